"""The error growth each winograd config declares: its rounding error over direct fp32 FMA accumulation's,
measured in float64 on the CPU by tools/transform_accuracy.py (results/transform_accuracy/cpu/ebac156/
accuracy.json, "winograd"), times a margin of 1.25.

    error_eps(problem, config) = FMA_EPS * growth        (measure.tolerance(problem, error_eps) is the config's
                                                          tolerance; FMA_EPS is what direct declares for float32)

growth depends on the F per axis (the tile and filter size), the op's transforms (forward and dgrad share
F(m, r); wgrad runs F(r, m)) and the GEMM's operands: fp32 ("simt", and the fused kernel, whose
arithmetic is the same), 3xTF32 ("tf32x3", float32 on tensor cores) or rounded to fp16 / bf16 ("f16",
"bf16", half problems on tensor cores). It is largest for short reductions (the transforms' rounding is
not averaged over many channels) and falls below 1 for long ones; the table holds the worst over
reduction lengths 36..1152, normal and uniform inputs, two seeds. The transforms run in fp32 for
fp16 / bf16 problems too, so on SIMT their growth is float32's (the output's rounding to the half type is
measure.tolerance's own term). Lavin & Gray's integer points give F(6x6, 3x3) a growth of 771 against
these points' 16 (the same run), which is why toomcook.POINTS are 0, +-1, +-1/2, +-2.
"""
from __future__ import annotations

import json
from importlib.resources import files

from convlab.plugin.contract import Config
from convlab.problem import Problem

from .plan import axis_transforms, storage

#: direct's compute_eps for float32 (finfo(float32).eps): the unit a growth multiplies
FMA_EPS = 2.0**-23
#: (op class, F_h x F_w) -> GEMM operands -> growth: growth.json beside this module (its measurement and
#: margin named there; tests/algorithms/test_winograd_growth.py checks it against the measurement)
GROWTH: dict[tuple[str, str], dict[str, float]] = {
    tuple(name.split(" ", 1)): row
    for name, row in json.loads(files(__package__).joinpath("growth.json").read_text())["growth"].items()}


def key(problem: Problem, config: Config) -> tuple[str, str]:
    """(op class, "F(..)xF(..)") of the table, an R x 1 filter's under its 1 x R mirror image."""
    th, tw = axis_transforms(problem, int(config["m"]))
    if tw.name == "F(1,1)":
        th, tw = tw, th
    return ("wgrad" if problem.op == "wgrad" else "forward", f"{th.name}x{tw.name}")


def engine(problem: Problem, config: Config) -> str:
    """The GEMM operands of ``config``: "simt" (SIMT and fused), "tf32x3", "f16" or "bf16"."""
    return "simt" if config["form"] == "fused" else storage(problem, config)


def growth(problem: Problem, config: Config) -> float:
    """The declared growth of ``config`` on ``problem`` (module docstring)."""
    return float(GROWTH[key(problem, config)][engine(problem, config)])


def eps(problem: Problem, config: Config) -> float:
    return FMA_EPS * growth(problem, config)


def worst_eps(dtype: str) -> float:
    """The largest eps a config for ``dtype`` declares (float32: SIMT and tf32x3; halves: their own
    tensor-core engine too)."""
    engines = {"float32": ("simt", "tf32x3"), "float16": ("simt", "f16"), "bfloat16": ("simt", "bf16")}[dtype]
    return FMA_EPS * max(v for row in GROWTH.values() for e, v in row.items() if e in engines)


def label(problem: Problem, config: Config) -> str:
    """E.g. ``F(4x4,3x3) fp32`` or ``F(4,5) f16`` (the transforms per axis and the GEMM's operands)."""
    op, pair = key(problem, config)
    fh, fw = pair.split("x")
    if fh == "F(1,1)":
        text = fw
    else:
        (mh, rh), (mw, rw) = (f[2:-1].split(",") for f in (fh, fw))
        text = f"F({mh}x{mw},{rh}x{rw})"
    return f"{text} {dict(simt='fp32').get(engine(problem, config), engine(problem, config))}"


def note(problem: Problem, config: Config) -> str:
    """explain's line: the form, its declared growth and its eps."""
    return (f"{label(problem, config)}: {growth(problem, config):g}x fp32 FMA's rounding error "
            f"(eps {eps(problem, config):.2g})")
