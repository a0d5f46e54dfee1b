"""Placeholder; replaced by measured constants."""
from __future__ import annotations

HIGHEST_LIMIT = 10.0
FMA_EPS = 2.0**-23


def label(problem, config):
    return f"m={config['m']}"


def growth(problem, config):
    return 1.0 + config["m"]


def eps(problem, config):
    return FMA_EPS * growth(problem, config) * (2**13 if config.get("gemm") == "tc" and problem.dtype != "float32" else 1)


def worst_eps(dtype):
    return FMA_EPS * 8 * (2**13 if dtype != "float32" else 1)


def note(problem, config):
    return ""
