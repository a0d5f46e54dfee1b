"""Hypothesis strategies that draw only valid convolution problems.

``problems(op)`` draws small problems with every option: batch 1-3, groups, stride, dilation and
padding up to the kernel's extent (dilation * (kernel - 1) + 1) on each axis, bias, odd sizes, and for
dgrad the smaller output that conv_transpose2d's output_padding allows; ``aligned_problems(op)`` draws
problems whose three GEMM dimensions are multiples of 16, the shapes that tiled and implicit-GEMM
plugins specialise for; ``ragged_problems(op)`` draws the opposite: GEMM dimensions with remainders (M,
N and K of a group each beyond one 16-wide tile or below it), groups 1, 2 or C (depthwise, channel
multiplier 1 or 2), and stride 2 for dgrad; ``long_problems(op)`` draws reductions of 512 to 1152
products (float32 and half precision: where an accumulation's error shows). ``nd_problems(op, nd=1)``
draws 1D problems as the plugins receive them (their 2D embedding, H = 1) and ``nd_problems(op, nd=3)``
3D ones, each with every option on every axis, depth dilation included; :func:`nd_example` is one fixed
3D problem of every option. Sizes stay small enough for the CUDA simulator. The classes every run
reaches whatever is drawn are :mod:`convlab.testing.classes`'.
"""
from __future__ import annotations

from hypothesis import strategies as st

from ..problem import HALF_DTYPES, Problem, conv_output_size, make_problem, make_problem_nd


def _input_size(out: int, kernel: int, stride: int, pad: int, dil: int) -> int:
    """Smallest input length giving ``out`` outputs (>= 1)."""
    return max(1, (out - 1) * stride + dil * (kernel - 1) + 1 - 2 * pad)


def _axis(draw, kernel: int, stride: int, dil: int, out_max: int, dgrad: bool) -> tuple[int, int, int]:
    """(input size, padding, output size) of one axis: padding 0 up to the kernel's extent, an output of
    1..``out_max`` (more where the padding alone gives more), a remainder the stride drops, and for dgrad
    conv_transpose2d's shortened output."""
    pad = draw(st.integers(0, dil * (kernel - 1) + 1))
    size = _input_size(draw(st.integers(1, out_max)), kernel, stride, pad, dil) + draw(st.integers(0, stride - 1))
    out = conv_output_size(size, kernel, stride, pad, dil)
    if dgrad:  # conv_transpose2d: output_padding < max(stride, dilation) can drop dy rows
        out = max(1, out - draw(st.integers(0, (max(stride, dil) - 1) // stride)))
    return size, pad, out


@st.composite
def problems(draw, op: str = "forward", dtypes: tuple[str, ...] = ("float32", "float64"),
             max_out: int = 5) -> Problem:
    """Any valid small problem of ``op``."""
    groups = draw(st.integers(1, 3))
    cpg, kpg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    (h, ph, p), (w, pw, q) = (_axis(draw, k, sd, dl, max_out, op == "dgrad")
                              for k, sd, dl in zip((r, s), stride, dilation))
    return make_problem(op, draw(st.integers(1, 3)), cpg * groups, h, w, kpg * groups, r, s, p=p, q=q,
                        stride=stride, padding=(ph, pw), dilation=dilation, groups=groups,
                        dtype=draw(st.sampled_from(dtypes)), bias=op != "wgrad" and draw(st.booleans()))


@st.composite
def aligned_problems(draw, op: str = "forward",
                     dtypes: tuple[str, ...] = ("float32", "float64")) -> Problem:
    """Problems with groups == 1 whose GEMM dimensions (M, N, K) are all multiples of 16 (batch 1; M of
    one image: 16 output (forward) or input (dgrad) pixels)."""
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (1, 1) if op == "dgrad" else (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    a, b = draw(st.sampled_from([(4, 4), (2, 8), (8, 2)]))
    if op == "dgrad":  # M = N*H*W: pick H, W first, padding enough for a non-empty output
        h, w = a, b
        padding = (max(padding[0], -(-(dilation[0] * (r - 1) + 1 - h) // 2)),
                   max(padding[1], -(-(dilation[1] * (s - 1) + 1 - w) // 2)))
    else:  # M = N*P*Q: pick P, Q first
        h = _input_size(a, r, stride[0], padding[0], dilation[0])
        w = _input_size(b, s, stride[1], padding[1], dilation[1])
        if conv_output_size(h, r, stride[0], padding[0], dilation[0]) != a or \
                conv_output_size(w, s, stride[1], padding[1], dilation[1]) != b:
            padding = (0, 0)
            h = _input_size(a, r, stride[0], 0, dilation[0])
            w = _input_size(b, s, stride[1], 0, dilation[1])
    bias = op != "wgrad" and draw(st.booleans())
    return make_problem(op, 1, 16, h, w, 16, r, s, stride=stride, padding=padding, dilation=dilation,
                        groups=1, dtype=draw(st.sampled_from(dtypes)), bias=bias)


@st.composite
def ragged_problems(draw, op: str = "forward",
                    dtypes: tuple[str, ...] = ("float32", "float64")) -> Problem:
    """Problems whose per-group GEMM dimensions are not multiples of 16: groups 1 (channels up to 17,
    so that N and K span a tile and a remainder), 2, or C (depthwise); dgrad mostly with stride 2."""
    mode = draw(st.sampled_from(["1", "2", "C"]))
    if mode == "1":
        groups, cpg, kpg = 1, draw(st.sampled_from([3, 5, 17])), draw(st.sampled_from([3, 17]))
    elif mode == "2":
        groups, cpg, kpg = 2, draw(st.integers(1, 5)), draw(st.integers(1, 5))
    else:
        groups = draw(st.integers(2, 4))
        cpg, kpg = 1, draw(st.integers(1, 2))
    r, s = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    if op == "dgrad":
        stride = draw(st.sampled_from([(2, 2), (2, 2), (2, 1), (1, 2), (1, 1)]))
    else:
        stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    (h, ph, p), (w, pw, q) = (_axis(draw, k, sd, dl, top, op == "dgrad")
                              for k, sd, dl, top in zip((r, s), stride, dilation, (4, 5)))
    return make_problem(op, draw(st.integers(1, 2)), cpg * groups, h, w, kpg * groups, r, s, p=p, q=q,
                        stride=stride, padding=(ph, pw), dilation=dilation, groups=groups,
                        dtype=draw(st.sampled_from(dtypes)), bias=op != "wgrad" and draw(st.booleans()))


@st.composite
def long_problems(draw, op: str = "forward", dtypes: tuple[str, ...] = ("float32", "float16")) -> Problem:
    """Problems of groups 1 whose reduction is 512 to 1152 products long: forward and dgrad through
    32 to 128 channels of a 2x2 to 3x3 filter (dgrad: output channels), wgrad through two images of
    16 x 16 to 24 x 24 output pixels; few outputs. ``dtypes`` is narrowed to float32 and the half
    types (the reductions whose accumulation these are for); a strategy that draws nothing when none
    is left."""
    kinds = tuple(d for d in dtypes if d == "float32" or d in HALF_DTYPES)
    if not kinds:
        return draw(st.nothing())
    dtype = draw(st.sampled_from(kinds))
    r, s = draw(st.sampled_from([(3, 3), (2, 3), (3, 2), (2, 2)]))
    pad = draw(st.integers(0, 1))
    if op == "wgrad":
        p, q = draw(st.integers(16, 24)), 16
        return make_problem(op, 2, draw(st.integers(1, 4)), p + r - 1 - 2 * pad, q + s - 1 - 2 * pad,
                            draw(st.integers(1, 4)), r, s, padding=pad, dtype=dtype)
    p, q = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    reduce = -(-512 // (r * s)) + draw(st.integers(0, 64))  # channels of the reduction
    other = draw(st.integers(2, 8))
    c, k = (reduce, other) if op == "forward" else (other, reduce)
    return make_problem(op, draw(st.integers(1, 2)), c, p + r - 1 - 2 * pad, q + s - 1 - 2 * pad, k, r, s,
                        padding=pad, dtype=dtype, bias=op != "wgrad" and draw(st.booleans()))


@st.composite
def nd_problems(draw, op: str = "forward", dtypes: tuple[str, ...] = ("float32", "float64"), nd: int = 3,
                max_out: int = 3) -> Problem:
    """A valid small problem of ``nd`` = 1 (returned lowered: its 2D embedding) or 3 spatial dimensions,
    every option drawn per axis (batch, groups, stride, dilation, padding up to the kernel's extent, odd
    sizes, dgrad's smaller output)."""
    groups = draw(st.integers(1, 2))
    cpg, kpg = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel, stride, dilation, padding, spatial, out = [], [], [], [], [], []
    for _ in range(nd):
        k, sd, dl = draw(st.integers(1, 3 if nd == 1 else 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
        size, pd, full = _axis(draw, k, sd, dl, max_out + (3 if nd == 1 else 0), op == "dgrad")
        kernel.append(k), stride.append(sd), dilation.append(dl), padding.append(pd), spatial.append(size)
        out.append(full)
    prob = make_problem_nd(op, draw(st.integers(1, 2)), cpg * groups, spatial, kpg * groups, kernel, out,
                           stride=stride, padding=padding, dilation=dilation, groups=groups,
                           dtype=draw(st.sampled_from(dtypes)), bias=op != "wgrad" and draw(st.booleans()))
    return prob.lowered()


def nd_example(op: str, dtype: str, nd: int = 3) -> Problem:
    """One fixed problem of ``nd`` spatial dimensions with batch 2, groups, stride, padding, dilation
    (depth and width) and bias on different axes (tiny: 2 x 4 x 5 x 4 x 5 for 3D)."""
    spatial, kernel = ((5, 4, 5), (2, 2, 2)) if nd == 3 else ((9,), (3,))
    return make_problem_nd(op, 2, 4, spatial, 2, kernel, stride=(1, 2, 1)[-nd:], padding=(2, 0, 1)[-nd:],
                           dilation=(2, 1, 2)[-nd:], groups=2, dtype=dtype, bias=op != "wgrad").lowered()


def any_problems(op: str, dtypes: tuple[str, ...] = ("float32", "float64"),
                 samples: list[Problem] | None = None, ndims: tuple[int, ...] = (2,)) -> st.SearchStrategy[Problem]:
    """Random, aligned, ragged, long-reduction (float32 and half types only) and the plugin's own
    sample problems, mixed, for every N in ``ndims`` (a 2D plugin also gets 1D problems: their 2D
    embeddings, which the ops hand it)."""
    parts = []
    if 2 in ndims:
        parts += [problems(op, dtypes), aligned_problems(op, dtypes), ragged_problems(op, dtypes),
                  nd_problems(op, dtypes, nd=1)]
        if any(d == "float32" or d in HALF_DTYPES for d in dtypes):
            parts.append(long_problems(op, dtypes))
    if 3 in ndims:
        parts.append(nd_problems(op, dtypes, nd=3))
    if samples:
        parts.append(st.sampled_from(samples))
    return st.one_of(*parts)
