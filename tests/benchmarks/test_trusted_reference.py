"""The benchmarks' float64 references (convlab.bench.trusted): never a convlab plugin, above the host
limit too and when cuDNN's float64 run fails, each named in the row it checks."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import make_problem, reference
from convlab.bench import harness, trusted
from convlab.bench.harness import BenchOptions
from convlab.bench.suite import single_shape_suite
from convlab.plugin import registry

PROBLEMS = [make_problem("forward", 5, 4, 5, 5, 6, 3, 3, stride=2, padding=1, groups=2, bias=True),
            make_problem("dgrad", 5, 4, 5, 5, 6, 3, 3, padding=1, bias=True),
            make_problem("wgrad", 5, 4, 5, 5, 6, 3, 3, dilation=2, padding=2)]


def _host(problem):
    rng = np.random.default_rng(1)
    shapes = list(problem.operand_shapes[:2]) + [problem.bias_shape]
    return tuple(None if s is None else rng.standard_normal(s).astype(np.float32) for s in shapes)


@pytest.fixture
def above_the_host_limit(monkeypatch):
    monkeypatch.setattr(trusted, "HOST_REFERENCE_MAX_FLOPS", 0)


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.op for p in PROBLEMS])
def test_numpy_in_chunks_equals_the_whole(problem):
    host = _host(problem)
    whole = reference.solve(problem, *[None if v is None else v.astype(np.float64) for v in host])
    for images in (1, 2, 5):
        np.testing.assert_allclose(trusted.chunked_numpy(problem, host, images), whole, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.op for p in PROBLEMS])
def test_above_the_limit_a_failing_cudnn_gives_torch_on_the_cpu(problem, above_the_host_limit):
    pytest.importorskip("torch")
    host = _host(problem)

    def out_of_memory():
        raise MemoryError("float64 on purpose")

    got = trusted.float64_reference(problem, host, out_of_memory)
    assert got.name == "torch float64 on the CPU (cudnn float64 failed: MemoryError: float64 on purpose)"
    assert got.eps == 0
    np.testing.assert_allclose(got.output, trusted.chunked_numpy(problem, host, problem.n), rtol=1e-10,
                               atol=1e-10)


def test_without_torch_numpy_in_chunks_and_cudnn_first(above_the_host_limit, monkeypatch):
    problem, host = PROBLEMS[0], _host(PROBLEMS[0])
    assert trusted.float64_reference(problem, host, lambda: np.ones(3)).name == "cudnn float64"

    def no_torch(*args):
        raise ImportError("no torch here")

    monkeypatch.setattr(trusted, "torch_cpu", no_torch)
    monkeypatch.setattr(trusted, "CHUNK_BYTES", 8 * 600)  # two images a chunk
    got = trusted.float64_reference(problem, host)
    assert got.name == f"host float64 in chunks of {trusted.chunk_images(problem)} images"
    assert 1 < trusted.chunk_images(problem) < problem.n
    np.testing.assert_allclose(got.output, trusted.chunked_numpy(problem, host, problem.n), rtol=1e-12)


def test_the_bench_row_names_its_reference_and_no_plugin_computes_it(above_the_host_limit, monkeypatch):
    pytest.importorskip("torch")
    runs = []
    direct = type(registry.get("direct"))
    real_run, real_reference = direct.run, harness.float64_reference

    def counted(self, *args, **kwargs):
        runs.append(1)
        return real_run(self, *args, **kwargs)

    def reference_without_plugins(*args, **kwargs):
        got = real_reference(*args, **kwargs)
        assert not runs, "a plugin ran while the reference was computed"
        return got

    monkeypatch.setattr(direct, "run", counted)
    monkeypatch.setattr(harness, "float64_reference", reference_without_plugins)
    ((entry, problem),) = single_shape_suite({"x": [1, 2, 4, 4], "w": [2, 2, 3, 3]}).problems(["wgrad"])
    res = harness.bench_problem("t", entry, problem, BenchOptions(ops=("wgrad",), plugins=("direct",),
                                                                  auto=False))
    assert res.reference == "torch float64 on the CPU" and res.candidates[0].status == "ok" and runs
