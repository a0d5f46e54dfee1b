"""The FFT convolution's launches (plan.py has the geometry, convlab.kernels.fft the kernels).

    forward, dgrad:
        W[f, g] (2Ko x 2Ci) = [[Re, Im], [-Im, Re]] of the filter's spectra     one block per PB filters
        for each pass of nb images:
            X[f, g] (T x 2Ci) = [Re | Im] of the input tiles' spectra            one block per PB patches
            Y[f, g] (2Ko x T) = W[f, g] @ X[f, g]^T = X conj W, Re and Im rows   batched SIMT GEMM (or inline)
            out tiles = the first L of IFFT(Y) (+ bias)                          one block per PB patches
    wgrad:
        for each pass of nb images:
            X[f, g] (C' x 2T) = [Re | Im] of the x patches, D[f, g] (2K' x 2T) = conj block of the dy tiles
            M[f, g] (2K' x C') (+)= D @ X^T = sum_t X conj DY                   split over k where blocks are few
        dw = lags 0, d, 2d, ... of IFFT(M)

f runs over the NH x (NW/2 + 1) bins of the half spectrum; complex products are real GEMMs on the
block-structured operands (convlab.kernels.fft.spectrum's "conj" role).
"""
from __future__ import annotations

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.fft.inverse import inverse
from convlab.kernels.fft.spectrum import spectrum
from convlab.kernels.transform import gemm as tgemm
from convlab.kernels.transform.operands import flat, image_batches, strides
from convlab.problem import Problem
from convlab.runtime.scratch import scratch

from .plan import Plan, dilated


def run(problem: Problem, plan: Plan, ksplit: int, a, b, bias, out) -> None:
    part = plan.z * 2 * plan.k_out * plan.c_in * ksplit if ksplit > 1 else 0
    with scratch(max(1, plan.buffers(problem) + part), np.float32) as buf:
        if problem.op == "wgrad":
            _wgrad(problem, plan, ksplit, a, b, out, buf)
        else:
            _forward(problem, plan, a, b, bias, out, buf)


def _forward(pr: Problem, plan: Plan, inp, w, bias, out, buf) -> None:
    kind = convert.half_kind(pr.dtype)
    nf, g, ci, ko, z = plan.nf, plan.groups, plan.c_in, plan.k_out, plan.z
    sk, sc, sr, ss = strides(w)
    if pr.op == "forward":
        fs, off = (ko * sk, sk, sc, sr, ss), 0
    else:
        fs, off = (ci * sk, sc, sk, -sr, -ss), (pr.r - 1) * sr + (pr.s - 1) * ss
    w_size = z * 2 * ko * 2 * ci
    wspec = buf[:w_size]
    spectrum(flat(w), wspec, nf=nf, role="conj", c_fast=False, kind=kind, groups=g, t_n=ko, c_n=ci, tiles=(1, 1),
             step=(0, 0), origin=(0, 0), bounds=(pr.r, pr.s), dilation=pr.dilation, limit=nf, src_strides=fs,
             off=off, dst_strides=(2 * ko * 2 * ci, 2 * ci, 1), im_off=ci, row_off=ko * 2 * ci)
    sn, scn, sy, sx = strides(inp)
    dn, dc, dy, dx = strides(out)
    src, dst = flat(inp), flat(out)
    bias = None if bias is None else runtime.kernel_view(bias)
    for n0, t in image_batches(pr.n, plan.nb, plan.t_img):
        xspec = buf[w_size:w_size + z * t * 2 * ci]
        spectrum(src, xspec, nf=nf, role="plain", c_fast=True, kind=kind, groups=g, t_n=t, c_n=ci, tiles=plan.tiles,
                 step=plan.tile, origin=plan.origin, bounds=plan.plane_in, dilation=(1, 1), limit=nf,
                 src_strides=(ci * scn, sn, scn, sy, sx), off=0, dst_strides=(t * 2 * ci, 2 * ci, 1), im_off=ci,
                 n0=n0)
        common = dict(nf=nf, inline=plan.inline, kind=kind, groups=g, o_n=ko, t_n=t, tiles=plan.tiles,
                      tile=plan.tile, select=(1, 1), limits=plan.plane_out, dst_strides=(dc, dn, dy, dx), n0=n0)
        if plan.inline:
            inverse(xspec, wspec, dst, bias, src_strides=(t * 2 * ci, 2 * ci), im_off=0, ci_n=ci,
                    spec_strides=(2 * ko * 2 * ci, 2 * ci), **common)
        else:
            y = buf[w_size + z * t * 2 * ci:w_size + z * t * 2 * ci + z * 2 * ko * t]
            tgemm.batched_gemm("simt", wspec, xspec, y, z, 2 * ko, t, 2 * ci)
            inverse(y, y, dst, bias, src_strides=(2 * ko * t, t), im_off=ko * t, ci_n=0, spec_strides=(0, 0),
                    **common)


def _wgrad(pr: Problem, plan: Plan, ksplit: int, x, dy, dw, buf) -> None:
    kind = convert.half_kind(pr.dtype)
    nf, g, ci, ko, z = plan.nf, plan.groups, plan.c_in, plan.k_out, plan.z
    xn, xc, xy, xx = strides(x)
    yn, yc, yy, yx = strides(dy)
    m_size = z * 2 * ko * ci
    m, part = buf[:m_size], buf[plan.buffers(pr):]
    spectra = buf[m_size:]
    if pr.n == 0:  # a sum over no images: the GEMM writes zeros
        tgemm.batched_gemm("simt", spectra, spectra, m, z, 2 * ko, ci, 0)
    for n0, t in image_batches(pr.n, plan.nb, plan.t_img):
        xs, ds = spectra[:z * ci * 2 * t], spectra[z * ci * 2 * t:z * (ci + 2 * ko) * 2 * t]
        spectrum(flat(x), xs, nf=nf, role="plain", c_fast=False, kind=kind, groups=g, t_n=t, c_n=ci, tiles=plan.tiles,
                 step=plan.tile, origin=plan.origin, bounds=(pr.h, pr.w), dilation=(1, 1), limit=nf,
                 src_strides=(ci * xc, xn, xc, xy, xx), off=0, dst_strides=(ci * 2 * t, 1, 2 * t), im_off=t, n0=n0)
        spectrum(flat(dy), ds, nf=nf, role="conj", c_fast=False, kind=kind, groups=g, t_n=t, c_n=ko,
                 tiles=plan.tiles, step=plan.tile, origin=(0, 0), bounds=(pr.p, pr.q), dilation=(1, 1),
                 limit=plan.tile, src_strides=(ko * yc, yn, yc, yy, yx), off=0, dst_strides=(2 * ko * 2 * t, 1, 2 * t),
                 im_off=t, row_off=ko * 2 * t, n0=n0)
        tgemm.batched_gemm("simt", ds, xs, m, z, 2 * ko, ci, 2 * t, accumulate=n0 > 0, ksplit=ksplit, part=part)
    kn, kc, kr, ks = strides(dw)
    inverse(m, m, flat(dw), None, nf=nf, inline=False, kind=kind, groups=g, o_n=ko, t_n=ci, tiles=(1, 1),
            src_strides=(2 * ko * ci, ci), im_off=ko * ci, ci_n=0, spec_strides=(0, 0), tile=dilated(pr),
            select=pr.dilation, limits=(pr.r, pr.s), dst_strides=(kn, kc, kr, ks))
