"""Radix-4 / radix-2 FFT passes in shared memory, written out by a generator (numba unrolls nothing).

A line of n = 2**L complex values (``re``, ``im``: float32 shared arrays; element e of line l at
``base(l) + e * stride``) is loaded in bit-reversed order, then decimated in time:

    h = 1
    if L is odd:  one radix-2 pass:  (x[i], x[i+1]) <- (x[i] + x[i+1], x[i] - x[i+1])
                  h = 2
    while h < n:  one radix-4 pass (two radix-2 stages, spans h and 2h, in registers): for each group of
                  4h and j < h, with w1 = W_2h^j, w2 = W_4h^j, w3 = W_4h^(j+h), x0..x3 = x[i + {0,1,2,3}h]:
                      a0, a1 = x0 + w1 x1, x0 - w1 x1;   a2, a3 = x2 + w1 x3, x2 - w1 x3
                      x[i], x[i+2h] = a0 + w2 a2, a0 - w2 a2;   x[i+h], x[i+3h] = a1 + w3 a3, a1 - w3 a3
                  h *= 4

W_m^j = exp(-2 pi i j / m) (the inverse transform uses its conjugate), read from a table of n/2 float32
pairs rounded once from float64 (W_m^j = W_n^(j n / m)); each pass spreads its butterflies over the
block's threads and ends at a barrier. After the passes a line holds its DFT in natural order, so a
transform only has to load its data bit-reversed: no separate permutation pass.
"""
from __future__ import annotations

import numpy as np

from convlab.kernels.source import Writer


def log2(n: int) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"FFT lengths are powers of two, got {n}")
    return n.bit_length() - 1


def bit_reverse(i: int, n: int) -> int:
    """i with its log2(n) bits reversed."""
    bits = log2(n)
    return int(f"{i:0{bits}b}"[::-1], 2) if bits else 0


def twiddles(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(cos, -sin) of 2 pi j / n for j < max(1, n/2): W_n^j, float32 rounded from float64."""
    j = np.arange(max(1, n // 2), dtype=np.float64)
    return np.cos(2 * np.pi * j / n).astype(np.float32), (-np.sin(2 * np.pi * j / n)).astype(np.float32)


def passes(n: int) -> list[tuple[int, int]]:
    """The passes of an n-point transform: (radix, span h) in order (module docstring)."""
    out, h, bits = [], 1, log2(n)
    if bits % 2:
        out.append((2, 1))
        h = 2
    while h < n:
        out.append((4, h))
        h *= 4
    return out


def emit_bitrev(w: Writer, n: int, index: str, out: str) -> None:
    """``out = bit-reverse of index`` (log2(n) bits) as shifts and masks."""
    bits = log2(n)
    if bits == 0:
        w(f"{out} = 0")
        return
    terms = [f"((({index}) >> {b}) & 1) << {bits - 1 - b}" for b in range(bits)]
    w(f"{out} = " + " | ".join(terms))


def _cmul(w: Writer, ar: str, ai: str, br: str, bi: str, out: str) -> None:
    w(f"{out}r = {ar} * {br} - {ai} * {bi}")
    w(f"{out}i = {ar} * {bi} + {ai} * {br}")


def _element(offset: int, stride: str) -> str:
    """The index of the line's element ``offset`` from element ``i``."""
    return "i" if offset == 0 else f"i + {offset} * {stride}"


def _outputs(w: Writer, lo: int, hi: int, stride: str, a: str, t: str) -> None:
    """A butterfly's outputs in place: a + t at element ``lo``, a - t at element ``hi`` (complex)."""
    for offset, op in ((lo, "+"), (hi, "-")):
        w(f"re[{_element(offset, stride)}] = {a}r {op} {t}r")
        w(f"im[{_element(offset, stride)}] = {a}i {op} {t}i")


def emit_passes(w: Writer, n: int, lines: str, base: str, stride: str, threads: int, inverse: bool,
                tag: str) -> None:
    """The DIT passes over ``lines`` lines (an expression) of n elements: line l starts at ``base`` (an
    expression of ``l``) with elements ``stride`` apart, in shared arrays ``re``, ``im``; the twiddle
    tables are the kernel's globals ``TWR{n}``, ``TWI{n}`` (inverse: conjugated). Ends at a barrier."""
    sign = "-" if inverse else ""

    def twiddle(k: int, index: str) -> None:
        w(f"w{k}r = twr{tag}[{index}]")
        w(f"w{k}i = {sign}twi{tag}[{index}]")

    for radix, h in passes(n):
        per = n // radix
        w("item = cuda.threadIdx.x")
        with w.block(f"while item < ({lines}) * {per}:"):
            w(f"l = item // {per}")
            w(f"j = item % {per} % {h}")
            w(f"i = {base} + ((item % {per}) // {h} * {radix * h} + j) * {stride}")
            twiddle(1, f"j * {n // (2 * h)}")
            if radix == 2:
                w(f"x1r = re[i + {h} * {stride}]")
                w(f"x1i = im[i + {h} * {stride}]")
                _cmul(w, "w1r", "w1i", "x1r", "x1i", "t")
                w("x0r = re[i]")
                w("x0i = im[i]")
                _outputs(w, 0, h, stride, "x0", "t")
            else:
                for q in range(4):
                    w(f"x{q}r = re[i + {q * h} * {stride}]")
                    w(f"x{q}i = im[i + {q * h} * {stride}]")
                _cmul(w, "w1r", "w1i", "x1r", "x1i", "t1")
                _cmul(w, "w1r", "w1i", "x3r", "x3i", "t3")
                w("a0r, a0i, a1r, a1i = x0r + t1r, x0i + t1i, x0r - t1r, x0i - t1i")
                w("a2r, a2i, a3r, a3i = x2r + t3r, x2i + t3i, x2r - t3r, x2i - t3i")
                twiddle(2, f"j * {n // (4 * h)}")
                twiddle(3, f"(j + {h}) * {n // (4 * h)}")
                _cmul(w, "w2r", "w2i", "a2r", "a2i", "t2")
                _cmul(w, "w3r", "w3i", "a3r", "a3i", "t4")
                _outputs(w, 0, 2 * h, stride, "a0", "t2")
                _outputs(w, h, 3 * h, stride, "a1", "t4")
            w(f"item += {threads}")
        w("cuda.syncthreads()")
