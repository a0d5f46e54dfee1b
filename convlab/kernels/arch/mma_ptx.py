"""The GPU definitions of the tensor-core intrinsics of :mod:`convlab.kernels.arch.mma`: inline PTX.

numba-cuda has no MMA API (numba-cuda#309); each name here is a ``cuda.extending.intrinsic``
(``convlab.runtime.intrinsic``) that emits an llvmlite ``ir.InlineAsm``. The semantics, fragment layouts
and argument rules are in :mod:`convlab.kernels.arch.mma`'s docstring; import the names from there, which
picks these on a GPU and the stand-ins of :mod:`convlab.kernels.arch.mma_sim` on the simulator.

On the simulator, which has no ``cuda.extending``, the module imports and each name raises when called
(``convlab.runtime.intrinsic``): kernels there call the stand-ins, and :mod:`convlab.kernels.arch.mma`
imports this module only on a GPU and when compiling only.
"""
from __future__ import annotations

import functools

from llvmlite import ir
from numba import types

from convlab.runtime import intrinsic

_I32, _F32, _I64 = ir.IntType(32), ir.FloatType(), ir.IntType(64)


def _as_int(builder, value, ty, to: ir.IntType):
    """An integer argument of numba type ``ty`` as the LLVM integer type ``to`` (truncated, or extended
    by its signedness)."""
    width = value.type.width
    if width == to.width:
        return value
    if width > to.width:
        return builder.trunc(value, to)
    return (builder.sext if ty.signed else builder.zext)(value, to)


def _as_i32(builder, value, ty):
    """An integer argument as i32 (truncated or extended)."""
    return _as_int(builder, value, ty, _I32)


def _as_f32(context, builder, value, ty):
    """A float32 operand from a float (converted) or from fp32 bits in an integer (reinterpreted)."""
    if isinstance(ty, types.Integer):
        return builder.bitcast(_as_i32(builder, value, ty), _F32)
    return context.cast(builder, value, ty, types.float32)


def _element_ptr(context, builder, aryty, ary, off, offty):
    """Pointer to element ``off`` (flat, from the data start) of an array argument."""
    data = context.make_array(aryty)(context, builder, ary).data
    if off.type.width < 64:
        off = (builder.sext if offty.signed else builder.zext)(off, _I64)
    return builder.gep(data, [off])


def _shared_u32(context, builder, aryty, ary, off, offty):
    """32-bit shared-window address of element ``off`` of a shared array (cvta.to.shared of the
    base, then 32-bit arithmetic: no 64-bit index math in the loop)."""
    i8 = ir.IntType(8)
    data = context.make_array(aryty)(context, builder, ary).data
    generic = builder.bitcast(data, i8.as_pointer())
    base = builder.ptrtoint(builder.addrspacecast(generic, i8.as_pointer(3)), _I32)
    size = ir.Constant(_I32, context.get_abi_sizeof(context.get_data_type(aryty.dtype)))
    return builder.add(base, builder.mul(_as_i32(builder, off, offty), size))


def _asm(builder, ret, args, text, constraints, side_effect=False):
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=side_effect), args)


def _unpacked(context, builder, signature, out, count: int):
    """The ``count`` outputs of an asm block returning a struct, as the intrinsic's UniTuple."""
    items = [builder.extract_value(out, i) for i in range(count)]
    return context.make_tuple(builder, signature.return_type, items)


def _shared_operand(arr, off) -> bool:
    """Whether (arr, off) types as a shared array and an integer element offset into it."""
    return isinstance(arr, types.Array) and isinstance(off, types.Integer)


def _shared_address(context, builder, signature, args):
    """The 32-bit shared-window address (:func:`_shared_u32`) of element args[1] of array args[0]."""
    aryty, offty = signature.args[:2]
    return _shared_u32(context, builder, aryty, args[0], args[1], offty)


def _make_mma(shape: str, itype: str):
    text = (f"mma.sync.aligned.{shape}.row.col.f32.{itype}.{itype}.f32 "
            "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        ints, floats = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
        if not all(isinstance(x, types.Integer) for x in ints):
            return None
        if not all(isinstance(x, (types.Float, types.Integer)) for x in floats):
            return None
        sig = types.UniTuple(types.float32, 4)(*ints, *floats)

        def codegen(context, builder, signature, args):
            tys = signature.args
            ops = [_as_i32(builder, v, t) for v, t in zip(args[:6], tys[:6])]
            ops += [context.cast(builder, v, t, types.float32) for v, t in zip(args[6:], tys[6:])]
            out = _asm(builder, ir.LiteralStructType([_F32] * 4), ops, text,
                       "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3")
            return _unpacked(context, builder, signature, out, 4)

        return sig, codegen

    return mma


@intrinsic
def mma_tf32x3(typingctx, s0, s1, s2, s3, a0, a1, a2, a3, t0, t1, b0, b1, c0, c1, c2, c3):
    """D = As @ B + A @ Bs + A @ B + C: three m16n8k8 TF32 mma in one asm block (small parts first)."""
    ints, floats = (s0, s1, s2, s3, a0, a1, a2, a3, t0, t1, b0, b1), (c0, c1, c2, c3)
    if not all(isinstance(x, types.Integer) for x in ints):
        return None
    if not all(isinstance(x, (types.Float, types.Integer)) for x in floats):
        return None
    sig = types.UniTuple(types.float32, 4)(*ints, *floats)
    one = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{$0,$1,$2,$3}}, {{{}}}, {{{}}}, {{$0,$1,$2,$3}};"
    text = " ".join(one.format(a, b) for a, b in (("$4,$5,$6,$7", "$14,$15"), ("$8,$9,$10,$11", "$12,$13"),
                                                  ("$8,$9,$10,$11", "$14,$15")))

    def codegen(context, builder, signature, args):
        tys = signature.args
        ops = [_as_i32(builder, v, t) for v, t in zip(args[:12], tys[:12])]
        ops += [context.cast(builder, v, t, types.float32) for v, t in zip(args[12:], tys[12:])]
        out = _asm(builder, ir.LiteralStructType([_F32] * 4), ops, text,
                   "=f,=f,=f,=f," + ",".join(["r"] * 12) + ",0,1,2,3")
        return _unpacked(context, builder, signature, out, 4)

    return sig, codegen


mma_f16 = _make_mma("m16n8k16", "f16")
mma_bf16 = _make_mma("m16n8k16", "bf16")
mma_tf32 = _make_mma("m16n8k8", "tf32")


def _tf32_words(name: str, text: str, count: int):
    """The intrinsic ``name(x)``: x (a float, or fp32 bits in an integer: :func:`_as_f32`) the f32 operand
    ${count} of ``text``, whose ``count`` 32-bit outputs $0.. it returns (a uint32, or a UniTuple of them)."""
    constraints = "=r," * count + "f"
    rtype = types.uint32 if count == 1 else types.UniTuple(types.uint32, count)

    def emit(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            value = _as_f32(context, builder, args[0], signature.args[0])
            if count == 1:
                return _asm(builder, _I32, [value], text, constraints)
            out = _asm(builder, ir.LiteralStructType([_I32] * count), [value], text, constraints)
            return _unpacked(context, builder, signature, out, count)

        return rtype(x), codegen

    emit.__name__ = emit.__qualname__ = name
    return intrinsic(emit)


to_tf32 = _tf32_words("to_tf32", "cvt.rna.tf32.f32 $0, $1;", 1)
#: (big, small): big = cvt.rna.tf32(x), small = cvt.rna.tf32(x - big) (the difference is exact)
split_tf32 = _tf32_words("split_tf32", "{ .reg .f32 big, rest; cvt.rna.tf32.f32 $0, $2; mov.b32 big, $0; "
                         "sub.f32 rest, $2, big; cvt.rna.tf32.f32 $1, rest; }", 2)


@intrinsic
def f32_to_bf16(typingctx, x):
    if not isinstance(x, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[0], signature.args[0], types.float32)
        return _asm(builder, ir.IntType(16), [value], "cvt.rn.bf16.f32 $0, $1;", "=h,f")

    return types.uint16(x), codegen


@intrinsic
def bf16_to_f32(typingctx, bits):
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        word = _as_i32(builder, args[0], types.uint32)  # zero-extended: the high half is 0
        return builder.bitcast(builder.shl(word, ir.Constant(_I32, 16)), _F32)

    return types.float32(bits), codegen


def _make_ldmatrix(count: int, trans: bool):
    regs = ",".join(f"${i}" for i in range(count))
    text = (f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 "
            f"{{{regs}}}, [${count}];")
    constraints = ",".join(["=r"] * count) + ",r,~{memory}"

    @intrinsic
    def ldmatrix(typingctx, arr, off):
        if not _shared_operand(arr, off):
            return None

        def codegen(context, builder, signature, args):
            addr = _shared_address(context, builder, signature, args)
            out = _asm(builder, ir.LiteralStructType([_I32] * count), [addr], text, constraints,
                       side_effect=True)
            return _unpacked(context, builder, signature, out, count)

        return types.UniTuple(types.uint32, count)(arr, off), codegen

    return ldmatrix


ldmatrix_x4 = _make_ldmatrix(4, False)
ldmatrix_x2 = _make_ldmatrix(2, False)
ldmatrix_x4_trans = _make_ldmatrix(4, True)
ldmatrix_x2_trans = _make_ldmatrix(2, True)


@intrinsic
def cp_async16(typingctx, sarr, soff, garr, goff, src_bytes):
    if not (isinstance(sarr, types.Array) and isinstance(garr, types.Array)
            and all(isinstance(x, types.Integer) for x in (soff, goff, src_bytes))):
        return None

    def codegen(context, builder, signature, args):
        st, sot, gt, got, nt = signature.args
        saddr = _shared_u32(context, builder, st, args[0], args[1], sot)
        gptr = _element_ptr(context, builder, gt, args[2], args[3], got)
        ops = [saddr, builder.ptrtoint(gptr, _I64), _as_i32(builder, args[4], nt)]
        _asm(builder, ir.VoidType(), ops, "cp.async.cg.shared.global [$0], [$1], 16, $2;",
             "r,l,r,~{memory}", side_effect=True)
        return context.get_dummy_value()

    return types.void(sarr, soff, garr, goff, src_bytes), codegen


def statement(text: str, name: str, module: str = __name__):
    """The intrinsic ``f()`` that emits the operand-less PTX statement ``text``, with a memory clobber (the
    compiler moves no memory access across it); ``module.name`` is what it is called (the simulator's
    error and the kernels' listings name it)."""
    def emit(typingctx):
        def codegen(context, builder, signature, args):
            _asm(builder, ir.VoidType(), [], text, "~{memory}", side_effect=True)
            return context.get_dummy_value()

        return types.void(), codegen

    emit.__name__ = emit.__qualname__ = name
    emit.__module__ = module
    return intrinsic(emit)


cp_async_commit = statement("cp.async.commit_group;", "cp_async_commit")


def pending_groups(name: str, n: int) -> int:
    """``n`` as the operand of a ``wait_group`` (the committed groups left pending: 0..7, known at compile
    time); ValueError naming the intrinsic ``name`` otherwise."""
    if not 0 <= int(n) <= 7:
        raise ValueError(f"{name} n must be in 0..7, got {n!r}")
    return int(n)


def wait_statement(instruction: str, name: str, n: int, module: str = __name__):
    """The intrinsic ``wait()`` for ``instruction n`` (a ``wait_group``: at most n committed groups
    pending), called ``name_n`` (:func:`statement`)."""
    n = pending_groups(name, n)
    return statement(f"{instruction} {n};", f"{name}_{n}", module)


@functools.cache
def cp_async_wait(n: int):
    """The intrinsic ``wait()`` for ``cp.async.wait_group n``: at most n committed groups pending."""
    return wait_statement("cp.async.wait_group", "cp_async_wait", n)
