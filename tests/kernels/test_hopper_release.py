"""The Hopper kernel's stage releases on the simulator, under a forced interleaving: one consumer lane
lags at its first full-barrier wait until the others are as far ahead as the ring lets them.

The sm_90 tile of tma_wgmma (as convlab.testing.gpu_tiles runs it: 2 consumer warpgroups, 8 stages, 9
k tiles, so stage 0 is filled twice) with lane 1 of warp 0 held before it waits on full[0]. When only
lane 0 of each warp released stages (the GPU's convention), the other lanes' releases let the producer
refill stage 0 under the held lane, whose parity wait then took the refill for the phase before and
blocked for good: the intermittent deadlock of that run on loaded cores. With every consumer thread
releasing (kernels.hopper.mainloop.releasers on the simulator) the producer cannot refill stage 0
before the held lane has read it, and the run is right."""
import threading
import time

import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.arch import sm90, sm90_sim
from convlab.kernels.hopper import kernel
from convlab.plugin import registry
from convlab.testing.gpu_tiles import check_gpu_tile, gpu_tile_cases

HELD = 1  # lane 1 of consumer warp 0
HOLD_LIMIT = 60.0  # seconds the held lane waits at most for the others (a safety net: 2 s on 2 loaded cores)


class _LaggingLane:
    """``sm90.mbar_wait`` holding thread HELD of block 0 at its first wait (full[0], k tile 0) until
    stage 0 is refilled (full[0] completed twice) or every other consumer thread is at its second wait
    on full[0] (k tile 8) with stage 0 still unreleased (empty[0] in its first phase)."""

    def __init__(self, stages: int, consumers: int) -> None:
        self.stages, self.consumers = stages, consumers
        self.wait = sm90.mbar_wait
        self.lock = threading.Lock()
        self.full0: int | None = None
        self.waits_on_full0: dict[int, int] = {}
        self.released = ""  # why the held lane went on: "others ahead" or "stage refilled"

    def __call__(self, bar, parity):
        st, thread, _ = sm90_sim._here()
        tid = int(thread.thread_id)
        if tuple(thread.blockIdx) == (0, 0, 0) and tid < 128 * self.consumers:
            with self.lock:
                if self.full0 is None:  # every consumer thread waits on full[0] first
                    self.full0 = int(bar)
                if int(bar) == self.full0:
                    self.waits_on_full0[tid] = self.waits_on_full0.get(tid, 0) + 1
                hold = tid == HELD and int(bar) == self.full0 and self.waits_on_full0[tid] == 1
            if hold:
                self._hold(st)
        return self.wait(bar, parity)

    def _hold(self, st) -> None:
        full, empty = st.bars[self.full0], st.bars[self.full0 + 8 * self.stages]
        start = time.monotonic()
        while full.phase < 2 and time.monotonic() - start < HOLD_LIMIT:
            with self.lock:
                ahead = sum(n >= 2 for t, n in self.waits_on_full0.items() if t != HELD)
            if ahead == 128 * self.consumers - 1 and empty.phase == 0:
                self.released = "others ahead"
                return
            time.sleep(0.005)
        self.released = "stage refilled" if full.phase >= 2 else "hold limit"


@pytest.mark.skipif(not runtime.SIMULATOR, reason="forces an interleaving of the simulator's threads")
def test_a_lagging_lane_keeps_its_stage_until_it_has_read_it(monkeypatch):
    plugin = registry.get("tma_wgmma")
    op, target, config, problem = next(c for c in gpu_tile_cases(plugin) if c[0] == "forward" and c[1] == "sm_90")
    assert config["CONSUMERS"] == 2 and config["STAGES"] == 8
    monkeypatch.setattr(sm90_sim, "WAIT_LIMIT", 10.0)
    lagging = _LaggingLane(config["STAGES"], config["CONSUMERS"])
    monkeypatch.setattr(sm90, "mbar_wait", lagging)
    kernel.conv_kernel.cache_clear()  # the kernels bind the intrinsics when compiled
    try:
        check_gpu_tile(plugin, op, target, config, problem, np.random.default_rng(0))
    finally:
        kernel.conv_kernel.cache_clear()
    assert lagging.released == "others ahead"  # the interleaving was forced
