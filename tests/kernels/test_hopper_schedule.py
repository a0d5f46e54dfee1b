"""The Hopper kernels' persistent schedule (convlab.kernels.hopper.schedule): for random tile counts, k
tiles, SM counts and CTAs per SM, split-K included, every (output tile, split) is computed by exactly one
CTA, the splits of a tile cover its k tiles exactly once, and the device decoder the kernels call
gives the host's answers."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convlab import runtime
from convlab.kernels.hopper import schedule
from convlab.runtime import cuda


@settings(max_examples=400, deadline=None)
@given(tiles_m=st.integers(1, 40), tiles_n=st.integers(1, 12), ktiles=st.integers(1, 300),
       sms=st.integers(1, 140), per_sm=st.integers(1, 2), min_k=st.integers(1, 16),
       max_splits=st.one_of(st.none(), st.integers(1, 64)), group=st.integers(1, 16))
def test_every_tile_and_k_tile_is_computed_exactly_once(tiles_m, tiles_n, ktiles, sms, per_sm, min_k, max_splits,
                                                        group):
    s = schedule.plan(tiles_m, tiles_n, ktiles, sms, per_sm, min_k, max_splits, group)
    assert 1 <= s.ctas <= sms * per_sm and s.ctas <= s.units
    seen = [unit for cta in range(s.ctas) for unit in s.units_of(cta)]
    assert sorted(seen) == sorted((tm, tn, z) for tm in range(tiles_m) for tn in range(tiles_n)
                                  for z in range(s.splits))
    covered = np.zeros(ktiles, int)
    for z in range(s.splits):
        start, stop = s.k_range(z)
        assert start < stop  # no empty split
        covered[start:stop] += 1
    assert (covered == 1).all()
    if s.splits > 1:  # split only to fill the slots, each split long enough
        assert s.tiles < sms * per_sm and (s.per_split >= min_k or s.splits == 1)
        assert max_splits is None or s.splits <= max_splits


def test_bands_keep_a_tile_rows_group_together():
    s = schedule.plan(10, 3, 8, 200, group=4)
    first = [schedule.unit_of(u, 10, 3, 4) for u in range(12)]
    assert {tm for tm, _, _ in first} == {0, 1, 2, 3} and {tn for _, tn, _ in first} == {0, 1, 2}
    assert s.units_of(0)[0] == (0, 0, 0)


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the device decoder is checked on the simulator")
def test_the_device_decoder_is_the_host_one():
    s = schedule.plan(5, 3, 40, 4, 1, 2)
    decode = schedule.unit_of_device

    def kernel(out, units, tiles_m, tiles_n, group, ctas):
        u = cuda.blockIdx.x
        i = 0
        while u < units:
            tm, tn, z = decode(u, tiles_m, tiles_n, group)
            out[cuda.blockIdx.x, i, 0], out[cuda.blockIdx.x, i, 1], out[cuda.blockIdx.x, i, 2] = tm, tn, z
            u += ctas
            i += 1
    per = -(-s.units // s.ctas)
    out = cuda.to_device(np.full((s.ctas, per, 3), -1, np.int64))
    runtime.jit(kernel)[s.ctas, 1](out, np.uint32(s.units), np.uint32(s.tiles_m), np.uint32(s.tiles_n),
                                   np.uint32(s.group), np.uint32(s.ctas))
    got = out.copy_to_host()
    for cta in range(s.ctas):
        units = s.units_of(cta)
        assert [tuple(r) for r in got[cta, :len(units)]] == units
