"""Intrinsic-like device helpers shared by every kernel family, with simulator stand-ins.

    u32(x)             the cast that keeps index arithmetic 32-bit unsigned (numba widens integer
                       results to 64 bits otherwise); also makes compile-time uint32 constants
    vector_load(n)     ``load(arr, i) -> (arr[i], ..., arr[i + n - 1])`` as one vector load
                       (``ld.shared.v4.f32`` for n = 4 fp32), n = 2, 4 or 8 (at most 16 bytes)
    store_vector(arr, i, values)  arr[i:i + n] = values (a tuple of n numbers, each cast to arr's
                       dtype) as one vector store of n * itemsize (at most 16) bytes, element i aligned
                       to them (``st.v4.b32`` for 8 fp16)
    load_cg(arr, i)    arr[i] read through L2 only (``ld.global.cg``): data written by other blocks
    copy16(dst, di, src, si)   16 bytes from src[si:] to dst[di:] as one vector load and one vector
                       store (``ld.v4.u32`` / ``st.v4.u32``; e.g. a staged epilogue tile in shared memory
                       to global memory): 1-D arrays of one item size, both element offsets 16-byte
                       aligned
    SHARED_ALIGN       the ``alignment=`` of shared arrays read with vector loads (None on the
                       simulator, which rejects the argument)

On the simulator each is a plain Python function.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from convlab import runtime
from convlab.runtime import cuda

u32 = np.uint32
SHARED_ALIGN = None if runtime.SIMULATOR else 16  # the simulator rejects alignment=


def _element_pointer(context, builder, aryty, idxty, ary_value, idx_value, vec_t):
    """The address of element ``idx_value`` of the 1-D array ``ary_value`` as a pointer to ``vec_t`` (the
    index widened to 64 bits by its signedness), for the codegen of the intrinsics below."""
    from llvmlite import ir

    ary = context.make_array(aryty)(context, builder, ary_value)
    if idx_value.type.width < 64:
        idx_value = (builder.sext if idxty.signed else builder.zext)(idx_value, ir.IntType(64))
    ptr = builder.gep(ary.data, [idx_value])
    return builder.bitcast(ptr, vec_t.as_pointer(ptr.type.addrspace))


@functools.cache
def vector_load(width: int) -> Callable:
    """``load(arr, i) -> (arr[i], ..., arr[i + width - 1])`` as one vector load, ``width`` 2, 4 or 8.

    The caller guarantees that element i of the 1-D array is ``min(16, width * itemsize)``-byte
    aligned (16 bytes for 4 fp32 or 8 fp16; fp64 loads split into 16-byte halves). A plain Python
    function on the simulator.
    """
    if width not in (2, 4, 8):
        raise ValueError(f"vector loads are 2, 4 or 8 wide, got {width}")
    if runtime.SIMULATOR:  # the stand-in: a plain Python function
        def load(arr, i):
            return tuple(arr[i + u] for u in range(width))
        return load
    from llvmlite import ir
    from numba import types

    @cuda.extending.intrinsic
    def load(typingctx, arr, index):
        if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(index, types.Integer):
            return None
        sig = types.UniTuple(arr.dtype, width)(arr, index)

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args
            vec_t = ir.VectorType(context.get_value_type(aryty.dtype), width)
            vec = builder.load(_element_pointer(context, builder, aryty, idxty, *args, vec_t),
                               align=min(16, width * aryty.dtype.bitwidth // 8))
            items = [builder.extract_element(vec, ir.Constant(ir.IntType(32), u)) for u in range(width)]
            return context.make_tuple(builder, signature.return_type, items)

        return sig, codegen

    return load


def _make_copy16() -> Callable:
    if runtime.SIMULATOR:  # the stand-in: a plain Python function
        def copy16(dst, di, src, si):  # the bits, as the GPU's vector copy (uint16 into int16 too)
            for u in range(16 // src.dtype.itemsize):
                dst[di + u] = np.asarray(src[si + u]).view(dst.dtype)
        return copy16
    from llvmlite import ir
    from numba import types

    @cuda.extending.intrinsic
    def copy16(typingctx, dst, di, src, si):
        if not all(isinstance(a, types.Array) and a.ndim == 1 for a in (dst, src)) \
                or dst.dtype.bitwidth != src.dtype.bitwidth or not all(isinstance(i, types.Integer) for i in (di, si)):
            return None
        sig = types.void(dst, di, src, si)

        def codegen(context, builder, signature, args):
            vec_t = ir.VectorType(ir.IntType(32), 4)
            dst, src = (_element_pointer(context, builder, *signature.args[i:i + 2], *args[i:i + 2], vec_t)
                        for i in (0, 2))
            builder.store(builder.load(src, align=16), dst, align=16)
            return context.get_dummy_value()

        return sig, codegen

    return copy16


copy16 = _make_copy16()


def _make_store_vector() -> Callable:
    if runtime.SIMULATOR:  # the stand-in: a plain Python function
        def store_vector(arr, i, values):
            n = len(values)
            if i % n:  # the GPU's st.v needs n * itemsize aligned bytes (the base: the caller's is_aligned)
                raise ValueError(f"store_vector of {n} at element {i}: not {n * arr.dtype.itemsize}-byte aligned")
            for u, v in enumerate(values):
                arr[i + u] = v
        return store_vector
    from llvmlite import ir
    from numba import types

    @cuda.extending.intrinsic
    def store_vector(typingctx, arr, index, values):
        if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(index, types.Integer) \
                or not isinstance(values, types.BaseTuple) or len(values) * arr.dtype.bitwidth > 128 \
                or not all(isinstance(t, (types.Integer, types.Float)) for t in values):
            return None
        sig = types.void(arr, index, values)

        def codegen(context, builder, signature, args):
            aryty, idxty, valty = signature.args
            vec_t = ir.VectorType(context.get_value_type(aryty.dtype), len(valty))
            vec = ir.Constant(vec_t, ir.Undefined)
            for u, t in enumerate(valty):
                item = context.cast(builder, builder.extract_value(args[2], u), t, aryty.dtype)
                vec = builder.insert_element(vec, item, ir.Constant(ir.IntType(32), u))
            builder.store(vec, _element_pointer(context, builder, aryty, idxty, *args[:2], vec_t),
                          align=len(valty) * aryty.dtype.bitwidth // 8)
            return context.get_dummy_value()

        return sig, codegen

    return store_vector


store_vector = _make_store_vector()

if runtime.SIMULATOR:  # the stand-in: a plain Python function
    def load_cg(arr, i):
        """arr[i] read from L2 (the simulator has no caches)."""
        return arr[i]
else:
    load_cg = cuda.ldcg
