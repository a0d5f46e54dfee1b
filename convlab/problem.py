"""The problem model: one immutable description of a 2D convolution problem.

All four public ops are built on three canonical problems over the same forward geometry:

    forward  y[n, k, p, q]  = sum_{c, r, s} x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w[k, c, r, s]
    dgrad    dx = d(sum y*dy)/dx     given dy (N, K, P, Q) and w          -> dx (N, C, H, W)
    wgrad    dw = d(sum y*dy)/dw     given x  (N, C, H, W) and dy         -> dw (K, C', R, S)

with C' = C / groups, g = k // (K / groups). conv_transpose2d(x, w) is the dgrad problem whose dy is the
transposed convolution's input; its output (dx) may carry an optional bias. Layouts are NCHW, weights
KCRS, like PyTorch.

Operands of each op, in the order plugins receive them (``a``, ``b`` -> ``out``):

    op        a                 b                    out
    forward   x  (N, C, H, W)   w  (K, C', R, S)     y  (N, K, P, Q)   (+ bias (K,))
    dgrad     dy (N, K, P, Q)   w  (K, C', R, S)     dx (N, C, H, W)   (+ bias (C,), for the transpose)
    wgrad     x  (N, C, H, W)   dy (N, K, P, Q)      dw (K, C', R, S)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

OPS = ("forward", "dgrad", "wgrad")
#: Operand dtypes. float16 and bfloat16 (``ml_dtypes.bfloat16`` numpy arrays) accumulate in fp32 and
#: write outputs in the input dtype.
DTYPES = ("float32", "float64", "float16", "bfloat16")
HALF_DTYPES = ("float16", "bfloat16")


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a :data:`DTYPES` name (bfloat16 through ``ml_dtypes``, imported only here)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_name(dtype: object) -> str | None:
    """The :data:`DTYPES` name of a dtype-like (numpy dtype, ``ml_dtypes`` type, torch dtype text), or
    None when it is none of them."""
    text = str(dtype).replace("torch.", "")
    if text in DTYPES:
        return text
    try:
        return np.dtype(dtype).name if np.dtype(dtype).name in DTYPES else None  # type: ignore[arg-type]
    except TypeError:
        return None


def unit_roundoff(name: str) -> float:
    """Machine epsilon of a dtype's storage (2**-10 float16, 2**-7 bfloat16, 2**-23 float32, ...)."""
    return {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[name]

Pair = tuple[int, int]


def as_pair(value: int | Iterable[int], name: str, *, minimum: int) -> Pair:
    """Normalise an int-or-pair argument, checking that both entries are ints >= ``minimum``."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, (int, np.integer)):
        pair = (int(value), int(value))
    else:
        try:
            items = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}") from None
        if len(items) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                      for v in items):
            raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
        pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return pair


#: One vocabulary, two spellings: the public op names (canonical in the API: ``explain(op=...)``,
#: ``problem_for``) and the short names (canonical in ``Problem.op`` and on the command line). Both are
#: accepted everywhere; ``transpose`` is conv_transpose2d, whose problem is a dgrad one.
OP_NAMES = {"forward": "conv2d", "dgrad": "conv2d_backward_data", "wgrad": "conv2d_backward_weight",
            "transpose": "conv_transpose2d"}


def public_op(name: str) -> str:
    """The public op name of ``name`` (either spelling); ValueError listing both otherwise."""
    if name in OP_NAMES.values():
        return name
    if isinstance(name, str) and name in OP_NAMES:
        return OP_NAMES[name]
    raise ValueError(f"op must be one of {sorted(OP_NAMES.values())} (or {sorted(OP_NAMES)}), "
                     f"got {name!r}")


def short_op(name: str) -> str:
    """The short name of ``name`` (either spelling): forward, dgrad, wgrad or transpose."""
    public = public_op(name)
    return next(k for k, v in OP_NAMES.items() if v == public)


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution along one axis (PyTorch's formula); may be <= 0."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


@dataclass(frozen=True)
class Problem:
    """A canonical convolution problem. Construct through :func:`make_problem` or the op builders.

    ``p``/``q`` are the output (dy) spatial sizes. They equal the forward formula except for a
    conv_transpose2d with ``output_padding >= stride``, whose dy may be smaller than the formula gives.
    """

    op: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    p: int
    q: int
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    dtype: str = "float32"
    bias: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {OPS}, got {self.op!r}")
        if self.dtype not in DTYPES:
            raise TypeError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        np_dtype(self.dtype)  # bfloat16: imports ml_dtypes, after which np.dtype("bfloat16") works
        if self.bias and self.op == "wgrad":
            raise ValueError("bias is not an operand of wgrad")

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def c_per_group(self) -> int:
        return self.c // self.groups

    @property
    def k_per_group(self) -> int:
        return self.k // self.groups

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.k, self.c_per_group, self.r, self.s)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.k, self.p, self.q)

    @property
    def operand_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Shapes of (a, b, out) as plugins receive them (see the module docstring)."""
        return {"forward": (self.x_shape, self.w_shape, self.y_shape),
                "dgrad": (self.y_shape, self.w_shape, self.x_shape),
                "wgrad": (self.x_shape, self.y_shape, self.w_shape)}[self.op]

    @property
    def bias_shape(self) -> tuple[int] | None:
        if not self.bias:
            return None
        return (self.k,) if self.op == "forward" else (self.c,)

    @property
    def itemsize(self) -> int:
        return np_dtype(self.dtype).itemsize

    # ---- the GEMM view --------------------------------------------------------------------------
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of one group's implicit GEMM: out[M, N] = sum_K A[M, K] B[K, N]."""
        npq = self.n * self.p * self.q
        if self.op == "forward":
            return (npq, self.k_per_group, self.c_per_group * self.r * self.s)
        if self.op == "dgrad":
            return (self.n * self.h * self.w, self.c_per_group, self.k_per_group * self.r * self.s)
        return (self.k_per_group, self.c_per_group * self.r * self.s, npq)

    @property
    def reduction_length(self) -> int:
        """Upper bound of the number of products summed into one output element."""
        return self.gemm_shape()[2]

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the dense algorithm (the same count for all three ops)."""
        return 2 * self.n * self.k * self.p * self.q * self.c_per_group * self.r * self.s

    @property
    def bytes(self) -> int:
        """Fewest bytes moved through device memory: each operand read once, the output written once."""
        elems = sum(int(np.prod(s)) for s in self.operand_shapes)
        if self.bias:
            elems += self.bias_shape[0]  # type: ignore[index]
        return elems * self.itemsize

    def key(self) -> tuple:
        """Hashable exact identity of the problem (used by caches)."""
        return (self.op, self.dtype, self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.p,
                self.q, self.stride, self.padding, self.dilation, self.groups, self.bias)

    def replace(self, **changes) -> "Problem":
        fields = {f: getattr(self, f) for f in ("op", "n", "c", "h", "w", "k", "r", "s", "p", "q",
                                                "stride", "padding", "dilation", "groups", "dtype",
                                                "bias")}
        fields.update(changes)
        return make_problem(**fields)

    def describe(self) -> str:
        """One line such as ``forward f32 x(16,3,227,227) w(96,3,11,11) s4 p0 d1 g1``."""
        st, pd, dl = (f"{a}" if a == b else f"{a}x{b}" for a, b in (self.stride, self.padding,
                                                                     self.dilation))
        return (f"{self.op} {self.dtype.replace('float', 'f')} x{self.x_shape} w{self.w_shape} "
                f"s{st} p{pd} d{dl} g{self.groups}{' +bias' if self.bias else ''}").replace(" ", " ")

    def to_dict(self) -> dict:
        return {"op": self.op, "dtype": self.dtype, "x": list(self.x_shape), "w": list(self.w_shape),
                "out_hw": [self.p, self.q], "stride": list(self.stride), "padding": list(self.padding),
                "dilation": list(self.dilation), "groups": self.groups, "bias": self.bias}

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        """The inverse of :meth:`to_dict` (validated like :func:`make_problem`)."""
        (n, c, h, w), (k, _, r, s), (p, q) = d["x"], d["w"], d["out_hw"]
        return make_problem(d["op"], n, c, h, w, k, r, s, p=p, q=q, stride=tuple(d["stride"]),
                            padding=tuple(d["padding"]), dilation=tuple(d["dilation"]),
                            groups=d["groups"], dtype=d["dtype"], bias=d["bias"])


def make_problem(op: str, n: int, c: int, h: int, w: int, k: int, r: int, s: int,
                 p: int | None = None, q: int | None = None, stride=1, padding=0, dilation=1,
                 groups: int = 1, dtype: str = "float32", bias: bool = False) -> Problem:
    """Validate and build a :class:`Problem`; ``p``/``q`` default to the forward formula. ``op`` is
    forward, dgrad or wgrad, or its public name (conv2d, conv2d_backward_data, conv2d_backward_weight)."""
    op = short_op(op)
    if op == "transpose":
        raise ValueError("make_problem takes the canonical problem (forward, dgrad or wgrad); a "
                         "conv_transpose2d is a dgrad problem: use problem_for('conv_transpose2d', ...)")
    stride = as_pair(stride, "stride", minimum=1)
    padding = as_pair(padding, "padding", minimum=0)
    dilation = as_pair(dilation, "dilation", minimum=1)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"groups must be an int, got {groups!r}")
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    for name, value in (("batch size N", n), ("channels C", c), ("height H", h), ("width W", w),
                        ("output channels K", k), ("kernel height R", r), ("kernel width S", s)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < (0 if name.startswith("batch") else 1):
            raise ValueError(f"{name} must be >= {0 if name.startswith('batch') else 1}, got {value}")
    if c % groups:
        raise ValueError(f"input channels C={c} must be divisible by groups={groups}")
    if k % groups:
        raise ValueError(f"output channels K={k} must be divisible by groups={groups}")
    full_p = conv_output_size(h, r, stride[0], padding[0], dilation[0])
    full_q = conv_output_size(w, s, stride[1], padding[1], dilation[1])
    if full_p < 1 or full_q < 1:
        raise ValueError(
            f"the convolution output would be empty: input {h}x{w}, kernel {r}x{s}, stride {stride}, "
            f"padding {padding}, dilation {dilation} give {full_p}x{full_q}")
    p = full_p if p is None else int(p)
    q = full_q if q is None else int(q)
    if not (1 <= p <= full_p and 1 <= q <= full_q):
        raise ValueError(f"output size {p}x{q} must be within 1..{full_p} x 1..{full_q}")
    return Problem(op=op, n=int(n), c=int(c), h=int(h), w=int(w), k=int(k), r=int(r), s=int(s),
                   p=p, q=q, stride=stride, padding=padding, dilation=dilation, groups=int(groups),
                   dtype=dtype, bias=bool(bias))
