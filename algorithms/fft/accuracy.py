"""Placeholder until measured."""
from __future__ import annotations

FMA_EPS = 2.0**-23
HIGHEST_LIMIT = 10.0


def label(problem, config):
    return f"n={config['n']}"


def growth(problem, config):
    return 4.0


def worst_eps():
    return FMA_EPS * 8


def note(problem, config):
    return ""
