"""Validation of the public ops' arguments: each op's arguments become one canonical
:class:`~convlab.problem.Problem` (or a ``ValueError`` / ``TypeError`` naming the argument and what was
expected), before anything is copied or launched. Arrays need only ``shape`` and ``dtype`` here. Every
builder takes ``nd``, the op's spatial dimensions (1, 2 or 3: conv1d / conv2d / conv3d and their
transposes and gradients), and checks each array's rank and each tuple's length against it.

    conv{N}d                  forward_problem(x, weight, bias, stride, padding, dilation, groups, nd)
    conv{N}d_backward_data    dgrad_problem(grad_out, weight, input_shape, ..., nd)
    conv{N}d_backward_weight  wgrad_problem(x, grad_out, weight_shape, ..., nd)
    conv_transpose{N}d        transpose_problem(x, weight, bias, stride, padding, output_padding, groups,
                              dilation, nd): the dgrad problem of the forward conv mapping y's shape to x's
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab.problem import (DTYPES, ND_OP_NAMES, Problem, as_tuple, dtype_name, make_problem_nd, np_dtype,
                             op_ndim, public_op, short_op)
from convlab.reference import transpose_output_size

from .output_checks import SIMULATOR_MEMORY, check_fits, check_out_aliasing, memory_budget  # noqa: F401

#: accepted operand dtypes (names; bfloat16 is ``ml_dtypes.bfloat16`` or torch.bfloat16)
_DTYPES = DTYPES


# ---- argument checking ----------------------------------------------------------------------------
#: the layout of an N-d activation, by rank: what an error about a tensor's rank names
_FORMS = {3: "(N, C, L)", 4: "(N, C, H, W)", 5: "(N, C, D, H, W)"}
_AXES = {1: ("length",), 2: ("height", "width"), 3: ("depth", "height", "width")}


def array_spec(obj: Any, name: str, ndim: int, op: str | None = None) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array argument, checking rank and dtype; with ``op`` (a public op name) a
    rank of another convolution's (3, 4 or 5) names the op that takes it."""
    if obj is None or not hasattr(obj, "shape") or not hasattr(obj, "dtype"):
        raise TypeError(f"{name} must be an array (numpy, Numba device array or CUDA array interface), "
                        f"got {type(obj).__name__}")
    shape = tuple(int(s) for s in obj.shape)
    if len(shape) != ndim:
        hint = ""
        if op is not None and len(shape) in _FORMS and ndim in _FORMS:
            other = op.replace(f"{ndim - 2}d", f"{len(shape) - 2}d")
            hint = f"; {op} takes {ndim}-D operands {_FORMS[ndim]}: use {other} for {len(shape)}-D ones"
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape}{hint}")
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


def _shape_arg(value: Any, name: str, length: int = 4) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {length} ints, got {value!r}") from None
    if len(shape) != length or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                       for v in shape):
        raise TypeError(f"{name} must be a sequence of {length} ints, got {value!r}")
    if min(shape) < 0:
        raise ValueError(f"{name} must not have negative sizes, got {shape}")
    return tuple(int(v) for v in shape)


def _check_bias(bias: Any, channels: int):
    if bias is None:
        return None
    spec = array_spec(bias, "bias", 1)
    if spec[0] != (channels,):
        raise ValueError(f"bias must have shape ({channels},), got {spec[0]}")
    return spec


def _padding_arg(padding: Any, op: str, kernel: tuple[int, ...], stride: Any, dilation: Any) -> Any:
    """PyTorch's string paddings: ``"valid"`` is 0; ``"same"`` (stride 1 only) pads ``dilation * (k - 1)``
    in total per axis, which must be even here (convlab pads symmetrically; PyTorch puts an odd total's
    extra row/column at the bottom/right). Non-strings pass through unchanged."""
    if not isinstance(padding, str):
        return padding
    nd = len(kernel)
    if op.startswith("conv_transpose"):
        raise ValueError(f"{op} takes padding as an int or a {'pair' if nd == 2 else f'{nd}-tuple'} "
                         f"(PyTorch refuses string padding there too), got padding={padding!r}")
    if padding == "valid":
        return 0
    if padding != "same":
        form = "a pair of ints" if nd == 2 else f"a tuple of {nd} ints"
        raise ValueError(f"padding must be an int, {form}, 'same' or 'valid', got {padding!r}")
    if as_tuple(stride, "stride", length=nd, minimum=1) != (1,) * nd:
        raise ValueError(f"padding='same' needs stride=1 (as in PyTorch), got stride={stride!r}")
    dl = as_tuple(dilation, "dilation", length=nd, minimum=1)
    totals = tuple(d * (k - 1) for d, k in zip(dl, kernel))
    for axis, total in zip(_AXES[nd], totals):
        if total % 2:
            raise ValueError(f"padding='same' with a {'x'.join(map(str, kernel))} kernel and dilation {dl} "
                             f"pads {total} in total along the {axis}, an odd total: PyTorch puts the "
                             f"extra one at the bottom/right, but convlab pads symmetrically only; pad the "
                             f"input yourself (numpy.pad) and pass an int padding")
    return tuple(t // 2 for t in totals)


def _op(kind: str, nd: int) -> str:
    return ND_OP_NAMES[nd][kind]


def forward_problem(x, w, bias, stride, padding, dilation, groups, nd: int = 2) -> Problem:
    op = _op("forward", nd)
    xs, ws = array_spec(x, "x", nd + 2, op), array_spec(w, "weight", nd + 2, op)
    (n, c, *spatial), (k, cg, *kernel) = xs[0], ws[0]
    bs = _check_bias(bias, k)
    dtype = _same_dtype(x=xs, weight=ws, bias=bs)
    _check_groups(groups, c, "x", k)
    if cg * groups != c:
        raise ValueError(f"channel mismatch: x has C={c} channels but weight {ws[0]} expects "
                         f"C/groups * groups = {cg} * {groups} = {cg * groups}")
    padding = _padding_arg(padding, op, tuple(kernel), stride, dilation)
    return make_problem_nd("forward", n, c, spatial, k, kernel, stride=stride, padding=padding,
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


def dgrad_problem(grad_out, w, input_shape, stride, padding, dilation, groups, nd: int = 2) -> Problem:
    op = _op("dgrad", nd)
    gs, ws = array_spec(grad_out, "grad_out", nd + 2, op), array_spec(w, "weight", nd + 2, op)
    dtype = _same_dtype(grad_out=gs, weight=ws)
    return _backward_problem("dgrad", _shape_arg(input_shape, "input_shape", nd + 2), "input_shape", ws[0],
                             "weight", gs[0], dtype, stride, padding, dilation, groups)


def wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups, nd: int = 2) -> Problem:
    op = _op("wgrad", nd)
    xs, gs = array_spec(x, "x", nd + 2, op), array_spec(grad_out, "grad_out", nd + 2, op)
    dtype = _same_dtype(x=xs, grad_out=gs)
    return _backward_problem("wgrad", xs[0], "x", _shape_arg(weight_shape, "weight_shape", nd + 2),
                             "weight_shape", gs[0], dtype, stride, padding, dilation, groups)


def _backward_problem(op: str, x_dims: tuple, x_name: str, w_dims: tuple, w_name: str, g_dims: tuple,
                      dtype: str, stride, padding, dilation, groups) -> Problem:
    """The dgrad or wgrad problem from the input's and the weight's shapes (an array's or a shape
    argument's, named ``x_name`` / ``w_name`` in errors), checked against grad_out's shape ``g_dims``."""
    (n, c, *spatial), (k, cg, *kernel), (gn, gk, *gout) = x_dims, w_dims, g_dims
    _check_groups(groups, c, x_name, k)
    if cg * groups != c:
        raise ValueError(f"channel mismatch: {x_name} has C={c} but {w_name} {tuple(w_dims)} expects "
                         f"{cg} * groups({groups}) = {cg * groups}")
    if (gn, gk) != (n, k):
        raise ValueError(f"grad_out {tuple(g_dims)} must have batch {n} ({x_name}) and K={k} channels "
                         f"({w_name})")
    padding = _padding_arg(padding, _op(op, len(spatial)), tuple(kernel), stride, dilation)
    prob = make_problem_nd(op, n, c, spatial, k, kernel, stride=stride, padding=padding, dilation=dilation,
                           groups=groups, dtype=dtype)
    if tuple(gout) != prob.spatial_out:
        size = "x".join
        raise ValueError(f"grad_out spatial size {size(map(str, gout))} does not match the forward output "
                         f"{size(map(str, prob.spatial_out))} of {x_name} {tuple(x_dims)} with these "
                         f"stride/padding/dilation")
    return prob


def transpose_problem(x, w, bias, stride, padding, output_padding, groups, dilation, nd: int = 2) -> Problem:
    name = _op("transpose", nd)
    xs, ws = array_spec(x, "x", nd + 2, name), array_spec(w, "weight", nd + 2, name)
    (n, cin, *spatial), (wk, cout_g, *kernel) = xs[0], ws[0]
    _check_groups_value(groups)  # needed before C_out = (C_out / groups) * groups
    if wk != cin:
        raise ValueError(f"channel mismatch: x has {cin} channels but weight {ws[0]} has "
                         f"{wk} input channels (weight is (C_in, C_out/groups, *kernel))")
    cout = cout_g * groups
    bs = _check_bias(bias, cout)
    dtype = _same_dtype(x=xs, weight=ws, bias=bs)
    _check_groups(groups, cout, "the output", cin)
    st = as_tuple(stride, "stride", length=nd, minimum=1)
    pd = as_tuple(_padding_arg(padding, name, tuple(kernel), stride, dilation), "padding", length=nd,
                  minimum=0)
    dl = as_tuple(dilation, "dilation", length=nd, minimum=1)
    op = as_tuple(output_padding, "output_padding", length=nd, minimum=0)
    for axis in range(nd):
        if op[axis] >= st[axis] and op[axis] >= dl[axis]:
            raise ValueError(f"output_padding {op} must be smaller than either stride {st} or "
                             f"dilation {dl} on each axis")
    outs = tuple(transpose_output_size(*args) for args in zip(spatial, kernel, st, pd, op, dl))
    if min(outs) < 1:
        raise ValueError(f"the {name} output would be empty ({'x'.join(map(str, outs))}): input "
                         f"{'x'.join(map(str, spatial))}, kernel {'x'.join(map(str, kernel))}, stride {st}, "
                         f"padding {pd}, dilation {dl}")
    return make_problem_nd("dgrad", n, cout, outs, cin, kernel, spatial, stride=st, padding=pd,
                           dilation=dl, groups=groups, dtype=dtype, bias=bias is not None)


_BUILDERS = {"forward": forward_problem, "dgrad": dgrad_problem, "wgrad": wgrad_problem,
             "transpose": transpose_problem}
_PARAMS = {"forward": ("x", "weight", "bias", "stride", "padding", "dilation", "groups"),
           "dgrad": ("grad_out", "weight", "input_shape", "stride", "padding", "dilation", "groups"),
           "wgrad": ("x", "grad_out", "weight_shape", "stride", "padding", "dilation", "groups"),
           "transpose": ("x", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")}
_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}


def problem_for(op: str, *args: Any, **kwargs: Any) -> Problem:
    """The canonical Problem of a call ``op(*args, **kwargs)``; arrays need only ``shape``/``dtype``.
    ``op``: a public op name of any N (conv1d, conv_transpose3d, ...) or a 2D op's short form (forward,
    dgrad, wgrad, transpose). A conv1d's Problem has ``ndim=1`` (the ops run its ``lowered()`` form)."""
    op = public_op(op)
    kind, nd = short_op(op), op_ndim(op)
    names = _PARAMS[kind]
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
    return _BUILDERS[kind](*(values[n] for n in names), nd=nd)
