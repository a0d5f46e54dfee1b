"""What the tensor_core test files share: the plugin, its split-K plans as on the simulator, a call
spy and one checked run."""
import numpy as np
import pytest

from convlab import reference, runtime
from convlab.kernels.data import layouts
from convlab.algorithms.tensor_core import gather as tc_gather, wgrad as tc_wgrad
from convlab.measure import random_operands, rel_error, tolerance
from convlab.plugin import registry
from convlab.problem import np_dtype

TC = registry.get("tensor_core")


@pytest.fixture
def split_like_the_simulator(monkeypatch):
    """Split-K plans as on the simulator (MIN_SPLIT_K_GPU 1, wgrad's MIN_KTILES_GPU 1), so that these tiny
    problems split the same way on a GPU; a test that wants another value sets its own."""
    monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_GPU", 1)
    monkeypatch.setattr(tc_wgrad, "MIN_KTILES_GPU", 1)


def spy(monkeypatch, module, name):
    """A list that records one entry per call of ``module.name`` (which still runs)."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def run_tc(problem, seed=0, nhwc_out=False, outputs=None):
    """(relative error, tolerance) of one run on random operands into a NaN-poisoned output (NCHW or
    channels-last); ``outputs`` (a list) collects (host output, host bias or None)."""
    host = random_operands(problem, np.random.default_rng(seed))
    dev = [None if v is None else runtime.to_device(v) for v in host]
    nan = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = layouts.channels_last_copy(nan) if nhwc_out else runtime.to_device(nan)
    TC.run(problem, TC.configs(problem)[0], *dev, out, workspace_limit=2**28)
    got = runtime.to_host(out)
    assert got.dtype == np.dtype(problem.dtype)
    if outputs is not None:
        outputs.append((got.astype(np.float64), None if host[2] is None else host[2].astype(np.float64)))
    return rel_error(got, reference.solve(problem, *host)), tolerance(problem, TC.compute_eps(problem.dtype))


def run_layouts(problem, lasts, seed=0, plugin=TC):
    """(relative error, tolerance) of one run of ``plugin``'s first config on random operands, a, b and a
    NaN-poisoned out channels-last where ``lasts`` says (the tolerance read under the caller's precision)."""
    host = random_operands(problem, np.random.default_rng(seed))
    a, b = (layouts.channels_last_copy(h) if last else runtime.to_device(h) for h, last in zip(host[:2], lasts))
    bias = None if host[2] is None else runtime.to_device(host[2])
    nan = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = layouts.channels_last_copy(nan) if lasts[2] else runtime.to_device(nan)
    plugin.run(problem, plugin.configs(problem)[0], a, b, bias, out, workspace_limit=2**28)
    got = runtime.to_host(out)
    assert not np.isnan(got.astype(np.float64)).any()
    return rel_error(got, reference.solve(problem, *host)), tolerance(problem, plugin.compute_eps(problem.dtype))
