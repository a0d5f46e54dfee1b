"""convlab.kernels.data.transpose: the layout copy, element kernel, 16-bit pairs kernel and short-rows
kernel, against numpy."""
import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.data import transpose


def _copy(src: np.ndarray, padded: int, flip: int = 0) -> np.ndarray:
    batch, channels, spatial = src.shape
    dst = runtime.full((batch * spatial * padded,), np.nan if src.dtype.kind == "f" else 7, src.dtype)
    transpose.to_channels_last(runtime.to_device(src.reshape(-1)), dst, batch, channels, spatial, padded,
                               flip=flip)
    return dst.copy_to_host().reshape(batch, spatial, padded)


def _want(src: np.ndarray, padded: int) -> np.ndarray:
    want = np.zeros((src.shape[0], src.shape[2], padded), src.dtype)
    want[..., :src.shape[1]] = src.transpose(0, 2, 1)
    return want


@pytest.mark.parametrize("dtype,shape,padded,kernel", [
    ("float16", (2, 5, 18), 8, "pairs"),      # odd channels padded, several tiles each way
    ("uint16", (1, 12, 20), 12, "pairs"),     # bf16 bits
    ("float16", (2, 5, 17), 8, "element"),    # odd spatial: the element kernel
    ("float32", (2, 3, 20), 4, "element"),    # 32-bit: the element kernel
    ("float16", (3, 5, 9), 8, "rows"),        # a 3x3 filter's 9: the rows kernel, padded channels
    ("float32", (2, 300, 1), 300, "rows"),    # a 1x1 filter, more threads than one block (256 on a GPU)
])
def test_copy_pads_channels_with_zeros(monkeypatch, dtype, shape, padded, kernel):
    used = []
    for name in ("_pairs_kernel", "_rows_kernel"):
        real = getattr(transpose, name)
        monkeypatch.setattr(transpose, name, lambda *a, real=real, name=name: used.append(name) or real(*a))
    src = (np.random.default_rng(1).standard_normal(shape) * 100).astype(dtype)
    np.testing.assert_array_equal(_copy(src, padded), _want(src, padded))
    assert used == ([] if kernel == "element" else [f"_{kernel}_kernel"])


def test_flipped_copy_takes_the_element_kernel(monkeypatch):
    monkeypatch.setattr(transpose, "_pairs_kernel", None)  # would raise if called
    src = np.arange(2 * 3 * 4, dtype=np.float16).reshape(1, 2, 12)
    got = _copy(src, 2, flip=4)
    runs = src.reshape(1, 2, 3, 4)[..., ::-1].reshape(1, 2, 12)
    np.testing.assert_array_equal(got, _want(runs, 2))


def test_grid_limits_are_named():
    a = runtime.full((4,), 0, np.float32)
    with pytest.raises(ValueError, match="65535 batches"):
        transpose.to_channels_last(a, a, 70000, 1, transpose.ROWS_BELOW, 1)


def test_a_view_off_4_byte_alignment_takes_the_element_kernel(monkeypatch):
    """A 16-bit view starting at an odd element is not 4-byte aligned: uint32 pairs would be misaligned
    loads on a GPU, so the element kernel copies it."""
    monkeypatch.setattr(transpose, "_pairs_kernel", None)  # would raise if called
    base = (np.random.default_rng(2).standard_normal(1 + 2 * 4 * 16) * 10).astype(np.float16)
    dev = runtime.to_device(base)[1:]
    assert runtime.device_pointer(dev) % 4 == 2
    dst = runtime.full((2 * 16 * 4,), np.nan, np.float16)
    transpose.to_channels_last(dev, dst, 2, 4, 16, 4)
    want = _want(base[1:].reshape(2, 4, 16), 4)
    np.testing.assert_array_equal(dst.copy_to_host().reshape(2, 16, 4), want)
