"""convlab.torch's kernel calls (convlab.torch._core._run: every forward, dgrad and wgrad of the functional
ops, the modules and autograd's backward) bound to their options once, so a repeated call replays its
launch plan under the op's own key (convlab.ops.bound) before going through the op's argument layers:

    replay(name, operands, args, algorithm, epilogue, resolve) -> the output, or None (the op runs)

The bound calls are kept per (op, options, algorithm, epilogue form), at most :data:`MAX_BOUND`, and made
again after any change of the host state plans depend on (convlab.runtime.settings.generation: the
registered plugins, which ``resolve`` reads). A call with ``scale`` / ``shift`` is not bound (the op
converts them per call). :func:`disabled` turns this and the modules' steady replays
(convlab.torch.steady) off on this thread: everything takes the whole path.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from convlab.ops.bound import BoundCall
from convlab.runtime import settings

#: bound calls kept; past it the table is emptied (a model has a few hundred distinct convolution calls)
MAX_BOUND = 1024
_STATE = threading.local()  # ``off``: disabled() on this thread
_TABLE: dict[tuple, BoundCall | None] = {}
_GENERATION = [-1]
_STATS = {"replayed": 0, "missed": 0}


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Within the block, on this thread, every convlab.torch call takes the whole path."""
    before = getattr(_STATE, "off", False)
    _STATE.off = True
    try:
        yield
    finally:
        _STATE.off = before


def off() -> bool:
    """True inside :func:`disabled` on this thread."""
    return getattr(_STATE, "off", False)


def stats() -> dict[str, int]:
    """Device calls replayed here and device calls that found no plan (the op ran)."""
    return dict(_STATS)


def replay(name: str, operands: tuple, args: tuple, algorithm: str, epilogue: dict | None,
           resolve: Callable[[str], str]) -> Any:
    """The output of ``convlab.<name>(*operands, *args, algorithm=resolve(algorithm), **epilogue)`` from
    its stored plan, or None. ``operands``: (a, b) or (a, b, bias)."""
    if off():
        return None
    if epilogue is None:
        activation, residual, residual_at = None, None, "before"
    elif epilogue.get("scale") is not None or epilogue.get("shift") is not None:
        return None
    else:
        activation, residual, residual_at = epilogue["activation"], epilogue["residual"], epilogue["residual_at"]
    generation = settings.generation()
    if _GENERATION[0] != generation:
        _TABLE.clear()
        _GENERATION[0] = generation
    key = (name, args, algorithm, activation, residual is not None, residual_at)
    try:
        bound = _TABLE[key]
    except KeyError:
        bound = _bind(name, args, resolve(algorithm), activation, residual is not None, residual_at)
        if len(_TABLE) >= MAX_BOUND:
            _TABLE.clear()
        _TABLE[key] = bound
    except TypeError:  # unhashable options: the op says what is wrong with them
        return None
    if bound is None:
        return None
    a, b, *rest = operands
    y = bound.replay(a, b, rest[0] if rest else None, residual)
    if y is None:
        _STATS["missed"] += a.is_cuda  # a host call never replays: no miss
    else:
        _STATS["replayed"] += 1
    return y


def _bind(name: str, args: tuple, algorithm: str, activation: Any, residual: bool,
          residual_at: str) -> BoundCall | None:
    try:
        return BoundCall(name, args, algorithm, activation=activation, residual=residual, residual_at=residual_at)
    except (TypeError, ValueError):  # the op raises its own error on this call
        return None
