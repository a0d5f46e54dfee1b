"""convlab.kernels.arch.intrinsics and .source: the vector load, the u32 cast, generated source."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.arch.intrinsics import load_cg, store_vector, u32, vector_load
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import cuda


@pytest.mark.parametrize("width, dtype", [(2, "float32"), (4, "float32"), (2, "float64"), (4, "float64"),
                                          (8, "float16")])
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
    with pytest.raises(ValueError, match="2, 4 or 8 wide"):
        vector_load(3)


@pytest.mark.parametrize("width, dtype", [(4, "float32"), (8, "float16"), (8, "uint16"), (2, "float64")])
def test_store_vector_writes_width_elements_cast_to_the_array_type(width, dtype):
    @runtime.jit
    def kernel(dst):  # float32 values of each thread's run of width elements, cast to dst's dtype
        i = u32(cuda.threadIdx.x) * u32(width)
        v = np.float32(i) + np.float32(1.0)
        if width == 2:
            store_vector(dst, i, (v, v + np.float32(1.0)))
        elif width == 4:
            store_vector(dst, i, (v, v + np.float32(1.0), v + np.float32(2.0), v + np.float32(3.0)))
        else:
            store_vector(dst, i, (v, v + np.float32(1.0), v + np.float32(2.0), v + np.float32(3.0),
                                  v + np.float32(4.0), v + np.float32(5.0), v + np.float32(6.0), v + np.float32(7.0)))

    dst = runtime.full((3 * width,), 0, dtype)
    kernel[1, 3](dst)
    np.testing.assert_array_equal(dst.copy_to_host(), np.arange(1, 3 * width + 1).astype(dtype))


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
