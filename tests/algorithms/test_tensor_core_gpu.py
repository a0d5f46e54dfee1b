"""The tensor_core plugin at GPU tile sizes: every op x dtype on shapes with padding, stride, dilation,
bias and remainders in M and N, every config (one with bias), through ``plugin.run`` on device arrays
(bf16 as its uint16 bits) into NaN-poisoned outputs, against the float64 reference; and the public op
on fp16 / bf16 host arrays. GPU only: the GPU configs' tiles (64-256 wide) would take minutes each on
the simulator, where tests/algorithms/test_tensor_core.py and the conformance suite run the smallest
tile instead."""
import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.measure import random_operands, rel_error, tolerance
from convlab.plugin import registry
from convlab.problem import np_dtype

pytestmark = pytest.mark.skipif(runtime.SIMULATOR, reason="needs a real CUDA GPU (GPU tile sizes)")

DTYPES = ("float16", "bfloat16", "float32")  # float32 = TF32 under precision "high"
CASES = [  # (op, n, c, h, w, k, r, s, options)
    ("forward", 2, 16, 9, 11, 24, 3, 3, dict(padding=1, bias=True)),
    ("forward", 3, 32, 17, 13, 40, 3, 2, dict(stride=2, dilation=(1, 2), padding=(1, 0))),
    ("forward", 2, 8, 15, 15, 136, 1, 1, {}),
    ("forward", 4, 64, 14, 14, 130, 5, 5, dict(padding=2, stride=(1, 2))),
    ("dgrad", 2, 24, 9, 11, 16, 3, 3, dict(padding=1, bias=True)),
    ("dgrad", 3, 40, 10, 12, 32, 3, 3, dict(dilation=2, padding=(0, 3))),
    ("dgrad", 2, 136, 7, 7, 64, 1, 1, {}),
    ("wgrad", 2, 24, 9, 11, 16, 3, 3, dict(padding=1)),
    ("wgrad", 3, 40, 10, 12, 32, 3, 3, dict(stride=2, dilation=2, padding=(0, 3))),
    ("wgrad", 8, 136, 7, 7, 64, 1, 1, {}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1:8]))}")
def test_every_config_matches_float64(case, dtype):
    op, n, c, h, w, k, r, s, opts = case
    plugin = registry.get("tensor_core")
    with convlab.float32_precision("high"):
        pr = convlab.make_problem(op, n, c, h, w, k, r, s, dtype=dtype, **opts)
        verdict = plugin.applicable(pr)
        if not verdict:
            pytest.skip(f"declined: {verdict.reason}")
        host = random_operands(pr, np.random.default_rng(7))
        dev = [None if v is None else runtime.to_device(runtime.kernel_view(v)) for v in host]
        want = reference.solve(pr, *host)
        tol = tolerance(pr, plugin.compute_eps(dtype))
        configs = plugin.configs(pr)
        for config in configs[:1] if pr.bias else configs:  # one config with bias: fewer compiles
            out = runtime.to_device(runtime.kernel_view(  # NaN poison (bf16: bits 0x7FC0)
                np.full(pr.operand_shapes[2], np.nan, np_dtype(dtype))))
            plugin.run(pr, config, *dev, out, workspace_limit=2**30)
            runtime.synchronize()
            got = np.asarray(out.copy_to_host().view(np_dtype(dtype)), np.float64)
            assert rel_error(got, want) <= tol, config.name


def test_float32_is_declined_under_highest():
    pr = convlab.make_problem("forward", 1, 16, 8, 8, 16, 3, 3, dtype="float32")
    with convlab.float32_precision("highest"):
        verdict = registry.get("tensor_core").applicable(pr)
    assert not verdict and "high" in verdict.reason


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_public_op_on_half_precision_host_arrays(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 12, 12)).astype(np_dtype(dtype))
    w = rng.standard_normal((32, 16, 3, 3)).astype(np_dtype(dtype))
    y = convlab.conv2d(x, w, padding=1, algorithm="tensor_core")
    y = y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)
    pr = convlab.make_problem("forward", 2, 16, 12, 12, 32, 3, 3, padding=1, dtype=dtype)
    assert y.dtype == np_dtype(dtype)
    assert rel_error(y, reference.solve(pr, x, w)) <= tolerance(pr, 2**-23)
