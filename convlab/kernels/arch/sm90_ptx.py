"""The GPU definitions of the Hopper intrinsics of :mod:`convlab.kernels.arch.sm90`: inline PTX.

Each name is a ``cuda.extending.intrinsic`` emitting one llvmlite ``ir.InlineAsm`` with side effects and
a memory clobber (kept in program order among themselves, around barriers and shared-memory accesses);
the helpers are :mod:`convlab.kernels.arch.mma_ptx`'s. Shared addresses go in as 32-bit registers
("r"), a tensor map as the 64-bit generic address of its 128 bytes in the ``maps`` array ("l"),
coordinates as 32-bit and im2col offsets as 16-bit registers ("h"). The forms follow the PTX ISA (9.7.9.25
``cp.async.bulk.tensor``, 9.7.13.15 ``mbarrier``, 9.7.19.5 ``setmaxnreg``) and CUTLASS's
``cute/arch/copy_sm90_tma.hpp`` / ``cutlass/arch/barrier.h`` (the try_wait loop's braces keep its label
local to each inlined copy). Not for the simulator: :mod:`convlab.kernels.arch.sm90` imports this module
only on a GPU or when compiling.
"""
from __future__ import annotations

import functools
from typing import Callable

from llvmlite import ir
from numba import types

from convlab.kernels.arch.mma_ptx import _I32, _I64, _as_i32, _asm, statement, wait_statement
from convlab.runtime import cuda

_I16 = ir.IntType(16)


def _intrinsic(name: str, argc: int, typer: Callable, lower: Callable):
    """An intrinsic ``name(a0, .., a{argc-1})``: ``typer(args) -> signature or None`` and
    ``lower(context, builder, argtypes, values) -> value or None``."""
    params = ", ".join(f"a{i}" for i in range(argc))
    src = (f"def {name}(typingctx{', ' if argc else ''}{params}):\n"
           f"    sig = _typer(({params}{',' if argc == 1 else ''}))\n"
           "    if sig is None:\n        return None\n"
           "    def codegen(context, builder, signature, args):\n"
           "        out = _lower(context, builder, signature.args, list(args))\n"
           "        return context.get_dummy_value() if out is None else out\n"
           "    return sig, codegen\n")
    namespace = {"_typer": typer, "_lower": lower}
    exec(compile(src, f"<convlab.kernels.arch.sm90_ptx {name}>", "exec"), namespace)
    return cuda.extending.intrinsic(namespace[name])


def _ints(args) -> bool:
    return all(isinstance(a, types.Integer) for a in args)


def _void_of_ints(args):
    return types.void(*args) if _ints(args) else None


def _map_address(context, builder, aryty, ary, mi, mity):
    """The generic 64-bit address of map ``mi`` (16 uint64 words each) of a uint64 array."""
    data = context.make_array(aryty)(context, builder, ary).data
    idx = builder.mul(builder.zext(_as_i32(builder, mi, mity), _I64), ir.Constant(_I64, 16))
    return builder.ptrtoint(builder.gep(data, [idx]), _I64)


def _maps_typer(extra: int):
    def typer(args):
        maps, rest = args[0], args[1:]
        if not (isinstance(maps, types.Array) and maps.ndim == 1 and maps.dtype == types.uint64) \
                or len(rest) != extra + 1 or not _ints(rest):
            return None
        return types.void(*args)
    return typer


def _asm_void(builder, values, text, constraints) -> None:
    _asm(builder, ir.VoidType(), values, text, ",".join(filter(None, [constraints, "~{memory}"])),
         side_effect=True)


@functools.cache
def tma_load(rank: int):
    coords = ", ".join(f"${3 + i}" for i in range(rank))
    text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            f"[$0], [$1, {{{coords}}}], [$2];")

    def lower(context, builder, tys, vals):
        ops = [_as_i32(builder, vals[2], tys[2]), _map_address(context, builder, tys[0], vals[0], vals[1], tys[1]),
               _as_i32(builder, vals[3], tys[3])] + [_as_i32(builder, v, t) for v, t in zip(vals[4:], tys[4:])]
        _asm_void(builder, ops, text, ",".join(["r", "l", "r"] + ["r"] * rank))
    return _intrinsic(f"tma_load_{rank}d", 4 + rank, _maps_typer(2 + rank), lower)


@functools.cache
def tma_load_im2col(rank: int):
    coords = ", ".join(f"${3 + i}" for i in range(rank))
    offs = ", ".join(f"${3 + rank + i}" for i in range(rank - 2))
    text = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
            f"[$0], [$1, {{{coords}}}], [$2], {{{offs}}};")

    def lower(context, builder, tys, vals):
        ops = [_as_i32(builder, vals[2], tys[2]), _map_address(context, builder, tys[0], vals[0], vals[1], tys[1]),
               _as_i32(builder, vals[3], tys[3])]
        ops += [_as_i32(builder, v, t) for v, t in zip(vals[4:4 + rank], tys[4:4 + rank])]
        ops += [builder.trunc(_as_i32(builder, v, t), _I16) for v, t in zip(vals[4 + rank:], tys[4 + rank:])]
        _asm_void(builder, ops, text, ",".join(["r", "l", "r"] + ["r"] * rank + ["h"] * (rank - 2)))
    return _intrinsic(f"tma_load_im2col_{rank}d", 4 + 2 * rank - 2, _maps_typer(2 * rank), lower)


@functools.cache
def tma_store(rank: int):
    coords = ", ".join(f"${2 + i}" for i in range(rank))
    text = f"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group [$0, {{{coords}}}], [$1];"

    def lower(context, builder, tys, vals):
        ops = [_map_address(context, builder, tys[0], vals[0], vals[1], tys[1]), _as_i32(builder, vals[2], tys[2])]
        ops += [_as_i32(builder, v, t) for v, t in zip(vals[3:], tys[3:])]
        _asm_void(builder, ops, text, ",".join(["l", "r"] + ["r"] * rank))
    return _intrinsic(f"tma_store_{rank}d", 3 + rank, _maps_typer(1 + rank), lower)


bulk_commit = statement("cp.async.bulk.commit_group;", "bulk_commit", __name__)


@functools.cache
def bulk_wait_read(n: int):
    return wait_statement("cp.async.bulk.wait_group.read", "bulk_wait_read", n, __name__)


@functools.cache
def bulk_wait(n: int):
    return wait_statement("cp.async.bulk.wait_group", "bulk_wait", n, __name__)


tensormap_acquire = _intrinsic(
    "tensormap_acquire", 2, _maps_typer(0),
    lambda c, b, t, v: _asm_void(b, [_map_address(c, b, t[0], v[0], v[1], t[1])],
                                 "fence.proxy.tensormap::generic.acquire.sys [$0], 128;", "l"))


def _on_bar(name: str, text: str, argc: int) -> Callable:
    """An intrinsic of ``argc`` integer operands (32-bit registers $0..) emitting ``text``."""
    return _intrinsic(name, argc, _void_of_ints,
                      lambda c, b, t, v: _asm_void(b, [_as_i32(b, x, ty) for x, ty in zip(v, t)], text,
                                                   ",".join(["r"] * argc)))


mbar_init = _on_bar("mbar_init", "mbarrier.init.shared::cta.b64 [$0], $1;", 2)
mbar_arrive = _on_bar("mbar_arrive", "mbarrier.arrive.shared::cta.b64 _, [$0];", 1)
mbar_arrive_tx = _on_bar("mbar_arrive_tx", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", 2)
mbar_wait = _on_bar("mbar_wait", "{ .reg .pred p; LAB_WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1; "
                    "@!p bra LAB_WAIT; }", 2)
fence_mbarrier_init = statement("fence.mbarrier_init.release.cluster;", "fence_mbarrier_init", __name__)


def _try_wait_lower(context, builder, tys, vals):
    ops = [_as_i32(builder, v, t) for v, t in zip(vals, tys)]
    return _asm(builder, _I32, ops, "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; "
                "selp.u32 $0, 1, 0, p; }", "=r,r,r,~{memory}", side_effect=True)


mbar_try_wait = _intrinsic("mbar_try_wait", 2, lambda args: types.uint32(*args) if _ints(args) else None,
                           _try_wait_lower)


def _setmaxnreg(kind: str, n: int) -> Callable:
    if not 24 <= int(n) <= 256 or int(n) % 8:
        raise ValueError(f"setmaxnreg takes 24..256 registers in multiples of 8, got {n}")
    return statement(f"setmaxnreg.{kind}.sync.aligned.u32 {int(n)};", f"setmaxnreg_{kind}_{n}", __name__)


@functools.cache
def setmaxnreg_inc(n: int) -> Callable:
    return _setmaxnreg("inc", n)


@functools.cache
def setmaxnreg_dec(n: int) -> Callable:
    return _setmaxnreg("dec", n)


@functools.cache
def named_sync(barrier: int, threads: int) -> Callable:
    if not 1 <= int(barrier) <= 15 or int(threads) % 32 or not 32 <= int(threads) <= 1024:
        raise ValueError(f"named barriers 1..15 (0 is __syncthreads) of a multiple of 32 threads, got "
                         f"{barrier}, {threads}")
    return statement(f"bar.sync {int(barrier)}, {int(threads)};", f"named_sync_{barrier}_{threads}", __name__)
