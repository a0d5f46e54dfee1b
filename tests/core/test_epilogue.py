"""The epilogue description (convlab.epilogue), its float64 reference (convlab.reference.epilogue)
against element-by-element definitions, and the ops' checks of the epilogue arguments."""
from __future__ import annotations

import math

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.epilogue import ACTIVATIONS, Epilogue, describe, parse_activation

#: each activation from its textbook definition, one float at a time
DEFINITIONS = {
    "identity": lambda t, a: t,
    "relu": lambda t, a: t if t > 0 else 0.0,
    "relu6": lambda t, a: min(max(t, 0.0), 6.0),
    "leaky_relu": lambda t, a: t if t >= 0 else a * t,
    "gelu": lambda t, a: 0.5 * t * (1 + math.erf(t / math.sqrt(2))),
    "gelu_tanh": lambda t, a: 0.5 * t * (1 + math.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3))),
    "silu": lambda t, a: t / (1 + math.exp(-t)),
    "sigmoid": lambda t, a: 1 / (1 + math.exp(-t)),
    "hardswish": lambda t, a: t * min(max(t + 3, 0.0), 6.0) / 6,
}


def test_every_activation_has_a_definition_here():
    assert set(DEFINITIONS) == set(ACTIVATIONS)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("residual", [None, "before", "after"])
def test_reference_matches_the_definition_element_by_element(activation, residual):
    rng = np.random.default_rng(7)
    y = rng.standard_normal((2, 3, 4, 5)) * 4
    scale, shift, res = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(y.shape)
    epi = Epilogue(activation, 0.3, True, True, residual)
    got = reference.epilogue(y, epi, scale, shift, res if residual else None)
    act = DEFINITIONS[activation]
    want = np.empty_like(y)
    for idx in np.ndindex(y.shape):
        t = y[idx] * scale[idx[1]] + shift[idx[1]]
        t = act(t + res[idx], 0.3) if residual == "before" else act(t, 0.3)
        want[idx] = t + res[idx] if residual == "after" else t
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


def test_known_values():
    t = np.array([-4.0, -1.0, 0.0, 1.0, 7.0])

    def act(name):
        return reference.activate(t, Epilogue(name, 0.5))
    np.testing.assert_array_equal(act("relu6"), [0, 0, 0, 1, 6])
    np.testing.assert_array_equal(act("leaky_relu"), [-2, -0.5, 0, 1, 7])
    np.testing.assert_array_equal(act("hardswish"), [0, -1 / 3, 0, 2 / 3, 7])
    assert act("sigmoid")[2] == 0.5 and act("gelu")[2] == 0 and act("silu")[2] == 0


def test_scale_and_shift_are_per_channel_on_every_rank():
    for shape in ((2, 3, 5), (1, 3, 2, 2, 2)):
        y = np.ones(shape)
        got = reference.epilogue(y, Epilogue(scale=True, shift=True), np.array([1., 2, 3]), np.array([0., 1, 2]))
        assert [float(v) for v in got[0, :].reshape(3, -1)[:, 0]] == [1, 3, 5]


def test_description_checks_its_fields():
    with pytest.raises(ValueError, match="activation"):
        Epilogue("swish")
    with pytest.raises(TypeError, match="negative_slope"):
        Epilogue("leaky_relu", float("nan"))
    with pytest.raises(TypeError, match="scale"):
        Epilogue(scale=1)
    with pytest.raises(ValueError, match="residual"):
        Epilogue(residual="middle")
    with pytest.raises(ValueError, match="residual_at"):
        describe(residual=True, residual_at="middle")
    assert Epilogue().is_identity and not Epilogue("relu").is_identity
    assert describe(("leaky_relu", 0.2), True, "after") == Epilogue("leaky_relu", 0.2, residual="after")


@pytest.mark.parametrize("bad, error", [("swish", ValueError), (("relu", 2.0), TypeError),
                                        (("leaky_relu", "x"), TypeError), (3, TypeError)])
def test_parse_activation_rejects(bad, error):
    with pytest.raises(error, match="activation"):
        parse_activation(bad)


# ---- the ops' checks, before anything runs --------------------------------------------------------
def _operands(nd: int = 2, dtype=np.float32):
    rng = np.random.default_rng(3)
    spatial = (4,) * nd
    x = rng.standard_normal((1, 2) + spatial).astype(dtype)
    w = rng.standard_normal((3, 2) + (3,) * nd).astype(dtype)
    return x, w, (1, 3) + (2,) * nd


BAD = [
    (dict(activation="swish"), ValueError, "activation"),
    (dict(activation=("relu", 1.0)), TypeError, "activation"),
    (dict(residual_at="middle"), ValueError, "residual_at"),
    (dict(residual=np.zeros((1, 3, 3, 3), np.float32)), ValueError, "residual"),
    (dict(residual=np.zeros((1, 3, 2, 2), np.float64)), ValueError, "residual"),
    (dict(residual=np.zeros((1, 3, 2), np.float32)), ValueError, "residual"),
    (dict(residual=[[1.0]]), TypeError, "residual"),
    (dict(scale=np.ones(4)), ValueError, "scale"),
    (dict(scale=np.ones(3, np.int32)), TypeError, "scale"),
    (dict(shift=np.ones((3, 1))), ValueError, "shift"),
    (dict(shift=["a", "b", "c"]), TypeError, "shift"),
]


@pytest.mark.parametrize("kwargs, error, name", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_conv2d_rejects_bad_epilogue_arguments_before_running(kwargs, error, name):
    x, w, y_shape = _operands()
    out = np.full(y_shape, np.nan, np.float32)
    with pytest.raises(error, match=name):
        convlab.conv2d(x, w, out=out, algorithm="direct", **kwargs)
    assert np.isnan(out).all()  # nothing ran


def test_residual_must_live_where_the_inputs_do():
    x, w, y_shape = _operands()
    with pytest.raises(ValueError, match="residual must be a host"):
        convlab.conv2d(x, w, residual=runtime.to_device(np.zeros(y_shape, np.float32)))
    with pytest.raises(ValueError, match="residual must be a device"):
        convlab.conv2d(runtime.to_device(x), runtime.to_device(w), residual=np.zeros(y_shape, np.float32))


def test_residual_must_not_be_out():
    x, w, y_shape = _operands()
    out = np.zeros(y_shape, np.float32)
    with pytest.raises(ValueError, match="residual"):
        convlab.conv2d(x, w, out=out, residual=out)


@pytest.mark.parametrize("nd", [1, 3])
def test_nd_ops_check_the_residual_shape(nd):
    x, w, y_shape = _operands(nd)
    op = convlab.conv1d if nd == 1 else convlab.conv3d
    with pytest.raises(ValueError, match="residual"):
        op(x, w, residual=np.zeros(y_shape[:-1] + (9,), np.float32))
    with pytest.raises(ValueError, match="scale"):
        op(x, w, scale=np.ones(2))
