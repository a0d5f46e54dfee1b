"""Replay of :func:`convlab.blocks.depthwise_pointwise` calls on device operands: what the first checked
call of a signature prepared, kept so that a later call of the same signature launches directly.

    key(operands, options, algorithm) -> tuple | None   each operand's convlab.call.operands.signature,
                                                         the options and ``algorithm``; None: not planned
    lookup(key) -> FusedPlan | SeparatePlan | None       the current device's table
    plan.run(operands) -> result                         a replayed call
    record_fused(key, args, dev, y, run), store(key, SeparatePlan(args))   a key's full path
    clear(), stats()

A call is planned when every operand given is a device operand convlab.call.operands signs (a torch CUDA
tensor that does not require grad, a Numba device array) and its options are hashable. Host operands,
host scale / shift vectors on a device call, ``__cuda_array_interface__`` objects of other kinds and the
compile-only runtime (whose launches only collect kernels to compile) take the full path every call.
The key holds everything :func:`convlab.blocks.dw_pw_args.check` reads (kinds, shapes, strides, dtypes,
the options), and a plan is stored only after its call passed every check, so a replay checks nothing
again and a bad argument raises the same error as before on every call.

A fused plan holds the output's allocation (torch.empty on the first operand's device, or a device array
of x's layout) and the kernel's launch recorded by convlab.runtime.launch (on a GPU, its thin launch:
the packed parameters, the data pointers patched per call) with the pointers of (x, w_dw, b_dw, w_pw, b_pw,
y, residual, dw_scale, dw_shift, scale, shift) as its operand slots; a device scale or shift of another
dtype than the compute type is converted each call as the full path does. Operands that overlap at
recording are not planned (a slot would be taken for another). A separate plan holds the two conv2d
calls bound to their arguments (convlab.ops.bound: each replays conv2d's own plan directly). "auto"'s
pick is made before a plan is stored and kept with it; both are dropped by :func:`convlab.reset` (the context's stores).

Bounds: at most :data:`MAX_PLANS` plans, the least recently stored dropped first (``stats()["dropped"]``).
"""
from __future__ import annotations

import collections
import sys
from typing import Any, Callable, Sequence

import numpy as np

from convlab import runtime
from convlab.blocks.dw_pw_args import BlockArgs, is_device
from convlab.call import operands as _operands
from convlab.call.plan import aliased, freeze
from convlab.dtypes import np_dtype
from convlab.kernels.data.layouts import channels_last_view
from convlab.kernels.epilogue import compute_dtype
from convlab.ops import epilogue
from convlab.ops.bound import BoundCall
from convlab.runtime import context, launch
from convlab.runtime.thin import stream_handle

#: plans kept per device (convlab.call.plan.MAX_PLANS: a network's calls, each signature once)
MAX_PLANS = 256
#: the operands of a call in the order :func:`key` and ``run`` take them
OPERANDS = ("x", "w_dw", "w_pw", "b_dw", "b_pw", "residual", "dw_scale", "dw_shift", "scale", "shift")


class _Table(collections.OrderedDict):
    """The current device's block plans, least recently stored first, and their counters."""

    def __init__(self) -> None:
        super().__init__()
        self.stats = {"built": 0, "replayed": 0, "dropped": 0}


def _table() -> _Table:
    return context.current().store("dw_pw_plans", _Table)


def key(operands: Sequence[Any], options: tuple, algorithm: Any) -> tuple | None:
    """The plan key of a call with ``operands`` (:data:`OPERANDS` order), ``options`` = (stride, padding,
    dilation, dw_activation, activation, residual_at) and ``algorithm``; None when it is not planned
    (module docstring)."""
    if runtime.COMPILE_ONLY:
        return None
    try:
        sigs = tuple(map(_operands.signature, operands))
        if False in sigs or any(s is not None and s[0] == "torch" and o.requires_grad
                                for s, o in zip(sigs, operands)):
            return None
        return sigs, freeze(options), freeze(algorithm)
    except (AttributeError, TypeError):  # not an array the checks take: they say so on the full path
        return None


def lookup(found_key: tuple) -> "FusedPlan | SeparatePlan | None":
    """The plan stored under ``found_key``, or None."""
    return _table().get(found_key)


def store(plan_key: tuple, plan: "FusedPlan | SeparatePlan") -> None:
    """Keep ``plan`` under ``plan_key``, within :data:`MAX_PLANS`."""
    table = _table()
    plan.counts = table.stats
    with context.current().lock:
        table[plan_key] = plan
        table.move_to_end(plan_key)
        table.stats["built"] += 1
        while len(table) > MAX_PLANS:
            table.popitem(last=False)
            table.stats["dropped"] += 1


def clear() -> None:
    """Drop every block plan of the current device."""
    _table().clear()


def stats() -> dict[str, int]:
    """Plans built, replayed and dropped on the current device, and the current count."""
    table = _table()
    return dict(table.stats, plans=len(table))


def activation_argument(epi: Any) -> Any:
    """The ``activation=`` argument that describes ``epi``'s activation (a pair for leaky_relu)."""
    return (epi.activation, epi.negative_slope) if epi.activation == "leaky_relu" else epi.activation


def device_vector(obj: Any, ct: np.dtype) -> Any:
    """A scale or shift (C,) / (K,) as a device array of the compute type ``ct``: a device one of that
    dtype as it is, a torch CUDA one of another float dtype cast on its device
    (:func:`convlab.ops.epilogue.device_vector`), another device one through the host, a host one copied."""
    if obj is None:
        return None
    if is_device(obj):
        cast = epilogue.device_vector(obj, len(obj), ct)
        if cast is not None:
            return cast
        dev = runtime.as_device_array(obj)
        return dev if dev.dtype == ct else runtime.to_device(runtime.to_host(dev).astype(ct))
    return runtime.to_device(np.asarray(obj, ct))


class FusedPlan:
    """The fused kernel's recorded launch for one call signature and its output's allocation."""

    def __init__(self, args: BlockArgs, launches: Sequence[launch.Launch]) -> None:
        sh = args.shape
        self.shape, self.size = (sh.n, sh.k, sh.p, sh.q), sh.n * sh.k * sh.p * sh.q
        self.channels_last, self.np_dtype = args.channels_last, np_dtype(args.dtype)
        self.ct = compute_dtype(args.dtype)
        self.launches = list(launches)
        self.thin = all(rec.thin is not None for rec in self.launches)
        # per vector: True where the kernel reads the operand itself (a device array of the compute type)
        self.direct = tuple(v is None or (is_device(v) and np.dtype(runtime.as_device_array(v).dtype) == self.ct)
                            for v in (args.dw_scale, args.dw_shift, args.scale, args.shift))
        self.counts: dict | None = None
        self._empty = None
        if _operands.is_torch(args.x):
            torch = sys.modules["torch"]
            self._empty = torch.empty
            self._kwargs = {"dtype": args.x.dtype, "device": args.x.device,
                            "memory_format": torch.channels_last if args.channels_last else torch.contiguous_format}

    def _output(self) -> Any:
        if self._empty is not None:
            return self._empty(self.shape, **self._kwargs)
        base = runtime.empty((self.size,), self.np_dtype)
        return channels_last_view(base, self.shape, self.np_dtype) if self.channels_last \
            else base.reshape(self.shape)

    def run(self, operands: Sequence[Any]) -> Any:
        """The call on ``operands`` (:data:`OPERANDS` order): a new output, the kernel launched on the
        ambient stream (the default stream unless convlab.runtime.launch.using_stream says otherwise)."""
        x, w_dw, w_pw, b_dw, b_pw, residual, *vectors = operands
        vectors = [v if direct else device_vector(v, self.ct) for v, direct in zip(vectors, self.direct)]
        out = self._output()
        values = (x, w_dw, b_dw, w_pw, b_pw, out, residual, *vectors)
        bases = [0 if v is None else _operands.data_pointer(v) for v in values]
        stream = launch.ambient_stream()
        if self.thin:
            handle = stream_handle(stream)
            for rec in self.launches:
                rec.replay(None, bases, handle)
        else:
            devs = [None if v is None else _operands.as_device(v) for v in values]
            for rec in self.launches:
                rec.replay(devs, bases, stream)
        self.counts["replayed"] += 1
        return out


def record_fused(plan_key: tuple, args: BlockArgs, dev: BlockArgs, y: Any,
                 run: Callable[[BlockArgs, Any], None]) -> None:
    """``run(dev, y)`` (the fused kernel on :func:`convlab.blocks.dw_pw._device_operands`' arrays into
    ``y``) with its launch recorded, and the :class:`FusedPlan` of ``args`` stored under ``plan_key``;
    run but not planned where operands overlap, a recording is under way or nothing was launched."""
    values = (dev.x, dev.w_dw, dev.b_dw, dev.w_pw, dev.b_pw, y, dev.residual, dev.dw_scale, dev.dw_shift,
              dev.scale, dev.shift)
    spans = [None if v is None else _operands.pointer(v) for v in values]
    if launch.is_recording() or aliased(spans):
        run(dev, y)
        return
    with launch.recording(spans) as recorded:
        run(dev, y)
    if recorded:
        store(plan_key, FusedPlan(args, recorded))


class SeparatePlan:
    """The block as two conv2d calls: the depthwise (groups = C) and the 1x1, each with its epilogue,
    bound once for a call signature (convlab.ops.bound: each replays conv2d's own plan directly, or
    calls conv2d, which records it)."""

    def __init__(self, args: BlockArgs) -> None:
        sh, pw = args.shape, args.pw_epi
        self.dw = BoundCall("conv2d", (sh.stride, sh.padding, sh.dilation, sh.c),
                            activation=activation_argument(args.dw_epi), scale=args.dw_scale is not None,
                            shift=args.dw_shift is not None)
        self.pw = BoundCall("conv2d", (1, 0, 1, 1), activation=activation_argument(pw),
                            residual=args.residual is not None, residual_at=pw.residual or "before",
                            scale=args.scale is not None, shift=args.shift is not None)
        self.counts: dict | None = None

    def run(self, operands: Sequence[Any]) -> Any:
        """The two conv2d calls on ``operands`` (:data:`OPERANDS` order; any kind conv2d takes), the
        second's result returned."""
        x, w_dw, w_pw, b_dw, b_pw, residual, dw_scale, dw_shift, scale, shift = operands
        t = self.dw(x, w_dw, b_dw, scale=dw_scale, shift=dw_shift)
        y = self.pw(t, w_pw, b_pw, residual, scale=scale, shift=shift)
        if self.counts is not None:
            self.counts["replayed"] += 1
        return y
