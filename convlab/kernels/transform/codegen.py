"""Unrolled small matrix products for generated kernels: a constant matrix applied to named scalars.

    consts = Constants("float32")
    apply(w, consts, M, ["d0", "d1", "d2", "d3"], ["v0", "v1", "v2", "v3"])
    # v0 = d0 - d2      (M's zeros skipped, +-1 as additions, other entries as named float32 constants)
    consts.namespace  # {"K0": np.float32(0.5), ...}: the constants the source names

Each output is one chained expression over its non-zero terms, in column order, so the rounding of a
transform is fixed by its matrix. Constants are module-level names of the kernel's namespace, typed as
the arithmetic's float (a bare Python float literal would make Numba compute in float64).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from convlab.kernels.source import Writer


class Constants:
    """The distinct non-unit magnitudes a kernel's matrices hold, each a named constant of ``dtype``."""

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = np.dtype(dtype)
        self.names: dict[float, str] = {}

    def name(self, value: float) -> str:
        value = float(value)
        if value not in self.names:
            self.names[value] = f"K{len(self.names)}"
        return self.names[value]

    @property
    def namespace(self) -> dict[str, object]:
        return {name: self.dtype.type(value) for value, name in self.names.items()}


def expression(consts: Constants, row: Sequence[float], names: Sequence[str]) -> str:
    """sum_j row[j] * names[j] as source text ("zero" when the row is all zeros)."""
    text = ""
    for coef, name in zip(row, names):
        coef = float(coef)
        if coef == 0.0:
            continue
        mag = abs(coef)
        term = name if mag == 1.0 else f"{consts.name(mag)} * {name}"
        if not text:
            text = term if coef > 0 else f"-{term}" if mag == 1.0 else f"-({term})"
        else:
            text += f" + {term}" if coef > 0 else f" - {term}"
    return text or "zero"


def apply(w: Writer, consts: Constants, matrix: np.ndarray, ins: Sequence[str], outs: Sequence[str]) -> None:
    """Emit ``outs[i] = sum_j matrix[i, j] * ins[j]`` for every row i."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.shape != (len(outs), len(ins)):
        raise ValueError(f"matrix {matrix.shape} does not map {len(ins)} inputs to {len(outs)} outputs")
    for i, out in enumerate(outs):
        w(f"{out} = {expression(consts, matrix[i], ins)}")


def apply_2d(w: Writer, consts: Constants, mh: np.ndarray, mw: np.ndarray, src: str, dst: str) -> None:
    """Emit ``dst = mh @ src @ mw^T`` on scalars named ``{src}_{a}_{b}`` (rows a, columns b), through
    ``{dst}t_{a}_{j}`` (the rows transformed first), into ``{dst}_{i}_{j}``."""
    mh, mw = np.atleast_2d(mh), np.atleast_2d(mw)
    rows, cols = mh.shape[1], mw.shape[1]
    for a in range(rows):
        apply(w, consts, mw, [f"{src}_{a}_{b}" for b in range(cols)], [f"{dst}t_{a}_{j}" for j in range(mw.shape[0])])
    for j in range(mw.shape[0]):
        apply(w, consts, mh, [f"{dst}t_{a}_{j}" for a in range(rows)], [f"{dst}_{i}_{j}" for i in range(mh.shape[0])])
