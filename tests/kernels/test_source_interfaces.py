"""The interfaces generated kernels are written with: Writer blocks, named parameter tables, and the
tensor-core pipeline's loader / store interface (no-op defaults, required methods named when missing)."""
from __future__ import annotations

import numpy as np
import pytest

from convlab.kernels.params import ParamTable
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core.config import TcConfig
from convlab.kernels.tensor_core.copy import ALoader
from convlab.kernels.tensor_core.epilogue import Store
from convlab.kernels.tensor_core.warp import pipeline_source


def test_writer_blocks_indent_their_lines_and_none_leaves_them_as_they_are():
    w = Writer("def f(x, n):")
    w.indent()
    with w.block("for i in range(n):"):
        with w.block("if x > i:"):
            w("x -= 1")
        with w.block(None):
            w("x += 2")
    w("return x")
    assert w.source == ("def f(x, n):\n    for i in range(n):\n        if x > i:\n            x -= 1\n"
                        "        x += 2\n    return x\n")


def test_param_table_packs_by_name_and_reads_by_position():
    head = ParamTable("M", "N")
    table = head + ParamTable("K")
    assert table.fields == ("M", "N", "K") and len(table) == 3
    assert (table.at.M, table.at.N, table.at.K) == (0, 1, 2)
    np.testing.assert_array_equal(table.pack(K=9, M=64, N=32), [64, 32, 9])
    with pytest.raises(ValueError, match=r"missing \['K'\], unknown \['Q'\]"):
        table.pack(M=1, N=2, Q=3)
    with pytest.raises(ValueError, match="unique"):
        head + ParamTable("N")


class _Partial(ALoader):
    """A loader that forgets ``chunk``."""

    params = "A, Bt, C, M, N, K"

    def rows(self, w, e, m, batch):
        w(f"aok{e} = {m} < M")


class _Store(Store):
    contig, array, dtype = "n", "C", np.float32

    def row(self, w, row, batch):
        w(f"cb = U({row} * N)")

    def addr(self, col):
        return f"U(cb + {col})"

    def value(self, col, v):
        return v


def test_a_loader_missing_a_required_method_is_named_and_optional_hooks_write_nothing():
    cfg = TcConfig(32, 32, 16, 16, 32, 2)
    with pytest.raises(NotImplementedError, match="_Partial reads a k-contiguous A: it must define chunk"):
        pipeline_source(cfg, "f16", _Partial(), _Store(), "gemm")
    w = Writer()
    loader = _Partial()
    loader.start(w, "kk")
    loader.ktile(w, "k0", "kk")
    loader.advance(w, 16)
    assert w.lines == [] and loader.array == "A" and not loader.batched and loader.b_stride == "K"


def test_the_pipeline_passes_its_names_to_the_loader():
    """The conv gather reads the pipeline's k-bounds test through the name it is given."""
    loader = tc_conv.GatherA()
    ok, off = loader.chunk(0, "kk", "k_in")
    assert "k_in" in ok and "kok" not in ok and off == "U(ab0 + koff)"
    src = tc_conv.kernel_source("f16", TcConfig(32, 32, 16, 16, 32, 2))
    assert "kok = kk < K" in src and "ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W" in src
