"""What a kernel declares about its resources, for ``convlab compile`` to check against what ptxas reports.

    allow_spills(kernel, nbytes, why) -> kernel    the spill bytes (stores + loads) a kernel may have, and
                                                   the decision behind them; ``convlab compile`` fails a
                                                   kernel spilling more than this (or than its budget)
    allowed_spills(dispatcher) -> (nbytes, why)    what was declared, (0, "") by default
    declare_registers(kernel, budgets) -> kernel   the registers each warp role runs with after
                                                   ``setmaxnreg``: ((threads, registers), ...); ``convlab
                                                   compile`` fails a kernel whose roles take more than the
                                                   block's register file, or whose setmaxnreg ptxas ignores
    register_budgets(dispatcher) -> budgets        what was declared, () by default
"""
from __future__ import annotations

from typing import Any

_ATTRIBUTE = "convlab_allowed_spills"
_REGISTERS = "convlab_register_budgets"


def allow_spills(kernel: Any, nbytes: int, why: str) -> Any:
    """Declare that ``kernel`` (a ``runtime.jit`` kernel) may spill up to ``nbytes`` (stores + loads, per
    thread, as ptxas counts them) for the reason ``why``; returns the kernel."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0 or not why:
        raise ValueError(f"allow_spills needs a byte count >= 0 and a reason, got {nbytes!r}, {why!r}")
    setattr(getattr(kernel, "dispatcher", kernel), _ATTRIBUTE, (nbytes, why))
    return kernel


def allowed_spills(dispatcher: Any) -> tuple[int, str]:
    return getattr(getattr(dispatcher, "dispatcher", dispatcher), _ATTRIBUTE, (0, ""))


def declare_registers(kernel: Any, budgets: tuple[tuple[int, int], ...]) -> Any:
    """Declare the (threads, registers) of each role of a warp-specialized ``kernel`` after its
    ``setmaxnreg`` (e.g. a producer warpgroup at 40, two consumer warpgroups at 232); returns the kernel."""
    budgets = tuple((int(t), int(r)) for t, r in budgets)
    if not budgets or any(t < 1 or not 24 <= r <= 256 or r % 8 for t, r in budgets):
        raise ValueError(f"register budgets are (threads >= 1, registers 24..256 by 8) pairs, got {budgets!r}")
    setattr(getattr(kernel, "dispatcher", kernel), _REGISTERS, budgets)
    return kernel


def register_budgets(dispatcher: Any) -> tuple[tuple[int, int], ...]:
    return getattr(getattr(dispatcher, "dispatcher", dispatcher), _REGISTERS, ())
