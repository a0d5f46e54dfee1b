"""The one entry of every plugin kernel launch; with convlab.runtime.thin, the only code below Numba's marshalling.

``launch(kernel, grid, block, args, stream=..., shared=...)`` runs one kernel. Plugins do not call it
by name: :func:`convlab.runtime.jit` returns a :class:`convlab.runtime.kernel.Kernel` whose
``kernel[grid, block](*args)`` comes here.

Streams: a launch without an explicit stream runs on the *ambient* stream, set by the public ops for
the duration of a call (``with using_stream(s):``), else the default stream (0).

Recording and replay (used by :mod:`convlab.call.plan`): inside ``with recording(operands) as rec`` every
launch is also captured as a :class:`Launch`: compiled function, grid, block, shared memory, stream
and arguments. An argument array whose memory lies inside an operand (a, b, bias, out, matched by
device pointer) is stored as (operand slot, byte offset, shape, strides, dtype); every other array
(workspace, parameter tables) is kept referenced by the record, so its memory lives as long as the
plan. ``Launch.replay(bases, stream)`` re-issues the launch on new operands:

- on a GPU through the *thin path* (:mod:`convlab.runtime.thin`): the parameters packed once at record time
  into a buffer the record owns, in Numba's layout (checked against Numba's ``_prepare_args`` and
  the driver's parameter sizes); a replay writes the new data pointers and calls ``cuLaunchKernel``;
- on the simulator (and on a GPU when the thin path is unavailable) by re-invoking the Numba kernel
  with views of the new operands.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from convlab.runtime import context, kernel_cache, offline, origin, settings
from convlab.runtime.origin import kernel_label  # noqa: F401  (also named here: launch's messages)
from convlab.runtime import device as runtime
from convlab.runtime.thin import _ThinLaunch, _launch_cached, dims3

log = logging.getLogger(__name__)
_state = threading.local()
#: one simulated launch at a time: Numba's simulator keeps the threads of a launch in process-wide state
#: (two threads launching at once made each other's kernels raise); a GPU runs them concurrently
SIMULATOR_LOCK = threading.RLock()


def thin_enabled() -> bool:
    """Whether recorded launches take the thin path: on a GPU, unless ``CONVLAB_THIN_LAUNCH=0``
    (convlab.runtime.settings) or a thin launch failed on this device (:func:`disable_thin`, until
    ``convlab.reset()``)."""
    return runtime.HAS_DEVICE and settings.thin_launch() and not context.current().store("launch").get("thin_off")


# ---- streams ----------------------------------------------------------------------------------------
def ambient_stream() -> Any:
    """The stream a launch without an explicit one runs on (0: the default stream)."""
    return getattr(_state, "stream", 0)


@contextlib.contextmanager
def using_stream(stream: Any) -> Iterator[None]:
    """Run the launches of the ``with`` block on ``stream`` (a Numba stream or 0)."""
    previous = ambient_stream()
    _state.stream = stream
    try:
        yield
    finally:
        _state.stream = previous


# ---- launching --------------------------------------------------------------------------------------
def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], *, stream: Any = None,
           shared: int = 0) -> None:
    """Launch ``kernel`` (a :class:`Kernel` or Numba dispatcher) on ``stream`` (default: the ambient
    stream) with Numba's ordinary launch; recorded when a recorder is active."""
    dispatcher = getattr(kernel, "dispatcher", kernel)  # a convlab.runtime.kernel.Kernel, or a dispatcher
    if runtime.COMPILE_ONLY:  # nothing runs: the launch is collected for convlab.compile
        offline.request(dispatcher, grid, block, shared, args)
        return
    stream = ambient_stream() if stream is None else stream
    if runtime.SIMULATOR:  # the simulator's speed: every CUDA thread is a Python thread
        runtime.load_numba_cuda()  # its thread-safe shared arrays, for a kernel of numba.cuda.jit itself
        _warn_simulator_cost(dispatcher, grid, block)
        with SIMULATOR_LOCK:
            dispatcher[grid, block, stream, shared](*args)
        origin.launched(dispatcher, "simulated")
    elif not (kernel_cache.enabled() and _launch_cached(dispatcher, grid, block, stream, shared, args)):
        before = len(dispatcher.overloads)
        dispatcher[grid, block, stream, shared](*args)
        if len(dispatcher.overloads) != before:  # Numba compiled an overload for this launch
            origin.count("compiled")
        origin.launched(dispatcher, "compiled")
    recorder = getattr(_state, "recorder", None)
    if recorder is not None:
        recorder.append(Launch(dispatcher, grid, block, shared, args, recorder.operands))


class SimulatorCostWarning(UserWarning):
    """A kernel launch on Numba's CUDA simulator that will take long (every thread is a Python thread)."""


_cost_warned: set = set()


def _warn_simulator_cost(dispatcher: Any, grid: Any, block: Any) -> None:
    """Warn (once per kernel and launch shape) before a simulated launch of more threads than
    ``settings.sim_thread_budget()`` (the simulator runs each thread as a Python thread: hundreds to a
    few thousand a second)."""
    from convlab.runtime.settings import sim_thread_budget

    threads = int(np.prod(dims3(grid))) * int(np.prod(dims3(block)))
    budget = sim_thread_budget()
    name = kernel_label(dispatcher)
    key = (name, dims3(grid), dims3(block))
    if threads <= budget or key in _cost_warned:
        return
    _cost_warned.add(key)
    warnings.warn(f"convlab: kernel {name!r} launches {threads:,} threads (grid {dims3(grid)} x block "
                  f"{dims3(block)}) on the CUDA simulator, where each thread is a Python thread "
                  f"(hundreds to a few thousand a second): this will take long. Shrink the problem "
                  f"(batch, channels, spatial size) or run on a GPU; CONVLAB_SIM_THREAD_BUDGET (now {budget}) sets this "
                  f"warning's threshold", SimulatorCostWarning, stacklevel=4)


class Launch:
    """One recorded launch; :meth:`replay` re-issues it on new operands (see the module docstring)."""

    def __init__(self, dispatcher: Any, grid: Any, block: Any, shared: int, args: Sequence[Any],
                 operands: Sequence[tuple[int, int] | None]) -> None:
        self.dispatcher, self.grid, self.block, self.shared = dispatcher, dims3(grid), dims3(block), \
            int(shared)
        self.args: list[Any] = []   # constants and owned arrays; None where an operand view goes
        self.views: list[tuple[int, int, int, tuple, tuple, np.dtype]] = []  # (arg, slot, offset, ...)
        self.owned: list[tuple[int, int]] = []  # (device pointer, bytes) of the arrays this launch keeps
        for i, value in enumerate(args):
            ptr = runtime.device_pointer(value) if runtime.is_device_array(value) else None
            slot = _operand_slot(ptr, operands) if ptr is not None else None
            if slot is None:
                self.args.append(value)
                if ptr is not None:
                    self.owned.append((ptr, int(value.size) * value.dtype.itemsize))
            else:
                self.args.append(None)
                self.views.append((i, slot, ptr - operands[slot][0], tuple(value.shape),
                                   tuple(runtime.strides_of(value)), np.dtype(value.dtype)))
        self.thin = None
        if thin_enabled():  # the thin path calls the driver
            try:
                self.thin = _ThinLaunch.build(self, args)
            except Exception as exc:  # noqa: BLE001  (replay then re-invokes the Numba kernel)
                log.warning("thin launch unavailable for %s: %r", getattr(dispatcher, "__name__", "?"), exc)

    def replay(self, operands: Sequence[Any], bases: Sequence[int], stream: Any) -> None:
        """Launch again with operand slot ``s`` at device pointer ``bases[s]`` (``operands[s]`` is
        the device array itself, used when the thin path is not available)."""
        if self.thin is not None:
            self.thin.launch(bases, stream)
            return
        args = list(self.args)
        for i, slot, offset, shape, strides, dtype in self.views:
            args[i] = runtime.view_at(operands[slot], offset, shape, strides, dtype)
        if runtime.SIMULATOR:
            with SIMULATOR_LOCK:
                self.dispatcher[self.grid, self.block, stream, self.shared](*args)
        else:
            self.dispatcher[self.grid, self.block, stream, self.shared](*args)


def disable_thin(exc: BaseException) -> None:
    """Stop using the thin path on this device (a thin launch failed), with a warning."""
    context.current().store("launch")["thin_off"] = True
    warnings.warn(f"convlab: thin kernel launch failed ({exc!r}); using Numba's launch from now on",
                  RuntimeWarning, stacklevel=3)


def _operand_slot(ptr: int, operands: Sequence[tuple[int, int] | None]) -> int | None:
    for slot, span in enumerate(operands):
        if span is not None and span[0] <= ptr < span[0] + max(span[1], 1):
            return slot
    return None


def is_recording() -> bool:
    """True inside :func:`recording` on this thread."""
    return getattr(_state, "recorder", None) is not None


@contextlib.contextmanager
def recording(operands: Sequence[tuple[int, int] | None]) -> Iterator[list[Launch]]:
    """Record the launches of the ``with`` block; ``operands`` are (device pointer, bytes) per slot."""
    if getattr(_state, "recorder", None) is not None:
        raise RuntimeError("launch recordings do not nest")
    rec = _Recorder(operands)
    _state.recorder = rec
    try:
        yield rec
    finally:
        _state.recorder = None


class _Recorder(list):
    def __init__(self, operands) -> None:
        super().__init__()
        self.operands = list(operands)
