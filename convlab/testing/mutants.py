"""Mutation testing: planted bugs (mutants) that the conformance suite must catch.

A :class:`Mutant` is a plugin with one subtle bug: a small subclass of the plugin (its ``run`` corrupts
the output, or hands its kernels a wrong problem or operand) or a patch of the plugin's source while it
runs (a module attribute replaced: convlab.testing.kernel_mutants). convlab.testing.mutation hunts them
with the suite's own checks: a mutant no check fails survived, and the suite has a hole.

Output-level mutants (any plugin: :func:`output_mutants`):

    image0          images n >= 1 of a batch get image 0's output (wgrad: every image's operands are
                    image 0's)
    column_shift    with a padding >= 2, the output shifted one column along its last axis
    depth_dilation  a 3D problem with depth dilation > 1 run with depth dilation 1
    half_sum        float16 / bfloat16: the output of a kernel that accumulates in the half type (a
                    rounding every 16 products, as an fp16-accumulating mma), error growing with the
                    reduction length

CI runs those four on built-in plugins and the kernel-level ones of kernel_mutants.py
(convlab.testing.mutation.suite_mutants). A plugin author declares their own mutants with a
``mutants()`` method on the plugin class returning :class:`Mutant` objects (imported inside the
method: the plugin's module must not need hypothesis); ``convlab check --mutants NAME`` runs them with
the output-level ones and the built-ins' kernel-level ones for it.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator

import numpy as np

from convlab import reference, runtime
from convlab.kernels.data.layouts import channels_last_copy, copy_host_into, is_channels_last
from convlab.plugin.contract import Algorithm
from convlab.problem import HALF_DTYPES, Problem, np_dtype


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``make(base)`` is a context manager yielding the mutated plugin (``base`` is the
    registered plugin ``plugin``); ``first``: the check to hunt it with first (the one meant to see it);
    ``simulator_only``: a patch of a simulator stand-in."""

    name: str
    plugin: str
    description: str
    make: Callable[[Algorithm], ContextManager[Algorithm]]
    first: str = "check_matches_reference"
    simulator_only: bool = False

    @property
    def label(self) -> str:
        return f"{self.plugin}~{self.name}"


def subclass(base: Algorithm, name: str, run: Callable[..., None]) -> Algorithm:
    """An instance of a subclass of ``base``'s class named ``base.name~name`` whose ``run`` is
    ``run(plugin, super_run, problem, config, a, b, bias, out, workspace_limit)``."""
    parent = type(base)

    def mutated_run(self, problem, config, a, b, bias, out, *, workspace_limit):
        def super_run(pr=problem, a_=a, b_=b, bias_=bias, out_=out):
            parent.run(self, pr, config, a_, b_, bias_, out_, workspace_limit=workspace_limit)
        run(self, super_run, problem, config, a, b, bias, out, workspace_limit)

    cls = type(f"{parent.__name__}_{name}", (parent,), {"name": f"{base.name}~{name}", "run": mutated_run})
    return cls()


@contextlib.contextmanager
def _as_subclass(base: Algorithm, name: str, run: Callable[..., None]) -> Iterator[Algorithm]:
    yield subclass(base, name, run)


def subclass_mutant(name: str, plugin: str, description: str, run: Callable[..., None],
                    first: str = "check_matches_reference") -> Mutant:
    """The :class:`Mutant` of ``plugin`` that is :func:`subclass` with ``run``."""
    return Mutant(name, plugin, description, lambda base: _as_subclass(base, name, run), first)


def _write(out: Any, host: np.ndarray) -> None:
    copy_host_into(out, np.ascontiguousarray(host, dtype=np_dtype(str(out.dtype))))


def _image0(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    if problem.op == "wgrad":  # both operands carry the batch: every image reads image 0's
        def first(dev):
            host = runtime.to_host(dev)
            host = np.broadcast_to(host[:1], host.shape).copy()
            return channels_last_copy(host) if is_channels_last(dev) else runtime.to_device(host)
        super_run(a_=first(a), b_=first(b))
        return
    super_run()
    got = runtime.to_host(out)
    got[1:] = got[:1]
    _write(out, got)


def _column_shift(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    super_run()
    if max(problem.paddings) >= 2:
        got = runtime.to_host(out)
        got[..., 1:] = got[..., :-1].copy()
        _write(out, got)


def _depth_dilation(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    if problem.ndim == 3 and problem.dilation_d > 1:  # the kernel's depth taps 1 apart
        super_run(pr=dataclasses.replace(problem, dilation_d=1))
    else:
        super_run()


def _unit_height_padding(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    pr = problem
    if pr.ndim == 2 and (pr.h, pr.r, pr.p) == (1, 1, 1) and pr.padding[0] > 0:  # as a conv1d's embedding
        super_run(pr=pr.replace(padding=(0, pr.padding[1])))
    else:
        super_run()


def half_accumulated(problem: Problem, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None,
                     chunk: int = 16) -> np.ndarray:
    """The output of a kernel that accumulates in ``problem.dtype``: the reduction cut into chunks of
    about ``chunk`` products (forward / dgrad: whole channels of a group; wgrad: output pixels), each
    chunk summed exactly, the running sum rounded to the dtype after each chunk; then the bias, rounded."""
    kind = np_dtype(problem.dtype)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if problem.op == "wgrad":  # the reduction is over dy's (n, output pixel)
        pixels = np.arange(b64[:, 0].size).reshape(b64[:, 0].shape)[:, None]
        masks = [(pixels // chunk == i, "b") for i in range(-(-pixels.size // chunk))]
    else:  # over a's channels of a group (x: C', dy: K') and the filter taps
        per = problem.c_per_group if problem.op == "forward" else problem.k_per_group
        taps = int(np.prod(problem.kernel_size))
        width = max(1, chunk // taps)
        channel = (np.arange(a64.shape[1]) % per).reshape((1, -1) + (1,) * problem.ndim)
        masks = [(channel // width == i, "a") for i in range(-(-per // width))]
    acc = np.zeros(problem.operand_shapes[2], kind)
    for mask, which in masks:
        part = reference.solve(problem, a64 * mask, b64) if which == "a" else \
            reference.solve(problem, a64, b64 * mask)
        acc = (acc.astype(np.float64) + part).astype(kind)
    if bias is not None:
        acc = (acc.astype(np.float64) + reference.solve(problem, 0 * a64, b64, bias)).astype(kind)
    return acc


def _half_sum(plugin, super_run, problem, config, a, b, bias, out, limit) -> None:
    if problem.dtype not in HALF_DTYPES:
        super_run()
        return
    host = [None if t is None else runtime.to_host(t) for t in (a, b, bias)]
    _write(out, half_accumulated(problem, *host))


#: name -> (description, the subclass's run, whether it applies to a plugin)
OUTPUT_LEVEL: dict[str, tuple[str, Callable[..., None], Callable[[Algorithm], bool]]] = {
    "image0": ("images n >= 1 of a batch get image 0's output", _image0, lambda p: True),
    "column_shift": ("the output shifted one column when a padding >= 2", _column_shift, lambda p: True),
    "depth_dilation": ("3D with depth dilation > 1 run with depth dilation 1", _depth_dilation,
                       lambda p: 3 in p.ndims),
    "half_sum": ("float16 / bfloat16 accumulated in the half type (a rounding every 16 products)", _half_sum,
                 lambda p: bool(set(p.dtypes) & set(HALF_DTYPES))),
    "unit_height_padding": ("a unit-height 2D problem with height padding run as a conv1d's embedding (its "
                            "height padding dropped)", _unit_height_padding, lambda p: 2 in p.ndims),
}


def output_mutant(name: str, plugin: str) -> Mutant:
    """The output-level mutant ``name`` (:data:`OUTPUT_LEVEL`) of ``plugin``."""
    description, run, _ = OUTPUT_LEVEL[name]
    return subclass_mutant(name, plugin, description, run)


def output_mutants(plugin: Algorithm) -> list[Mutant]:
    """Every output-level mutant that applies to ``plugin``."""
    return [output_mutant(name, plugin.name) for name, (_, _, applies) in OUTPUT_LEVEL.items() if applies(plugin)]
