"""convlab.kernels.data.splitk: the split-K plan and the ordered, bit-deterministic sum of partials."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.data.splitk import MAX_INDEX, sm_count, split_plan, sum_partials


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sum_partials_is_the_ordered_sum_bit_for_bit(dtype):
    rng = np.random.default_rng(11)
    splits, shape = 5, (3, 7, 5)  # 105 elements: two blocks of 64 threads on the simulator
    # magnitudes spread over many binades, so that another summation order would change the bits
    part = (rng.standard_normal((splits,) + shape) * 10.0 ** rng.integers(-6, 7, (splits,) + shape))
    part = part.astype(dtype)
    base = rng.standard_normal(shape).astype(dtype)
    want = part[0].copy()
    for s in range(1, splits):  # the documented order, in the dtype's own arithmetic
        want = want + part[s]
    dpart = runtime.to_device(part)
    results = []
    for _ in range(2):
        out = runtime.full(shape, np.nan, dtype)
        sum_partials(dpart, out, splits)
        results.append(out.copy_to_host())
    np.testing.assert_array_equal(results[0], want)
    assert results[0].tobytes() == results[1].tobytes()
    reversed_sum = part[::-1].sum(axis=0, dtype=dtype)  # the test can fail: order matters here
    assert not np.array_equal(reversed_sum, want)
    out = runtime.to_device(base)
    sum_partials(dpart, out, splits, accumulate=True)
    np.testing.assert_array_equal(out.copy_to_host(), want + base)
    exact = part.astype(np.float64).sum(axis=0)
    assert np.linalg.norm(results[0] - exact) <= 8 * np.finfo(dtype).eps * np.linalg.norm(np.abs(part).sum(0))


@pytest.mark.parametrize("inner", [1, 6])  # NHWC (channel fastest), NCHW (channel stride H*W = 6)
def test_sum_partials_adds_a_channel_bias_once_after_the_sum(inner):
    rng = np.random.default_rng(12)
    splits, size, channels = 3, 2 * 5 * 6, 5
    part = rng.standard_normal((splits, size)).astype(np.float32)
    bias = (rng.standard_normal(channels) * 100).astype(np.float32)
    want = part[0] + part[1] + part[2] + bias[(np.arange(size) // inner) % channels]
    out = runtime.full((size,), np.nan, np.float32)
    sum_partials(runtime.to_device(part), out, splits, bias=runtime.to_device(bias), inner=inner)
    np.testing.assert_array_equal(out.copy_to_host(), want)
    with pytest.raises(TypeError, match="bias"):
        sum_partials(runtime.to_device(part), out, splits, bias=runtime.to_device(bias.astype(np.float64)))
    with pytest.raises(ValueError, match="inner"):
        sum_partials(runtime.to_device(part), out, splits, bias=runtime.to_device(bias), inner=0)


@pytest.mark.parametrize("out_kind", ["float16", "bfloat16"])
def test_sum_partials_rounds_into_a_half_output_in_one_pass(out_kind):
    """float32 partials into an fp16 / bf16 (uint16 bits) out: the ordered float32 sum plus the bias
    (widened from out's type), rounded to nearest even as it is stored, as convert.narrow rounds."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    half = np.float16 if out_kind == "float16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(13)
    splits, size, channels, inner = 3, 2 * 4 * 6, 4, 6
    part = rng.standard_normal((splits, size)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(half)
    total = part[0] + part[1] + part[2] + bias.astype(np.float32)[(np.arange(size) // inner) % channels]
    want = total.astype(half)  # numpy / ml_dtypes: round to nearest even
    bits = np.uint16 if out_kind == "bfloat16" else np.float16
    out = runtime.full((size,), 0, bits)
    sum_partials(runtime.to_device(part), out, splits, bias=runtime.to_device(bias.view(bits)), inner=inner,
                 out_kind=out_kind)
    np.testing.assert_array_equal(out.copy_to_host().view(half), want)
    with pytest.raises(ValueError, match="accumulate"):
        sum_partials(runtime.to_device(part), out, splits, accumulate=True, out_kind=out_kind)
    with pytest.raises(TypeError, match="out_kind"):
        sum_partials(runtime.to_device(part), runtime.full((size,), 0, np.float32), splits, out_kind=out_kind)


def test_sum_partials_rejects_bad_arguments():
    part = runtime.to_device(np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        sum_partials(part, runtime.to_device(np.zeros(4, np.float64)), 2)
    with pytest.raises(ValueError, match="splits=3"):
        sum_partials(part, runtime.to_device(np.zeros(4, np.float32)), 3)
    with pytest.raises(ValueError, match="splits=0"):
        sum_partials(part, runtime.to_device(np.zeros(4, np.float32)), 0)
    with pytest.raises(TypeError, match="part must be a device array"):
        sum_partials(np.zeros(8, np.float32), runtime.to_device(np.zeros(4, np.float32)), 2)


def test_split_plan_fills_the_device_within_the_limit():
    assert sm_count() == runtime.target().sm_count == (2 if runtime.target().simulator else sm_count())
    tiles, k_len, bk, threads = 1, 64 * 16, 16, 256
    splits, chunk = split_plan(tiles, k_len, bk, threads, 256, 1 << 30)
    assert splits == min(2 * sm_count(), 64 // 8) and chunk % bk == 0 and splits * chunk >= k_len
    assert chunk // bk >= 8  # every split keeps at least min_tiles_per_split slices
    # the workspace (splits * out_elems + tiles) * 4 bytes stays within the limit
    limit = (3 * 256 + tiles) * 4
    assert split_plan(tiles, k_len, bk, threads, 256, limit)[0] <= 3
    assert split_plan(tiles, k_len, bk, threads, 256, limit - 1)[0] <= 2
    assert split_plan(tiles, k_len, bk, threads, 256, 0) == (1, k_len)
    assert split_plan(10 ** 6, k_len, bk, threads, 256, 1 << 30) == (1, k_len)  # enough tiles already
    assert split_plan(1, k_len, bk, threads, MAX_INDEX, 1 << 62) == (1, k_len)  # 32-bit indexing
