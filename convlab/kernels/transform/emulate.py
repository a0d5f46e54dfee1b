"""Host emulations of the transform convolutions' arithmetic, for measuring their error growth in float64
on the CPU (tools/transform_accuracy.py, the winograd and fft plugins' accuracy declarations, notebook 05).

Each function returns the output an algorithm computes with every rounding of its GPU kernels made
explicit in numpy float32 (or float16 / bfloat16 / TF32 for the GEMM's operands), on float64 inputs that
are exactly representable in float32; compare it with :func:`convlab.reference.solve` in float64:

    direct_fma(x, w)         y[n, k, p, q] = fma chain over (c, r, s): one rounding a term (the SIMT plugins)
    winograd(x, w, th, tw)   U = G_h g G_w^T, V = B_h^T d B_w (fp32, row then column, terms in order),
                             M = sum_c U V with one rounding a term (or the GEMM engine's), y = A_h^T M A_w
    winograd_wgrad(x, dy, th, tw)   the same for wgrad (F(R, m): x patches, dy tiles, sum over tiles)
    fft_conv(x, w, nf)       overlap-save tiles of nf, the r2c / c2r transforms as convlab.kernels.fft computes
                             them (row pairs, bit-reversed radix-2 stages with the float32 twiddle table), the
                             products summed as the GEMM on the block operands sums them

Forward correlations of stride 1, no padding (the interior that padding leaves unchanged); the error
ratios these give are what the plugins declare (accuracy.py of each).
"""
from __future__ import annotations

import numpy as np

from convlab.kernels.fft.stages import bit_reverse, twiddles
from convlab.kernels.winograd.toomcook import Transforms

F32 = np.float32


def round_to(x: np.ndarray, engine: str) -> np.ndarray:
    """``x`` (float32) rounded as an engine stores GEMM operands: f16, bf16 (to nearest even), or unchanged
    (simt, tf32x3: float32)."""
    if engine == "f16":
        return x.astype(np.float16).astype(F32)
    if engine == "bf16":
        bits = x.astype(F32).view(np.uint32).astype(np.uint64)
        return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(F32)
    return x.astype(F32)


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 (10 mantissa bits, nearest, ties away: ``cvt.rna.tf32.f32``)."""
    bits = x.astype(F32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(F32)


def fma(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc + a*b with one rounding to float32 (the product of two float32 is exact in float64)."""
    return (acc.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(F32)


def product_sum(u: np.ndarray, v: np.ndarray, engine: str = "simt") -> np.ndarray:
    """sum_c u[..., k, c] * v[..., c, t] as the GEMM engine computes it, terms in order: fp32 FMA (simt,
    and f16 / bf16 on operands already rounded: their products are exact in fp32), or three TF32
    products a term (tf32x3: big*big + big*small + small*big)."""
    acc = np.zeros(u.shape[:-1] + v.shape[-1:], F32)
    for c in range(u.shape[-1]):
        a, b = u[..., :, c, None], v[..., None, c, :]
        if engine == "tf32x3":
            ab, bb = tf32(a), tf32(b)
            asm, bsm = tf32(a - ab), tf32(b - bb)
            acc = fma(fma(fma(acc, asm, bb), ab, bsm), ab, bb)
        else:
            acc = fma(acc, a, b)
    return acc


def apply(matrix: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """matrix (float32 entries) applied along ``axis`` of float32 ``x`` as the generated kernels do:
    each output the terms in column order, each product (an entry of magnitude 1 is exact) and each sum
    rounded to float32."""
    mat = matrix.astype(F32)
    x = np.moveaxis(x.astype(F32), axis, -1)
    out = np.zeros(x.shape[:-1] + (mat.shape[0],), F32)
    for i in range(mat.shape[0]):
        acc = None
        for j in range(mat.shape[1]):
            if mat[i, j] == 0:
                continue
            term = x[..., j] * mat[i, j] if abs(mat[i, j]) != 1 else x[..., j] * np.sign(mat[i, j])
            acc = term.astype(F32) if acc is None else (acc + term).astype(F32)
        out[..., i] = 0 if acc is None else acc
    return np.moveaxis(out, -1, axis)


def direct_fma(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The stride-1 valid correlation in float32, one FMA a term in (c, r, s) order."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xs, ws = x.astype(F32), w.astype(F32)
    acc = np.zeros((n, k, h - r + 1, wd - s + 1), F32)
    for ci in range(c):
        for a in range(r):
            for b in range(s):
                patch = xs[:, None, ci, a:a + h - r + 1, b:b + wd - s + 1]
                acc = fma(acc, patch, ws[None, :, ci, a, b, None, None])
    return acc


def direct_wgrad_fma(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dw of the stride-1 valid correlation in float32, one FMA a term in (n, p, q) order."""
    k, (n, c, h, wd), (p, q) = dy.shape[1], x.shape, dy.shape[2:]
    r, s = h - p + 1, wd - q + 1
    acc = np.zeros((k, c, r, s), F32)
    for ni in range(n):
        for i in range(p):
            for j in range(q):
                patch = x[ni, None, :, i:i + r, j:j + s].astype(F32)
                acc = fma(acc, patch, dy[ni, :, i, j, None, None, None].astype(F32))
    return acc


def _patches(x: np.ndarray, size: tuple[int, int], step: tuple[int, int], tiles: tuple[int, int]) -> np.ndarray:
    """x (N, C, H, W) -> (N, C, TH, TW, size_h, size_w) patches at (th*step_h, tw*step_w), 0 beyond x."""
    n, c, h, w = x.shape
    need_h, need_w = (tiles[0] - 1) * step[0] + size[0], (tiles[1] - 1) * step[1] + size[1]
    pad = np.zeros((n, c, max(h, need_h), max(w, need_w)), x.dtype)
    pad[:, :, :h, :w] = x
    out = np.empty((n, c, tiles[0], tiles[1], size[0], size[1]), x.dtype)
    for i in range(tiles[0]):
        for j in range(tiles[1]):
            out[:, :, i, j] = pad[:, :, i * step[0]:i * step[0] + size[0], j * step[1]:j * step[1] + size[1]]
    return out


def winograd(x: np.ndarray, w: np.ndarray, th: Transforms, tw: Transforms, engine: str = "simt") -> np.ndarray:
    """The valid stride-1 correlation by F(th) x F(tw) (module docstring); x (N, C, H, W), w (K, C, R, S)."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    p, q = h - th.r + 1, wd - tw.r + 1
    tiles = (-(-p // th.m), -(-q // tw.m))
    at_h, g_h, bt_h = (a.astype(F32) for a in th.arrays())
    at_w, g_w, bt_w = (a.astype(F32) for a in tw.arrays())
    u = apply(g_h, apply(g_w, w.astype(F32), 3), 2)  # (K, C, nh, nw): rows (w axis) first
    d = _patches(x.astype(F32), (th.n, tw.n), (th.m, tw.m), tiles)  # (N, C, TH, TW, nh, nw)
    v = apply(bt_h, apply(bt_w, d, 5), 4)
    u = round_to(u, engine).transpose(2, 3, 0, 1)  # (nh, nw, K, C)
    v = round_to(v, engine).transpose(4, 5, 1, 0, 2, 3).reshape(th.n, tw.n, c, -1)  # (nh, nw, C, T)
    m = product_sum(u, v, engine).reshape(th.n, tw.n, k, n, tiles[0], tiles[1])
    y = apply(at_h, apply(at_w, m, 1), 0)  # (mh, mw, K, N, TH, TW)
    y = y.transpose(3, 2, 4, 0, 5, 1).reshape(n, k, tiles[0] * th.m, tiles[1] * tw.m)
    return y[:, :, :p, :q]


def winograd_wgrad(x: np.ndarray, dy: np.ndarray, th: Transforms, tw: Transforms) -> np.ndarray:
    """dw (K, C, R, S) of the valid stride-1 correlation by F(R, m) per axis (th.m = R, th.r = the tile)."""
    n, c, h, wd = x.shape
    k, p, q = dy.shape[1], dy.shape[2], dy.shape[3]
    tiles = (-(-p // th.r), -(-q // tw.r))
    at_h, g_h, bt_h = (a.astype(F32) for a in th.arrays())
    at_w, g_w, bt_w = (a.astype(F32) for a in tw.arrays())
    xd = _patches(x.astype(F32), (th.n, tw.n), (th.r, tw.r), tiles)
    dd = _patches(dy.astype(F32), (th.r, tw.r), (th.r, tw.r), tiles)
    xv = apply(bt_h, apply(bt_w, xd, 5), 4).transpose(4, 5, 1, 0, 2, 3).reshape(th.n, tw.n, c, -1)
    dv = apply(g_h, apply(g_w, dd, 5), 4).transpose(4, 5, 1, 0, 2, 3).reshape(th.n, tw.n, k, -1)
    m = product_sum(dv, np.swapaxes(xv, -1, -2))  # (nh, nw, K, C)
    return apply(at_h, apply(at_w, m, 1), 0).transpose(2, 3, 0, 1)


def _dft_lines(z: np.ndarray, inverse: bool) -> np.ndarray:
    """The DFT along the last axis (complex64) as convlab.kernels.fft.stages computes it: bit-reversed
    load, radix-2 stages with the float32 twiddle table (a radix-4 pass is two of them, same twiddles)."""
    n = z.shape[-1]
    z = z[..., [bit_reverse(i, n) for i in range(n)]].astype(np.complex64)
    twr, twi = twiddles(n)
    table = (twr + 1j * (-twi if inverse else twi)).astype(np.complex64)
    h = 1
    while h < n:
        z = z.reshape(z.shape[:-1] + (n // (2 * h), 2, h))
        b = z[..., 1, :] * table[np.arange(h) * (n // (2 * h))]
        z = np.stack([z[..., 0, :] + b, z[..., 0, :] - b], axis=-2).reshape(z.shape[:-3] + (n,))
        h *= 2
    return z


def _rows_r2c(rows: np.ndarray) -> np.ndarray:
    """(R, nw) real rows -> (R, nw/2 + 1) half spectra, two rows a complex transform (spectrum.py)."""
    r, nw = rows.shape
    pad = np.zeros((r + r % 2, nw), F32)
    pad[:r] = rows
    z = _dft_lines(pad[0::2] + 1j * pad[1::2], False)
    half = nw // 2 + 1
    zv, zm = z[:, :half], z[:, (-np.arange(half)) % nw]
    a = ((zv.real + zm.real) * F32(0.5)) + 1j * ((zv.imag - zm.imag) * F32(0.5))
    b = ((zv.imag + zm.imag) * F32(0.5)) + 1j * ((zm.real - zv.real) * F32(0.5))
    out = np.empty((r + r % 2, half), np.complex64)
    out[0::2], out[1::2] = a, b
    return out[:r]


def _rows_c2r(spec: np.ndarray, nw: int) -> np.ndarray:
    """(R, nw/2 + 1) half spectra -> (R, nw) real rows (unscaled), two rows a complex transform (inverse.py)."""
    r, half = spec.shape
    pad = np.zeros((r + r % 2, half), np.complex64)
    pad[:r] = spec
    x = np.arange(nw)
    xm = np.where(x < half, x, nw - x)
    cj = np.where(x < half, 1, -1).astype(F32)
    a, b = pad[0::2][:, xm], pad[1::2][:, xm]
    z = (a.real - cj * b.imag) + 1j * (cj * a.imag + b.real)
    z = _dft_lines(z.astype(np.complex64), True)
    out = np.empty((r + r % 2, nw), F32)
    out[0::2], out[1::2] = z.real, z.imag
    return out[:r]


def fft2_r2c(patches: np.ndarray) -> np.ndarray:
    """(..., nh, nw) real -> (..., nh, nw/2 + 1) half spectra (rows, then columns when nh > 1)."""
    *lead, nh, nw = patches.shape
    s = _rows_r2c(patches.reshape(-1, nw).astype(F32)).reshape(*lead, nh, nw // 2 + 1)
    return np.swapaxes(_dft_lines(np.swapaxes(s, -1, -2), False), -1, -2) if nh > 1 else s


def fft2_c2r(spec: np.ndarray, nw: int) -> np.ndarray:
    """(..., nh, nw/2 + 1) half spectra -> (..., nh, nw) real, scaled by 1 / (nh*nw) in float32."""
    *lead, nh, half = spec.shape
    if nh > 1:
        spec = np.swapaxes(_dft_lines(np.swapaxes(spec, -1, -2), True), -1, -2)
    out = _rows_c2r(spec.reshape(-1, half), nw).reshape(*lead, nh, nw)
    return (out * F32(1.0 / (nh * nw))).astype(F32)


def _complex_products(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """sum_c x[..., c, t, f] conj(p[..., o, c, f]) -> (..., o, t, f) as the real GEMM on the block operands
    sums: the 2C terms [Pr | Pi] . [Xr | Xi] (and [-Pi | Pr]) in order, one FMA each."""
    re = np.zeros(p.shape[:-3] + (p.shape[-3],) + x.shape[-2:], F32)
    im = np.zeros_like(re)
    for part in range(2):
        for c in range(x.shape[-3]):
            xv = (x[..., c, :, :].real if part == 0 else x[..., c, :, :].imag)[..., None, :, :]
            pc = p[..., :, c, None, :]
            re = fma(re, pc.real if part == 0 else pc.imag, xv)
            im = fma(im, -pc.imag if part == 0 else pc.real, xv)
    return re + 1j * im


def fft_conv(x: np.ndarray, w: np.ndarray, nf: tuple[int, int]) -> np.ndarray:
    """The valid stride-1 correlation by overlap-save FFT tiles of nf (nh = 1: the height not transformed)."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    p, q = h - r + 1, wd - s + 1
    tile = (nf[0] - r + 1, nf[1] - s + 1)
    tiles = (-(-p // tile[0]), -(-q // tile[1]))
    wpad = np.zeros((k, c, nf[0], nf[1]), F32)
    wpad[:, :, :r, :s] = w
    wspec = fft2_r2c(wpad)  # (K, C, nh, half)
    xs = fft2_r2c(_patches(x.astype(F32), nf, tile, tiles))  # (N, C, TH, TW, nh, half)
    xs = xs.transpose(1, 0, 2, 3, 4, 5).reshape(c, -1, nf[0] * (nf[1] // 2 + 1))
    y = _complex_products(xs, wspec.reshape(k, c, -1))  # (K, T, bins)
    y = fft2_c2r(y.reshape(k, n, tiles[0], tiles[1], nf[0], nf[1] // 2 + 1), nf[1])
    y = y[..., :tile[0], :tile[1]].transpose(1, 0, 2, 4, 3, 5).reshape(n, k, tiles[0] * tile[0], tiles[1] * tile[1])
    return y[:, :, :p, :q]
