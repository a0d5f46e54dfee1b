"""Tuning modes of ``algorithm="auto"``: how much is timed before a shape's pick.

    mode         candidates considered            compiled and timed                 cache entry
    heuristic    every eligible one (*)           none: the cost model's best one    "heuristic" (**)
    (default)                                     (compiled by the first call)
    tune         every eligible one (*)           each plugin's TOP_K best by the    "tune" (k, the
                                                  model, best first, until the       labels timed)
                                                  per-shape budget is spent
    exhaustive   every eligible one (*)           all of them, in registry order     "exhaustive"

(*) ``set_tune_configs(N)`` caps every mode alike: only each plugin's first N configs (its preferred
ones) are candidates at all, ranked, timed or picked.
(**) only a pick the cost model made is stored: where the ranking is the declared priority (no model,
or a target without ceilings such as the simulator) recomputing it costs what reading it would.

The default (``settings.DEFAULT_TUNE_MODE``) is "heuristic": a first call of a new shape runs the cost
model's pick at once, compiling the one kernel it runs and timing nothing (ResNet-50's 69 layer-ops on
sm_90: 20 kernels compiled, 0 candidates timed, against 59 / 481 in "tune",
results/autotune_cold_start/sm90/ba18b2d); held out of its fit the model's pick runs 1.3 % slower than
the measured best (geometric mean; worst 79 %: results/autotune_model/sm90/66078f8). Tuning is asked
for: :func:`convlab.tune` (problems), :func:`convlab.torch.tune` (a model's layers), ``convlab tune`` (a
suite), or this mode set to "tune" / "exhaustive" for every later call.

An entry answers a later call only when it was made by a mode at least as thorough as the one asked for
(heuristic < tune < exhaustive): a heuristic entry never stands in where ``tune`` is asked for (it is
tuned again and replaced); a tuned entry answers a heuristic call. Where no cost model applies (the
simulator, a corrupt model file) the ranking is the plugins' declared priority order.

One setting, three ways: ``$CONVLAB_TUNE_MODE``, :func:`set_mode` / :func:`mode` here, ``convlab
--tune-mode MODE`` on the command line. The budget: ``$CONVLAB_TUNE_BUDGET``, :func:`set_budget`.
"""
from __future__ import annotations

import contextlib

from convlab.runtime import settings
from convlab.runtime.settings import TUNE_MODES

#: configs per plugin mode "tune" times. Held out of the fit (results/autotune_model/sm90/66078f8/report.md), the
#: model's best 2 a plugin hold a candidate within 5 % of the best measured on all 57 layer-ops where a
#: plugin has more than 2 measured configs (its best 1: on 68 of 69); 2 keeps a cold tune to two
#: compiles a plugin (a tensor-core kernel compiles in 5-22 s on the H200, results/FINDINGS.md, the sweep)
TOP_K = 2

#: thoroughness: an entry made in a mode of a lower rank does not answer a call in a higher one
RANK = {"heuristic": 0, "tune": 1, "exhaustive": 2}


def describe(name: str) -> str:
    """One line on what mode ``name`` does (explain prints it)."""
    budget = settings.get_tune_budget()
    within = "no time limit" if budget is None else f"within {budget:g} s a shape"
    text = {"heuristic": "the cost model's pick; nothing compiled or timed before the first call",
            "tune": f"each plugin's top {TOP_K} by the cost model compiled, checked and timed, {within}",
            "exhaustive": "every candidate compiled, checked and timed"}[name]
    default = " (the default)" if name == settings.DEFAULT_TUNE_MODE else ""
    return f"tuning mode {name}{default}: {text}"


def get_mode() -> str:
    """The current tuning mode: "heuristic", "tune" or "exhaustive"."""
    return settings.get_tune_mode()


def set_mode(mode: str) -> str:
    """Set the tuning mode (module docstring); ValueError listing the modes otherwise. Returns the
    previous mode."""
    return settings.set_tune_mode(mode)


def mode(name: str) -> contextlib.AbstractContextManager[str]:
    """``with convlab.autotune.mode("heuristic"): ...``: the mode inside the block, restored after
    (ValueError listing the modes for an unknown name, before the block runs)."""
    return settings.set_within(settings.set_tune_mode, name)


def get_budget() -> float | None:
    """Seconds of checking and timing per shape in mode "tune" (None: no limit)."""
    return settings.get_tune_budget()


def set_budget(seconds: float | None) -> float | None:
    """Set the per-shape budget of mode "tune" (None: no limit); returns the previous value. When it is
    spent, the candidates not yet checked are left out (the ones the model ranks lowest: they come
    last) and the final round is skipped; at least one candidate is always timed."""
    return settings.set_tune_budget(seconds)


def entry_mode(entry: dict) -> str:
    """The mode a cache entry was made in (entries written before modes existed timed everything)."""
    made = entry.get("mode", "exhaustive")
    return made if made in RANK else "exhaustive"


def answers(entry: dict, wanted: str) -> bool:
    """Whether an entry may answer a call in mode ``wanted`` (module docstring)."""
    return RANK[entry_mode(entry)] >= RANK[wanted]


__all__ = ["TOP_K", "TUNE_MODES", "RANK", "describe", "get_mode", "set_mode", "mode", "get_budget", "set_budget",
           "entry_mode", "answers"]
