"""What a kernel declares about its resources, for ``convlab compile`` to check against what ptxas reports.

    allow_spills(kernel, nbytes, why) -> kernel    the spill bytes (stores + loads) a kernel may have, and
                                                   the decision behind them; ``convlab compile`` fails a
                                                   kernel spilling more than this (or than its budget)
    allowed_spills(dispatcher) -> (nbytes, why)    what was declared, (0, "") by default
"""
from __future__ import annotations

from typing import Any

_ATTRIBUTE = "convlab_allowed_spills"


def allow_spills(kernel: Any, nbytes: int, why: str) -> Any:
    """Declare that ``kernel`` (a ``runtime.jit`` kernel) may spill up to ``nbytes`` (stores + loads, per
    thread, as ptxas counts them) for the reason ``why``; returns the kernel."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0 or not why:
        raise ValueError(f"allow_spills needs a byte count >= 0 and a reason, got {nbytes!r}, {why!r}")
    setattr(getattr(kernel, "dispatcher", kernel), _ATTRIBUTE, (nbytes, why))
    return kernel


def allowed_spills(dispatcher: Any) -> tuple[int, str]:
    return getattr(getattr(dispatcher, "dispatcher", dispatcher), _ATTRIBUTE, (0, ""))
