"""The ops' epilogue arguments on every kind of operand: numpy, CPU tensors, device arrays (NCHW and
channels-last, the residual in either layout), 1D-3D, and the transposes; without them nothing changes."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.epilogue import Epilogue
from convlab.kernels.data import layouts
from convlab.measure import rel_error
from convlab.ops.arguments import forward_problem, transpose_problem

TOL = 1e-5  # float32 on these tiny reductions (at most 27 terms)


def _operands(nd: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3) + (5,) * nd).astype(np.float32)
    w = rng.standard_normal((4, 3) + (3,) * nd).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    prob = forward_problem(x, w, b, 1, 1, 1, 1, nd=nd)
    r = rng.standard_normal(prob.y_shape).astype(np.float32)
    scale, shift = rng.uniform(0.5, 2, 4), rng.standard_normal(4)
    return prob, x, w, b, r, scale, shift


@pytest.mark.parametrize("nd, op", [(1, convlab.conv1d), (2, convlab.conv2d), (3, convlab.conv3d)])
def test_numpy_operands_every_rank(nd, op):
    prob, x, w, b, r, scale, shift = _operands(nd)
    got = op(x, w, b, padding=1, activation="hardswish", residual=r, scale=scale, shift=shift,
             algorithm="direct")
    epi = Epilogue("hardswish", scale=True, shift=True, residual="before")
    want = reference.epilogue(reference.forward(prob, x, w, b), epi, scale, shift, r)
    assert rel_error(got, want) <= TOL


def test_no_epilogue_arguments_change_nothing():
    prob, x, w, b, *_ = _operands(2)
    plain = convlab.conv2d(x, w, b, padding=1, algorithm="direct")
    same = convlab.conv2d(x, w, b, padding=1, algorithm="direct", activation=None, residual_at="before")
    np.testing.assert_array_equal(plain, same)


@pytest.mark.parametrize("x_cl, r_cl", [(False, True), (True, False), (True, True)])
def test_device_operands_in_either_layout(x_cl, r_cl):
    prob, x, w, b, r, scale, shift = _operands(2, seed=1)

    def device(host, channels_last):
        return layouts.channels_last_copy(host) if channels_last else runtime.to_device(host)
    y = convlab.conv2d(device(x, x_cl), runtime.to_device(w), runtime.to_device(b), padding=1,
                       activation=("leaky_relu", 0.25), residual=device(r, r_cl), residual_at="after",
                       scale=runtime.to_device(scale), algorithm="direct")
    assert layouts.is_channels_last(y) == x_cl
    got = np.ascontiguousarray(runtime.to_host(y))
    epi = Epilogue("leaky_relu", 0.25, scale=True, residual="after")
    assert rel_error(got, reference.epilogue(reference.forward(prob, x, w, b), epi, scale, None, r)) <= TOL


def test_cpu_tensors():
    torch = pytest.importorskip("torch")
    prob, x, w, b, r, scale, shift = _operands(2, seed=2)
    got = convlab.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), padding=1,
                         activation="gelu", residual=torch.from_numpy(r), shift=torch.from_numpy(shift))
    assert isinstance(got, torch.Tensor)
    epi = Epilogue("gelu", shift=True, residual="before")
    want = reference.epilogue(reference.forward(prob, x, w, b), epi, None, shift, r)
    assert rel_error(got.numpy(), want) <= TOL


@pytest.mark.parametrize("nd, op", [(1, convlab.conv_transpose1d), (2, convlab.conv_transpose2d),
                                    (3, convlab.conv_transpose3d)])
def test_transposes(nd, op):
    rng = np.random.default_rng(nd)
    x = rng.standard_normal((1, 4) + (3,) * nd).astype(np.float32)
    w = rng.standard_normal((4, 2) + (2,) * nd).astype(np.float32)
    prob = transpose_problem(x, w, None, 2, 0, 0, 1, 1, nd=nd)
    scale = rng.standard_normal(2)
    got = op(x, w, stride=2, activation="relu6", scale=scale, algorithm="direct")
    want = reference.epilogue(reference.dgrad(prob, x, w), Epilogue("relu6", scale=True), scale)
    assert rel_error(got, want) <= TOL


@pytest.mark.parametrize("algorithm, r_cl", [("direct", False), ("implicit_gemm", False), ("implicit_gemm", True)])
def test_device_calls_replay_a_plan_with_each_calls_residual_scale_and_shift(algorithm, r_cl):
    """A repeated device call with an epilogue replays its launch plan, reading the residual, scale and
    shift of that call (fused into implicit_gemm's store, or the pass after direct's and after a
    channels-last residual's), and a call with another epilogue records its own plan."""
    from convlab.call import plan

    prob, x, w, b, *_ = _operands(2, seed=3)
    dx, dw, db = (runtime.to_device(v) for v in (x, w, b))
    epi = Epilogue("silu", scale=True, shift=True, residual="after")
    plan.clear()
    replayed = plan.stats()["replayed"]
    for seed in range(3):
        *_, r, scale, shift = _operands(2, seed=10 + seed)
        r_dev = layouts.channels_last_copy(r) if r_cl else runtime.to_device(r)
        y = convlab.conv2d(dx, dw, db, padding=1, activation="silu", residual=r_dev, residual_at="after",
                           scale=scale, shift=runtime.to_device(shift), algorithm=algorithm)
        want = reference.epilogue(reference.forward(prob, x, w, b), epi, scale, shift, r)
        assert rel_error(runtime.to_host(y), want) <= TOL
    assert plan.stats()["plans"] == 1 and plan.stats()["replayed"] - replayed == 2
    convlab.conv2d(dx, dw, db, padding=1, activation="relu", algorithm=algorithm)
    assert plan.stats()["plans"] == 2


def test_a_replayed_activation_and_residual_call_checks_nothing_again(monkeypatch):
    """A device call with an activation and a residual looks its plan up before any check: the first
    call checks (the problem built, the epilogue checked), a replay with a fresh residual of the same
    signature checks nothing and reads that residual, and a residual of another shape, dtype or alignment
    misses the plan: the checks then raise as for an unplanned call, or a new plan is recorded."""
    from convlab.call import plan
    from convlab.ops import epilogue as epilogue_args

    prob, x, w, b, *_ = _operands(2, seed=5)
    dx, dw, db = (runtime.to_device(v) for v in (x, w, b))
    checks = []
    real = epilogue_args.check
    monkeypatch.setattr(epilogue_args, "check", lambda *a, **k: checks.append(1) or real(*a, **k))
    plan.clear()
    for seed in range(3):
        *_, r, _, _ = _operands(2, seed=20 + seed)
        y = convlab.conv2d(dx, dw, db, padding=1, activation="relu6", residual=runtime.to_device(r),
                           algorithm="implicit_gemm")
        want = reference.epilogue(reference.forward(prob, x, w, b), Epilogue("relu6", residual="before"), None,
                                  None, r)
        assert rel_error(runtime.to_host(y), want) <= TOL
    assert len(checks) == 1 and plan.stats()["plans"] == 1
    out_shape = prob.operand_shapes[2]
    for bad, match in ((np.zeros((1,) + out_shape[1:], np.float32), "residual must have the output's shape"),
                       (np.zeros(out_shape, np.float64), "residual must have the output's shape")):
        with pytest.raises(ValueError, match=match):
            convlab.conv2d(dx, dw, db, padding=1, activation="relu6", residual=runtime.to_device(bad),
                           algorithm="implicit_gemm")
    *_, r, _, _ = _operands(2, seed=30)
    backing = runtime.to_device(np.concatenate([np.zeros(1, np.float32), r.ravel()]))
    shifted = runtime.flat_view(backing)[1:].reshape(r.shape)  # 4 bytes past a 16-byte boundary
    y = convlab.conv2d(dx, dw, db, padding=1, activation="relu6", residual=shifted, algorithm="implicit_gemm")
    want = reference.epilogue(reference.forward(prob, x, w, b), Epilogue("relu6", residual="before"), None, None, r)
    assert rel_error(runtime.to_host(y), want) <= TOL and plan.stats()["plans"] == 2


def test_device_scale_and_shift_of_the_compute_dtype_are_not_copied_to_the_host(monkeypatch):
    """A scale and shift given on the device as float32 vectors (K,) (the compute dtype of a float32
    output) are the kernels' operands as they are: the call copies nothing to the host (a copy would wait
    for the device on every call); another dtype still goes through the host and gives the same result."""
    from convlab.ops import epilogue as epilogue_args

    prob, x, w, b, r, scale, shift = _operands(2, seed=41)
    dx, dw, db, dr = (runtime.to_device(v) for v in (x, w, b, r))
    want = reference.epilogue(reference.forward(prob, x, w, b), Epilogue("relu", scale=True, shift=True,
                                                                         residual="before"), scale, shift, r)
    ds, dsh = (runtime.to_device(v.astype(np.float32)) for v in (scale, shift))
    copies = []
    monkeypatch.setattr(epilogue_args.runtime, "to_host", lambda *a, **k: copies.append(1))
    for algorithm in ("implicit_gemm", "direct"):  # fused, and the pass
        y = convlab.conv2d(dx, dw, db, padding=1, activation="relu", residual=dr, scale=ds, shift=dsh,
                           algorithm=algorithm)
        assert not copies
        monkeypatch.undo()
        assert rel_error(runtime.to_host(y), want) <= TOL
        monkeypatch.setattr(epilogue_args.runtime, "to_host", lambda *a, **k: copies.append(1))
    monkeypatch.undo()
    y = convlab.conv2d(dx, dw, db, padding=1, activation="relu", residual=dr, scale=runtime.to_device(scale),
                       shift=dsh, algorithm="implicit_gemm")  # float64 scale: converted through the host
    assert rel_error(runtime.to_host(y), want) <= TOL
