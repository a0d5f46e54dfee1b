"""The arguments of :func:`convlab.blocks.depthwise_pointwise`: their checks (a ValueError / TypeError
naming the argument, before any launch) and the float64 reference of the block.

Operands are all host (numpy arrays, CPU torch tensors) or all device (Numba device arrays, torch CUDA
tensors); x (N, C, H, W) C-contiguous or channels-last (host numpy arrays: either, by their strides;
a device residual in x's layout, a host one in any),
w_dw (C, 1, R, S), w_pw (K, C, 1, 1), biases (C,) / (K,), residual (N, K, P, Q), all of x's dtype.
Scales and shifts are sequences or arrays of floats, (C,) for the depthwise and (K,) for the pointwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from convlab import runtime
from convlab.call.operands import host_view, is_host_tensor
from convlab.dtypes import DTYPES, dtype_name
from convlab.epilogue import Epilogue, describe
from convlab.kernels.block.dw_pw import Shape
from convlab.kernels.data.layouts import is_channels_last, is_torch
from convlab.reference import epilogue as reference_epilogue


def is_device(obj: Any) -> bool:
    """True for a device operand (a Numba device array or a CUDA-array-like such as a torch CUDA tensor)."""
    return runtime.is_cuda_array_like(obj) and not is_host_tensor(obj)


def _kind(name: str, obj: Any) -> bool:
    """Whether ``obj`` is a device operand; TypeError for anything but an array or tensor."""
    if isinstance(obj, np.ndarray) or is_host_tensor(obj):
        return False
    if is_device(obj):
        return True
    raise TypeError(f"{name} must be a numpy array, a torch tensor or a device array, got {type(obj).__name__}")


def host_array(obj: Any) -> np.ndarray:
    """A numpy view of a host operand (a CPU torch tensor through convlab.call.operands)."""
    return host_view(obj) if is_host_tensor(obj) else obj


def channels_last(obj: Any) -> bool:
    """Whether a 4-D operand is channels-last (and not also C-contiguous)."""
    if isinstance(obj, np.ndarray):
        return (not obj.flags.c_contiguous) and obj.transpose(0, 2, 3, 1).flags.c_contiguous
    return is_channels_last(obj)


def _pair(name: str, value: Any, low: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair)):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(pair) < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    return int(pair[0]), int(pair[1])


def _vector(name: str, value: Any, length: int, device: bool) -> Any:
    """None, or a (length,) float vector: a device array on a device call, else float64 numpy."""
    if value is None:
        return None
    if is_device(value):
        if not device:
            raise TypeError(f"{name} is a device array but x is a host operand")
        shape = tuple(value.shape)
    else:
        try:
            value = np.asarray(host_array(value) if is_torch(value) else value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a sequence or array of floats, got {type(value).__name__}") from exc
        shape = value.shape
    if shape != (length,):
        raise ValueError(f"{name} must have shape ({length},), got {shape}")
    return value


@dataclass(frozen=True)
class BlockArgs:
    """The checked arguments of one block call (operands as given; scales and shifts as vectors)."""

    dtype: str
    shape: Shape
    dw_epi: Epilogue
    pw_epi: Epilogue
    channels_last: bool
    device: bool
    x: Any
    w_dw: Any
    w_pw: Any
    b_dw: Any
    b_pw: Any
    dw_scale: Any
    dw_shift: Any
    scale: Any
    shift: Any
    residual: Any


def check(x: Any, w_dw: Any, w_pw: Any, b_dw: Any = None, b_pw: Any = None, stride: Any = 1, padding: Any = 0,
          dilation: Any = 1, *, dw_activation: Any = None, dw_scale: Any = None, dw_shift: Any = None,
          activation: Any = None, scale: Any = None, shift: Any = None, residual: Any = None,
          residual_at: str = "before") -> BlockArgs:
    """The :class:`BlockArgs` of a call, or a ValueError / TypeError naming the bad argument."""
    device = _kind("x", x)
    if len(x.shape) != 4:
        raise ValueError(f"x must be 4-D (N, C, H, W), got shape {tuple(x.shape)}")
    dtype = dtype_name(x.dtype)
    if dtype not in DTYPES:
        raise TypeError(f"x's dtype must be one of {DTYPES}, got {x.dtype}")
    n, c, h, w = (int(v) for v in x.shape)
    for name, obj, want in (("w_dw", w_dw, None), ("w_pw", w_pw, None), ("b_dw", b_dw, (c,)),
                            ("residual", residual, None)):
        if obj is None:
            continue
        if _kind(name, obj) != device:
            raise TypeError(f"{name} must be a {'device' if device else 'host'} operand like x")
        if dtype_name(obj.dtype) != dtype:
            raise TypeError(f"{name} must have x's dtype {dtype}, got {obj.dtype}")
        if want is not None and tuple(obj.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(obj.shape)}")
    if len(w_dw.shape) != 4 or tuple(w_dw.shape[:2]) != (c, 1):
        raise ValueError(f"w_dw must have shape ({c}, 1, R, S) (a depthwise filter of x's {c} channels), "
                         f"got {tuple(w_dw.shape)}")
    if len(w_pw.shape) != 4 or w_pw.shape[1] != c or tuple(w_pw.shape[2:]) != (1, 1) or w_pw.shape[0] < 1:
        raise ValueError(f"w_pw must have shape (K, {c}, 1, 1), got {tuple(w_pw.shape)}")
    k, r, s = int(w_pw.shape[0]), int(w_dw.shape[2]), int(w_dw.shape[3])
    if b_pw is not None:
        if _kind("b_pw", b_pw) != device or dtype_name(b_pw.dtype) != dtype:
            raise TypeError(f"b_pw must be a {'device' if device else 'host'} operand of dtype {dtype}")
        if tuple(b_pw.shape) != (k,):
            raise ValueError(f"b_pw must have shape ({k},), got {tuple(b_pw.shape)}")
    st, pad, dil = _pair("stride", stride, 1), _pair("padding", padding, 0), _pair("dilation", dilation, 1)
    p = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1
    q = (w + 2 * pad[1] - dil[1] * (s - 1) - 1) // st[1] + 1
    if min(n, c, p, q) < 1 or min(r, s) < 1:
        raise ValueError(f"the block has no output: x {tuple(x.shape)}, filter {r}x{s}, stride {st}, "
                         f"padding {pad}, dilation {dil} give output {p}x{q}")
    if residual is not None and tuple(residual.shape) != (n, k, p, q):
        raise ValueError(f"residual must have shape {(n, k, p, q)}, got {tuple(residual.shape)}")
    cl = channels_last(host_array(x) if not device else x)
    if device and residual is not None and channels_last(residual) != cl:  # host ones are copied into it
        raise ValueError("residual must have x's memory layout (both C-contiguous or both channels-last)")
    if device and not (cl or runtime.as_device_array(x).is_c_contiguous()):
        raise ValueError("x must be C-contiguous or channels-last")
    for name, obj in (("w_dw", w_dw), ("w_pw", w_pw), ("b_dw", b_dw), ("b_pw", b_pw)):
        if device and obj is not None and not runtime.as_device_array(obj).is_c_contiguous():
            raise ValueError(f"{name} must be C-contiguous (a device operand the kernel reads flat)")
    vectors = [_vector(name, v, length, device) for name, v, length in
               (("dw_scale", dw_scale, c), ("dw_shift", dw_shift, c), ("scale", scale, k), ("shift", shift, k))]
    dw_epi = describe(dw_activation, False, "before", dw_scale is not None, dw_shift is not None)
    pw_epi = describe(activation, residual is not None, residual_at, scale is not None, shift is not None)
    shape = Shape(n, c, h, w, k, p, q, r, s, st, pad, dil)
    return BlockArgs(dtype, shape, dw_epi, pw_epi, cl, device, x, w_dw, w_pw, b_dw, b_pw, *vectors, residual)


def _f64(obj: Any) -> np.ndarray | None:
    if obj is None:
        return None
    host = runtime.to_host(runtime.as_device_array(obj)) if is_device(obj) else host_array(obj)
    return np.asarray(host, dtype=np.float64)


def reference(args: BlockArgs) -> np.ndarray:
    """The block in float64 (N, K, P, Q): the depthwise convolution with its epilogue, then the pointwise
    one with its own, each exactly as two separate layers define it."""
    x, wd, wp = _f64(args.x), _f64(args.w_dw), _f64(args.w_pw)
    sh = args.shape
    (st_h, st_w), (ph, pw), (dh, dw) = sh.stride, sh.padding, sh.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    t = np.zeros((sh.n, sh.c, sh.p, sh.q))
    for r in range(sh.r):
        for s in range(sh.s):
            window = xp[:, :, r * dh: r * dh + st_h * (sh.p - 1) + 1: st_h, s * dw: s * dw + st_w * (sh.q - 1) + 1: st_w]
            t += window * wd[None, :, 0, r, s, None, None]
    if args.b_dw is not None:
        t += _f64(args.b_dw)[None, :, None, None]
    t = reference_epilogue(t, args.dw_epi, _f64(args.dw_scale), _f64(args.dw_shift))
    y = np.einsum("ncpq,kc->nkpq", t, wp[:, :, 0, 0])
    if args.b_pw is not None:
        y += _f64(args.b_pw)[None, :, None, None]
    return reference_epilogue(y, args.pw_epi, _f64(args.scale), _f64(args.shift), _f64(args.residual))
