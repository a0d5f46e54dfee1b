"""Features of the built-in plugin families (``convlab.algorithms``), from each plugin's own planning
helpers (its split-K plan, column sub-batches, stride phases), so the model counts the launches and the
bytes the plugin's ``run`` really issues. Every extractor returns :class:`~.features.Features`.

    family          main kernel (GEMM view, tile)                       auxiliary kernels, extra launches
    direct          one thread per output, 128 a block                  wgrad: the split sum
    implicit_gemm   M x N x K of gemm_shape per group, BM x BN tiles    wgrad split sum; dgrad: a launch
                    (split-K blocks, dgrad by stride phases)            per stride phase
    im2col/col2im   per image K' x PQ x C'RS (batched over the          unfold / fold of the column
                    sub-batch), BM x BN tiles                           buffer per sub-batch, split sum
    tensor_core,    N*P*Q x K x R*S*Cpad (dgrad: of the flipped          NHWC / KRSC copies (none for an
    tf32x3          problem), split-K blocks; wgrad K x CRS x N*PQp     NCHW 1x1 read), unfolds, split sum
    depthwise       TH x TW output tiles of PL planes                   wgrad split sum
    widen           the float32 plugin's features (``via``)            widen a, b (bias), narrow out

The warpgroup configs of tensor_core (``MMA=wgmma``) are the family ``tensor_core_wgmma``: no results
file the fit reads (:mod:`.measured`) times them, so no fitted constant of the mma.sync kernels speaks
for them and they get the physics defaults until such a file does.

Shapes as in :mod:`convlab.problem`; bytes of the operands in their own dtype.
"""
from __future__ import annotations

import math
from typing import Callable

from convlab.kernels.simt.tile import Tile
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm, Config
from convlab.problem import Problem
from convlab.runtime.targets import Target

from .features_base import Features, blocks_per_sm, default_arith, gemm_tiles, operand_loads

#: (plugin, problem, config, target, workspace limit, recurse) -> Features; ``recurse`` is
#: :func:`convlab.autotune.features.features` (widen asks it for its float32 plugin's features)
Extractor = Callable[..., Features]
HALF = ("float16", "bfloat16")


def _prod(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _direct(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
        recurse: Callable | None = None) -> Features:
    from convlab.algorithms import direct

    out = _prod(pr.operand_shapes[2])
    splits = direct.wgrad_splits(pr, limit) if pr.op == "wgrad" else 1
    aux = 2.0 * splits * out * pr.itemsize if splits > 1 else 0.0
    blocks = math.ceil(out * splits / direct.THREADS)
    return Features("direct", default_arith(pr), float(pr.flops), float(pr.bytes), aux, 1 + (splits > 1),
                    blocks, 1, direct.THREADS, blocks_per_sm(target, direct.THREADS))


def _simt_tile(config: Config):
    return Tile.from_config(config)


def _implicit_gemm(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
        recurse: Callable | None = None) -> Features:
    from convlab.algorithms.implicit_gemm import common, gathers

    tile = _simt_tile(config)
    if pr.op == "wgrad":
        shapes = [pr.gemm_shape()]
    else:
        shapes = [(g.m, g.n, g.k) for g in gathers.gathers(pr)]
    flops = l2 = aux = 0.0
    blocks = 0
    for m, n, k in shapes:
        splits, _, _ = common.plan(pr, tile, limit, (m, n, k), target=target)
        tiles, pad = gemm_tiles(m, n, tile.bm, tile.bn)
        flops += 2.0 * m * n * math.ceil(k / tile.bk) * tile.bk * pad * pr.groups
        l2 += operand_loads(m, n, k, tile.bm, tile.bn, pr.itemsize) * pr.groups
        blocks = max(blocks, tiles * pr.groups * splits)
        if splits > 1:
            aux += 2.0 * splits * tiles * pr.groups * tile.bm * tile.bn * 4
    split_pass = pr.op == "wgrad" and aux > 0
    shared = tile.shared_bytes(pr.itemsize)
    return Features("implicit_gemm", default_arith(pr), flops, float(pr.bytes), aux,
                    len(shapes) + split_pass, blocks, len(shapes), tile.threads,
                    blocks_per_sm(target, tile.threads, shared, common.register_cap(tile.threads)), l2)


def _columns(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
        recurse: Callable | None = None) -> Features:
    from convlab.algorithms.explicit_gemm import common as columns

    tile = _simt_tile(config)
    plan = columns.column_plan(pr, tile, limit, target)
    m, n, k = columns.gemm_shape(pr)
    subs = max(1, math.ceil(pr.n / max(1, plan.nb)))
    images = max(1, min(pr.n, plan.nb))
    tiles, pad = gemm_tiles(m, n, tile.bm, tile.bn)
    ksplit = plan.ksplit if pr.op == "wgrad" else 1
    gemm_batch = pr.groups * (1 if pr.op == "wgrad" else images)
    per_image = pr.c * pr.r * pr.s * pr.p * pr.q
    aux = 0.0 if plan.pointwise else 2.0 * pr.n * per_image * pr.itemsize  # columns written, read
    aux += 2.0 * plan.part * pr.itemsize * subs
    per_sub = 1 + (not plan.pointwise) + (pr.op == "wgrad" and ksplit > 1)
    return Features(plugin.name, default_arith(pr), 2.0 * m * n * k * pad * pr.groups * max(pr.n, 1),
                    float(pr.bytes), aux, subs * per_sub, tiles * gemm_batch * ksplit, subs,
                    tile.threads, blocks_per_sm(target, tile.threads, tile.shared_bytes(pr.itemsize), 64),
                    operand_loads(m, n, k, tile.bm, tile.bn, pr.itemsize) * pr.groups * max(pr.n, 1))


def _tensor_core(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
        recurse: Callable | None = None) -> Features:
    from convlab.algorithms.tensor_core import plugin as tc
    from convlab.algorithms.tensor_core import strided, wgrad

    cfg = tc.tc_config(config)
    itype = plugin.itype(pr.dtype)  # type: ignore[attr-defined]
    arith = {"f16": "f16", "bf16": "f16", "tf32": "tf32", "tf32x3": "tf32x3"}[itype]
    size, align = pr.itemsize, tc.ALIGN[pr.dtype]
    threads = cfg.threads
    regs = cfg.REGS or (168 if cfg.wgmma else 128)
    occupancy = blocks_per_sm(target, threads, cfg.shared_bytes(itype), regs)
    passes = 1
    if pr.op == "wgrad":
        plan = wgrad.plan(pr, cfg, align, target)
        m, n, k = pr.k, pr.c * pr.r * pr.s, pr.n * plan.pqp
        dense, x_too = wgrad.as_is(pr, plan.splits, align, plan.pqp)
        unfold = (0 if dense else pr.n * plan.pqp * pr.k) + (0 if x_too else pr.n * plan.pqp * n)
        parts = plan.splits * plan.parts
        aux = 2.0 * unfold * size + (2.0 * 4 * parts * m * n if parts > 1 else 0.0)
        launches = 1 + (not dense) + (not x_too) + (parts > 1)
        blocks = gemm_tiles(m, n, cfg.BM, cfg.BN)[0] * parts
    elif tc._strided_dgrad(pr):
        kp, crs, pq = strided._sizes(pr)
        m, n, k = pr.n * pq, crs, kp
        passes = math.ceil(pr.n / strided.images_per_pass(pr, limit))
        aux = 2.0 * 4 * (strided.operand_elements(pr) + pr.n * pq * crs)
        launches = 2 + 2 * passes  # the two copies, then a GEMM and a fold per pass
        blocks = gemm_tiles(math.ceil(m / passes), n, cfg.BM, cfg.BN)[0]
    else:
        geo = tc._gathered(pr)
        cp = tc._padded(geo["c"], pr.dtype)
        m, n, k = geo["n"] * geo["p"] * geo["q"], geo["k"], geo["r"] * geo["s"] * cp
        splits, _ = tc.split_k(pr, cfg, target)
        one = (geo["r"], geo["s"], tuple(geo["stride"]), tuple(geo["padding"])) == (1, 1, (1, 1), (0, 0))
        x_read = one and not cfg.wgmma and (geo["h"] * geo["w"]) % (16 // size) == 0 and cp == geo["c"]
        w_read = pr.op == "forward" and cp == geo["c"] and geo["r"] * geo["s"] == 1
        copies = (0 if x_read else geo["n"] * geo["h"] * geo["w"] * (geo["c"] + cp)) + \
            (0 if w_read else geo["k"] * geo["r"] * geo["s"] * (geo["c"] + cp))
        aux = float(copies * size) + (2.0 * 4 * splits * m * n if splits > 1 else 0.0)
        launches = 1 + (not x_read) + (not w_read) + (splits > 1)
        blocks = gemm_tiles(m, n, cfg.BM, cfg.BN)[0] * splits
    _, pad = gemm_tiles(m, n, cfg.BM, cfg.BN)
    family = plugin.name + ("_wgmma" if cfg.wgmma else "")  # wgmma: its own group (WGMMA_FAMILY)
    return Features(family, arith, 2.0 * m * n * math.ceil(k / cfg.BK) * cfg.BK * pad,
                    float(pr.bytes), aux, launches, blocks, passes, threads, occupancy,
                    operand_loads(m, n, k, cfg.BM, cfg.BN, size))


def _depthwise(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
        recurse: Callable | None = None) -> Features:
    from convlab.algorithms import depthwise as dw

    tile = dw._tile(config)
    th, tw, vh, pl = tile
    threads = tw * th // vh * pl
    tiles_h, tiles_w, units = dw._blocks(pr, tile)
    waste = dw._waste(pr, tile)
    if pr.op == "wgrad":
        splits, _ = dw.wgrad_plan(pr, config, limit, target)
        blocks = splits * math.ceil(pr.k / pl)
        aux = 2.0 * splits * pr.k * pr.r * pr.s * pr.itemsize if splits > 1 else 0.0
        launches = 1 + (splits > 1)
    else:
        blocks = units * math.ceil(max(pr.c, pr.k) / pl) * max(pr.n, 1)
        aux, launches = 0.0, 1
    halo = (th + pr.r - 1) * (tw + pr.s - 1) / (th * tw)
    return Features("depthwise", default_arith(pr), pr.flops * waste, float(pr.bytes), aux, launches,
                    blocks, 1, threads, blocks_per_sm(target, threads, 0, 48),
                    float(pr.bytes) * halo)


def _widen(plugin: Algorithm, pr: Problem, config: Config, target: Target, limit: int,
           recurse: Callable) -> Features:
    name = config["via"]
    inner = Config({k: v for k, v in config.items() if k != "via"})
    wide = pr.replace(dtype="float32")
    via = recurse(registry.get(name), wide, inner, target, limit)
    elems = sum(_prod(s) for s in pr.operand_shapes) + (pr.bias_shape[0] if pr.bias else 0)
    copies = float(elems * (pr.itemsize + 4))  # each operand read in half, written (read) in float32
    return Features(via.family, via.arith, via.flops, via.bytes, via.aux_bytes + copies,
                    via.launches + 3 + pr.bias, via.blocks, via.passes, via.threads, via.blocks_per_sm,
                    via.l2_bytes)


BUILTIN: dict[str, Extractor] = {"direct": _direct, "implicit_gemm": _implicit_gemm, "im2col": _columns,
                                 "col2im": _columns, "tensor_core": _tensor_core, "tf32x3": _tensor_core,
                                 "depthwise": _depthwise, "widen": _widen}


def extractor(plugin: Algorithm) -> Extractor | None:
    """The built-in extractor of a plugin shipped in ``convlab.algorithms`` (by name), else None."""
    module = type(plugin).__module__
    if not module.startswith("convlab.algorithms"):
        return None
    return BUILTIN.get(plugin.name)
