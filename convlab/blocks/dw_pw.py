"""The fused depthwise -> pointwise block (convlab.kernels.block.dw_pw) as a public op, beside the same
block run as two layers through the public :func:`convlab.conv2d` (``algorithm="separate"``).

``algorithm="auto"`` on a GPU times both (CUDA events, the median of 10 calls each, each way through its
public call: the launch and the host's work, replayed as a repeated call is) on the call's shape,
dtype, layout and epilogues and keeps the faster, once per key in the device's context (reset by
:func:`convlab.reset`). On the simulator and when compiling only, where times mean nothing, it picks
by a rule: fused when the depthwise tile's recomputation, ceil(K / KT) (KT output channels per block),
is at most :data:`MAX_RECOMPUTE` -- each recomputation costs R*S multiply-adds per intermediate
element, against the 2 * itemsize bytes per element of global traffic that fusing saves. The rule is
a choice, not a measurement; the GPU's timing replaces it.

A call on device operands replays what the first call of its signature prepared (convlab.blocks.dw_pw_plan:
no argument check, choice or operand conversion again; the fused kernel's launch recorded, as conv2d's
launch plans are); other calls check, choose and run every time.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from convlab import runtime
from convlab.blocks import dw_pw_plan
from convlab.blocks.dw_pw_args import BlockArgs, check, host_array, is_device, reference
from convlab.blocks.dw_pw_plan import SeparatePlan, activation_argument, device_vector
from convlab.kernels.block.dw_pw import GPU_TILE, SIM_TILE, launch
from convlab.call.operands import from_host, is_host_tensor
from convlab.dtypes import np_dtype
from convlab.kernels.data.layouts import channels_last_view, is_torch
from convlab.kernels.epilogue import compute_dtype
from convlab.runtime import launch as launching
from convlab.runtime.context import current

ALGORITHMS = ("auto", "fused", "separate")
#: the simulator's rule: fused while ceil(K / KT) <= 8 (see the module docstring)
MAX_RECOMPUTE = 8


@dataclass(frozen=True)
class Choice:
    """Which way a block call runs ("fused" or "separate") and why; ``times_ms`` (fused, separate)
    when it was timed."""

    algorithm: str
    reason: str
    times_ms: tuple[float, float] | None = None


def _check_algorithm(algorithm: Any) -> str:
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return algorithm


def _device_operands(args: BlockArgs) -> BlockArgs:
    """``args`` with every operand a device array of the fused kernel's layout (copies of host ones;
    x and the residual in x's memory order; the scales and shifts of the compute type)."""
    ct = compute_dtype(args.dtype)

    def tensor(obj: Any, activation: bool = False) -> Any:
        """A device array of ``obj``; an activation (x, the residual) in x's memory order."""
        if obj is None or is_device(obj):
            return None if obj is None else runtime.as_device_array(obj)
        host = host_array(obj)
        return runtime.to_device(host.transpose(0, 2, 3, 1) if activation and args.channels_last else host)

    return replace(args, x=tensor(args.x, True), w_dw=tensor(args.w_dw), w_pw=tensor(args.w_pw),
                   b_dw=tensor(args.b_dw), b_pw=tensor(args.b_pw), residual=tensor(args.residual, True),
                   dw_scale=device_vector(args.dw_scale, ct), dw_shift=device_vector(args.dw_shift, ct),
                   scale=device_vector(args.scale, ct), shift=device_vector(args.shift, ct), device=True)


def _output(args: BlockArgs) -> tuple[Any, Any]:
    """(what the call returns, the device array the kernel writes) for the output (N, K, P, Q)."""
    sh = args.shape
    shape = (sh.n, sh.k, sh.p, sh.q)
    if is_torch(args.x) and not is_host_tensor(args.x):
        import torch

        fmt = torch.channels_last if args.channels_last else torch.contiguous_format
        y = torch.empty(shape, dtype=args.x.dtype, device=args.x.device, memory_format=fmt)
        return y, runtime.as_device_array(y)
    dtype = np_dtype(args.dtype)
    base = runtime.empty((sh.n * sh.k * sh.p * sh.q,), dtype)
    y = channels_last_view(base, shape, dtype) if args.channels_last else base.reshape(shape)
    return y, y


def run_fused(dev: BlockArgs, y: Any) -> None:
    """The fused kernel on :func:`_device_operands`' arrays into the device array ``y``."""
    launch(dev.dtype, dev.dw_epi, dev.pw_epi, dev.channels_last, dev.shape, dev.x, dev.w_dw, dev.b_dw, dev.w_pw,
           dev.b_pw, y, dev.residual, dev.dw_scale, dev.dw_shift, dev.scale, dev.shift)


def _operands(args: BlockArgs) -> tuple:
    """``args``' operands in convlab.blocks.dw_pw_plan.OPERANDS order."""
    return (args.x, args.w_dw, args.w_pw, args.b_dw, args.b_pw, args.residual, args.dw_scale, args.dw_shift,
            args.scale, args.shift)


def run_separate(args: BlockArgs) -> Any:
    """The block as two public conv2d calls (the depthwise, groups = C, then the 1x1), each with its
    epilogue; operands of any kind conv2d takes, its output kind returned."""
    return SeparatePlan(args).run(_operands(args))


def _fused(args: BlockArgs, plan_key: tuple | None = None) -> Any:
    """The fused kernel on ``args``; with a ``plan_key``, its launch recorded and the plan stored."""
    dev = _device_operands(args)
    out, y = _output(args)
    if plan_key is None:
        run_fused(dev, y)
    else:
        dw_pw_plan.record_fused(plan_key, args, dev, y, run_fused)
    if args.device:
        return out
    host = runtime.to_host(y if not args.channels_last else runtime.flat_view(y)
                           .reshape((args.shape.n, args.shape.p, args.shape.q, args.shape.k)))
    host = host.transpose(0, 3, 1, 2) if args.channels_last else host
    if is_host_tensor(args.x):
        return from_host(np.ascontiguousarray(host) if not args.channels_last else host)
    return host


def _key(args: BlockArgs) -> tuple:
    return (args.dtype, args.shape, args.dw_epi, args.pw_epi, args.channels_last)


def _timing_operands(args: BlockArgs) -> tuple:
    """The call's operands for timing it both ways on the device (OPERANDS order): device ones as the
    call gave them, host ones copied once (x and the residual viewed in x's layout), host scales and
    shifts as device vectors of the compute type."""
    ct, sh = compute_dtype(args.dtype), args.shape
    vectors = [v if v is None or is_device(v) else device_vector(v, ct)
               for v in (args.dw_scale, args.dw_shift, args.scale, args.shift)]
    if args.device:
        return (*_operands(args)[:6], *vectors)
    dev, dtype = _device_operands(args), np_dtype(args.dtype)

    def layout(a: Any, shape: tuple) -> Any:
        return None if a is None else channels_last_view(a, shape, dtype) if args.channels_last else a
    return (layout(dev.x, (sh.n, sh.c, sh.h, sh.w)), dev.w_dw, dev.w_pw, dev.b_dw, dev.b_pw,
            layout(dev.residual, (sh.n, sh.k, sh.p, sh.q)), *vectors)


def _timed(args: BlockArgs) -> Choice:
    """Both ways timed end to end, each through its public call on the device (replayed after the
    first: host work included), so that "auto" keeps the one faster for the caller."""
    x, w_dw, w_pw, b_dw, b_pw, residual, dw_scale, dw_shift, scale, shift = _timing_operands(args)
    sh = args.shape
    options = dict(stride=sh.stride, padding=sh.padding, dilation=sh.dilation, residual=residual,
                   dw_activation=activation_argument(args.dw_epi), activation=activation_argument(args.pw_epi),
                   residual_at=args.pw_epi.residual or "before", dw_scale=dw_scale, dw_shift=dw_shift,
                   scale=scale, shift=shift)

    def way(algorithm: str) -> float:
        def call() -> Any:
            return depthwise_pointwise(x, w_dw, w_pw, b_dw, b_pw, algorithm=algorithm, **options)
        return statistics.median(runtime.time_ms(call, repeat=10))
    fused, separate = way("fused"), way("separate")
    pick = "fused" if fused <= separate else "separate"
    return Choice(pick, f"timed on this GPU: fused {fused:.4f} ms, separate {separate:.4f} ms", (fused, separate))


def choose(args: BlockArgs, algorithm: str = "auto") -> Choice:
    """How a checked call runs: as asked, or ``"auto"``'s pick (the module docstring's timing or rule)."""
    if _check_algorithm(algorithm) != "auto":
        return Choice(algorithm, f"algorithm={algorithm!r} asked for it")
    target = runtime.target()
    if target.simulator or runtime.COMPILE_ONLY:
        tile = SIM_TILE if target.simulator else GPU_TILE
        blocks = -(-args.shape.k // tile.kt)
        pick = "fused" if blocks <= MAX_RECOMPUTE else "separate"
        return Choice(pick, f"rule (no timing on {'the simulator' if target.simulator else 'compile-only'}): "
                            f"the depthwise tile is computed ceil(K={args.shape.k} / {tile.kt}) = {blocks} times, "
                            f"{'<=' if pick == 'fused' else '>'} {MAX_RECOMPUTE}")
    return current().cached("dw_pw_choice", _key(args), lambda: _timed(args))


def depthwise_pointwise(x: Any, w_dw: Any, w_pw: Any, b_dw: Any = None, b_pw: Any = None, stride: Any = 1,
                        padding: Any = 0, dilation: Any = 1, *, dw_activation: Any = None, dw_scale: Any = None,
                        dw_shift: Any = None, activation: Any = None, scale: Any = None, shift: Any = None,
                        residual: Any = None, residual_at: str = "before", algorithm: str = "auto") -> Any:
    """y (N, K, P, Q) = pw_epi(conv1x1(dw_epi(depthwise(x (N, C, H, W), w_dw (C, 1, R, S)) + b_dw), w_pw
    (K, C, 1, 1)) + b_pw): an inverted-residual block's depthwise kxk and pointwise 1x1 layers.

    ``dw_activation``, ``dw_scale`` / ``dw_shift`` (C,): the depthwise's epilogue (e.g. an eval
    BatchNorm folded, then relu6); ``activation``, ``scale`` / ``shift`` (K,), ``residual`` (N, K, P, Q),
    ``residual_at``: the pointwise's (convlab.epilogue). ``algorithm``: "fused" (one kernel, the
    intermediate kept in shared memory), "separate" (two conv2d calls) or "auto" (see the module
    docstring; :func:`explain_depthwise_pointwise` says which and why). Host operands give a host
    result (numpy, or a CPU tensor for CPU tensors); device operands a device result, in x's layout.
    Device calls launch on the default stream."""
    operands = (x, w_dw, w_pw, b_dw, b_pw, residual, dw_scale, dw_shift, scale, shift)
    plan_key = dw_pw_plan.key(operands, (stride, padding, dilation, dw_activation, activation, residual_at),
                              algorithm)
    found = dw_pw_plan.lookup(plan_key) if plan_key is not None else None
    if found is not None:
        try:
            return found.run(operands)
        except Exception as exc:
            if not getattr(found, "thin", False):
                raise
            launching.disable_thin(exc)  # the full path below runs the call
            dw_pw_plan.clear()
    args = check(x, w_dw, w_pw, b_dw, b_pw, stride, padding, dilation, dw_activation=dw_activation,
                 dw_scale=dw_scale, dw_shift=dw_shift, activation=activation, scale=scale, shift=shift,
                 residual=residual, residual_at=residual_at)
    if choose(args, algorithm).algorithm == "fused":
        return _fused(args, plan_key)
    result = run_separate(args)
    if plan_key is not None:
        dw_pw_plan.store(plan_key, SeparatePlan(args))
    return result


def explain_depthwise_pointwise(*args: Any, algorithm: str = "auto", **kwargs: Any) -> str:
    """Which way :func:`depthwise_pointwise` with these arguments runs, and why (a GPU times both)."""
    block = check(*args, **kwargs)
    choice = choose(block, algorithm)
    sh = block.shape
    return (f"depthwise {sh.r}x{sh.s} stride {sh.stride} (C={sh.c}) -> pointwise {sh.c}->{sh.k}, {block.dtype}, "
            f"{'channels-last' if block.channels_last else 'NCHW'}, dw epilogue {block.dw_epi.activation}, "
            f"pw epilogue {block.pw_epi.activation}: runs {choice.algorithm}; {choice.reason}")


def reference_depthwise_pointwise(*args: Any, **kwargs: Any) -> np.ndarray:
    """The block in float64 (N, K, P, Q) for :func:`depthwise_pointwise`'s arguments (two convolutions
    with their epilogues; convlab.blocks.dw_pw_args.reference)."""
    return reference(check(*args, **kwargs))
