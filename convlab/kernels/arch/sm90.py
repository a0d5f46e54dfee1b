"""Hopper's asynchronous machinery (sm_90 / sm_90a) as intrinsics: the Tensor Memory Accelerator's copies,
mbarriers, register reallocation, named barriers and their fences.

On a GPU these are the inline-PTX intrinsics of :mod:`convlab.kernels.arch.sm90_ptx`; on the simulator
the stand-ins of :mod:`convlab.kernels.arch.sm90_sim`, which give each the PTX ISA's semantics and check
the rules a GPU would only break silently. Shared-memory operands are 32-bit shared addresses (``bar``,
``dst``, ``src``: :func:`convlab.kernels.arch.wgmma.shared_addr` of the kernel's dynamic shared array
plus byte offsets); ``maps`` is a 1-D uint64 device array of 128-byte tensor maps
(:mod:`convlab.kernels.arch.tensormap`), ``mi`` the index of one of them.

Tensor copies (cp.async.bulk.tensor; one thread issues each):

    load = tma_load(rank)         load(maps, mi, dst, bar, c0, .., c{rank-1})
        ``.tile`` global -> shared: the map's box at coordinates c (innermost first, int32, may lie
        outside the tensor: zeros there) into shared memory at ``dst`` (the box's rows packed, then the
        map's swizzle), completing its byte count on the mbarrier at ``bar`` (complete_tx)
    load = tma_load_im2col(rank)  load(maps, mi, dst, bar, c0, .., c{rank-1}, o0, .., o{rank-3})
        ``.im2col``: the im2col map's ``pixels`` x ``channels`` box starting at box position c with
        filter offsets o (uint16, innermost first; tensormap's module doc has the traversal)
    store = tma_store(rank)       store(maps, mi, src, c0, ..): shared -> global, ``.bulk_group``
                                  completion; elements outside the tensor are not written
    bulk_commit()                 cp.async.bulk.commit_group: this thread's stores so far -> a group
    bulk_wait_read(n), bulk_wait(n)   factories of cp.async.bulk.wait_group.read n / wait_group n: at
                                  most n groups still reading their shared source / still writing
    tensormap_acquire(maps, mi)   fence.proxy.tensormap::generic.acquire.sys [map], 128: a map written
                                  by a host copy (generic proxy) is then safe for this thread's copies;
                                  once per thread before its first copy through the map

mbarriers (64-bit, 8-byte aligned, in shared memory; a phase completes when its pending arrivals and
its transaction count both reach 0, then the next phase starts with ``count`` arrivals pending):

    mbar_init(bar, count)         mbarrier.init.shared::cta.b64 (one thread), then
    fence_mbarrier_init()         fence.mbarrier_init.release.cluster and a block barrier before use
    mbar_arrive(bar)              mbarrier.arrive: one arrival
    mbar_arrive_tx(bar, nbytes)   mbarrier.arrive.expect_tx: ``nbytes`` more expected, one arrival
    mbar_wait(bar, parity)        loops on mbarrier.try_wait.parity until the phase of that parity has
                                  completed: a fresh barrier's parity-1 wait returns at once (the
                                  "preceding" phase), its parity-0 wait when phase 0 completes
    mbar_try_wait(bar, parity) -> uint32   one try (1: completed)

Warp specialization:

    setmaxnreg_inc(n), setmaxnreg_dec(n)   factories of setmaxnreg.{inc,dec}.sync.aligned.u32 n (24..256,
                                  multiples of 8; every thread of a warpgroup together; takes effect
                                  only in a kernel whose registers are capped at entry: launch bounds)
    named_sync(barrier, threads)  factory of ``bar.sync barrier, threads`` (1..15; threads a multiple of
                                  32): the named barrier a subset of the block's warps meets at

A tensor copy into shared memory lands through the async proxy: the mbarrier wait makes it visible to
the waiting thread and to wgmma (no proxy fence needed); shared memory written by ordinary stores that a
tensor store then reads needs ``fence_proxy_async`` (:mod:`convlab.kernels.arch.wgmma`) in each writing
thread before the barrier that orders it with the storing thread.
"""
from __future__ import annotations

from convlab import runtime

__all__ = ["tma_load", "tma_load_im2col", "tma_store", "bulk_commit", "bulk_wait_read", "bulk_wait",
           "tensormap_acquire", "mbar_init", "fence_mbarrier_init", "mbar_arrive", "mbar_arrive_tx", "mbar_wait",
           "mbar_try_wait", "setmaxnreg_inc", "setmaxnreg_dec", "named_sync"]

if runtime.SIMULATOR:
    from convlab.kernels.arch.sm90_sim import (bulk_commit, bulk_wait, bulk_wait_read, fence_mbarrier_init,
                                               mbar_arrive, mbar_arrive_tx, mbar_init, mbar_try_wait, mbar_wait,
                                               named_sync, setmaxnreg_dec, setmaxnreg_inc, tensormap_acquire,
                                               tma_load, tma_load_im2col, tma_store)
else:
    from convlab.kernels.arch.sm90_ptx import (bulk_commit, bulk_wait, bulk_wait_read, fence_mbarrier_init,
                                               mbar_arrive, mbar_arrive_tx, mbar_init, mbar_try_wait, mbar_wait,
                                               named_sync, setmaxnreg_dec, setmaxnreg_inc, tensormap_acquire,
                                               tma_load, tma_load_im2col, tma_store)
