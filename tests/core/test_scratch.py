"""convlab.runtime.scratch: lent device buffers are reused, never shared while lent, and bounded in number."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import runtime
from convlab.runtime import scratch


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


def test_zeroed_tail_is_zero_on_entry_and_kept_only_after_a_clean_exit():
    """``zeroed=z``: the view's last z elements are zero on entry; the pool zeroes them only when the
    buffer's last use was not a clean exit of a user of that same range."""
    with scratch.scratch(10, np.float32, zeroed=3) as a:
        assert not a.copy_to_host()[7:].any()
        a[:7].copy_to_device(np.ones(7, np.float32))
    # a kept reference breaks the promise on purpose: a re-lend that zeroed nothing shows it
    a[7:].copy_to_device(np.full(3, 7, np.float32))
    with scratch.scratch(10, np.float32, zeroed=3) as b:  # same range after a clean exit: not zeroed
        np.testing.assert_array_equal(b.copy_to_host(), [1] * 7 + [7] * 3)
        b[7:].copy_to_device(np.zeros(3, np.float32))
    with pytest.raises(RuntimeError):
        with scratch.scratch(10, np.float32, zeroed=3) as c:
            c.copy_to_device(np.full(10, 5, np.float32))  # counters dirty, then the "launch" raises
            raise RuntimeError("kernel failed")
    with scratch.scratch(10, np.float32, zeroed=3) as d:
        np.testing.assert_array_equal(d.copy_to_host(), [5] * 7 + [0] * 3)  # same buffer, re-zeroed
    with scratch.scratch(10, np.float32) as e:  # another kind of user overwrites everything
        e.copy_to_device(np.full(10, 5, np.float32))
    with scratch.scratch(9, np.float32, zeroed=2) as f:
        np.testing.assert_array_equal(f.copy_to_host(), [5] * 7 + [0] * 2)
    with pytest.raises(ValueError, match="zeroed"):
        with scratch.scratch(4, np.float32, zeroed=5):
            pass


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


def test_a_repeated_size_gets_the_same_view_without_slicing_again():
    """Lending n elements of a larger pooled buffer slices it once per (buffer, n): slicing a device
    array costs host time on every call otherwise."""
    scratch.release()
    with scratch.scratch(100, np.float32) as big:
        pass
    with scratch.scratch(60, np.float32) as first:
        pass
    with scratch.scratch(60, np.float32) as second:
        assert second is first and second.size == 60
    with scratch.scratch(100, np.float32) as whole:
        assert whole is big  # the full buffer is lent as is
    scratch.release()
    with scratch.scratch(60, np.float32) as fresh:
        assert fresh is not first
