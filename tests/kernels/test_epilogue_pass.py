"""The epilogue pass (convlab.kernels.epilogue) against the float64 reference: every activation and
dtype, the residual before and after, NCHW and channels-last outputs and residuals, 1D-3D."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import reference, runtime
from convlab.dtypes import DTYPES, np_dtype, unit_roundoff
from convlab.epilogue import ACTIVATIONS, Epilogue
from convlab.kernels.data import layouts
from convlab.kernels.epilogue import apply_epilogue, compute_dtype, fused_store, fused_store_vector
from convlab.runtime import cuda
from convlab.measure import rel_error


def _device(host: np.ndarray, channels_last: bool):
    """A device copy of ``host`` (N, C, *spatial), C-contiguous or with channels-last memory."""
    if not channels_last:
        return runtime.to_device(host)
    moved = np.ascontiguousarray(np.moveaxis(host, 1, -1))
    return layouts.channels_last_view(runtime.to_device(moved), host.shape, host.dtype)


def _host(dev, shape: tuple, channels_last: bool) -> np.ndarray:
    flat = runtime.to_host(runtime.flat_view(dev))
    if not channels_last:
        return flat.reshape(shape)
    return np.moveaxis(flat.reshape((shape[0],) + shape[2:] + (shape[1],)), -1, 1)


def _run(shape, dtype, epi, y_cl=False, r_cl=False, seed=0):
    rng = np.random.default_rng(seed)
    kind = np_dtype(dtype)
    y = (rng.standard_normal(shape) * 3).astype(kind)
    r = rng.standard_normal(shape).astype(kind) if epi.residual else None
    scale = rng.standard_normal(shape[1]) if epi.scale else None
    shift = rng.standard_normal(shape[1]) if epi.shift else None
    want = reference.epilogue(y.astype(np.float64), epi, scale, shift,
                              None if r is None else r.astype(np.float64))
    dy = _device(y, y_cl)
    vectors = [None if v is None else runtime.to_device(v.astype(compute_dtype(dtype))) for v in (scale, shift)]
    apply_epilogue(dy, epi, dtype, y_channels_last=y_cl, residual=None if r is None else _device(r, r_cl),
                   residual_channels_last=r_cl, scale=vectors[0], shift=vectors[1])
    return _host(dy, shape, y_cl), want


def _bound(dtype: str) -> float:
    """A few roundings of the compute type plus the output's rounding."""
    return unit_roundoff(dtype) + 16 * float(np.finfo(compute_dtype(dtype)).eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation_and_dtype(dtype, activation):
    epi = Epilogue(activation, 0.2, True, True, "before")
    got, want = _run((2, 3, 3, 4), dtype, epi)
    assert rel_error(got, want) <= _bound(dtype)


@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 3, 5), (2, 3, 2, 3, 2)], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("y_cl, r_cl", [(False, True), (True, False), (True, True)])
def test_layouts_and_ranks(shape, y_cl, r_cl):
    epi = Epilogue("silu", scale=True, residual="after")
    got, want = _run(shape, "float32", epi, y_cl, r_cl, seed=len(shape))
    assert rel_error(got, want) <= _bound("float32")


@pytest.mark.parametrize("shape", [(3, 5, 4, 4), (2, 3, 9, 9)], ids=["several_steps", "period_over_wave"])
@pytest.mark.parametrize("y_cl, r_cl", [(False, False), (False, True), (True, False), (True, True)])
def test_each_thread_walks_its_channel_over_several_steps(shape, y_cl, r_cl):
    """More elements than the simulator's wave of 128 threads: a thread keeps its channel over several
    steps (NCHW: one per image; channels-last: every step of a multiple of K), and a channel period
    longer than the wave takes one step of the period."""
    epi = Epilogue("relu6", scale=True, shift=True, residual="before")
    got, want = _run(shape, "float32", epi, y_cl, r_cl, seed=7)
    assert rel_error(got, want) <= _bound("float32")


@pytest.mark.parametrize("epi", [Epilogue("relu"), Epilogue(shift=True), Epilogue("hardswish", residual="before")])
def test_partial_epilogues(epi):
    got, want = _run((1, 5, 2, 3), "float64", epi)
    assert rel_error(got, want) <= _bound("float64")


def test_identity_and_empty_outputs_are_left_alone():
    y = runtime.to_device(np.full((1, 2, 3), np.nan, np.float32))
    apply_epilogue(y, Epilogue(), "float32")
    empty = runtime.to_device(np.zeros((0, 2, 3), np.float32))
    apply_epilogue(empty, Epilogue("relu"), "float32")
    assert np.isnan(runtime.to_host(y)).all()


def test_operands_must_match_the_description():
    y = runtime.to_device(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="scale"):
        apply_epilogue(y, Epilogue(scale=True), "float32")
    with pytest.raises(ValueError, match="residual"):
        apply_epilogue(y, Epilogue(), "float32", residual=y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("channel_step", [0, 1])
def test_vector_write_out_is_the_element_write_out_bit_for_bit(dtype, channel_step):
    """fused_store_vector's 16 bytes (one residual load, one store) hold fused_store's values, element by
    element: a run of pixels of one channel (channel_step 0, NCHW) or of consecutive channels (1)."""
    epi = Epilogue("hardswish", scale=True, shift=True, residual="after")
    kind = np_dtype(dtype)
    width = 16 // kind.itemsize
    ct = compute_dtype(dtype)
    put, putv = fused_store(dtype, epi), fused_store_vector(dtype, epi, width, channel_step)
    rng = np.random.default_rng(3)
    staged = (rng.standard_normal(2 * width) * 4).astype(np.float32)
    residual = rng.standard_normal(2 * width).astype(np.float32)
    residual = residual.astype(np.float16).view(np.uint16) if dtype == "bfloat16" else residual.astype(kind)
    scale, shift = (runtime.to_device(rng.standard_normal(2 * width).astype(ct)) for _ in range(2))

    @runtime.jit
    def both(one, vec, cs, r, sc, sh):  # thread 0: element by element; thread 1: one vector each run
        for run in range(2):
            at, k = run * width, run * width // 2
            if cuda.threadIdx.x == 0:
                for e in range(width):
                    put(one, at + e, cs[at + e], k + e * channel_step, (r, sc, sh))
            else:
                putv(vec, at, cs, at, k, (r, sc, sh))

    store = np.uint16 if dtype == "bfloat16" else kind
    one, vec = (runtime.full((2 * width,), 0, store) for _ in range(2))
    both[1, 2](one, vec, runtime.to_device(staged), runtime.to_device(residual), scale, shift)
    got, want = vec.copy_to_host(), one.copy_to_host()
    assert np.any(want != 0)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
