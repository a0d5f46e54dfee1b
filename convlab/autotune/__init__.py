"""The autotuner behind ``algorithm="auto"``: times the eligible (plugin, config) candidates of a problem
on the GPU, checks each against a trusted output, and caches the winner per shape key on disk.

Modules: :mod:`~convlab.autotune.tuner` (what :func:`tune` does, step by step), :mod:`.modes` (the
tuning modes: heuristic, the default, tune, exhaustive), :mod:`.request` (tuning on request:
``convlab.tune``), :mod:`.rounds` (how the candidates of one problem are
checked and timed), :mod:`.cache` (the per-device JSON file and its keys), :mod:`.cache_entries` (when a
stored entry answers, what a tuning stores), :mod:`.result` (what a tuning
reports); the cost model: :mod:`.costmodel` (the formula, its JSON files per target class),
:mod:`.features` (what it knows of a candidate: what the plugin declares, ``Algorithm.cost_features``),
:mod:`.ranking`. Its offline fit on measured results is :mod:`convlab.modelfit`
(``python -m convlab.modelfit``).
The key policy, deterministic mode, tuning depth, mode and budget live in :mod:`convlab.runtime.settings` and
are re-exported here.
"""
from convlab.runtime.settings import (get_deterministic, get_key_policy, get_tune_configs, set_deterministic,
                                      set_key_policy, set_tune_configs)

from .modes import TOP_K, TUNE_MODES, get_budget, get_mode, mode, set_budget, set_mode
from .result import CandidateResult, TuneResult
from .rounds import (FINAL_MARGIN, FINAL_REPEAT, FINAL_ROUNDS, PROBE, REFERENCE_FLOPS, REPEAT, SLOW_FACTOR,
                     WARMUP, Timer)
from .tuner import cache_path, choose, clear_cache, pretune, reset_stats, stats, tune

__all__ = ["tune", "choose", "pretune", "clear_cache", "cache_path", "stats", "reset_stats",
           "set_key_policy", "get_key_policy", "set_tune_configs", "get_tune_configs", "set_deterministic",
           "get_deterministic", "set_mode", "get_mode", "mode", "set_budget", "get_budget", "TOP_K",
           "TUNE_MODES", "TuneResult",
           "CandidateResult", "Timer", "FINAL_MARGIN", "FINAL_REPEAT", "FINAL_ROUNDS", "PROBE",
           "REFERENCE_FLOPS", "REPEAT", "SLOW_FACTOR", "WARMUP"]
