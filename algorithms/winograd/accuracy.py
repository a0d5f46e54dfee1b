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

from convlab.plugin.contract import Config
from convlab.problem import Problem

from .plan import axis_transforms, storage

#: direct's compute_eps for float32 (finfo(float32).eps): the unit a growth multiplies
FMA_EPS = 2.0**-23
#: (op class, F_h x F_w) -> GEMM operands -> growth: results/transform_accuracy/cpu/ebac156/accuracy.json x 1.25
GROWTH = {
    ("forward", "F(2,3)xF(2,3)"): {"simt": 1.5, "tf32x3": 2.2, "f16": 6000, "bf16": 45000},
    ("forward", "F(4,3)xF(4,3)"): {"simt": 6.8, "tf32x3": 9.6, "f16": 24000, "bf16": 200000},
    ("forward", "F(6,3)xF(6,3)"): {"simt": 21, "tf32x3": 30, "f16": 77000, "bf16": 590000},
    ("wgrad", "F(3,2)xF(3,2)"): {"simt": 2.8},
    ("wgrad", "F(3,4)xF(3,4)"): {"simt": 9},
    ("wgrad", "F(3,6)xF(3,6)"): {"simt": 29},
    ("forward", "F(1,1)xF(2,2)"): {"simt": 1.9, "tf32x3": 3.4, "f16": 11000, "bf16": 87000},
    ("forward", "F(1,1)xF(4,2)"): {"simt": 4.4, "tf32x3": 6.5, "f16": 19000, "bf16": 140000},
    ("forward", "F(1,1)xF(6,2)"): {"simt": 9, "tf32x3": 13, "f16": 33000, "bf16": 270000},
    ("forward", "F(1,1)xF(2,3)"): {"simt": 1.8, "tf32x3": 2.7, "f16": 8100, "bf16": 66000},
    ("forward", "F(1,1)xF(4,3)"): {"simt": 4.5, "tf32x3": 6.7, "f16": 18000, "bf16": 140000},
    ("forward", "F(1,1)xF(6,3)"): {"simt": 9.2, "tf32x3": 12, "f16": 31000, "bf16": 250000},
    ("forward", "F(1,1)xF(2,4)"): {"simt": 4.1, "tf32x3": 5.7, "f16": 17000, "bf16": 95000},
    ("forward", "F(1,1)xF(4,4)"): {"simt": 5.9, "tf32x3": 8.2, "f16": 21000, "bf16": 160000},
    ("forward", "F(1,1)xF(2,5)"): {"simt": 4.1, "tf32x3": 5.3, "f16": 14000, "bf16": 110000},
    ("forward", "F(1,1)xF(4,5)"): {"simt": 6.4, "tf32x3": 9.4, "f16": 23000, "bf16": 180000},
    ("forward", "F(1,1)xF(2,6)"): {"simt": 6.3, "tf32x3": 8, "f16": 20000, "bf16": 170000},
    ("forward", "F(1,1)xF(2,7)"): {"simt": 5.8, "tf32x3": 7.8, "f16": 19000, "bf16": 160000},
    ("wgrad", "F(1,1)xF(2,2)"): {"simt": 1.8},
    ("wgrad", "F(1,1)xF(2,4)"): {"simt": 4.4},
    ("wgrad", "F(1,1)xF(2,6)"): {"simt": 7.6},
    ("wgrad", "F(1,1)xF(3,2)"): {"simt": 1.8},
    ("wgrad", "F(1,1)xF(3,4)"): {"simt": 4.5},
    ("wgrad", "F(1,1)xF(3,6)"): {"simt": 8.7},
    ("wgrad", "F(1,1)xF(4,2)"): {"simt": 5.2},
    ("wgrad", "F(1,1)xF(4,4)"): {"simt": 7.8},
    ("wgrad", "F(1,1)xF(5,2)"): {"simt": 6.8},
    ("wgrad", "F(1,1)xF(5,4)"): {"simt": 13},
    ("wgrad", "F(1,1)xF(6,2)"): {"simt": 13},
    ("wgrad", "F(1,1)xF(7,2)"): {"simt": 10},
}


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
