"""convlab.kernels.arch.intrinsics and .source: the vector load, the u32 cast, generated source."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.arch.intrinsics import load_cg, u32, vector_load
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import cuda


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vector_load_reads_width_consecutive_elements(width, dtype):
    load = vector_load(width)
    assert vector_load(width) is load  # one intrinsic per width

    @runtime.jit
    def kernel(src, dst):  # a global array: aligned to 256 bytes, each thread's run to width elements
        i = u32(cuda.threadIdx.x) * u32(width)
        values = load(src, i)
        for v in range(width):
            dst[i + v] = values[v] + load_cg(src, i + v)

    src = np.arange(2 * width, dtype=dtype) + 0.5
    dst = runtime.full((2 * width,), np.nan, dtype)
    kernel[1, 2](runtime.to_device(src), dst)
    np.testing.assert_array_equal(dst.copy_to_host(), 2 * src)
    with pytest.raises(ValueError, match="2 or 4 wide"):
        vector_load(3)


def test_writer_and_compile_source_keep_tracebacks_readable():
    w = Writer("def f(x):")
    w.indent()
    w("if x:")
    w("    raise ValueError(x)")
    w("return u32(x + 1)")
    assert w.source == "def f(x):\n    if x:\n        raise ValueError(x)\n    return u32(x + 1)\n"
    namespace = compile_source(w.source, "<test generated f>", {"u32": u32})
    assert namespace["f"](0) == 1 and isinstance(namespace["f"](0), np.uint32)
    assert linecache.getline("<test generated f>", 3).strip() == "raise ValueError(x)"
    with pytest.raises(ValueError) as info:
        namespace["f"](5)
    assert "raise ValueError(x)" in str(info.traceback[-1])
