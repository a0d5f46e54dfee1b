"""convlab.scratch: lent device buffers are reused, never shared while lent, and bounded in number."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import runtime, scratch


@pytest.fixture(autouse=True)
def empty_pool():
    scratch.release()
    yield
    scratch.release()


def test_reuse_smallest_fit_and_views_of_the_asked_size():
    with scratch.scratch(100, np.float32) as a:
        assert a.shape == (100,) and a.dtype == np.float32
    with scratch.scratch(60, np.float32) as b:  # the idle 100-element buffer serves the smaller request
        assert b.shape == (60,)
        b.copy_to_device(np.arange(60, dtype=np.float32))
    assert scratch.held_bytes() == 400
    with scratch.scratch(100, np.float64) as c:  # another dtype: its own buffer
        assert c.dtype == np.float64
    assert scratch.held_bytes() == 400 + 800


def test_two_lent_at_once_are_distinct_and_bounded_by_keep():
    with scratch.scratch(10, np.float32) as a, scratch.scratch(10, np.float32) as b, \
            scratch.scratch(10, np.float32) as c:
        for i, buf in enumerate((a, b, c)):
            buf.copy_to_device(np.full(10, i, np.float32))
        assert [float(buf.copy_to_host()[0]) for buf in (a, b, c)] == [0.0, 1.0, 2.0]
    assert scratch.held_bytes() == scratch.KEEP * 40  # the rest were dropped


def test_returned_after_an_exception_and_released():
    with pytest.raises(RuntimeError):
        with scratch.scratch(8, np.float32):
            raise RuntimeError("launch failed")
    assert scratch.held_bytes() == 32
    scratch.release()
    assert scratch.held_bytes() == 0
    with pytest.raises(ValueError, match="n must be >= 0"):
        with scratch.scratch(-1, np.float32):
            pass


def test_picks_the_smallest_fit_among_several():
    with scratch.scratch(100, np.float32), scratch.scratch(10, np.float32):
        pass  # idle now: the 10- and the 100-element buffers
    with scratch.scratch(50, np.float32) as a, scratch.scratch(5, np.float32) as b:
        assert a.shape == (50,) and b.shape == (5,)
    assert scratch.held_bytes() == 440  # nothing new was allocated


def test_op_outputs_come_from_a_pool_per_shape_dtype_and_stream():
    """An output's memory is lent again once the caller dropped it, never while it is alive, and only
    for the same (shape, dtype, stream)."""
    import gc

    pool = scratch
    pool.release_outputs()
    a = pool.output((2, 3), np.float32)
    ptr = runtime.device_pointer(a)
    live = pool.output((2, 3), np.float32)
    assert runtime.device_pointer(live) != ptr and a.shape == (2, 3)
    del a
    gc.collect()
    assert runtime.device_pointer(pool.output((2, 3), np.float32, stream=7)) != ptr  # other stream
    assert runtime.device_pointer(pool.output((3, 2), np.float32)) != ptr  # other shape
    again = pool.output((2, 3), np.float32)
    assert runtime.device_pointer(again) == ptr and pool.output_held_bytes() >= 0
    pool.release_outputs()
    assert pool.output_held_bytes() == 0
