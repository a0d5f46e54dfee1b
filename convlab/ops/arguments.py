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

import math
from typing import Any

import numpy as np

from convlab import runtime
from convlab.call import operands
from convlab.runtime import context
from convlab.problem import DTYPES, Problem, as_pair, dtype_name, make_problem, np_dtype, public_op
from convlab.reference import transpose_output_size

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


def _padding_arg(padding: Any, op: str, r: int, s: int, stride: Any, dilation: Any) -> Any:
    """PyTorch's string paddings: ``"valid"`` is 0; ``"same"`` (stride 1 only) pads ``dilation * (k - 1)``
    in total per axis, which must be even here (convlab pads symmetrically; PyTorch puts an odd total's
    extra row/column at the bottom/right). Non-strings pass through unchanged."""
    if not isinstance(padding, str):
        return padding
    if op == "conv_transpose2d":
        raise ValueError(f"conv_transpose2d takes padding as an int or a pair (PyTorch refuses string "
                         f"padding there too), got padding={padding!r}")
    if padding == "valid":
        return 0
    if padding != "same":
        raise ValueError(f"padding must be an int, a pair of ints, 'same' or 'valid', got {padding!r}")
    if as_pair(stride, "stride", minimum=1) != (1, 1):
        raise ValueError(f"padding='same' needs stride=1 (as in PyTorch), got stride={stride!r}")
    dl = as_pair(dilation, "dilation", minimum=1)
    totals = (dl[0] * (r - 1), dl[1] * (s - 1))
    for axis, total in zip(("height", "width"), totals):
        if total % 2:
            raise ValueError(f"padding='same' with a {r}x{s} kernel and dilation {dl} pads {total} in total "
                             f"along the {axis}, an odd total: PyTorch puts the extra one at the "
                             f"bottom/right, but convlab pads symmetrically only; pad the input yourself "
                             f"(numpy.pad) and pass an int padding")
    return (totals[0] // 2, totals[1] // 2)


def forward_problem(x, w, bias, stride, padding, dilation, groups) -> Problem:
    xs, ws = array_spec(x, "x", 4), array_spec(w, "weight", 4)
    (n, c, h, wd), (k, cg, r, s) = xs[0], ws[0]
    bs = _check_bias(bias, k)
    dtype = _same_dtype(x=xs, weight=ws, bias=bs)
    _check_groups(groups, c, "x", k)
    if cg * groups != c:
        raise ValueError(f"channel mismatch: x has C={c} channels but weight {ws[0]} expects "
                         f"C/groups * groups = {cg} * {groups} = {cg * groups}")
    padding = _padding_arg(padding, "conv2d", r, s, stride, dilation)
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
    padding = _padding_arg(padding, public_op(op), r, s, stride, dilation)
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
    pd = as_pair(_padding_arg(padding, "conv_transpose2d", r, s, stride, dilation), "padding", minimum=0)
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


# ---- out= aliasing and sizes (checked by the ops before anything is allocated or launched) ---------
def _device_span(obj: Any) -> tuple[int, int] | None:
    """(address, bytes) of a device operand's memory; None for a numpy array."""
    if isinstance(obj, np.ndarray):
        return None
    if operands.is_torch(obj):
        return operands.pointer(obj)
    return operands.pointer(runtime.as_device_array(obj))


def check_out_aliasing(out: Any, inputs: dict[str, Any]) -> None:
    """ValueError when ``out`` shares memory with an input (the same array, a view into the same
    buffer, overlapping device memory): the kernels read the inputs while they write ``out``."""
    if out is None:
        return
    span = _device_span(out)
    for name, value in inputs.items():
        if value is None:
            continue
        if isinstance(out, np.ndarray) or isinstance(value, np.ndarray):
            overlap = (isinstance(out, np.ndarray) and isinstance(value, np.ndarray)
                       and np.shares_memory(out, value))
        else:
            other = _device_span(value)
            overlap = (span[1] > 0 and other[1] > 0 and span[0] < other[0] + other[1]
                       and other[0] < span[0] + span[1])
        if overlap:
            raise ValueError(f"out overlaps {name}: they share memory, and the kernels read {name} "
                             f"while they write out; pass an out= that shares no memory with the "
                             f"inputs (or out=None)")


#: Memory the simulator is assumed to have (it allocates host memory for every device array).
SIMULATOR_MEMORY = 2 * 2**30


def memory_budget() -> tuple[int, str]:
    """(bytes, description) of the memory an op's operands must fit in: the GPU's total memory (read
    once per device), or the target's (:data:`SIMULATOR_MEMORY` on the simulator)."""
    return context.current().cached("memory_budget", None, _memory_budget)


def _memory_budget() -> tuple[int, str]:
    if not runtime.HAS_DEVICE:
        target = runtime.target()
        return (SIMULATOR_MEMORY, "simulator's budget") if target.simulator else \
            (target.memory_bytes, f"{target.name}'s memory")
    return int(runtime.cuda.current_context().get_memory_info()[1]), "device's memory"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def check_fits(op: str, prob: Problem) -> None:
    """ValueError naming the argument when the output of ``op`` (a public op name) on ``prob``, or all
    its operands together, cannot fit in :func:`memory_budget` (checked before any allocation)."""
    budget, where = memory_budget()
    shapes = prob.operand_shapes
    out_bytes = math.prod(shapes[2]) * prob.itemsize
    total = sum(math.prod(s) for s in shapes) * prob.itemsize
    if out_bytes <= budget and total <= budget:
        return
    pd, st = prob.padding, prob.stride
    culprit = {"conv2d": f"padding={pd[0] if pd[0] == pd[1] else pd}" if max(pd) else
               f"x {prob.x_shape}",
               "conv2d_backward_data": f"input_shape={prob.x_shape}",
               "conv2d_backward_weight": f"weight_shape={prob.w_shape}" if max(pd) == 0 else
               f"padding={pd[0] if pd[0] == pd[1] else pd} with weight_shape={prob.w_shape}",
               "conv_transpose2d": f"stride={st[0] if st[0] == st[1] else st} on x {prob.y_shape}"}[op]
    dims = "x".join(map(str, shapes[2]))
    what = (f"the output {dims} ({_gib(out_bytes)})" if out_bytes > budget else
            f"the operands ({_gib(total)} with the output {dims})")
    raise ValueError(f"{op}: {culprit} makes {what}, more than the {where} ({_gib(budget)})")


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
    """The canonical Problem of a call ``op(*args, **kwargs)``; arrays need only ``shape``/``dtype``.
    ``op``: a public op name or its short form (forward, dgrad, wgrad, transpose)."""
    op = public_op(op)
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
