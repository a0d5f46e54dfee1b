"""The Hopper implicit-GEMM convolution kernel: warp-specialized, persistent, fed by the copy engine.

    kernel(maps, bias, N, KT, CB, TILES_M, TILES_N, UNITS, PER_SPLIT, GROUP, PIX, <per axis: O, ST, PD, KS, DL>)
        maps: uint64[16 x 3] the A (im2col of x), B (filter) and C (output) tensor maps (geometry.py)
        grid: the schedule's CTAs (persistent), block: CONSUMERS warpgroups + the producer

    init the ring's mbarriers (thread 0); __syncthreads
    if a producer warp:  setmaxnreg.dec;  thread 0 of them: the producer loop      (mainloop.py)
    else:                setmaxnreg.inc;  the consumer loop with the epilogue       (mainloop.py, epilogue.py)

The forward form (geometry.py) per k tile kt: tap = kt // CB, channel block cb = kt % CB; A = the im2col
box at the unit's first output pixel with the tap's filter offsets, channels cb * BK..; B = the filter's
box (cb * BK.., the tap, n0..). Axis 0 is W (innermost), 1 H, 2 D. Kernels are cached per (config, input
type, spatial dims, output kind, bias, split) and take every size as an argument.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
from numba.np.numpy_support import from_dtype as numba_from_dtype

from convlab import runtime
from convlab.kernels.arch import mma, sm90, wgmma
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.hopper import schedule
from convlab.kernels.hopper.config import CONSUMER_REGS, PRODUCER_REGS, HopperConfig
from convlab.kernels.hopper.epilogue import Out, epilogue
from convlab.kernels.hopper.kinds import KINDS
from convlab.kernels.hopper.mainloop import consumer, init_barriers, producer
from convlab.kernels.resources import declare_registers
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import cuda, kernel_cache
from convlab.runtime.driver import driver_function

ALIGN = None if runtime.SIMULATOR else 1024  # the 128-byte swizzle's repeat (the simulator rejects alignment=)
CTYPES = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}


def params(nd: int) -> str:
    axes = ", ".join(f"O{a}, ST{a}, PD{a}, KS{a}, DL{a}" for a in range(nd))
    return f"maps, bias, N, KT, CB, TILES_M, TILES_N, UNITS, PER_SPLIT, GROUP, PIX, {axes}"


def conv_source(cfg: HopperConfig, itype: str, nd: int, out: Out, kind: str = "fprop") -> str:
    """The kernel's source (module doc) of one operand plan (kinds.py)."""
    loads = KINDS[kind](cfg, itype, nd)
    lay = cfg.layout(itype, out.size)
    sim = runtime.target().simulator
    cwarps = 4 * cfg.CONSUMERS
    w = Writer(f"def conv({params(nd)}):")
    w.indent()
    w("sm = cuda.shared.array(0, c_uint8, alignment=align)")
    w("ct = cuda.shared.array(0, ctype)  # the same bytes in the output's element type (the C tile)")
    w("base = shared_addr(sm, 0)")
    w("tid = U(cuda.threadIdx.x)")
    w("warp = U(tid // 32)")
    w("lane = U(tid % 32)")
    init_barriers(w, cfg, lay)
    with w.block(f"if warp >= {cwarps}:  # the producer warpgroup" + (" (one warp on the simulator)" if sim else "")):
        w("producer_regs()")
        with w.block(f"if tid == {128 * cfg.CONSUMERS}:"):
            producer(w, cfg, itype, lay, loads)
    with w.block("else:  # the consumer warpgroups"):
        w("consumer_regs()")
        with w.block("if tid == 0:"):
            w(f"tensormap_acquire(maps, {out.mi})")
        consumer(w, cfg, itype, lay, loads,
                 lambda w: epilogue(w, cfg, out, lay, lambda p, eb: loads.store_coords(p, eb, out.split)))
        with w.block("if tid == 0:"):
            w("wait0()  # the last stores done before the CTA's shared memory goes")
    return w.source


def _namespace(cfg: HopperConfig, itype: str, nd: int, out: Out, kind: str) -> dict[str, Any]:
    nb = numba_from_dtype
    loads = KINDS[kind](cfg, itype, nd)
    tile, im2col = sm90.tma_load(2 if kind == "wgrad" else nd + 2), sm90.tma_load_im2col(nd + 2)
    trans = int(kind == "wgrad")
    return {"cuda": cuda, "U": U, "I": np.int32, "U64": np.uint64, "f32": np.float32, "min": min,
            "c_uint8": nb(np.dtype(np.uint8)), "ctype": nb(np.dtype(CTYPES[out.kind])), "align": ALIGN,
            "shared_addr": wgmma.shared_addr, "mbar_init": sm90.mbar_init, "mbar_wait": sm90.mbar_wait,
            "mbar_arrive": sm90.mbar_arrive, "mbar_arrive_tx": sm90.mbar_arrive_tx,
            "fence_mbarrier_init": sm90.fence_mbarrier_init, "tensormap_acquire": sm90.tensormap_acquire,
            "load_a": tile if trans else im2col, "load_b": im2col if trans else tile,
            "store_c": sm90.tma_store(loads.store_rank + out.split), "bulk_commit": sm90.bulk_commit,
            "wait_read0": sm90.bulk_wait_read(0), "wait0": sm90.bulk_wait(0),
            "producer_regs": sm90.setmaxnreg_dec(PRODUCER_REGS),
            "consumer_regs": sm90.setmaxnreg_inc(CONSUMER_REGS[cfg.CONSUMERS]),
            "csync": sm90.named_sync(1, 128 * cfg.CONSUMERS), "unit_of": schedule.unit_of_device,
            "ZEROS": (np.float32(0),) * (cfg.BN // 2), **{k: np.uint64(v) for k, v in loads.dhi.items()},
            "mma": wgmma.wgmma_async(itype, cfg.BN, trans, trans), "wgmma_fence": wgmma.wgmma_fence,
            "wgmma_commit": wgmma.wgmma_commit, "wgmma_wait1": wgmma.wgmma_wait(1),
            "wgmma_wait0": wgmma.wgmma_wait(0), "fence_proxy_async": wgmma.fence_proxy_async,
            "f32_to_bf16": mma.f32_to_bf16, "bf16_to_f32": mma.bf16_to_f32}


@functools.cache
def conv_kernel(cfg: HopperConfig, itype: str, nd: int, out: Out, kind: str = "fprop") -> Callable:
    """The compiled kernel of one operand plan (kinds.py; cached); ValueError when the config breaks a
    limit."""
    why = cfg.reason(itype, out.size, kind)
    if why:
        raise ValueError(why)
    src = conv_source(cfg, itype, nd, out, kind)
    name = f"<convlab.kernels.hopper.kernel {kind} {itype} {cfg.name} {nd}d {out.kind}" + \
        (" bias" if out.bias else "") + (" split" if out.split else "") + ">"
    fn = compile_source(src, name, _namespace(cfg, itype, nd, out, kind))["conv"]
    sim = runtime.target().simulator
    kernel = runtime.jit(fastmath=False, launch_bounds=(cfg.threads(sim), 1))(fn)
    budgets = ((32 * cfg.producer_warps(sim), PRODUCER_REGS), (128 * cfg.CONSUMERS, CONSUMER_REGS[cfg.CONSUMERS]))
    return declare_registers(kernel, budgets)


def launch(kernel: Callable, cfg: HopperConfig, itype: str, out: Out, ctas: int, args: tuple) -> None:
    """``kernel[ctas, threads, None, shared](*args)``, the kernel's dynamic shared-memory limit raised
    past 48 KiB through the driver first on a GPU (numba-cuda#94): on the function the launch will use,
    the disk cache's (convlab.runtime.kernel_cache) when it is on, else Numba's."""
    shared = cfg.layout(itype, out.size)["total"]
    if runtime.MODE == "gpu" and shared > 48 * 1024:
        _allow_shared(kernel, args, shared)
    kernel[ctas, cfg.threads(runtime.target().simulator), None, shared](*args)


def _allow_shared(kernel: Any, args: tuple, nbytes: int) -> None:
    from cuda.bindings import driver as drv

    attribute = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    found = kernel_cache.compiled(kernel.dispatcher, tuple(args)) if kernel_cache.enabled() else None
    if found is None:  # Numba's own launch
        cufunc = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args)).library.get_cufunc()
        handle, device = cufunc.handle, cufunc.device.id
    else:
        handle, device = found.handle, cuda.get_current_device().id
    function = driver_function(handle)
    if isinstance(function, drv.CUkernel):
        drv.cuKernelSetAttribute(attribute, int(nbytes), function, device)
    else:
        drv.cuFuncSetAttribute(function, attribute, int(nbytes))


def out_kind(itype: str, dtype: Any) -> str:
    """The epilogue's output kind for a ``dtype`` output of ``itype`` inputs."""
    name = np.dtype(dtype).name
    kind = {"float16": "f16", "uint16": "bf16", "int16": "bf16", "float32": "f32"}.get(name)
    if kind is None or (kind != "f32" and {"f16": "f16", "bf16": "bf16"}.get(itype) != kind):
        raise ValueError(f"{itype} inputs write float32 or their own type, not {name}")
    return kind


__all__ = ["conv_kernel", "conv_source", "launch", "out_kind"]
