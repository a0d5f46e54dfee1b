"""Simulator stand-ins for the Hopper intrinsics of :mod:`convlab.kernels.arch.sm90`, with the PTX ISA's
semantics and checks of the rules a GPU breaks silently.

Each block keeps its state on the simulator's shared-memory object (reset per block, as wgmma_sim's):
the mbarriers by shared address (count, pending arrivals, transaction bytes, phase) under one condition
variable, the named barriers, and which thread fenced which tensor map. The simulator runs a block's
threads as Python threads, so a wait blocks on the condition until another thread's arrival (or a tensor
copy's completion) finishes the phase; a wait that lasts WAIT_LIMIT seconds is a deadlock and raises,
and a wait wakes up to raise when another thread of the block failed.

A tensor copy happens at issue (its bytes land, then complete_tx), so the checks are made then:
- the map was fenced by this thread (``tensormap_acquire``) and is of the copy's kind and rank;
- im2col coordinates name a box position, filter offsets fit the instruction's 16 bits;
- the shared destination or source lies in dynamic shared memory, starts on 128 bytes and on its
  swizzle's repeat (8 x the span: convlab's tiles start there, what the wgmma descriptors assume);
- a copy overwrites no mbarrier and no bytes a pending wgmma still reads (wgmma_sim's bookkeeping:
  the stage-reuse race of a producer that skipped its empty-barrier wait).

Plain functions, like wgmma_sim's, reaching the launch through the simulator's kernel context.
"""
from __future__ import annotations

import functools
import threading
import time

import numpy as np

from convlab.kernels.arch import tensormap, wgmma_sim

WAIT_LIMIT = 120.0  # seconds a simulated wait may block before it counts as a deadlock
_POLL = 0.02
_ATTR = "_convlab_sm90_state"
_CREATE = threading.Lock()
_BYTE = np.dtype(np.uint8)


class _Barrier:
    __slots__ = ("count", "pending", "tx", "phase")

    def __init__(self, count: int) -> None:
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0


class _Block:
    def __init__(self, block: tuple) -> None:
        self.block = block
        self.cond = threading.Condition()
        self.bars: dict[int, _Barrier] = {}
        self.named: dict[int, threading.Barrier] = {}
        self.fenced: set[tuple] = set()


def _here() -> tuple[_Block, object, np.ndarray]:
    """(this block's state, this thread, the dynamic shared memory as bytes)."""
    kctx, thread = wgmma_sim._context()
    block = tuple(thread.blockIdx)
    with _CREATE:
        st = getattr(kctx.shared, _ATTR, None)
        if st is None or st.block != block:
            st = _Block(block)
            setattr(kctx.shared, _ATTR, st)
    return st, thread, kctx.shared.array(0, _BYTE)


def _numpy(arr) -> np.ndarray:
    return np.asarray(getattr(arr, "_ary", arr)).reshape(-1)


def _address(arr) -> int:
    return int(_numpy(arr).__array_interface__["data"][0])


def _barrier(st: _Block, bar) -> _Barrier:
    b = st.bars.get(int(bar))
    if b is None:
        raise RuntimeError(f"no mbarrier initialised at shared address {int(bar)} (mbar_init first)")
    return b


def _complete(st: _Block, b: _Barrier) -> None:
    if b.pending == 0 and b.tx == 0:
        b.phase += 1
        b.pending = b.count
        st.cond.notify_all()


def _wait(st: _Block, thread, done, what: str) -> None:
    start = time.monotonic()
    with st.cond:
        while not done():
            if getattr(thread, "abort", False):
                raise RuntimeError(f"{what}: another thread of the block failed")
            if time.monotonic() - start > WAIT_LIMIT:
                raise RuntimeError(f"{what} never completed in {WAIT_LIMIT:.0f} s: a deadlock (an arrival or "
                                   "a copy that never comes)")
            st.cond.wait(_POLL)


# --- mbarriers

def mbar_init(bar, count):
    st, _, smem = _here()
    if int(bar) % 8 or not 0 <= int(bar) <= smem.size - 8:
        raise ValueError(f"an mbarrier is 8 aligned bytes of dynamic shared memory, got address {int(bar)}")
    if not 1 <= int(count) < 2**20:
        raise ValueError(f"mbarrier count must be in 1..2**20-1, got {int(count)}")
    with st.cond:
        st.bars[int(bar)] = _Barrier(int(count))


def fence_mbarrier_init():
    pass


def mbar_arrive(bar):
    st, _, _ = _here()
    with st.cond:
        b = _barrier(st, bar)
        b.pending -= 1
        if b.pending < 0:
            raise RuntimeError(f"mbarrier at {int(bar)}: more arrivals than its count {b.count} in one phase")
        _complete(st, b)


def mbar_arrive_tx(bar, nbytes):
    st, _, _ = _here()
    with st.cond:
        _barrier(st, bar).tx += int(nbytes)
    mbar_arrive(bar)


def _complete_tx(st: _Block, bar, nbytes: int) -> None:
    with st.cond:
        b = _barrier(st, bar)
        b.tx -= nbytes
        _complete(st, b)


def mbar_wait(bar, parity):
    st, thread, _ = _here()
    b = _barrier(st, bar)
    _wait(st, thread, lambda: b.phase % 2 != int(parity) % 2, f"mbarrier wait (address {int(bar)}, parity "
          f"{int(parity)})")


def mbar_try_wait(bar, parity):
    st, _, _ = _here()
    b = _barrier(st, bar)
    with st.cond:
        if b.phase % 2 == int(parity) % 2:
            st.cond.wait(_POLL)  # try_wait may suspend the thread for a while (PTX ISA)
        return np.uint32(b.phase % 2 != int(parity) % 2)


# --- warp specialization

def _setmaxnreg(n: int):
    if not 24 <= int(n) <= 256 or int(n) % 8:
        raise ValueError(f"setmaxnreg takes 24..256 registers in multiples of 8, got {n}")

    def setmaxnreg():
        pass

    return setmaxnreg


setmaxnreg_inc = functools.cache(_setmaxnreg)
setmaxnreg_dec = functools.cache(_setmaxnreg)


@functools.cache
def named_sync(barrier: int, threads: int):
    if not 1 <= int(barrier) <= 15 or int(threads) % 32 or not 32 <= int(threads) <= 1024:
        raise ValueError(f"named barriers 1..15 (0 is __syncthreads) of a multiple of 32 threads, got "
                         f"{barrier}, {threads}")

    def sync():
        st, _, _ = _here()
        with _CREATE:
            gate = st.named.setdefault(int(barrier), threading.Barrier(int(threads)))
        if gate.parties != int(threads):
            raise RuntimeError(f"named barrier {barrier} used with {threads} and {gate.parties} threads")
        try:
            gate.wait(WAIT_LIMIT)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"named barrier {barrier}: {threads} threads never arrived (a deadlock, or a "
                               "thread of the block failed)") from None

    return sync


# --- tensor copies

def tensormap_acquire(maps, mi):
    st, thread, _ = _here()
    with st.cond:
        st.fenced.add((int(thread.thread_id), _address(maps), int(mi)))


def _map(st: _Block, thread, maps, mi, kind: type, rank: int):
    words = _numpy(maps)
    if (int(thread.thread_id), _address(maps), int(mi)) not in st.fenced:
        raise RuntimeError(f"tensor map {int(mi)} used before this thread's tensormap_acquire (a map copied in "
                           "by the host needs fence.proxy.tensormap before the copy engine reads it)")
    record, tensor = tensormap.sim_lookup(words[16 * int(mi):16 * int(mi) + 16])
    if not isinstance(record, kind) or len(record.dims) != rank:
        raise TypeError(f"tensor map {int(mi)} is a rank-{len(record.dims)} {type(record).__name__}, used as a "
                        f"rank-{rank} {kind.__name__}")
    return record, _numpy(tensor)


def _tile_bytes(st: _Block, smem: np.ndarray, addr: int, record) -> np.ndarray:
    """Shared byte addresses of the box's bytes in shared-memory order, after the checks of the doc."""
    size, nbytes = record.itemsize, record.box_bytes
    repeat = max(128, 8 * record.swizzle)
    if addr % repeat or not 0 <= addr <= smem.size - nbytes:
        raise ValueError(f"tensor copy shared address {addr} must start on {repeat} bytes with its {nbytes} "
                         f"bytes inside dynamic shared memory ({smem.size})")
    where = addr + tensormap.swizzled(np.arange(nbytes), record.swizzle)
    for b in st.bars:
        if addr <= b < addr + nbytes:
            raise RuntimeError(f"tensor copy over shared bytes [{addr}, {addr + nbytes}) overwrites the mbarrier "
                               f"at {b}")
    return where.reshape(-1, size)


def _check_reads(where: np.ndarray) -> None:
    kctx, _ = wgmma_sim._context()
    ws = wgmma_sim._state(kctx)
    if ws is None:
        return
    chunks = np.unique(where.reshape(-1) // 16)
    busy = chunks[ws.reads[chunks] > 0]
    if busy.size:
        raise RuntimeError(f"tensor copy into shared bytes [{16 * busy[0]}, {16 * busy[0] + 16}) while a wgmma "
                           "reading them is pending: the stage was refilled before its consumers released it")


def _load(st: _Block, smem: np.ndarray, dst, bar, record, src: np.ndarray, flat, ok) -> None:
    where = _tile_bytes(st, smem, int(dst), record)
    _check_reads(where)
    values = np.where(ok, src[flat], np.zeros(1, src.dtype))
    smem[where] = np.ascontiguousarray(values).view(np.uint8).reshape(where.shape)
    _complete_tx(st, bar, record.box_bytes)


@functools.cache
def tma_load(rank: int):
    def load(maps, mi, dst, bar, *coords):
        st, thread, smem = _here()
        record, src = _map(st, thread, maps, mi, tensormap.TiledMap, rank)
        if len(coords) != rank:
            raise TypeError(f"a rank-{rank} tile copy takes {rank} coordinates, got {len(coords)}")
        _load(st, smem, dst, bar, record, src, *tensormap.tiled_box(record, tuple(int(c) for c in coords)))
    return load


@functools.cache
def tma_load_im2col(rank: int):
    def load(maps, mi, dst, bar, *args):
        st, thread, smem = _here()
        record, src = _map(st, thread, maps, mi, tensormap.Im2colMap, rank)
        if len(args) != 2 * rank - 2:
            raise TypeError(f"a rank-{rank} im2col copy takes {rank} coordinates and {rank - 2} offsets")
        offsets = tuple(int(o) for o in args[rank:])
        if any(not 0 <= o < 2**16 for o in offsets):
            raise ValueError(f"im2col offsets {offsets} are 16-bit unsigned")
        _load(st, smem, dst, bar, record, src,
              *tensormap.im2col_box(record, tuple(int(c) for c in args[:rank]), offsets))
    return load


@functools.cache
def tma_store(rank: int):
    def store(maps, mi, src, *coords):
        st, thread, smem = _here()
        record, dst = _map(st, thread, maps, mi, tensormap.TiledMap, rank)
        flat, ok = tensormap.tiled_box(record, tuple(int(c) for c in coords))
        where = _tile_bytes(st, smem, int(src), record)
        values = np.ascontiguousarray(smem[where]).view(dst.dtype).reshape(-1)
        dst[flat[ok]] = values[ok]
    return store


def bulk_commit():
    pass


def _bulk_wait(n: int):
    if not 0 <= int(n) <= 7:
        raise ValueError(f"cp.async.bulk.wait_group takes 0..7, got {n}")

    def wait():  # the stand-in's stores are done at issue
        pass

    return wait


bulk_wait_read = functools.cache(_bulk_wait)
bulk_wait = functools.cache(_bulk_wait)
