"""Validation of the public ops' arguments: each op's arguments become one canonical
:class:`~convlab.problem.Problem` (or a ``ValueError`` / ``TypeError`` naming the argument and what was
expected), before anything is copied or launched. Arrays need only ``shape`` and ``dtype`` here.

    conv2d                  forward_problem(x, weight, bias, stride, padding, dilation, groups)
    conv2d_backward_data    dgrad_problem(grad_out, weight, input_shape, ...)
    conv2d_backward_weight  wgrad_problem(x, grad_out, weight_shape, ...)
    conv_transpose2d        transpose_problem(x, weight, bias, stride, padding, output_padding, groups,
                            dilation): the dgrad problem of the forward conv mapping y's shape to x's
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .problem import DTYPES, Problem, as_pair, dtype_name, make_problem, np_dtype
from .reference import transpose_output_size

#: accepted operand dtypes (names; bfloat16 is ``ml_dtypes.bfloat16`` or torch.bfloat16)
_DTYPES = DTYPES


# ---- argument checking ----------------------------------------------------------------------------
def array_spec(obj: Any, name: str, ndim: int) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array argument, checking rank and dtype."""
    if obj is None or not hasattr(obj, "shape") or not hasattr(obj, "dtype"):
        raise TypeError(f"{name} must be an array (numpy, Numba device array or CUDA array interface), "
                        f"got {type(obj).__name__}")
    shape = tuple(int(s) for s in obj.shape)
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape}")
    kind = dtype_name(obj.dtype)
    if kind not in _DTYPES:
        raise TypeError(f"{name} must be one of {', '.join(_DTYPES)}, got dtype {obj.dtype}")
    return shape, np_dtype(kind)


def _same_dtype(**arrays: tuple[tuple[int, ...], np.dtype] | None) -> str:
    items = [(k, v[1]) for k, v in arrays.items() if v is not None]
    first_name, first = items[0]
    for name, dtype in items[1:]:
        if dtype != first:
            raise TypeError(f"{name} has dtype {dtype} but {first_name} has {first}; dtypes must match")
    return str(first)


def _shape_arg(value: Any, name: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of 4 ints, got {value!r}") from None
    if len(shape) != 4 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                  for v in shape):
        raise TypeError(f"{name} must be a sequence of 4 ints, got {value!r}")
    if min(shape) < 0:
        raise ValueError(f"{name} must not have negative sizes, got {shape}")
    return tuple(int(v) for v in shape)  # type: ignore[return-value]


def _check_bias(bias: Any, channels: int):
    if bias is None:
        return None
    spec = array_spec(bias, "bias", 1)
    if spec[0] != (channels,):
        raise ValueError(f"bias must have shape ({channels},), got {spec[0]}")
    return spec


def forward_problem(x, w, bias, stride, padding, dilation, groups) -> Problem:
    xs, ws = array_spec(x, "x", 4), array_spec(w, "weight", 4)
    (n, c, h, wd), (k, cg, r, s) = xs[0], ws[0]
    bs = _check_bias(bias, k)
    dtype = _same_dtype(x=xs, weight=ws, bias=bs)
    _check_groups(groups, c, "x", k)
    if cg * groups != c:
        raise ValueError(f"channel mismatch: x has C={c} channels but weight {ws[0]} expects "
                         f"C/groups * groups = {cg} * {groups} = {cg * groups}")
    return make_problem("forward", n, c, h, wd, k, r, s, stride=stride, padding=padding,
                        dilation=dilation, groups=groups, dtype=dtype, bias=bias is not None)


def _check_groups_value(groups: Any) -> None:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"groups must be an int, got {groups!r}")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")


def _check_groups(groups: Any, c: int, c_name: str, k: int) -> None:
    _check_groups_value(groups)
    if c % groups:
        raise ValueError(f"channels of {c_name} (C={c}) must be divisible by groups={groups}")
    if k % groups:
        raise ValueError(f"output channels K={k} must be divisible by groups={groups}")


def dgrad_problem(grad_out, w, input_shape, stride, padding, dilation, groups) -> Problem:
    gs, ws = array_spec(grad_out, "grad_out", 4), array_spec(w, "weight", 4)
    dtype = _same_dtype(grad_out=gs, weight=ws)
    return _backward_problem("dgrad", _shape_arg(input_shape, "input_shape"), "input_shape", ws[0],
                             "weight", gs[0], dtype, stride, padding, dilation, groups)


def wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups) -> Problem:
    xs, gs = array_spec(x, "x", 4), array_spec(grad_out, "grad_out", 4)
    dtype = _same_dtype(x=xs, grad_out=gs)
    return _backward_problem("wgrad", xs[0], "x", _shape_arg(weight_shape, "weight_shape"),
                             "weight_shape", gs[0], dtype, stride, padding, dilation, groups)


def _backward_problem(op: str, x_dims: tuple, x_name: str, w_dims: tuple, w_name: str, g_dims: tuple,
                      dtype: str, stride, padding, dilation, groups) -> Problem:
    """The dgrad or wgrad problem from the input's and the weight's shapes (an array's or a shape
    argument's, named ``x_name`` / ``w_name`` in errors), checked against grad_out's shape ``g_dims``."""
    (n, c, h, wd), (k, cg, r, s), (gn, gk, gp, gq) = x_dims, w_dims, g_dims
    _check_groups(groups, c, x_name, k)
    if cg * groups != c:
        raise ValueError(f"channel mismatch: {x_name} has C={c} but {w_name} {tuple(w_dims)} expects "
                         f"{cg} * groups({groups}) = {cg * groups}")
    if (gn, gk) != (n, k):
        raise ValueError(f"grad_out {tuple(g_dims)} must have batch {n} ({x_name}) and K={k} channels "
                         f"({w_name})")
    prob = make_problem(op, n, c, h, wd, k, r, s, stride=stride, padding=padding, dilation=dilation,
                        groups=groups, dtype=dtype)
    if (gp, gq) != (prob.p, prob.q):
        raise ValueError(f"grad_out spatial size {gp}x{gq} does not match the forward output "
                         f"{prob.p}x{prob.q} of {x_name} {tuple(x_dims)} with these stride/padding/dilation")
    return prob


def transpose_problem(x, w, bias, stride, padding, output_padding, groups, dilation) -> Problem:
    xs, ws = array_spec(x, "x", 4), array_spec(w, "weight", 4)
    (n, cin, hin, win), (wk, cout_g, r, s) = xs[0], ws[0]
    _check_groups_value(groups)  # needed before C_out = (C_out / groups) * groups
    if wk != cin:
        raise ValueError(f"channel mismatch: x has {cin} channels but weight {ws[0]} has "
                         f"{wk} input channels (weight is (C_in, C_out/groups, R, S))")
    cout = cout_g * groups
    bs = _check_bias(bias, cout)
    dtype = _same_dtype(x=xs, weight=ws, bias=bs)
    _check_groups(groups, cout, "the output", cin)
    st = as_pair(stride, "stride", minimum=1)
    pd = as_pair(padding, "padding", minimum=0)
    dl = as_pair(dilation, "dilation", minimum=1)
    op = as_pair(output_padding, "output_padding", minimum=0)
    for axis in range(2):
        if op[axis] >= st[axis] and op[axis] >= dl[axis]:
            raise ValueError(f"output_padding {op} must be smaller than either stride {st} or "
                             f"dilation {dl} on each axis")
    hout = transpose_output_size(hin, r, st[0], pd[0], op[0], dl[0])
    wout = transpose_output_size(win, s, st[1], pd[1], op[1], dl[1])
    if hout < 1 or wout < 1:
        raise ValueError(f"the conv_transpose2d output would be empty ({hout}x{wout}): input "
                         f"{hin}x{win}, kernel {r}x{s}, stride {st}, padding {pd}, dilation {dl}")
    return make_problem("dgrad", n, cout, hout, wout, cin, r, s, p=hin, q=win, stride=st, padding=pd,
                        dilation=dl, groups=groups, dtype=dtype, bias=bias is not None)


_BUILDERS = {"conv2d": forward_problem, "conv2d_backward_data": dgrad_problem,
             "conv2d_backward_weight": wgrad_problem, "conv_transpose2d": transpose_problem}
_PARAMS = {"conv2d": ("x", "weight", "bias", "stride", "padding", "dilation", "groups"),
           "conv2d_backward_data": ("grad_out", "weight", "input_shape", "stride", "padding",
                                    "dilation", "groups"),
           "conv2d_backward_weight": ("x", "grad_out", "weight_shape", "stride", "padding", "dilation",
                                      "groups"),
           "conv_transpose2d": ("x", "weight", "bias", "stride", "padding", "output_padding", "groups",
                                "dilation")}
_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}


def problem_for(op: str, *args: Any, **kwargs: Any) -> Problem:
    """The canonical Problem of a call ``op(*args, **kwargs)``; arrays need only ``shape``/``dtype``."""
    if op not in _BUILDERS:
        raise ValueError(f"op must be one of {sorted(_BUILDERS)}, got {op!r}")
    names = _PARAMS[op]
    if len(args) > len(names):
        raise TypeError(f"{op} takes at most {len(names)} positional arguments")
    values = dict(_DEFAULTS)
    values.update(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{op} got an unexpected argument {key!r}")
        values[key] = value
    missing = [n for n in names if n not in values]
    if missing:
        raise TypeError(f"{op} is missing argument(s) {missing}")
    return _BUILDERS[op](*(values[n] for n in names))
