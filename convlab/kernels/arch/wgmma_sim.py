"""Simulator stand-ins for the warpgroup intrinsics of :mod:`convlab.kernels.arch.wgmma`, with the PTX ISA's
per-thread semantics, and a checker of the asynchronous ordering rules that only a GPU would otherwise
break.

``wgmma_async``: each thread decodes the two descriptors (:func:`convlab.kernels.arch.wgmma_desc.addresses`:
start address, SBO, LBO, swizzle mode, the XOR on shared byte addresses) and reads the rows its own
accumulator fragment needs from the block's dynamic shared memory as raw bytes (fp16, bf16 bits, or
fp32 bits truncated to TF32 as the ISA says wgmma does), then returns D = A @ B (+ acc when scale_d)
in the ISA's accumulator layout: thread t of the warpgroup (warp w = t // 32, lane l = 4g + q) holds
d[4j + 2h + u] = D[16w + g + 8h, 8j + 2q + u] (PTX ISA 9.7.15.5.1.1 "Register Fragments", Figure 149;
CUTLASS ``cute/atom/mma_traits_sm90_gmma.hpp``, ``CLayout_64xN``). Products are exact (float64), the
sum rounded once to float32. No thread reads another's registers, so unlike :mod:`mma_sim` these need
no staging buffer and no barrier; the GPU still needs all 128 threads of the warpgroup converged.

Ordering checks (per launch state on the simulator's shared-memory object, reset at each block): the
kernel's first ``shared_addr`` switches them on (every wgmma kernel calls it first, for its
descriptors), so mma.sync kernels pay nothing.
- A ``cp.async`` chunk is *dirty* from its copy until its thread has waited for its group
  (``cp.async.wait_group``) and then issued ``fence.proxy.async``: a wgmma reading a dirty chunk raises
  (the async proxy would not see the copy: ISA 9.7.15.4 "Async Proxy", 9.7.15.7.1 ``wgmma.fence``).
- The chunks a warpgroup's wgmma reads stay *in flight* from its issue until ``wgmma.wait_group``
  retires its group in the issuing warpgroup: a ``cp.async`` into one raises (a write racing the
  tensor cores' asynchronous read: the stage-reuse invariant of :mod:`convlab.kernels.tensor_core.warpgroup`).
The barrier between a writer's fence and the reader's wgmma is not checked; plain shared-memory
stores (the probes') are not tracked: they still need the fence on a GPU.

Plain functions (not device functions): they reach the launch through the simulator's kernel context
and the current thread (``numba.cuda.simulator.kernel._get_kernel_context``, through
:func:`convlab.runtime.device.simulator_kernel_context`; the ``BlockThread``), which numba-cuda 0.30 keeps
private. Not for the GPU: :mod:`convlab.kernels.arch.wgmma` exports these on the
simulator only.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from convlab.kernels.arch.wgmma_desc import addresses, mn_addresses

_ATTR = "_convlab_async_state"
_CREATE = threading.Lock()
_BYTE = np.dtype(np.uint8)


def _context():
    """The running launch's context and the calling ``BlockThread``. A thread of an aborted launch stops
    here: the simulator does not join a raising block's other threads, and the next launch's context is
    global, so such a thread would otherwise record its copies and reads in that launch's state."""
    from convlab.runtime import device  # the one importer of numba.cuda

    thread = threading.current_thread()
    if getattr(thread, "abort", False):
        raise RuntimeError("a thread of an aborted simulated launch stopped at its next warpgroup intrinsic")
    return device.simulator_kernel_context(), thread


class _Thread:
    __slots__ = ("cp_open", "cp_groups", "landed", "wg_open", "wg_groups")

    def __init__(self) -> None:
        self.cp_open, self.cp_groups, self.landed = [], [], []  # cp.async chunks: uncommitted, groups, waited
        self.wg_open, self.wg_groups = [], []  # in-flight wgmma chunk sets: uncommitted, groups


class _State:
    """One launch's async bookkeeping over its dynamic shared memory, in 16-byte chunks."""

    def __init__(self, buf: np.ndarray, block) -> None:
        self.lock = threading.Lock()
        self.block = block
        self.base = buf.__array_interface__["data"][0]
        self.size = buf.nbytes
        self.reads = np.zeros(-(-buf.nbytes // 16) + 1, np.int32)
        self.dirty = np.zeros(len(self.reads), np.bool_)
        self.threads: dict[int, _Thread] = {}

    def thread(self, tid: int) -> _Thread:
        t = self.threads.get(tid)
        if t is None:
            t = self.threads[tid] = _Thread()
        return t

    def chunk(self, arr: np.ndarray, byte_off: int) -> int | None:
        """The dynamic-shared chunk of byte ``byte_off`` of ``arr`` (None when arr is not in it)."""
        rel = arr.__array_interface__["data"][0] - self.base + byte_off
        return rel // 16 if 0 <= rel < self.size else None


def _state(kctx=None):
    kctx = kctx or _context()[0]
    return getattr(kctx.shared, _ATTR, None)


def _tid(thread) -> int:
    return int(thread.thread_id)


# --- the cp.async hooks (called by mma_sim's cp_async16 / commit / wait)

def note_copy(sarr: np.ndarray, byte_off: int) -> None:
    kctx, thread = _context()
    st = _state(kctx)
    if st is None:
        return
    c = st.chunk(sarr, byte_off)
    if c is None:
        return
    if st.reads[c]:
        raise RuntimeError(f"cp.async into shared bytes [{16 * c}, {16 * c + 16}) while a wgmma reading them "
                           "is pending (its warpgroup has not retired it with wgmma.wait_group)")
    st.dirty[c] = True
    st.thread(_tid(thread)).cp_open.append(c)


def _commit(kind: str) -> None:
    """This thread's uncommitted ``kind`` entries ("cp": cp.async chunks, "wg": wgmma chunk sets) become
    its newest group of that kind."""
    kctx, thread = _context()
    st = _state(kctx)
    if st is not None:
        t = st.thread(_tid(thread))
        getattr(t, f"{kind}_groups").append(getattr(t, f"{kind}_open"))
        setattr(t, f"{kind}_open", [])


def note_commit() -> None:
    _commit("cp")


def note_wait(n: int) -> None:
    kctx, thread = _context()
    st = _state(kctx)
    if st is not None:
        t = st.thread(_tid(thread))
        while len(t.cp_groups) > n:
            t.landed.extend(t.cp_groups.pop(0))


# --- the intrinsics

def shared_addr(arr, off):
    """Byte offset of element ``off`` of ``arr`` in the block's dynamic shared memory (its shared
    address: the simulator's dynamic shared memory starts at 0, aligned for every swizzle)."""
    kctx, thread = _context()
    buf = kctx.shared.array(0, _BYTE)
    block = tuple(thread.blockIdx)
    with _CREATE:
        st = getattr(kctx.shared, _ATTR, None)
        if st is None or st.block != block:
            setattr(kctx.shared, _ATTR, _State(buf, block))
    rel = arr.__array_interface__["data"][0] - buf.__array_interface__["data"][0]
    if not 0 <= rel < max(buf.nbytes, 1):
        raise ValueError("shared_addr: not a dynamic shared array (the simulated wgmma reads dynamic shared "
                         "memory only)")
    return np.uint32(rel + int(off) * arr.itemsize)


def fence_proxy_async():
    kctx, thread = _context()
    st = _state(kctx)
    if st is not None:
        t = st.thread(_tid(thread))
        if t.landed:
            st.dirty[np.asarray(t.landed, np.int64)] = False
            t.landed = []


def wgmma_fence(acc):
    return acc


def wgmma_commit():
    _commit("wg")


@functools.cache
def wgmma_wait(n: int):
    """The stand-in for ``wgmma.wait_group n``: retires all but the n most recent groups (the reads are
    done at issue, so the accumulators pass through)."""
    if not 0 <= int(n) <= 7:
        raise ValueError(f"wgmma_wait n must be in 0..7, got {n!r}")

    def wait(acc):
        kctx, thread = _context()
        st = _state(kctx)
        if st is not None:
            t = st.thread(_tid(thread))
            while len(t.wg_groups) > n:
                for chunks in t.wg_groups.pop(0):
                    with st.lock:
                        np.subtract.at(st.reads, chunks, 1)
        return acc

    return wait


def _values(buf: np.ndarray, addr: np.ndarray, itype: str) -> np.ndarray:
    """float64 elements [rows, 32 bytes / element size] of the bytes at ``addr`` [rows, 32]."""
    if addr.max() >= buf.size or addr.min() < 0:
        raise IndexError(f"wgmma operand bytes [{addr.min()}, {addr.max()}] outside dynamic shared memory "
                         f"({buf.size} bytes)")
    raw = np.ascontiguousarray(buf[addr])
    if itype == "f16":
        return raw.view(np.float16).astype(np.float64)
    if itype == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return (raw.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _track(st: _State, tid: int, reads: tuple) -> None:
    """The warpgroup leader's bookkeeping of one wgmma (``reads``: the byte addresses of each operand):
    every chunk it reads must be clean, and stays in flight until retired."""
    chunks = np.unique(np.concatenate([(a // 16).ravel() for a in reads]))
    if st.dirty[chunks].any():
        bad = int(chunks[st.dirty[chunks]][0])
        raise RuntimeError(f"wgmma reads shared bytes [{16 * bad}, {16 * bad + 16}) written by cp.async that "
                           "its thread has not waited for and fenced (cp.async.wait_group, then "
                           "fence.proxy.async, then a barrier)")
    with st.lock:
        np.add.at(st.reads, chunks, 1)
    st.thread(tid).wg_open.append(chunks)


def _operand(desc: int, rows: np.ndarray, trans: int) -> np.ndarray:
    """Byte addresses [rows, 32] of the k-step's elements of operand rows (M or N) ``rows``: K-major, or
    MN-major when ``trans`` (wgmma_desc.mn_addresses)."""
    return mn_addresses(desc, rows) if trans else addresses(desc, rows)


@functools.cache
def wgmma_async(itype: str, n: int, trans_a: int = 0, trans_b: int = 0):
    """The stand-in ``mma(desc_a, desc_b, scale_d, acc) -> acc`` of m64n{n}k{16|8} (see module doc);
    ``trans_a`` / ``trans_b``: the operand is MN-major (imm-trans 1: f16 / bf16 only)."""
    if itype not in ("f16", "bf16", "tf32") or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma is f16 / bf16 / tf32 with N a multiple of 8 in 8..256, got {itype}, {n}")
    if (trans_a or trans_b) and itype == "tf32":
        raise ValueError("wgmma reads tf32 operands K-major only (imm-trans is for f16 / bf16)")
    j = np.arange(n // 8)

    def mma(desc_a, desc_b, scale_d, acc):
        kctx, thread = _context()
        buf = kctx.shared.array(0, _BYTE)
        tid = _tid(thread)
        t = tid % 128
        w, g, q = t // 32, (t % 32) // 4, t % 4
        rows_b = (8 * j[:, None] + 2 * q + np.arange(2)[None, :]).ravel()  # B^T rows n = 8j + 2q + u
        st = _state(kctx)
        if st is not None and t == 0:
            _track(st, tid, (_operand(int(desc_a), np.arange(64), trans_a), _operand(int(desc_b), np.arange(n), trans_b)))
        A = _values(buf, _operand(int(desc_a), np.array([16 * w + g, 16 * w + g + 8]), trans_a), itype)
        B = _values(buf, _operand(int(desc_b), rows_b, trans_b), itype)
        D = (A @ B.T).reshape(2, n // 8, 2).transpose(1, 0, 2).reshape(-1)  # d[4j + 2h + u] = D[h, 2j + u]
        if scale_d:
            D = D + np.asarray(acc, np.float64)
        return tuple(D.astype(np.float32))

    return mma
