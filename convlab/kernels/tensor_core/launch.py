"""Compiling and launching the kernels :mod:`convlab.kernels.tensor_core.warp` generates: the namespace of
intrinsics they name, the register cap, and the launch configuration (grid over output tiles, the
dynamic shared memory, raised past 48 KiB through the driver where a kernel needs it)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numba.np.numpy_support import from_dtype as numba_from_dtype

from convlab import runtime
from convlab.kernels.arch import mma
from convlab.kernels.arch.intrinsics import copy16
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import compile_source
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.epilogue import STATIC_LIMIT, dynamic_bytes
from convlab.runtime import cuda


def compile_kernel(source: str, name: str, filename: str, cfg: TcConfig, itype: str,
                   extra: dict[str, Any] | None = None) -> Callable:
    """Compile a :func:`pipeline_source` kernel with the intrinsics and constants it names (a wgmma
    config's too: :func:`convlab.kernels.tensor_core.warpgroup.namespace`)."""
    if cfg.wgmma:
        from convlab.kernels.tensor_core import warpgroup as tc_wgmma
        extra = {**tc_wgmma.namespace(cfg, itype), **(extra or {})}
    namespace = {"cuda": cuda, "U": U, "zero": np.float32(0), "f32": np.float32,
                 "stype": numba_from_dtype(np.dtype(ITYPES[itype][0])),
                 "align": None if runtime.SIMULATOR else 16,  # the simulator rejects alignment=
                 "c_float32": numba_from_dtype(np.dtype(np.float32)),
                 "c_float16": numba_from_dtype(np.dtype(np.float16)),
                 "c_uint16": numba_from_dtype(np.dtype(np.uint16)), "copy16": copy16,
                 "c_uint32": numba_from_dtype(np.dtype(np.uint32)),
                 "mma": {"f16": mma.mma_f16, "bf16": mma.mma_bf16, "tf32": mma.mma_tf32,
                         "tf32x3": mma.mma_tf32}[itype],
                 "split_tf32": mma.split_tf32, "mma_tf32x3": mma.mma_tf32x3,
                 "ldmatrix_x4": mma.ldmatrix_x4, "ldmatrix_x4_trans": mma.ldmatrix_x4_trans,
                 "to_tf32": mma.to_tf32, "f32_to_bf16": mma.f32_to_bf16,
                 "bf16_to_f32": mma.bf16_to_f32,
                 "cp_async16": mma.cp_async16, "cp_async_commit": mma.cp_async_commit,
                 "wait": mma.cp_async_wait(cfg.STAGES - 2), "wait_all": mma.cp_async_wait(0),
                 **(extra or {})}
    regs = {"max_registers": cfg.REGS} if cfg.REGS else {}
    return runtime.jit(fastmath=False, **regs)(compile_source(source, filename, namespace)[name])


def configure(kernel: Callable, cfg: TcConfig, itype: str, args: tuple, m: int, n: int,
              batch: int = 1, *, out_dtype: Any, contig: str) -> Callable:
    """``kernel[grid, block, None, dynamic shared]`` for ``batch`` M x N outputs (grid z: a batched
    loader's ``bz``) of ``out_dtype`` (its store ``contig``-major), raising the kernel's dynamic
    shared-memory limit first when it needs more than 48 KiB. Stream None: the launch runs on the
    ambient stream (the call's: convlab.runtime.launch), as every other plugin launch."""
    dyn = dynamic_bytes(cfg, itype, out_dtype, contig)
    if dyn > STATIC_LIMIT:
        _allow_dynamic_shared(kernel, args, dyn)
    tiles = ((n + cfg.BN - 1) // cfg.BN) * ((m + cfg.BM - 1) // cfg.BM)
    if tiles >= 2**31 or batch > 65535:
        raise ValueError(f"{m} x {n} outputs in {cfg.BM} x {cfg.BN} tiles ({tiles}) and batch {batch} exceed "
                         "the grid's limits (2**31 - 1 blocks along x, 65535 along z)")
    return kernel[(tiles, 1, batch), cfg.threads, None, dyn]


def _allow_dynamic_shared(kernel: Any, args: tuple, nbytes: int) -> None:
    """Compile ``kernel`` for ``args`` and let it use ``nbytes`` of dynamic shared memory (over 48 KiB
    needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on the function: numba-cuda#94)."""
    if runtime.MODE != "gpu":  # a driver attribute: nothing to set on the simulator or when compiling only
        return
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    cufunc = compiled.library.get_cufunc()
    drv = cuda.cudadrv.driver
    attr = drv.binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    drv.driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)
