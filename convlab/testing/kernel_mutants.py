"""Kernel-level mutants of the built-in plugins: each the bug a kernel or its launch code could have,
planted by a small subclass (its kernels handed a wrong problem or operand) or a patch of the plugin's
module while the mutant runs (convlab.testing.mutation hunts them):

    mutant                  plugin          how
    padding_off_by_one      implicit_gemm   the kernels get the width padding 1 smaller (a gather offset 1 off)
    stride_off_by_one       direct          the kernel gets the first stride > 1 made 1 smaller
    group_offset            implicit_gemm   group g reads group g+1's filters (forward, dgrad) or input
                                            channels (wgrad): a group offset one group off
    split_k_dropped_chunk   tensor_core     the split-K sum adds all partials but the last
    channels_last_store     tensor_core     a channels-last output written in NCHW order (the epilogue's
                                            layout flag lost): a transposed store
    bias_missed             tensor_core     the epilogue (or the split-K sum) never adds the bias
    half_accumulator        tensor_core     mma.sync accumulating in fp16: the accumulators rounded to
                                            float16 after each mma (the simulator's stand-in patched)
    activation_first        implicit_gemm   the epilogue's activation applied before its scale and shift
                                            (convlab.kernels.epilogue.compose patched: the fused forward
                                            store and the pass after dgrad)
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
from typing import Any, Iterator

import numpy as np

from convlab import runtime
from convlab.kernels import epilogue
from convlab.kernels.data.layouts import channels_last_copy, is_channels_last
from convlab.plugin.contract import Algorithm

from .mutants import Mutant, subclass_mutant


@contextlib.contextmanager
def patched(module: str, name: str, wrap: Any) -> Iterator[None]:
    """``module.name`` replaced by ``wrap(original)`` inside the block."""
    mod = importlib.import_module(module)
    original = getattr(mod, name)
    setattr(mod, name, wrap(original))
    try:
        yield
    finally:
        setattr(mod, name, original)


@contextlib.contextmanager
def _patching(base: Algorithm, module: str, name: str, wrap: Any) -> Iterator[Algorithm]:
    with patched(module, name, wrap):
        yield base


def _padding_off_by_one(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    ph, pw = problem.padding
    super_run(pr=dataclasses.replace(problem, padding=(ph, max(pw - 1, 0))) if pw else problem)


def _stride_off_by_one(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    sh, sw = problem.stride
    wrong = (sh - 1, sw) if sh > 1 else (sh, sw - 1) if sw > 1 else (sh, sw)
    super_run(pr=dataclasses.replace(problem, stride=wrong))


def _group_offset(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    if problem.groups == 1:
        super_run()
        return
    which = a if problem.op == "wgrad" else b  # x's channels, or w's output channels (its groups)
    host = runtime.to_host(which)
    per = host.shape[1 if problem.op == "wgrad" else 0] // problem.groups
    rolled = np.roll(host, -per, axis=1 if problem.op == "wgrad" else 0)
    moved = channels_last_copy(rolled) if is_channels_last(which) else runtime.to_device(rolled)
    super_run(a_=moved) if problem.op == "wgrad" else super_run(b_=moved)


def _drop_last_split(sum_partials):
    def dropped(part, out, splits, **kw):
        return sum_partials(part, out, max(splits - 1, 1), **kw)
    return dropped


def _nchw_store(conv):
    def stored(problem, itype, cfg, xh, wt, y, bias, nhwc_out, geo, nchw_in=False):
        return conv(problem, itype, cfg, xh, wt, y, bias, False, geo, nchw_in)
    return stored


def _no_bias(conv):
    def unbiased(problem, itype, cfg, xh, wt, y, bias, nhwc_out, geo, nchw_in=False):
        return conv(problem, itype, cfg, xh, wt, y, None, nhwc_out, geo, nchw_in)
    return unbiased


def _half_mma(mma):
    def rounded(itype, *regs):
        return tuple(np.float32(np.float16(v)) for v in mma(itype, *regs))
    return rounded


def _activation_first(compose):
    def swapped(act, has_scale, has_shift, before, after):
        def finish(t, k, rv, scale, shift):
            t = act(t)  # the activation before the scale and shift
            if has_scale:
                t = t * scale[k]
            if has_shift:
                t = t + shift[k]
            if before or after:
                t = t + rv
            return t
        return finish
    return swapped


@contextlib.contextmanager
def _epilogue_patched(base: Algorithm, wrap: Any) -> Iterator[Algorithm]:
    """``convlab.kernels.epilogue.compose`` replaced by ``wrap(compose)`` with every epilogue kernel
    rebuilt from it (the caches cleared on entry and exit): the pass and every fused store."""
    epilogue.clear_caches()
    try:
        with patched("convlab.kernels.epilogue", "compose", wrap):
            yield base
    finally:
        epilogue.clear_caches()


_TC = "convlab.algorithms.tensor_core.gather"  # the module whose sum_partials and _conv the forward calls
KERNEL_MUTANTS = [
    subclass_mutant("padding_off_by_one", "implicit_gemm", "the kernels get the width padding 1 smaller",
                    _padding_off_by_one),
    subclass_mutant("stride_off_by_one", "direct", "the kernel gets the first stride > 1 made 1 smaller",
                    _stride_off_by_one),
    subclass_mutant("group_offset", "implicit_gemm", "group g reads group g+1's filters (wgrad: input channels)",
                    _group_offset),
    Mutant("split_k_dropped_chunk", "tensor_core", "the split-K sum drops the last partial",
           lambda base: _patching(base, _TC, "sum_partials", _drop_last_split)),
    Mutant("channels_last_store", "tensor_core", "a channels-last output stored in NCHW order",
           lambda base: _patching(base, _TC, "_conv", _nchw_store), first="check_channels_last_operands"),
    Mutant("bias_missed", "tensor_core", "the epilogue and the split-K sum never add the bias",
           lambda base: _patching(base, _TC, "_conv", _no_bias)),
    Mutant("half_accumulator", "tensor_core", "mma.sync accumulating in fp16 (the simulator's stand-in)",
           lambda base: _patching(base, "convlab.kernels.arch.mma_sim", "_mma", _half_mma), simulator_only=True),
    Mutant("activation_first", "implicit_gemm", "the epilogue applies the activation before the scale and shift "
           "(its fused store and the pass)", lambda base: _epilogue_patched(base, _activation_first),
           first="check_epilogue_matches_reference"),
]
