"""The direct convolution's kernels: one thread per output element, straight from the definition, for
N = 1, 2 or 3 spatial axes (convlab.kernels.conv.axes; shown for N = 3, the last N axes of each tuple
otherwise; C' = C/groups, K' = K/groups, g = the element's group):

    forward  y[n,k,o,p,q]  = bias[k] + sum_{c<C', t, r, s} x[n, g*C'+c, o*sd-pd+t*dd, p*sh-ph+r*dh,
                                                             q*sw-pw+s*dw] * w[k,c,t,r,s]
    dgrad    dx[n,c,z,h,w] = bias[c] + sum over (t, r, s, k < K') whose tap lands on (z, h, w), i.e.
                             z+pd-t*dd = o*sd, h+ph-r*dh = p*sh, w+pw-s*dw = q*sw with o<Do, p<P, q<Q, of
                             dy[n, g*K'+k, o, p, q] * w[g*K'+k, c mod C', t, r, s]
    wgrad    part[j,k,c,t,r,s] = sum over (n, o, p, q) in chunk j of x[n, g*C'+c, z, h, w] * dy[n,k,o,p,q]

Each kernel is generated source with one loop (and one bounds test) per axis, compiled per dtype (the
accumulator's zero a compile-time constant) and N: the operands are (N+2)-d arrays, the geometry the
scalar arguments (strides, then paddings, then dilations, depth first), bias a flag argument.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.conv.axes import names
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import cuda


def _geometry_params(nd: int) -> str:
    return ", ".join(names(nd, "stride") + names(nd, "pad") + names(nd, "dil"))


def _decode(w: Writer, index: str, extents: list[str], coords: list[str]) -> None:
    """coords (outermost first) of the flat ``index`` over ``extents``, innermost by a remainder."""
    rest = index
    for i in range(len(coords) - 1, 1, -1):
        w(f"{coords[i]} = {rest} % {extents[i]}")
        w(f"i = {rest} // {extents[i]}")
        rest = "i"
    w(f"{coords[1]} = {rest} % {extents[1]}")
    w(f"{coords[0]} = {rest} // {extents[1]}")


def forward_source(nd: int) -> str:
    """``forward(x, w, bias, y, strides, paddings, dilations, has_bias)`` for ``nd`` axes."""
    outs, taps, ins = names(nd, "out"), names(nd, "tap"), names(nd, "in")
    st, pd, dl = names(nd, "stride"), names(nd, "pad"), names(nd, "dil")
    w = Writer(f"def forward(x, w, bias, y, {_geometry_params(nd)}, has_bias):")
    w.indent()
    w("idx = cuda.grid(1)")
    extents = ["n_", "k_"] + [f"{o}_" for o in outs]
    w(f"{', '.join(extents)} = y.shape")
    with w.block(f"if idx >= {' * '.join(extents)}:"):
        w("return")
    _decode(w, "idx", extents, ["n", "k", *outs])
    w(f"cpg, {', '.join(f'{t}_' for t in taps)} = " + ", ".join(f"w.shape[{a}]" for a in range(1, nd + 2)))
    w("c0 = (k // (k_ // (x.shape[1] // cpg))) * cpg")
    w("acc = zero")
    w("for c in range(cpg):")
    w.indent()
    for a in range(nd):
        w(f"for {taps[a]} in range({taps[a]}_):")
        w.indent()
        w(f"{ins[a]} = {outs[a]} * {st[a]} - {pd[a]} + {taps[a]} * {dl[a]}")
        w(f"if 0 <= {ins[a]} < x.shape[{a + 2}]:")
        w.indent()
    w(f"acc += x[n, c0 + c, {', '.join(ins)}] * w[k, c, {', '.join(taps)}]")
    w.indent(-(2 * nd + 1))
    with w.block("if has_bias:"):
        w("acc += bias[k]")
    w(f"y[n, k, {', '.join(outs)}] = acc")
    return w.source


def dgrad_source(nd: int) -> str:
    """``dgrad(dy, w, bias, dx, strides, paddings, dilations, has_bias)`` for ``nd`` axes."""
    outs, taps = names(nd, "out"), names(nd, "tap")
    st, pd, dl = names(nd, "stride"), names(nd, "pad"), names(nd, "dil")
    xs = tuple(f"x_{a}" for a in ("z", "h", "w")[3 - nd:])
    rel = ("zz", "hh", "wq")[3 - nd:]
    w = Writer(f"def dgrad(dy, w, bias, dx, {_geometry_params(nd)}, has_bias):")
    w.indent()
    w("idx = cuda.grid(1)")
    extents = ["n_", "c_"] + [f"{a}_" for a in ("z", "h", "w")[3 - nd:]]
    w(f"{', '.join(extents)} = dx.shape")
    with w.block(f"if idx >= {' * '.join(extents)}:"):
        w("return")
    _decode(w, "idx", extents, ["n", "c", *xs])
    w(f"k_, cpg, {', '.join(f'{t}_' for t in taps)} = w.shape")
    w("kpg = k_ // (c_ // cpg)")
    w("g = c // cpg")
    w("cl = c - g * cpg")
    w("acc = zero")
    for a in range(nd):
        w(f"for {taps[a]} in range({taps[a]}_):")
        w.indent()
        w(f"{rel[a]} = {xs[a]} + {pd[a]} - {taps[a]} * {dl[a]}")
        w(f"if {rel[a]} >= 0 and {rel[a]} % {st[a]} == 0 and {rel[a]} // {st[a]} < dy.shape[{a + 2}]:")
        w.indent()
        w(f"{outs[a]} = {rel[a]} // {st[a]}")
    with w.block("for kk in range(kpg):"):
        w("k = g * kpg + kk")
        w(f"acc += dy[n, k, {', '.join(outs)}] * w[k, cl, {', '.join(taps)}]")
    w.indent(-2 * nd)
    with w.block("if has_bias:"):
        w("acc += bias[c]")
    w(f"dx[n, c, {', '.join(xs)}] = acc")
    return w.source


def wgrad_source(nd: int) -> str:
    """``wgrad_partial(x, dy, part, strides, paddings, dilations, chunk)`` for ``nd`` axes:
    part[j, k, c, taps] = the sum over (n, outputs) in [j*chunk, (j+1)*chunk) of x * dy."""
    outs, taps, ins = names(nd, "out"), names(nd, "tap"), names(nd, "in")
    st, pd, dl = names(nd, "stride"), names(nd, "pad"), names(nd, "dil")
    w = Writer(f"def wgrad_partial(x, dy, part, {_geometry_params(nd)}, chunk):")
    w.indent()
    w("idx = cuda.grid(1)")
    extents = ["splits", "k_", "cpg"] + [f"{t}_" for t in taps]
    w(f"{', '.join(extents)} = part.shape")
    with w.block(f"if idx >= {' * '.join(extents)}:"):
        w("return")
    _decode(w, "idx", extents, ["j", "k", "c", *taps])
    out_ext = ["n_"] + [f"{o}_" for o in outs]
    w(f"{', '.join(out_ext)} = " + ", ".join(["dy.shape[0]"] + [f"dy.shape[{a + 2}]" for a in range(nd)]))
    w("ci = (k // (k_ // (x.shape[1] // cpg))) * cpg + c")
    w("acc = zero")
    w(f"stop = min((j + 1) * chunk, {' * '.join(out_ext)})")
    with w.block("for m in range(j * chunk, stop):"):
        inner = []  # extents inside the current axis, innermost first
        for a in range(nd - 1, -1, -1):
            if not inner:
                w(f"{outs[a]} = m % {outs[a]}_")
            elif len(inner) == 1:
                w(f"{outs[a]} = (m // {inner[0]}) % {outs[a]}_")
            else:
                w(f"{outs[a]} = (m // ({' * '.join(inner)})) % {outs[a]}_")
            inner.append(f"{outs[a]}_")
        w(f"n = m // ({' * '.join(inner)})" if len(inner) > 1 else f"n = m // {inner[0]}")
        for a in range(nd):
            w(f"{ins[a]} = {outs[a]} * {st[a]} - {pd[a]} + {taps[a]} * {dl[a]}")
        inside = " and ".join(f"0 <= {ins[a]} < x.shape[{a + 2}]" for a in range(nd))
        with w.block(f"if {inside}:"):
            w(f"acc += x[n, ci, {', '.join(ins)}] * dy[n, k, {', '.join(outs)}]")
    w(f"part[j, k, c, {', '.join(taps)}] = acc")
    return w.source


@functools.cache
def kernels(dtype: str, nd: int) -> tuple[Any, Any, Any]:
    """(forward, dgrad, wgrad_partial) for values of ``dtype`` over ``nd`` spatial axes."""
    namespace = {"cuda": cuda, "zero": np.dtype(dtype).type(0), "__name__": __name__}  # messages name this module
    out = []
    for name, source in (("forward", forward_source), ("dgrad", dgrad_source),
                         ("wgrad_partial", wgrad_source)):
        code = compile_source(source(nd), f"<direct {name} {dtype} {nd}d>", dict(namespace))
        out.append(runtime.jit(code[name]))
    return tuple(out)  # type: ignore[return-value]
