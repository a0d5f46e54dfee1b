"""The problem builders' argument checks: int-or-tuple arguments normalised per spatial dimension, the
output-size formula, and the checked fields of a 2D or N-d problem (what :func:`make_problem` and
:func:`make_problem_nd` construct a Problem from), each wrong argument named in a ValueError or
TypeError."""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .vocabulary import NDIMS, short_op

Pair = tuple[int, int]


class LengthError(ValueError, TypeError):
    """A stride / padding / dilation / output_padding tuple whose length is not the problem's N: a
    ValueError (the value is wrong for this N) and a TypeError (what a 2D op raised for a non-pair),
    as numpy's AxisError is both a ValueError and an IndexError."""


def as_tuple(value: int | Iterable[int], name: str, *, length: int, minimum: int) -> tuple[int, ...]:
    """Normalise an int-or-``length``-tuple argument, checking that every entry is an int >= ``minimum``."""
    form = "a pair of ints" if length == 2 else f"a tuple of {length} ints"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or {form}, got {value!r}")
    if isinstance(value, (int, np.integer)):
        items = (int(value),) * length
    else:
        try:
            items = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{name} must be an int or {form}, got {value!r}") from None
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            raise TypeError(f"{name} must be an int or {form}, got {value!r}")
        if len(items) != length:
            raise LengthError(f"{name} must be an int or {form} (one per spatial dimension), got "
                             f"{len(items)} entries: {value!r}")
        items = tuple(int(v) for v in items)
    if min(items) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return items


def as_pair(value: int | Iterable[int], name: str, *, minimum: int) -> Pair:
    """Normalise an int-or-pair argument, checking that both entries are ints >= ``minimum``."""
    return as_tuple(value, name, length=2, minimum=minimum)  # type: ignore[return-value]


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution along one axis (PyTorch's formula); may be <= 0."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def plane_fields(op: str, n: int, c: int, h: int, w: int, k: int, r: int, s: int,
                 p: int | None = None, q: int | None = None, stride=1, padding=0, dilation=1,
                 groups: int = 1, dtype: str = "float32", bias: bool = False) -> dict[str, Any]:
    """The checked fields of a 2D Problem (make_problem's arguments: ValueError / TypeError naming the
    first that is wrong); ``p``/``q`` default to the forward formula."""
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
    return dict(op=op, n=int(n), c=int(c), h=int(h), w=int(w), k=int(k), r=int(r), s=int(s),
                p=p, q=q, stride=stride, padding=padding, dilation=dilation, groups=int(groups),
                dtype=dtype, bias=bool(bias))


def nd_fields(op: str, n: int, c: int, spatial: Iterable[int], k: int, kernel: Iterable[int],
              out: Iterable[int] | None = None, stride=1, padding=0, dilation=1, groups: int = 1,
              dtype: str = "float32", bias: bool = False) -> dict[str, Any]:
    """The checked fields of a Problem of N = len(spatial) spatial dimensions (make_problem_nd's
    arguments); a 1D problem's are its 2D embedding's with ``ndim`` 1."""
    spatial, kernel = tuple(spatial), tuple(kernel)
    nd = len(spatial)
    if nd not in NDIMS:
        raise ValueError(f"a problem has 1, 2 or 3 spatial dimensions, got {nd}: {spatial}")
    if len(kernel) != nd:
        raise ValueError(f"kernel size {kernel} must have {nd} entries like the input's spatial "
                         f"size {spatial}")
    st = as_tuple(stride, "stride", length=nd, minimum=1)
    pd = as_tuple(padding, "padding", length=nd, minimum=0)
    dl = as_tuple(dilation, "dilation", length=nd, minimum=1)
    outs = None if out is None else tuple(int(v) for v in out)
    if outs is not None and len(outs) != nd:
        raise ValueError(f"output size {outs} must have {nd} entries")
    if nd == 2:
        return plane_fields(op, n, c, *spatial, k, *kernel, *(outs or (None, None)), stride=st,
                            padding=pd, dilation=dl, groups=groups, dtype=dtype, bias=bias)
    if nd == 1:
        plane = plane_fields(op, n, c, 1, spatial[0], k, 1, kernel[0], 1, None if outs is None else outs[0],
                             stride=(1, st[0]), padding=(0, pd[0]), dilation=(1, dl[0]), groups=groups,
                             dtype=dtype, bias=bias)
        return {**plane, "ndim": 1}
    (d, h, w), (t, r, s) = spatial, kernel
    for name, value in (("depth D", d), ("kernel depth T", t)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    full_do = conv_output_size(d, t, st[0], pd[0], dl[0])
    if full_do < 1:
        raise ValueError(f"the convolution output would be empty: input depth {d}, kernel depth {t}, "
                         f"stride {st[0]}, padding {pd[0]}, dilation {dl[0]} give {full_do}")
    do = full_do if outs is None else outs[0]
    if not 1 <= do <= full_do:
        raise ValueError(f"output depth {do} must be within 1..{full_do}")
    plane = plane_fields(op, n, c, h, w, k, r, s, *(outs[1:] if outs else (None, None)), stride=st[1:],
                         padding=pd[1:], dilation=dl[1:], groups=groups, dtype=dtype, bias=bias)
    return {**plane, "ndim": 3, "d": int(d), "t": int(t), "do": int(do), "stride_d": st[0],
            "padding_d": pd[0], "dilation_d": dl[0]}
