"""convlab.blocks.depthwise_pointwise: the fused depthwise -> pointwise kernel against the float64
reference, torch and the two layers run apart (conv2d twice); layouts, epilogues, auto's choice and
its explanation; bad arguments rejected before any launch."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import blocks, runtime
from convlab.blocks import dw_pw
from convlab.blocks.dw_pw_args import channels_last
from convlab.dtypes import np_dtype, unit_roundoff
from convlab.kernels.block.dw_pw import SIM_TILE, Tile


def _case(dtype="float64", n=2, c=5, k=11, hw=6, r=3, seed=0):
    rng = np.random.default_rng(seed)
    d = np_dtype(dtype)
    x = rng.standard_normal((n, c, hw, hw)).astype(d)
    wd = rng.standard_normal((c, 1, r, r)).astype(d)
    wp = (rng.standard_normal((k, c, 1, 1)) / np.sqrt(c)).astype(d)
    return x, wd, wp, rng.standard_normal(c).astype(d), rng.standard_normal(k).astype(d), rng


def _cl(a: np.ndarray) -> np.ndarray:
    """A channels-last numpy array of a's values."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _err(y, ref) -> float:
    return float(np.abs(np.asarray(y, np.float64) - ref).max() / max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("stride,padding,dilation,cl", [(1, 1, 1, False), (2, 1, 1, False), (2, 1, 1, True),
                                                        ((1, 2), (0, 2), (1, 2), False)])
def test_float64_against_reference_and_separate(stride, padding, dilation, cl):
    x, wd, wp, bd, bp, rng = _case()
    kw = dict(stride=stride, padding=padding, dilation=dilation, dw_activation="relu6",
              dw_scale=rng.uniform(0.5, 2, 5), dw_shift=rng.standard_normal(5), activation="hardswish",
              scale=rng.uniform(0.5, 2, 11), shift=rng.standard_normal(11))
    xx = _cl(x) if cl else x
    ref = blocks.reference_depthwise_pointwise(x, wd, wp, bd, bp, **kw)
    y = blocks.depthwise_pointwise(xx, wd, wp, bd, bp, **kw, algorithm="fused")
    assert y.shape == ref.shape and y.dtype == np.float64
    assert channels_last(y) == cl
    assert _err(y, ref) < 1e-12
    apart = blocks.depthwise_pointwise(xx, wd, wp, bd, bp, **kw, algorithm="separate")
    assert _err(apart, ref) < 1e-12


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cl", [False, True])
def test_half_with_residual(dtype, cl):
    x, wd, wp, bd, bp, rng = _case(dtype, n=1, c=8, k=20)  # K = 20: three blocks of KT = 8 channels
    res = rng.standard_normal((1, 20, 6, 6)).astype(np_dtype(dtype))
    kw = dict(padding=1, dw_activation="relu", activation="identity", residual=_cl(res) if cl else res,
              residual_at="after")
    ref = blocks.reference_depthwise_pointwise(x, wd, wp, bd, bp, **kw)
    y = blocks.depthwise_pointwise(_cl(x) if cl else x, wd, wp, bd, bp, **kw, algorithm="fused")
    assert y.dtype == np_dtype(dtype)
    # the intermediate stays float32 (one rounding, the output's) and 9 + 8 terms are summed in float32
    assert _err(y, ref) < 4 * unit_roundoff(dtype)


def test_float16_against_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, wd, wp, bd, bp, rng = _case("float16", n=1, c=6, k=9)
    scale, shift = rng.uniform(0.5, 1.5, 9), rng.standard_normal(9)
    y = blocks.depthwise_pointwise(x, wd, wp, bd, None, 2, 1, dw_activation="relu6", activation="silu",
                                   scale=scale, shift=shift, algorithm="fused")
    tx, twd, twp, tbd = (torch.from_numpy(a.astype(np.float64)) for a in (x, wd, wp, bd))
    t = F.relu6(F.conv2d(tx, twd, tbd, 2, 1, groups=6))
    want = F.silu(F.conv2d(t, twp) * torch.from_numpy(scale)[:, None, None] + torch.from_numpy(shift)[:, None, None])
    assert _err(y, want.numpy()) < 4 * unit_roundoff("float16")


def test_torch_cpu_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    x, wd, wp, _, bp, _ = _case("float32", n=1, c=3, k=4)
    tx, twd, twp, tbp = (torch.from_numpy(a) for a in (x, wd, wp, bp))
    y = blocks.depthwise_pointwise(tx, twd, twp, None, tbp, padding=1, activation="relu", algorithm="fused")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    want = torch.relu(torch.nn.functional.conv2d(torch.nn.functional.conv2d(tx, twd, None, 1, 1, groups=3), twp, tbp))
    assert torch.allclose(y, want, atol=1e-5, rtol=1e-5)


def test_device_operands_give_a_device_result():
    x, wd, wp, bd, bp, _ = _case("float32", n=1, c=4, k=6)
    dev = [runtime.to_device(a) for a in (x, wd, wp, bd, bp)]
    y = blocks.depthwise_pointwise(*dev, padding=1, dw_activation="relu6", algorithm="fused")
    assert runtime.is_device_array(y)
    ref = blocks.reference_depthwise_pointwise(x, wd, wp, bd, bp, padding=1, dw_activation="relu6")
    assert _err(runtime.to_host(y), ref) < 1e-5


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's rule: a GPU times both paths "
                    "(test_auto_on_a_gpu_times_both_and_keeps_the_faster)")
def test_auto_rule_and_explanation(monkeypatch):
    x, wd, wp, *_ = _case(n=1, c=2, k=3)
    text = blocks.explain_depthwise_pointwise(x, wd, wp, padding=1)
    assert "runs fused" in text and "rule" in text
    calls = []
    monkeypatch.setattr(dw_pw, "launch", lambda *a, **k: calls.append(a))
    blocks.depthwise_pointwise(x, wd, wp, padding=1)
    assert len(calls) == 1  # auto ran the fused kernel
    many = np.zeros((SIM_TILE.kt * dw_pw.MAX_RECOMPUTE + 1, 2, 1, 1))  # one block of KT channels too many
    assert "runs separate" in blocks.explain_depthwise_pointwise(x, wd, many, padding=1)
    assert "runs separate" in blocks.explain_depthwise_pointwise(x, wd, wp, padding=1, algorithm="separate")


def test_tile_sizes():
    assert Tile(32, 4, 16).threads == 128 and Tile(32, 4, 16).kt == 16
    assert Tile(32, 4, 16).shared_bytes("float32") == (16 * 32 + 16 * 16) * 4


def _bad_cases():
    x, wd, wp, bd, bp, _ = _case(n=1, c=2, k=3)
    return [
        ((list(x), wd, wp), {}, TypeError, "x must be"),
        ((x[0], wd, wp), {}, ValueError, "x must be 4-D"),
        ((x.astype(np.int32), wd, wp), {}, TypeError, "x's dtype"),
        ((x, wd[:1], wp), {}, ValueError, "w_dw must have shape"),
        ((x, wd.astype(np.float32), wp), {}, TypeError, "w_dw must have x's dtype"),
        ((x, wd, wp[:, :1]), {}, ValueError, "w_pw must have shape"),
        ((x, wd, np.zeros((3, 2, 3, 3))), {}, ValueError, "w_pw must have shape"),
        ((x, wd, wp, bd[:1]), {}, ValueError, "b_dw must have shape"),
        ((x, wd, wp, None, bp[:2]), {}, ValueError, "b_pw must have shape"),
        ((x, wd, wp), {"stride": 0}, ValueError, "stride must be >= 1"),
        ((x, wd, wp), {"padding": (1, 2, 3)}, TypeError, "padding must be"),
        ((x, wd, wp), {"dilation": 9}, ValueError, "no output"),
        ((x, wd, wp), {"scale": [1.0, 2.0]}, ValueError, "scale must have shape \\(3,\\)"),
        ((x, wd, wp), {"dw_shift": np.ones(3)}, ValueError, "dw_shift must have shape \\(2,\\)"),
        ((x, wd, wp), {"residual": np.zeros((1, 3, 5, 5))}, ValueError, "residual must have shape"),
        ((x, wd, wp), {"activation": "swish"}, ValueError, "activation must be one of"),
        ((x, wd, wp), {"dw_activation": 3}, TypeError, "activation must be"),
        ((x, wd, wp), {"residual": np.zeros((1, 3, 4, 4)), "residual_at": "middle"}, ValueError, "residual_at"),
        ((x, wd, wp), {"algorithm": "fastest"}, ValueError, "algorithm must be one of"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_arguments_raise_before_any_launch(case, monkeypatch):
    args, kwargs, exc, match = _bad_cases()[case]

    def no_launch(*a, **k):
        raise AssertionError("launched")
    monkeypatch.setattr(dw_pw, "launch", no_launch)
    monkeypatch.setattr(dw_pw, "run_separate", no_launch)
    with pytest.raises(exc, match=match):
        blocks.depthwise_pointwise(*args, **kwargs)


@pytest.mark.parametrize("act", ["identity", "relu", "relu6", ("leaky_relu", 0.3), "gelu", "gelu_tanh", "silu",
                                 "sigmoid", "hardswish"])
def test_every_activation_on_both_layers(act):
    x, wd, wp, bd, bp, rng = _case(n=1, c=2, k=3, hw=4)
    kw = dict(padding=1, dw_activation=act, activation=act, dw_shift=rng.standard_normal(2),
              residual=rng.standard_normal((1, 3, 4, 4)), residual_at="before")
    ref = blocks.reference_depthwise_pointwise(x, wd, wp, bd, bp, **kw)
    for algorithm in ("fused", "separate"):
        assert _err(blocks.depthwise_pointwise(x, wd, wp, bd, bp, **kw, algorithm=algorithm), ref) < 1e-12


def test_auto_on_a_gpu_times_both_and_keeps_the_faster(monkeypatch):
    """The GPU path of auto with the target and the timer stood in: both ways timed once per key."""
    import dataclasses

    import convlab

    x, wd, wp, *_ = _case(n=1, c=2, k=3, hw=4)
    gpu = dataclasses.replace(runtime.target(), simulator=False)
    monkeypatch.setattr(runtime, "target", lambda: gpu)
    timed = []

    def time_ms(fn, repeat=20, **kwargs):
        fn()
        timed.append(fn)
        return [2.0, 3.0, 2.0] if len(timed) % 2 else [1.0, 1.0, 5.0]  # fused 2 ms, separate 1 ms
    monkeypatch.setattr(runtime, "time_ms", time_ms)
    convlab.reset()
    try:
        text = blocks.explain_depthwise_pointwise(x, wd, wp, padding=1)
        assert "runs separate" in text and "fused 2.0000 ms, separate 1.0000 ms" in text
        assert len(timed) == 2
        ref = blocks.reference_depthwise_pointwise(x, wd, wp, padding=1)
        assert _err(blocks.depthwise_pointwise(x, wd, wp, padding=1), ref) < 1e-12
        assert len(timed) == 2  # the pick is kept per key
    finally:
        convlab.reset()
