"""The plugin layer: the contract a plugin implements (:mod:`.contract`), the registry of installed
plugins (:mod:`.registry`), the rules that turn ``algorithm=`` into a candidate (:mod:`.strategy`) and
the explanation of a choice (:mod:`.explain`).

Only the contract and the registry are imported here: they sit below the autotuner, while strategy and
explain sit above it (import them as submodules).
"""
from .contract import Algorithm, Config, Verdict
from .registry import Candidate

__all__ = ["Algorithm", "Config", "Verdict", "Candidate"]
