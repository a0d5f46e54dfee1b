"""Hypothesis strategies that draw only valid convolution problems.

``problems(op)`` draws small problems with every option (groups, stride, dilation, padding, bias,
odd sizes, and for dgrad the smaller output that conv_transpose2d's output_padding allows);
``aligned_problems(op)`` draws problems whose three GEMM dimensions are multiples of 16, the shapes that
tiled and implicit-GEMM plugins specialise for; ``ragged_problems(op)`` draws the opposite: GEMM
dimensions with remainders (M, N and K of a group each beyond one 16-wide tile or below it), groups 1, 2
or C (depthwise, channel multiplier 1 or 2), and stride 2 for dgrad. ``nd_problems(op, nd=1)`` draws
1D problems as the plugins receive them (their 2D embedding, H = 1) and ``nd_problems(op, nd=3)`` 3D
ones, each with every option on every axis; :func:`nd_example` is one fixed 3D problem of every option
(the conformance suite's explicit example for a plugin claiming 3D). Sizes stay small enough for the
CUDA simulator.
"""
from __future__ import annotations

from hypothesis import strategies as st

from ..problem import Problem, conv_output_size, make_problem, make_problem_nd


def _input_size(out: int, kernel: int, stride: int, pad: int, dil: int) -> int:
    """Smallest input length giving ``out`` outputs (>= 1)."""
    return max(1, (out - 1) * stride + dil * (kernel - 1) + 1 - 2 * pad)


@st.composite
def problems(draw, op: str = "forward", dtypes: tuple[str, ...] = ("float32", "float64"),
             max_out: int = 6) -> Problem:
    """Any valid small problem of ``op``."""
    groups = draw(st.integers(1, 3))
    cpg, kpg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    p_want, q_want = draw(st.integers(1, max_out)), draw(st.integers(1, max_out))
    # input size: the smallest that gives p_want outputs, plus a remainder the stride drops
    h = _input_size(p_want, r, stride[0], padding[0], dilation[0]) + draw(st.integers(0, stride[0] - 1))
    w = _input_size(q_want, s, stride[1], padding[1], dilation[1]) + draw(st.integers(0, stride[1] - 1))
    full_p = conv_output_size(h, r, stride[0], padding[0], dilation[0])
    full_q = conv_output_size(w, s, stride[1], padding[1], dilation[1])
    p, q = full_p, full_q
    bias = False
    if op == "dgrad":  # conv_transpose2d: output_padding < max(stride, dilation) can drop dy rows
        p -= draw(st.integers(0, (max(stride[0], dilation[0]) - 1) // stride[0]))
        q -= draw(st.integers(0, (max(stride[1], dilation[1]) - 1) // stride[1]))
        p, q = max(p, 1), max(q, 1)
    if op != "wgrad":
        bias = draw(st.booleans())
    return make_problem(op, 1, cpg * groups, h, w, kpg * groups, r, s, p=p, q=q,
                        stride=stride, padding=padding, dilation=dilation, groups=groups,
                        dtype=draw(st.sampled_from(dtypes)), bias=bias)


@st.composite
def aligned_problems(draw, op: str = "forward",
                     dtypes: tuple[str, ...] = ("float32", "float64")) -> Problem:
    """Problems with groups == 1 whose GEMM dimensions (M, N, K) are all multiples of 16."""
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
    dilation = (draw(st.integers(1, 2)), 1)
    padding = (draw(st.integers(0, r // 2 + 1)), draw(st.integers(0, s // 2)))
    p_want, q_want = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    h = _input_size(p_want, r, stride[0], padding[0], dilation[0]) + draw(st.integers(0, stride[0] - 1))
    w = _input_size(q_want, s, stride[1], padding[1], dilation[1]) + draw(st.integers(0, stride[1] - 1))
    bias = op != "wgrad" and draw(st.booleans())
    return make_problem(op, 1, cpg * groups, h, w, kpg * groups, r, s,
                        stride=stride, padding=padding, dilation=dilation, groups=groups,
                        dtype=draw(st.sampled_from(dtypes)), bias=bias)


@st.composite
def nd_problems(draw, op: str = "forward", dtypes: tuple[str, ...] = ("float32", "float64"), nd: int = 3,
                max_out: int = 3) -> Problem:
    """A valid small problem of ``nd`` = 1 (returned lowered: its 2D embedding) or 3 spatial dimensions,
    every option drawn per axis (groups, stride, dilation, padding, odd sizes, dgrad's smaller output)."""
    groups = draw(st.integers(1, 2))
    cpg, kpg = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel, stride, dilation, padding, spatial, out = [], [], [], [], [], []
    for _ in range(nd):
        k, sd, dl = draw(st.integers(1, 3 if nd == 1 else 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
        pd = draw(st.integers(0, 1))
        size = _input_size(draw(st.integers(1, max_out + (3 if nd == 1 else 0))), k, sd, pd, dl) +             draw(st.integers(0, sd - 1))
        full = conv_output_size(size, k, sd, pd, dl)
        if op == "dgrad":
            full = max(1, full - draw(st.integers(0, (max(sd, dl) - 1) // sd)))
        kernel.append(k), stride.append(sd), dilation.append(dl), padding.append(pd), spatial.append(size)
        out.append(full)
    prob = make_problem_nd(op, 1, cpg * groups, spatial, kpg * groups, kernel, out, stride=stride,
                           padding=padding, dilation=dilation, groups=groups,
                           dtype=draw(st.sampled_from(dtypes)), bias=op != "wgrad" and draw(st.booleans()))
    return prob.lowered()


def nd_example(op: str, dtype: str, nd: int = 3) -> Problem:
    """One fixed problem of ``nd`` spatial dimensions with groups, stride, padding, dilation and bias
    on different axes (tiny: 1 x 4 x 3 x 4 x 3 for 3D)."""
    spatial, kernel = ((3, 4, 3), (2, 2, 2)) if nd == 3 else ((9,), (3,))
    return make_problem_nd(op, 1, 4, spatial, 2, kernel, stride=(2, 1, 1)[:nd], padding=(1, 0, 1)[-nd:],
                           dilation=(1, 2, 1)[:nd], groups=2, dtype=dtype, bias=op != "wgrad").lowered()


def any_problems(op: str, dtypes: tuple[str, ...] = ("float32", "float64"),
                 samples: list[Problem] | None = None, ndims: tuple[int, ...] = (2,)) -> st.SearchStrategy[Problem]:
    """Random, aligned, ragged, and the plugin's own sample problems, mixed, for every N in ``ndims``
    (a 2D plugin also gets 1D problems: their 2D embeddings, which the ops hand it)."""
    parts = []
    if 2 in ndims:
        parts += [problems(op, dtypes), aligned_problems(op, dtypes), ragged_problems(op, dtypes),
                  nd_problems(op, dtypes, nd=1)]
    if 3 in ndims:
        parts.append(nd_problems(op, dtypes, nd=3))
    if samples:
        parts.append(st.sampled_from(samples))
    return st.one_of(*parts)
