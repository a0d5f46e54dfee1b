"""The public ops. Each validates its arguments (before any launch), builds a canonical
:class:`~convlab.problem.Problem`, picks a plugin through :mod:`convlab.strategy` and runs it.

Arrays: numpy in -> numpy out (copied to the device and back); a Numba device array in -> device array
out; a PyTorch CUDA tensor in -> a tensor from torch's allocator out; any ``__cuda_array_interface__``
object (CuPy) is used in place, no copy. Calls with device operands replay a launch plan after the
first call of their signature (convlab.plan); streams follow convlab.operands' rules.
"""
from __future__ import annotations

import contextlib
from typing import Any, Sequence

import numpy as np

from . import launch, operands, plan, runtime
from .plugin import registry, strategy
from .problem import Problem, as_pair, make_problem
from .reference import transpose_output_size
from .settings import check_workspace_limit

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


# ---- argument checking ----------------------------------------------------------------------------
def _spec(obj: Any, name: str, ndim: int) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of an array argument, checking rank and dtype."""
    if obj is None or not hasattr(obj, "shape") or not hasattr(obj, "dtype"):
        raise TypeError(f"{name} must be an array (numpy, Numba device array or CUDA array interface), "
                        f"got {type(obj).__name__}")
    shape = tuple(int(s) for s in obj.shape)
    if len(shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {shape}")
    try:
        dtype = np.dtype(obj.dtype)
    except TypeError:
        dtype = np.dtype(str(obj.dtype).replace("torch.", ""))
    if dtype not in _DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {dtype}")
    return shape, dtype


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
    spec = _spec(bias, "bias", 1)
    if spec[0] != (channels,):
        raise ValueError(f"bias must have shape ({channels},), got {spec[0]}")
    return spec


def _forward_problem(x, w, bias, stride, padding, dilation, groups) -> Problem:
    xs, ws = _spec(x, "x", 4), _spec(w, "weight", 4)
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


def _dgrad_problem(grad_out, w, input_shape, stride, padding, dilation, groups) -> Problem:
    gs, ws = _spec(grad_out, "grad_out", 4), _spec(w, "weight", 4)
    dtype = _same_dtype(grad_out=gs, weight=ws)
    return _backward_problem("dgrad", _shape_arg(input_shape, "input_shape"), "input_shape", ws[0],
                             "weight", gs[0], dtype, stride, padding, dilation, groups)


def _wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups) -> Problem:
    xs, gs = _spec(x, "x", 4), _spec(grad_out, "grad_out", 4)
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


def _transpose_problem(x, w, bias, stride, padding, output_padding, groups, dilation) -> Problem:
    xs, ws = _spec(x, "x", 4), _spec(w, "weight", 4)
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


# ---- running --------------------------------------------------------------------------------------
def _to_device(obj: Any, name: str) -> Any:
    """A device array for an operand: numpy arrays are copied, CUDA arrays used in place."""
    if isinstance(obj, np.ndarray):
        return runtime.to_device(obj)
    if operands.is_torch(obj) and obj.is_cuda or runtime.is_cuda_array_like(obj):
        dev = operands.as_device(obj)
        if not dev.is_c_contiguous():
            raise ValueError(f"{name} is a non-contiguous device array; pass a C-contiguous one")
        return dev
    raise TypeError(f"{name} must be a numpy array or a CUDA array, got {type(obj).__name__}")


def _run_with_fallback(prob: Problem, candidate: Any, algorithm: Any, limit: int, *arrays: Any) -> Any:
    """Run the candidate; under ``"auto"`` a plugin whose kernel raises is excluded (with a warning
    naming it) and the next choice runs instead. A forced plugin's error propagates. Returns the
    candidate that ran."""
    while True:
        try:
            candidate.plugin.run(prob, candidate.config, *arrays, workspace_limit=limit)
            return candidate
        except Exception as exc:
            if not (isinstance(algorithm, str) and algorithm == "auto"):
                raise
            registry.mark_broken(candidate.plugin.name, exc)
            try:
                following = strategy.resolve(prob, "auto", limit)
            except ValueError:
                raise exc from None
            if following.plugin is candidate.plugin:  # never retry an excluded plugin
                raise exc
            candidate = following


def _call(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
          algorithm: Any, workspace_limit: Any, stream: Any) -> Any:
    """Replay the launch plan of this call's signature (convlab.plan), else check, run and record."""
    a, b = inputs.values()
    key = plan.call_key(op, [operands.signature(v) for v in (a, b, bias, out)], options, algorithm,
                        workspace_limit)
    found = plan.lookup(key) if key is not None else None
    if found is not None:
        st = operands.resolve_stream(stream, (a, b, bias, out))
        result = out if out is not None else operands.empty_like_kind(a, found.out_shape, found.dtype, st)
        values = (a, b, bias, result)
        spans = [None if v is None else operands.pointer(v) for v in values]
        if not plan.aliased(spans):
            devs = None if found.thin else [None if v is None else operands.as_device(v) for v in values]
            try:
                with launch.using_stream(st):
                    found.replay(devs, [0 if sp is None else sp[0] for sp in spans], st)
                return result
            except Exception as exc:
                if not found.thin:
                    raise
                launch.disable_thin(exc)  # the full path below recomputes the whole result
                plan.clear()
    return _execute(build(), inputs, bias, out, algorithm, workspace_limit, stream, key)


def _execute(prob: Problem, inputs: dict[str, Any], bias: Any, out: Any, algorithm: Any,
             workspace_limit: int | None, stream: Any = None, key: tuple | None = None) -> Any:
    """Check ``out``, pick the candidate, run it (recording a plan under ``key``), and hand the result
    back in the caller's kind of array: numpy when every operand was numpy, a torch tensor for torch
    operands, else a device array (or ``out`` when given)."""
    limit = check_workspace_limit(workspace_limit)
    out_shape = prob.operand_shapes[2]
    if out is not None:
        oshape, odtype = _spec(out, "out", 4)
        if oshape != out_shape or str(odtype) != prob.dtype:
            raise ValueError(f"out must have shape {out_shape} and dtype {prob.dtype}, "
                             f"got {oshape} {odtype}")
    for name, value in (*inputs.items(), ("bias", bias), ("out", out)):  # before "auto" may tune
        if value is not None and not isinstance(value, np.ndarray):
            _to_device(value, name)  # a view, no copy: ValueError when non-contiguous
    candidate = strategy.resolve(prob, algorithm, limit)  # validates algorithm= before any copy
    st = operands.resolve_stream(stream, (*inputs.values(), bias, out))
    host = all(isinstance(v, np.ndarray) for v in inputs.values())
    first = next(iter(inputs.values()))
    if out is None and operands.is_torch(first) and prob.n > 0:
        out = operands.empty_like_kind(first, out_shape, prob.dtype, st)  # the caller's allocator
    if prob.n == 0:  # nothing to compute: an empty output, or a zero gradient for wgrad
        result = np.zeros(out_shape, prob.dtype)
        dout = None if host or isinstance(out, np.ndarray) else (
            _to_device(out, "out") if out is not None else runtime.to_device(result))
        if dout is not None and out is not None:
            dout.copy_to_device(result)
    else:
        a, b = (_to_device(v, name) for name, v in inputs.items())
        dbias = None if bias is None else _to_device(bias, "bias")
        device_out = out is not None and not isinstance(out, np.ndarray)
        dout = (_to_device(out, "out") if device_out else
                operands.empty_like_kind(None, out_shape, prob.dtype, st))  # pooled: no cuMemAlloc
        arrays = (a, b, dbias, dout)
        spans = [None if v is None else operands.pointer(v) for v in arrays]
        record = (key is not None and plan.replayable(candidate) and not plan.aliased(spans)
                  and not launch.is_recording())
        with launch.using_stream(st), (launch.recording(spans) if record else
                                       contextlib.nullcontext()) as recorded:
            ran = _run_with_fallback(prob, candidate, algorithm, limit, *arrays)
        if record and ran is candidate:
            auto = isinstance(algorithm, str) and algorithm == "auto"
            plan.store(key, plan.Plan(ran, recorded, plan.host_state(), out_shape, prob.dtype,
                                      plan.decision_of(prob, limit) if auto else None))
        result = dout.copy_to_host() if host or isinstance(out, np.ndarray) else None
    if isinstance(out, np.ndarray):
        out[...] = result
        return out
    if out is not None:
        return out
    return result if host else dout


def conv2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None) -> Any:
    """y (N, K, P, Q) = conv2d(x (N, C, H, W), weight (K, C/groups, R, S)) + bias (K,).

    ``stream``: where the kernels run (default: the operands' stream; see convlab.operands)."""
    return _call("conv2d", lambda: _forward_problem(x, weight, bias, stride, padding, dilation, groups),
                 {"x": x, "weight": weight}, bias, out, (stride, padding, dilation, groups), algorithm,
                 workspace_limit, stream)


def conv2d_backward_data(grad_out: Any, weight: Any, input_shape: Sequence[int], stride=1, padding=0,
                         dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                         workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dx (input_shape) from grad_out (N, K, P, Q) and weight (K, C/groups, R, S)."""
    return _call("conv2d_backward_data",
                 lambda: _dgrad_problem(grad_out, weight, input_shape, stride, padding, dilation, groups),
                 {"grad_out": grad_out, "weight": weight}, None, out,
                 (input_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv2d_backward_weight(x: Any, grad_out: Any, weight_shape: Sequence[int], stride=1, padding=0,
                           dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                           workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dw (weight_shape = (K, C/groups, R, S)) from x (N, C, H, W) and grad_out (N, K, P, Q)."""
    return _call("conv2d_backward_weight",
                 lambda: _wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups),
                 {"x": x, "grad_out": grad_out}, None, out,
                 (weight_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv_transpose2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1, *, algorithm: Any = "auto", out: Any = None,
                     workspace_limit: int | None = None, stream: Any = None) -> Any:
    """y (N, C_out, H_out, W_out) from x (N, C_in, H, W), weight (C_in, C_out/groups, R, S), bias (C_out,).

    Computed as the backward-data problem of the forward convolution that maps y's shape to x's.
    """
    return _call("conv_transpose2d",
                 lambda: _transpose_problem(x, weight, bias, stride, padding, output_padding, groups,
                                            dilation),
                 {"x": x, "weight": weight}, bias, out, (stride, padding, output_padding, groups, dilation),
                 algorithm, workspace_limit, stream)


_BUILDERS = {"conv2d": _forward_problem, "conv2d_backward_data": _dgrad_problem,
             "conv2d_backward_weight": _wgrad_problem, "conv_transpose2d": _transpose_problem}
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


def explain(*args: Any, op: str = "conv2d", algorithm: Any = "auto",
            workspace_limit: int | None = None, **kwargs: Any):
    """For a call ``op(*args, **kwargs)`` (or a Problem as the only argument): each plugin, whether it
    applies (and why not), its workspace, and what ``algorithm`` picks. Returns an Explanation."""
    from .plugin.explain import explain_problem

    prob = args[0] if len(args) == 1 and isinstance(args[0], Problem) else problem_for(op, *args, **kwargs)
    return explain_problem(prob, algorithm=algorithm, workspace_limit=check_workspace_limit(workspace_limit))
