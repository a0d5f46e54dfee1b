"""The GPU definitions of the warpgroup intrinsics of :mod:`convlab.kernels.arch.wgmma`: inline PTX (sm_90a).

Each name is a ``cuda.extending.intrinsic`` (``convlab.runtime.intrinsic``) emitting one llvmlite
``ir.InlineAsm`` (the helpers are :mod:`convlab.kernels.arch.mma_ptx`'s); the semantics, operand rules and
the descriptor layout are in :mod:`convlab.kernels.arch.wgmma`'s docstring. Every asm here has side effects and clobbers memory, so LLVM
keeps them in program order among themselves and around ``cp.async`` / barriers. The accumulators go
in and out of ``wgmma.mma_async``, ``wgmma.fence`` and ``wgmma.wait_group`` as tied registers ("=f"
outputs tied to their inputs, the "+f" of CUDA C++): no accumulator use can move across the wait, and
the values keep one register each through the pipeline (what ptxas needs to keep the wgmma pipeline
unserialised: warnings C7510 / C7515, /work/shared/NUMBA_NOTES.md).

On the simulator, which has no ``cuda.extending``, the module imports and each name raises when called
(``convlab.runtime.intrinsic``): kernels there call the stand-ins, and :mod:`convlab.kernels.arch.wgmma`
imports this module only on a GPU and when compiling only.
"""
from __future__ import annotations

import functools

from llvmlite import ir
from numba import types

from convlab.kernels.arch.mma_ptx import (_F32, _I64, _as_i32, _as_int, _asm, _shared_address, _shared_operand,
                                          pending_groups, statement)
from convlab.runtime import intrinsic

#: (PTX type, k of one instruction) of each input type
SHAPE_K = {"f16": ("f16", 16), "bf16": ("bf16", 16), "tf32": ("tf32", 8)}


def _as_i64(builder, value, ty):
    return _as_int(builder, value, ty, _I64)


def _accumulators(acc) -> bool:
    """A tuple of float32 accumulators, or a tuple of such tuples (one per m64 slice)."""
    if isinstance(acc, types.UniTuple) and acc.dtype == types.float32:
        return acc.count > 0
    return isinstance(acc, types.BaseTuple) and len(acc) > 0 and all(
        isinstance(t, types.UniTuple) and t.dtype == types.float32 for t in acc)


def _flat(builder, acc, ty) -> list:
    if isinstance(ty, types.UniTuple) and ty.dtype == types.float32:
        return [builder.extract_value(acc, i) for i in range(ty.count)]
    return [v for i, t in enumerate(ty) for v in _flat(builder, builder.extract_value(acc, i), t)]


def _rebuild(context, builder, ty, values: list):
    if isinstance(ty, types.UniTuple) and ty.dtype == types.float32:
        return context.make_tuple(builder, ty, [values.pop(0) for _ in range(ty.count)])
    return context.make_tuple(builder, ty, [_rebuild(context, builder, t, values) for t in ty])


def _tied(builder, context, signature, text: str, ops: list, acc, acc_ty, constraints: str):
    """Run ``text`` with the accumulators ``acc`` (a tuple, or a tuple of tuples) as tied "=f" outputs
    $0..$n-1 (inputs ``ops`` after them) and return them in the same shape."""
    values = _flat(builder, acc, acc_ty)
    n = len(values)
    ties = ",".join(str(i) for i in range(n))
    cons = ",".join(["=f"] * n) + ("," + constraints if constraints else "") + "," + ties + ",~{memory}"
    out = _asm(builder, ir.LiteralStructType([_F32] * n), ops + values, text, cons, side_effect=True)
    return _rebuild(context, builder, acc_ty, [builder.extract_value(out, i) for i in range(n)])


@functools.cache
def wgmma_async(itype: str, n: int, trans_a: int = 0, trans_b: int = 0):
    """The intrinsic ``mma(desc_a, desc_b, scale_d, acc) -> acc`` for
    ``wgmma.mma_async.sync.aligned.m64n{n}k{16|8}.f32.{itype}.{itype}`` (A and B K-major in shared
    memory, or MN-major with ``trans_a`` / ``trans_b`` (f16 / bf16), ``acc`` a UniTuple of n/2 float32;
    ``scale_d`` 0 computes D = A @ B, else D = A @ B + acc)."""
    ptype, k = SHAPE_K[itype]
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got {n}")
    if (trans_a or trans_b) and ptype == "tf32":
        raise ValueError("wgmma reads tf32 operands K-major only (imm-trans is for f16 / bf16)")
    nacc = n // 2
    regs = ",".join(f"${i}" for i in range(nacc))
    # imm-scale-a/b 1; imm-trans-a/b: 0 K-major, 1 MN-major (f16 / bf16 only: tf32 takes no trans operands)
    tail = f"p, 1, 1, {int(bool(trans_a))}, {int(bool(trans_b))}" if ptype != "tf32" else "p, 1, 1"
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${nacc + 2}, 0; "
            f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptype}.{ptype} {{{regs}}}, ${nacc}, ${nacc + 1}, "
            f"{tail}; }}")

    @intrinsic
    def mma(typingctx, desc_a, desc_b, scale_d, acc):
        if not (isinstance(desc_a, types.Integer) and isinstance(desc_b, types.Integer)
                and isinstance(scale_d, types.Integer) and isinstance(acc, types.UniTuple)
                and acc.dtype == types.float32 and acc.count == nacc):
            return None

        def codegen(context, builder, signature, args):
            ta, tb, ts, tacc = signature.args
            ops = [_as_i64(builder, args[0], ta), _as_i64(builder, args[1], tb), _as_i32(builder, args[2], ts)]
            return _tied(builder, context, signature, text, ops, args[3], tacc, "l,l,r")

        return acc(desc_a, desc_b, scale_d, acc), codegen

    return mma


@intrinsic
def wgmma_fence(typingctx, acc):
    """``wgmma.fence.sync.aligned`` with the accumulators tied through it (CUTLASS's
    warpgroup_fence_operand + warpgroup_arrive in one asm)."""
    if not _accumulators(acc):
        return None

    def codegen(context, builder, signature, args):
        return _tied(builder, context, signature, "wgmma.fence.sync.aligned;", [], args[0], signature.args[0], "")

    return acc(acc), codegen


wgmma_commit = statement("wgmma.commit_group.sync.aligned;", "wgmma_commit", __name__)


@functools.cache
def wgmma_wait(n: int):
    """The intrinsic ``wait(acc) -> acc`` for ``wgmma.wait_group.sync.aligned n`` (n = 0..7, compile
    time), the accumulators tied through it."""
    text = f"wgmma.wait_group.sync.aligned {pending_groups('wgmma_wait', n)};"

    @intrinsic
    def wait(typingctx, acc):
        if not _accumulators(acc):
            return None

        def codegen(context, builder, signature, args):
            return _tied(builder, context, signature, text, [], args[0], signature.args[0], "")

        return acc(acc), codegen

    return wait


fence_proxy_async = statement("fence.proxy.async.shared::cta;", "fence_proxy_async", __name__)


@intrinsic
def shared_addr(typingctx, arr, off):
    """uint32 shared-window byte address of element ``off`` of a shared array (cvta.to.shared)."""
    if not _shared_operand(arr, off):
        return None

    def codegen(context, builder, signature, args):
        return _shared_address(context, builder, signature, args)

    return types.uint32(arr, off), codegen


__all__ = ["wgmma_async", "wgmma_fence", "wgmma_commit", "wgmma_wait", "fence_proxy_async", "shared_addr",
           "SHAPE_K"]
