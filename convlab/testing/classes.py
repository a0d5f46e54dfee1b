"""The option classes every conformance run reaches, by explicit examples rather than by luck.

A class is a property of a problem where kernels go wrong in their own way (:data:`CLASSES`): a batch of
two or more images, a padding of 2 or more, a dilation on each axis (depth included), a stride, groups,
a bias, a 1D or 3D problem, a 2D one of unit height whose one row reads only the height padding
(kernels that run unit height as 1D drop it), and a reduction of 512 products or more in float32 and in
a half type.
:func:`class_examples` picks, for one plugin and op, a few fixed problems from :func:`candidates` (each
covering several classes at once; variants with groups 1, 2 and C, strides 1 and 2) that the plugin
accepts, until every class one of them reaches is covered; the suite runs them as hypothesis's explicit
examples of every run, before the random draws (:mod:`convlab.testing.suite`). A class none of the
candidates that the plugin accepts reaches (groups for a groups-1 plugin) is left out, and
:func:`missing_classes` names it.

    candidate  batch  groups  kernel  stride   padding  dilation  output      bias
    rich 2D    2      2/1/C   3x3     2x1/1    2x3      2x3       3x4         op != wgrad
    rich 1D    2      2/1/C   3       2/1      2        2         4           op != wgrad
    rich 3D    2      2/1/C   2x2x2   1x2x1/1  2x0x1    2x3x2     4x2x3       op != wgrad
    long 2D    2      1 (C)   3x3     1        1        1         2x4         reduction 576 (wgrad: 16x16
                                                                              output pixels: 512)
    long 3D    1      1       2x3x3   1        0x1x1    1         2x3x3       reduction 576 (wgrad: 512)
    (aligned wgrad: 8 channels in and out, a 1x1 filter, then 3x3, the long rows' pixels)
    unit H     2      1/C     1x3     3x1      1x2      1x2       1x9         op != wgrad (its one row
                                                                              reads only padding; also
                                                                              8 channels, groups 1)

(C): wgrad only, whose reduction is over pixels. Dilations and paddings differ between axes, so a kernel
that swaps two axes' values fails. After them come the same rows with 8 input and 8 output channels and
groups 1 ("aligned": a row of 8 half values is the 16 bytes a copy engine moves, tma_wgmma's floor),
then those rows and the groups-2 ones undilated (Winograd's and other fixed-tile algorithms' domain):
a plugin reaches the classes it takes whatever its channel alignment and dilation limits. They are
chosen only for a class the earlier rows left unreached, so a plugin that takes the 4-channel rows runs
no more examples.
"""
from __future__ import annotations

from typing import Callable

from ..plugin import registry
from ..plugin.contract import Algorithm
from ..problem import HALF_DTYPES, Problem, make_problem_nd
from ..runtime.settings import float32_precision, get_float32_precision

#: class name -> whether a problem is in it
CLASSES: dict[str, Callable[[Problem], bool]] = {
    "batch>1": lambda p: p.n >= 2,
    "padding>=2": lambda p: max(p.paddings) >= 2,
    "dilation H": lambda p: p.ndim >= 2 and p.dilation[0] > 1 and p.h > 1,
    "dilation W": lambda p: p.dilation[1] > 1,
    "dilation D": lambda p: p.ndim == 3 and p.dilation_d > 1,
    "stride>1": lambda p: max(p.strides) > 1,
    "groups>1": lambda p: p.groups > 1,
    "bias": lambda p: p.bias,
    "1D": lambda p: p.ndim == 2 and (p.h, p.r, p.p) == (1, 1, 1),
    "padded unit height": lambda p: p.ndim == 2 and (p.h, p.r, p.p) == (1, 1, 1) and p.padding[0] > 0,
    "3D": lambda p: p.ndim == 3,
    "long float32": lambda p: p.dtype == "float32" and p.reduction_length >= 512,
    "long half": lambda p: p.dtype in HALF_DTYPES and p.reduction_length >= 512,
}
#: the classes of arithmetic only (checks of layout and coverage leave them out: they cost the most)
NUMERIC = frozenset({"long float32", "long half"})
#: dtypes tried for the geometric classes, first accepted first
DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64")


def classes_of(problem: Problem) -> set[str]:
    """The classes ``problem`` is in."""
    return {name for name, test in CLASSES.items() if test(problem)}


def _rich(op: str, nd: int, groups: str, strided: bool, dtype: str, dilated: bool = True) -> Problem:
    """One problem of every geometric option (the module docstring's rich rows); ``groups``: "2", "1"
    or "C" (depthwise), or "aligned" (8 channels, groups 1); ``dilated=False``: dilation 1."""
    c, k, g = {"2": (4, 4, 2), "1": (4, 4, 1), "C": (4, 4, 4), "aligned": (8, 8, 1)}[groups]
    bias = op != "wgrad"
    if nd == 2:
        stride, padding, dilation, kernel, out = (2 if strided else 1, 1), (2, 3), (2, 3), (3, 3), (3, 4)
    elif nd == 1:
        stride, padding, dilation, kernel, out = (2 if strided else 1,), (2,), (2,), (3,), (4,)
    else:
        stride, padding, dilation = (1, 2 if strided else 1, 1), (2, 0, 1), (2, 3, 2)
        kernel, out = (2, 2, 2), (4, 2, 3)
    if not dilated:
        dilation = (1,) * nd
    spatial = [max(1, (o - 1) * sd + dl * (kk - 1) + 1 - 2 * pd)
               for o, sd, dl, kk, pd in zip(out, stride, dilation, kernel, padding)]
    return make_problem_nd(op, 2, c, spatial, k, kernel, stride=stride, padding=padding, dilation=dilation,
                           groups=g, dtype=dtype, bias=bias).lowered()


def _long(op: str, dtype: str, nd: int = 2, depthwise: bool = False, aligned: bool = False,
          pointwise: bool = False) -> Problem:
    """A reduction of 512 or more products with a few hundred outputs (the long rows); ``aligned``:
    wgrad with 8 input and 8 output channels (forward's and dgrad's long rows are aligned already),
    ``pointwise``: with a 1x1 filter, 64 outputs (tma_wgmma's 3x3 one took 45 s of the simulator, its
    other class examples 11 s)."""
    if op == "wgrad":  # 2 images x 16 x 16 output pixels (3D: x 2 output depths)
        c, k, g = (4, 4, 4) if depthwise else (8, 8, 1) if aligned else (2, 4, 1)
        if pointwise:
            return make_problem_nd(op, 1 if nd == 3 else 2, c, (2, 16, 16)[3 - nd:], k, (1,) * nd, groups=g,
                                   dtype=dtype)
        if nd == 3:
            return make_problem_nd(op, 1, c, (2, 16, 16), k, (1, 3, 3), padding=(0, 1, 1), groups=g, dtype=dtype)
        return make_problem_nd(op, 2, c, (16, 16), k, (3, 3), padding=1, groups=g, dtype=dtype)
    if nd == 3:  # 32 x 2 x 3 x 3 = 576
        c, k = (32, 8) if op == "forward" else (8, 32)
        return make_problem_nd(op, 1, c, (3, 3, 3), k, (2, 3, 3), padding=(0, 1, 1), dtype=dtype, bias=True)
    c, k = (64, 8) if op == "forward" else (8, 64)  # 64 x 3 x 3 = 576
    return make_problem_nd(op, 2, c, (2, 4), k, (3, 3), padding=1, dtype=dtype, bias=True)


def _unit_height(op: str, dtype: str, groups: str) -> Problem:
    """The unit-height row: H = R = P = 1 with height padding, so the output row reads only padding (not a
    conv1d's embedding, which has none); ``groups`` "1", "C" (depthwise, 4 channels) or "aligned" (8
    channels, groups 1)."""
    c, g = {"1": (4, 1), "C": (4, 4), "aligned": (8, 1)}[groups]
    return make_problem_nd(op, 2, c, (1, 9), c, (1, 3), stride=(3, 1), padding=(1, 2), dilation=(1, 2),
                           groups=g, dtype=dtype, bias=op != "wgrad")


def candidates(op: str, dtypes: tuple[str, ...], ndims: tuple[int, ...]) -> list[Problem]:
    """The fixed problems :func:`class_examples` chooses from, richest first: for every N in ``ndims``
    (and 1D for a 2D plugin), each groups variant strided and not, in the first dtype of
    :data:`DTYPE_ORDER` the plugin takes and the others after; then the long ones in float16 / bfloat16
    and float32; then the aligned and undilated variants of both."""
    order = [d for d in DTYPE_ORDER if d in dtypes]
    nds = [n for n in (3, 2, 1) if n in ndims or (n == 1 and 2 in ndims)]
    halves = [d for d in ("float16", "bfloat16", "float32") if d in dtypes]  # half first: where half bugs show
    found = []
    for dtype in order:
        for nd in nds:
            for groups in ("2", "1", "C"):
                for strided in (True, False):
                    found.append(_rich(op, nd, groups, strided, dtype))
    for dtype in halves:
        found += [_long(op, dtype, nd) for nd in (2, 3) if nd in ndims]
        if op == "wgrad" and 2 in ndims:
            found.append(_long(op, dtype, depthwise=True))
    for dilated, groups in ((True, "aligned"), (False, "aligned"), (False, "2")):
        for dtype in order:
            for nd in nds:
                for strided in (True, False):
                    found.append(_rich(op, nd, groups, strided, dtype, dilated))
    if 2 in ndims:
        found += [_unit_height(op, dtype, groups) for groups in ("1", "C", "aligned") for dtype in order]
    if op == "wgrad":
        for pointwise in (True, False):  # 1x1 first: 3x3 for a plugin that takes only larger filters
            found += [_long(op, dtype, nd, aligned=True, pointwise=pointwise) for dtype in halves
                      for nd in (2, 3) if nd in ndims]
    return found


def _reached(problem: Problem, wanted: set[str]) -> set[tuple[str, str]]:
    """(N, class) pairs of ``problem``: the geometric classes count once per N (a 3D kernel's dilation is
    not a 2D kernel's), the numeric ones once."""
    label = "3D" if problem.ndim == 3 else "1D" if CLASSES["1D"](problem) else "2D"
    return {("", c) if c in NUMERIC else (label, c) for c in classes_of(problem) & wanted}


def float32_precision_for(plugin: Algorithm, op: str) -> str:
    """The float32 precision the suite checks ``plugin``'s ``op`` under: ``"high"`` for a plugin that
    takes float32 only as TF32 (tensor_core: declines a plain float32 problem under ``"highest"``, takes
    it under ``"high"``), so that its TF32 routes are conformance-checked; else the one in force."""
    current = get_float32_precision()
    if "float32" not in plugin.dtypes:
        return current
    plain = make_problem_nd(op, 1, 8, (6, 7), 8, (3, 3), padding=1, dtype="float32")
    with float32_precision("highest"):
        exact = registry.verdict(plugin, plain)
    with float32_precision("high"):
        tf32 = registry.verdict(plugin, plain)
    return "high" if tf32 and not exact else current


def class_examples(plugin: Algorithm, op: str, classes: set[str] | frozenset[str] | None = None
                   ) -> list[Problem]:
    """The candidates ``plugin`` accepts (under :func:`float32_precision_for`) that together reach every
    class (of ``classes``, default all) at every N any accepted candidate reaches: taken in order, each
    when it adds a class (at its N) not reached yet."""
    wanted = set(CLASSES) if classes is None else set(classes)
    dtypes = tuple(sorted(plugin.dtypes))
    chosen, reached = [], set()
    with float32_precision(float32_precision_for(plugin, op)):
        for problem in candidates(op, dtypes, tuple(getattr(plugin, "ndims", (2,)))):
            new = _reached(problem, wanted) - reached
            if new and registry.verdict(plugin, problem):
                chosen.append(problem)
                reached |= new
    return chosen


def missing_classes(plugin: Algorithm, op: str) -> list[str]:
    """The classes none of ``plugin``'s class examples for ``op`` reaches (those it never accepts)."""
    reached = set().union(*(classes_of(p) for p in class_examples(plugin, op)))
    return [name for name in CLASSES if name not in reached]


def epilogue_example(plugin: Algorithm, op: str) -> list[Problem]:
    """The one problem the epilogue check runs ``op`` on (its property does not depend on the problem's
    class; each run costs a whole convolution on the simulator): the candidates and sample problems
    ``plugin`` accepts, 3D for dgrad where it claims 3D (2D otherwise), in the first dtype of
    :data:`DTYPE_ORDER` it takes for forward and the second for dgrad (where it takes two), the fewest
    flops of those; [] when it accepts none."""
    dtypes = [d for d in DTYPE_ORDER if d in plugin.dtypes]
    ndims = tuple(getattr(plugin, "ndims", (2,)))
    nd = 3 if op == "dgrad" and 3 in ndims else 2
    dtype = dtypes[min(1, len(dtypes) - 1)] if op == "dgrad" else dtypes[0]
    pool = candidates(op, tuple(dtypes), ndims) + [p for p in plugin.sample_problems(op) if p.op == op]
    with float32_precision(float32_precision_for(plugin, op)):
        accepted = [p for p in pool if registry.verdict(plugin, p)]
    if not accepted:
        return []
    return [min(accepted, key=lambda p: (p.ndim != nd, p.dtype != dtype, p.flops))]

