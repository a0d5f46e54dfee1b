"""The plugin layer: the contract a plugin implements (:mod:`.contract`; the record of its cost
declaration in :mod:`.cost`; the base the lossy transform plugins share in :mod:`.lossy`) and the
registry of installed plugins (:mod:`.registry`). They sit below the autotuner; the rules that turn
``algorithm=`` into a candidate (:mod:`convlab.ops.strategy`) and the explanation of a choice
(:mod:`convlab.ops.explain`) sit above it.
"""
from .contract import Algorithm, Config, Verdict
from .cost import Features
from .registry import Candidate

__all__ = ["Algorithm", "Config", "Verdict", "Features", "Candidate"]
