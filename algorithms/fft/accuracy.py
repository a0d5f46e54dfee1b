"""The error growth each fft config declares: its rounding error over direct fp32 FMA accumulation's,
measured in float64 on the CPU by tools/transform_accuracy.py (results/transform_accuracy/cpu/ebac156/, forward
correlations through convlab.kernels.transform.emulate's copy of the kernels' arithmetic), times a
margin of 1.25:

    error_eps(problem, config) = FMA_EPS * growth(NH x NW)

The growth rises slowly with the transform size (the error of an n-point FFT grows like log n) and is
largest for the shortest filter a size holds (direct's error grows with the reduction length): each size
was measured with a 2- or 3-tap filter, over 1, 4 and 32 channels, normal and uniform inputs, two seeds.
A plan whose size was not measured (a small extent: NH x NW below the largest) takes the next larger
measured one's. dgrad runs as a forward; wgrad's spectra are the same, its products summed over tiles as
the forward sums them over channels (the conformance suite checks it against this growth).
"""
from __future__ import annotations

from convlab.plugin.contract import Config
from convlab.problem import Problem

from .plan import sizes

FMA_EPS = 2.0**-23  # direct's compute_eps for float32
#: (NH, NW) -> growth, measured: results/transform_accuracy/cpu/ebac156/accuracy.json ("fft") x 1.25
GROWTH_2D = {(4, 4): 3.4, (8, 8): 2.9, (16, 16): 3.6, (32, 32): 4.7}
GROWTH_1D = {(1, 16): 5.3, (1, 64): 6.3, (1, 256): 5.7, (1, 1024): 6.8}


def growth(problem: Problem, config: Config) -> float:
    nf = sizes(problem, int(config["n"])) or (1, int(config["n"]))
    table = GROWTH_1D if nf[0] == 1 else GROWTH_2D
    points = nf[0] * nf[1]
    fits = [v for (h, w), v in sorted(table.items(), key=lambda kv: kv[0][0] * kv[0][1]) if h * w >= points]
    return float(fits[0] if fits else max(table.values()))


def worst_eps() -> float:
    return FMA_EPS * max(*GROWTH_2D.values(), *GROWTH_1D.values())


def label(problem: Problem, config: Config) -> str:
    nf = sizes(problem, int(config["n"])) or (1, int(config["n"]))
    return f"{nf[1]}-point" if nf[0] == 1 else f"{nf[0]}x{nf[1]}"


def note(problem: Problem, config: Config) -> str:
    """explain's line: the transform size, its declared growth and eps."""
    g = growth(problem, config)
    return f"FFT {label(problem, config)}: {g:g}x fp32 FMA's rounding error (eps {FMA_EPS * g:.2g})"
