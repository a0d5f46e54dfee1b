"""Named kernel parameters packed into one int32 device array.

A kernel with many scalar parameters (the implicit-GEMM kernels: sizes, strides, padding, split-K
plan) takes them as the head of one int32 array, so a launch passes a few arrays and no scalars. A
:class:`ParamTable` names the fields once: the host packs values by name (``pack``) and the kernel reads
field ``f`` as ``prm[at.f]``, where ``at`` is the table's :attr:`ParamTable.at`, a namedtuple of field
positions that Numba folds to constant indices.

    FORWARD = ParamTable("M", "N", "K")
    FORWARD.pack(M=64, N=32, K=9)          -> np.array([64, 32, 9], int64)
    at = FORWARD.at;  M = prm[at.M]        (inside the kernel, ``at`` a closure constant)
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np


class ParamTable:
    """An ordered set of named int32 kernel parameters.

    ``fields``: the names, in array order; ``at``: a namedtuple mapping each name to its position;
    ``len(table)``: the number of fields (where data after the parameters starts)."""

    def __init__(self, *fields: str) -> None:
        if len(set(fields)) != len(fields):
            raise ValueError(f"parameter names must be unique, got {fields}")
        self.fields = fields
        self.at: Any = namedtuple("At", fields)(*range(len(fields)))

    def __len__(self) -> int:
        return len(self.fields)

    def __add__(self, more: "ParamTable") -> "ParamTable":
        """This table's fields followed by ``more``'s (a kernel variant that needs a few more)."""
        return ParamTable(*self.fields, *more.fields)

    def pack(self, **values: int) -> np.ndarray:
        """The values in field order as an int64 array (shape (len(self),)); ValueError naming any
        missing or unknown field."""
        missing = [f for f in self.fields if f not in values]
        unknown = [f for f in values if f not in self.at._fields]
        if missing or unknown:
            raise ValueError(f"parameters: missing {missing}, unknown {unknown}")
        return np.array([values[f] for f in self.fields], np.int64)
