"""The simulator's block runner (convlab.runtime.sim_blocks): numba's barrier and exception semantics,
its threads kept between blocks and launches, and each job's indices."""
import numpy as np
import pytest
from numba import float32

from convlab import runtime
from convlab.runtime import cuda, sim_blocks

pytestmark = pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's block runner")


@cuda.jit
def _ids(out):
    """Each thread writes its linear thread id, block index and lane (2-D blocks)."""
    tid = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    g = cuda.blockIdx.x * cuda.blockDim.x * cuda.blockDim.y + tid
    out[g, 0] = tid
    out[g, 1] = cuda.blockIdx.x
    out[g, 2] = cuda.laneid


@cuda.jit
def _rotate(out, rounds, leavers):
    """Threads below ``leavers`` return at once; the others pass values around shared memory, two
    barriers a round: a barrier opens when every thread still running waits at it."""
    s = cuda.shared.array(64, float32)
    t = cuda.threadIdx.x
    n = cuda.blockDim.x
    if t < leavers:
        out[cuda.blockIdx.x * n + t] = -1
        return
    acc = float32(0)
    for i in range(rounds):
        s[t] = t + i
        cuda.syncthreads()
        acc += s[leavers + (t - leavers + 1) % (n - leavers)]
        cuda.syncthreads()
    out[cuda.blockIdx.x * n + t] = acc


@cuda.jit
def _fails_in_one_thread(out, bad):
    t = cuda.threadIdx.x
    out[t] = t
    cuda.syncthreads()
    if t == bad:
        out[t] = out[1000000]  # out of bounds: the simulator raises IndexError
    cuda.syncthreads()
    out[t] = 2 * t


def _expected_rotation(blocks, n, rounds, leavers):
    want = np.full((blocks, n), -1.0, np.float32)
    for t in range(leavers, n):
        nxt = leavers + (t - leavers + 1) % (n - leavers)
        want[:, t] = sum(nxt + i for i in range(rounds))
    return want.reshape(-1)


@pytest.mark.parametrize("leavers", [0, 5])
def test_barriers_open_when_every_running_thread_waits(leavers):
    blocks, n, rounds = 3, 64, 4
    out = runtime.to_device(np.full(blocks * n, np.nan, np.float32))
    _rotate[blocks, n](out, rounds, leavers)
    np.testing.assert_array_equal(runtime.to_host(out), _expected_rotation(blocks, n, rounds, leavers))


def test_every_job_sees_its_own_indices_in_2d_blocks():
    blocks, shape = 4, (16, 3)
    out = runtime.to_device(np.full((blocks * 48, 3), -1, np.int32))
    _ids[blocks, shape](out)
    got = runtime.to_host(out)
    np.testing.assert_array_equal(got[:, 0], np.tile(np.arange(48), blocks))
    np.testing.assert_array_equal(got[:, 1], np.repeat(np.arange(blocks), 48))
    np.testing.assert_array_equal(got[:, 2], np.tile(np.arange(48) % 32, blocks))


def test_threads_are_kept_between_blocks_and_launches():
    out = runtime.to_device(np.zeros(2 * 64, np.float32))
    _rotate[2, 64](out, 1, 0)
    before = sim_blocks.stats()
    _rotate[2, 64](out, 1, 0)
    _rotate[3, 32](out, 1, 0)
    after = sim_blocks.stats()
    assert after["started"] == before["started"], (before, after)
    assert after["jobs"] - before["jobs"] == 2 * 64 + 3 * 32
    assert after["idle"] >= 64


def test_a_raising_thread_aborts_its_block_and_the_next_launch_is_whole():
    out = runtime.to_device(np.zeros(32, np.int32))
    with pytest.raises(IndexError, match=r"tid=\[7, 0, 0\] ctaid=\[0, 0, 0\]"):
        _fails_in_one_thread[1, 32](out, 7)
    _fails_in_one_thread[1, 32](out, 99)  # no thread fails
    np.testing.assert_array_equal(runtime.to_host(out), 2 * np.arange(32))
    blocks, n = 2, 64
    res = runtime.to_device(np.zeros(blocks * n, np.float32))
    _rotate[blocks, n](res, 3, 2)
    np.testing.assert_array_equal(runtime.to_host(res), _expected_rotation(blocks, n, 3, 2))


@cuda.jit
def _count(out):
    t = cuda.threadIdx.x
    out[0] = cuda.syncthreads_count(t % 3 == 0)
    out[1] = cuda.syncthreads_and(t >= 0)
    out[2] = cuda.syncthreads_or(t == 5)


def test_barrier_reductions_see_every_thread():
    out = runtime.to_device(np.zeros(3, np.int32))
    _count[1, 30](out)
    np.testing.assert_array_equal(runtime.to_host(out), [10, 1, 1])


def _rotate_in_child(conn):
    blocks, n = 2, 64
    out = runtime.to_device(np.zeros(blocks * n, np.float32))
    _rotate[blocks, n](out, 2, 0)
    conn.send(bool(np.array_equal(runtime.to_host(out), _expected_rotation(blocks, n, 2, 0))))


def test_a_forked_child_runs_blocks_without_the_parents_threads():
    import multiprocessing

    _rotate[1, 64](runtime.to_device(np.zeros(64, np.float32)), 1, 0)  # the parent's pool holds threads
    assert sim_blocks.stats()["idle"] >= 64
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_rotate_in_child, args=(child,))
    proc.start()
    ok = parent.recv() if parent.poll(120) else None
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    assert ok is True, "the forked child's launch hung or gave a wrong result"
