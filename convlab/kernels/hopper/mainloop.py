"""The collective mainloop of the Hopper kernels: a producer warp feeding an S-stage shared-memory ring
through the copy engine, consumer warpgroups draining it with wgmma, full / empty mbarrier pairs
between them (CUTLASS's ``sm90_implicit_gemm_gmma_ss_warpspecialized`` and its ``PipelineTmaAsync``).

    producer (one thread of the producer warpgroup):
        for each unit of this CTA (schedule.py), for each k tile kt of its split:
            wait empty[s] (parity ph ^ 1: a fresh stage counts as released)
            arrive.expect_tx full[s] (the stage's bytes); copy A box, B box -> stage s (complete_tx full[s])
            s, ph = next stage (ph flips when s wraps)
    consumers (each warpgroup its BM / CONSUMERS rows, m64 slices):
        for each unit: acc = 0
            for each k tile: wait full[s] (parity ph); wgmma.fence; wgmma over the stage's BK (one per
                32-byte k step and slice); commit; wait_group 1 (the previous k tile's wgmma done): its
                stage -> arrive empty (lane 0 of each consumer warp: the barrier counts the warps)
            wait_group 0; release the last stage; the epilogue (epilogue.py)

Both roles walk the same units and k tiles in the same order, so the ring's stages and parities agree
without any other exchange. On a GPU lane 0 releasing for its warp is enough: it arrives after the
warp's ``.sync.aligned`` wgmma and wait_group, which every lane executes converged, so every lane has
passed the stage's full wait (CUTLASS's ``PipelineTmaAsync`` counts one arrival per consumer warpgroup).
Running on the simulator, whatever target the tiles are planned for (convlab.testing.gpu_tiles runs
sm_90's), every consumer thread arrives (the count is the consumer threads): its lanes are Python
threads that never converge, and with lane 0 releasing, a lagging lane's stage could be refilled before
it waits on it; its parity wait then takes the refill's phase for the one before and blocks for good
(tests/kernels/test_hopper_release.py forces it). The stage a consumer releases is never the one it
reads next, and the producer refills a stage only after every consumer warp released it (the
simulator checks both: a copy into bytes a pending wgmma reads raises). Descriptors: wgmma_desc's
K-major swizzled layout, the copy engine's swizzle of BK * size-byte rows being the same
(tensormap.swizzled).

The copies per operand are a :class:`Loads`: the lines that compute a unit's coordinates and a k
tile's, and the copy calls; :func:`producer` and :func:`consumer` take it.
"""
from __future__ import annotations

from convlab import runtime
from convlab.kernels.source import Writer
from convlab.kernels.hopper.config import HopperConfig


def releasers(cfg: HopperConfig) -> tuple[int, str]:
    """(arrivals an empty barrier counts, the condition of a consumer thread that arrives): lane 0 of each
    consumer warp on a GPU, every consumer thread when running on the simulator, for any target (module
    doc)."""
    if runtime.SIMULATOR:
        return 128 * cfg.CONSUMERS, "held != 0"
    return 4 * cfg.CONSUMERS, "held != 0 and lane == 0"


class Loads:
    """The operands of one kernel kind. Producer side: ``unit(w)``: lines run once per unit (``m0``,
    ``n0`` known); ``ktile(w)``: lines run once per k tile (``kt`` known) before the copies;
    ``copies(w, dst_a, dst_b, bar)``: the copy calls; ``begin(w)`` / ``advance(w)``: the k-tile counters
    at the unit's first k tile and after each; ``maps``: the tensor-map indices the producer uses.
    Consumer side: ``consumer_unit(w)``: lines run once per unit (names the epilogue's store needs);
    ``mma(w, a, b)``: the wgmma of one stage (A and B at the shared addresses ``a``, ``b``), reading the
    operands in the layout the copies wrote."""

    maps: tuple[int, ...] = (0, 1)

    def consumer_unit(self, w: Writer) -> None:
        pass

    def mma(self, w: Writer, a: str, b: str) -> None:
        raise NotImplementedError

    def unit(self, w: Writer) -> None:
        raise NotImplementedError

    def begin(self, w: Writer) -> None:
        raise NotImplementedError

    def ktile(self, w: Writer) -> None:
        raise NotImplementedError

    def copies(self, w: Writer, dst_a: str, dst_b: str, bar: str) -> None:
        raise NotImplementedError

    def advance(self, w: Writer) -> None:
        raise NotImplementedError


def addresses(cfg: HopperConfig, itype: str, lay: dict[str, int]) -> dict[str, str]:
    """Expressions of the stage-``st`` addresses and barriers (``base``: the shared window's start)."""
    return {"a": f"U(base + U({lay['a0']} + U(st * {lay['a_stage']})))",
            "b": f"U(base + U({lay['b0']} + U(st * {lay['b_stage']})))",
            "full": f"U(base + U({lay['bars']} + U(st * 8)))",
            "empty": f"U(base + U({lay['bars'] + 8 * cfg.STAGES} + U(st * 8)))"}


def init_barriers(w: Writer, cfg: HopperConfig, lay: dict[str, int]) -> None:
    """Thread 0 initialises full[s] (1 arrival: the producer's, plus the copies' bytes) and empty[s]
    (:func:`releasers`); then the fence and a block barrier, before the roles split."""
    with w.block("if tid == 0:"):
        for st in range(cfg.STAGES):
            w(f"mbar_init(U(base + {lay['bars'] + 8 * st}), 1)")
            w(f"mbar_init(U(base + {lay['bars'] + 8 * (cfg.STAGES + st)}), {releasers(cfg)[0]})")
        w("fence_mbarrier_init()")
    w("cuda.syncthreads()")


def _next_stage(w: Writer, cfg: HopperConfig) -> None:
    w("st = U(st + 1)")
    with w.block(f"if st == {cfg.STAGES}:"):
        w("st = U(0)")
        w("ph = U(ph ^ 1)")


def _unit(w: Writer, cfg: HopperConfig) -> None:
    w("tm, tn, z = unit_of(u, TILES_M, TILES_N, GROUP)")
    w(f"m0 = U(U(tm) * {cfg.BM})")
    w(f"n0 = U(U(tn) * {cfg.BN})")
    w("kt = U(U(z) * PER_SPLIT)")
    w("ke = min(U(kt + PER_SPLIT), KT)")


def producer(w: Writer, cfg: HopperConfig, itype: str, lay: dict[str, int], loads: Loads) -> None:
    """The producer thread's loop (module doc)."""
    at = addresses(cfg, itype, lay)
    tx = lay["a_stage"] + lay["b_stage"]
    for mi in loads.maps:
        w(f"tensormap_acquire(maps, {mi})")
    w("st = U(0)")
    w("ph = U(0)")
    w("u = U(cuda.blockIdx.x)")
    with w.block("while u < UNITS:"):
        _unit(w, cfg)
        loads.unit(w)
        loads.begin(w)
        with w.block("while kt < ke:"):
            loads.ktile(w)
            w(f"mbar_wait({at['empty']}, U(ph ^ 1))")
            w(f"full = {at['full']}")
            w(f"mbar_arrive_tx(full, {tx})")
            loads.copies(w, at["a"], at["b"], "full")
            _next_stage(w, cfg)
            loads.advance(w)
            w("kt = U(kt + 1)")
        w("u = U(u + cuda.gridDim.x)")


def accumulators(cfg: HopperConfig) -> str:
    """The tuple of every slice's accumulator tuple (wgmma_fence / wait take them as one)."""
    return "(" + ", ".join(f"a{s}" for s in range(cfg.slices)) + ",)" if cfg.slices > 1 else "a0"


def consumer(w: Writer, cfg: HopperConfig, itype: str, lay: dict[str, int], loads: Loads, epilogue) -> None:
    """The consumer warpgroups' loop (module doc); ``loads.mma`` writes a stage's wgmma, ``epilogue(w)``
    the lines run after a unit's mainloop with the accumulators a0..a{slices-1} final."""
    at = addresses(cfg, itype, lay)
    every = accumulators(cfg)
    w("cw = U(warp // 4)  # this consumer warpgroup: rows cw * BM / CONSUMERS .. of the tile")
    w("st = U(0)")
    w("ph = U(0)")
    w("u = U(cuda.blockIdx.x)")
    with w.block("while u < UNITS:"):
        _unit(w, cfg)
        loads.consumer_unit(w)
        for s in range(cfg.slices):
            w(f"a{s} = ZEROS")
        w("prev = U(0)")
        w("held = U(0)")
        with w.block("while kt < ke:"):
            w(f"mbar_wait({at['full']}, ph)")
            w(f"{every} = wgmma_fence({every})")
            loads.mma(w, at["a"], at["b"])
            w("wgmma_commit()")
            w(f"{every} = wgmma_wait1({every})")
            with w.block(f"if {releasers(cfg)[1]}:"):
                w(f"mbar_arrive(U(base + U({lay['bars'] + 8 * cfg.STAGES} + U(prev * 8))))")
            w("prev = st")
            w("held = U(1)")
            _next_stage(w, cfg)
            w("kt = U(kt + 1)")
        w(f"{every} = wgmma_wait0({every})")
        with w.block(f"if {releasers(cfg)[1]}:"):
            w(f"mbar_arrive(U(base + U({lay['bars'] + 8 * cfg.STAGES} + U(prev * 8))))")
        epilogue(w)
        w("u = U(u + cuda.gridDim.x)")
