"""Tuning on request: :func:`tune` (exported as ``convlab.tune``) checks and times problems in a chosen mode.

The default mode, "heuristic" (:mod:`.modes`), runs the cost model's pick at the first call of a shape
and times nothing; this is how a user asks for the measured pick of the shapes that matter:

    import convlab
    results = convlab.tune([prob1, prob2])                 # mode "tune", the budget in force
    results = convlab.tune(prob, mode="exhaustive")        # one problem, every candidate timed
    [r.picked_by for r in results]                         # "tuned" ("priority" on the simulator)

Each pick is stored in the autotuner's disk cache, so later calls (and later processes on this GPU
model) answer from it in any mode at most as thorough as the one it was made in; a rerun times nothing
already stored (an interrupted tuning resumes where it stopped). ``convlab.torch.tune`` does the same
for the convolution layers of a model, ``convlab tune --suite NAME`` for a suite.
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

from convlab.problem import Problem
from convlab.runtime import settings

from . import modes, tuner
from .result import TuneResult


def _problems(problems: Problem | Iterable[Problem]) -> list[Problem]:
    if isinstance(problems, Problem):
        return [problems]
    try:
        listed = list(problems)
    except TypeError:
        raise TypeError(f"problems must be a convlab Problem or an iterable of them, got "
                        f"{type(problems).__name__}") from None
    for i, p in enumerate(listed):
        if not isinstance(p, Problem):
            raise TypeError(f"problems[{i}] must be a convlab Problem, got {type(p).__name__}")
    return listed


def check_request(mode: str, budget: float | None) -> None:
    """ValueError naming ``mode`` (not a tuning mode) or ``budget`` (not None or a finite number >= 0)."""
    if not isinstance(mode, str) or mode not in settings.TUNE_MODES:
        raise ValueError(f"mode must be one of {settings.TUNE_MODES}, got {mode!r}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                               or not 0 <= budget < float("inf")):
        raise ValueError(f"budget must be None (the budget in force) or a finite number of seconds >= 0, "
                         f"got {budget!r}")


@contextlib.contextmanager
def requested(mode: str, budget: float | None) -> Iterator[str]:
    """``with requested(mode, budget): ...``: the tuning mode and (unless None) the per-shape budget
    inside the block, both restored after (ValueError for a bad one, before the block runs)."""
    check_request(mode, budget)
    previous = modes.set_mode(mode)
    before = modes.set_budget(budget) if budget is not None else None
    try:
        yield mode
    finally:
        modes.set_mode(previous)
        if budget is not None:
            modes.set_budget(before)


def tune(problems: Problem | Iterable[Problem], *, mode: str = "tune", budget: float | None = None,
         workspace_limit: int | str | None = None, force: bool = False,
         progress: bool | None = None) -> list[TuneResult]:
    """Check and time each problem's candidates in ``mode`` ("tune": each plugin's top TOP_K by the cost
    model; "exhaustive": all; "heuristic": the model's pick, nothing timed) and store the picks in the
    disk cache; returns one :class:`TuneResult` a problem, in order (``picked_by`` says "tuned").

    ``budget``: seconds of checking and timing per shape in mode "tune" (None: the budget in force,
    ``convlab.autotune.get_budget()``, 20 s unless set). ``force``: tune again where the cache answers.
    ``progress``: a tqdm bar over the problems (None: only on a terminal). On the simulator nothing is
    timed (timings mean nothing there): the pick is by declared priority and nothing is stored.
    The mode and budget in force are restored after. TypeError / ValueError name the bad argument.
    """
    from tqdm import tqdm

    listed = _problems(problems)
    limit = settings.check_workspace_limit(workspace_limit)
    if not isinstance(force, bool):
        raise TypeError(f"force must be a bool, got {force!r}")
    with requested(mode, budget):
        return [tuner.tune(p, workspace_limit=limit, force=force)
                for p in tqdm(listed, disable=None if progress is None else not progress, unit="shape",
                              desc=f"convlab.tune ({mode})")]


__all__ = ["tune", "requested", "check_request"]
