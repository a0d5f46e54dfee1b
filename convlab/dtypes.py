"""Operand dtypes: their names, numpy dtypes and unit roundoffs (shared by the problem model and the
tolerances)."""
from __future__ import annotations

import numpy as np

#: Operand dtypes. float16 and bfloat16 (``ml_dtypes.bfloat16`` numpy arrays) accumulate in fp32 and
#: write outputs in the input dtype.
DTYPES = ("float32", "float64", "float16", "bfloat16")
HALF_DTYPES = ("float16", "bfloat16")


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a :data:`DTYPES` name (bfloat16 through ``ml_dtypes``, imported only here)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_name(dtype: object) -> str | None:
    """The :data:`DTYPES` name of a dtype-like (numpy dtype, ``ml_dtypes`` type, torch dtype text), or
    None when it is none of them."""
    text = str(dtype).replace("torch.", "")
    if text in DTYPES:
        return text
    try:
        return np.dtype(dtype).name if np.dtype(dtype).name in DTYPES else None  # type: ignore[arg-type]
    except TypeError:
        return None


def unit_roundoff(name: str) -> float:
    """Machine epsilon of a dtype's storage (2**-10 float16, 2**-7 bfloat16, 2**-23 float32, ...)."""
    return {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}[name]
