"""Edges a new user hits (issue 17): out= aliasing an input, sizes that cannot fit, string padding,
one op vocabulary, config strings with spaces, duplicate plugin names."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference
from convlab.plugin import registry
from convlab.runtime import cuda

F32 = np.float32
_RNG = np.random.default_rng(17)


def _rand(*shape):
    return _RNG.standard_normal(shape).astype(F32)


# ---- out= overlapping an input ----------------------------------------------------------------------
# every op with out=, on 1x1 kernels where out has an input's shape: (op, a, b, extra positional args)
_ALIAS_CALLS = {
    "conv2d": (convlab.conv2d, (1, 4, 3, 3), (4, 4, 1, 1), ()),
    "conv2d_backward_data": (convlab.conv2d_backward_data, (1, 4, 3, 3), (4, 4, 1, 1), ((1, 4, 3, 3),)),
    "conv2d_backward_weight": (convlab.conv2d_backward_weight, (4, 4, 1, 1), (4, 4, 1, 1), ((4, 4, 1, 1),)),
    "conv_transpose2d": (convlab.conv_transpose2d, (1, 4, 3, 3), (4, 4, 1, 1), ()),
}
_SHORT = {"conv2d": "forward", "conv2d_backward_data": "dgrad", "conv2d_backward_weight": "wgrad",
          "conv_transpose2d": "dgrad"}


def _op_plugin_pairs():
    return [(op, p.name) for op in _ALIAS_CALLS for p in convlab.plugins(_SHORT[op])]


@pytest.mark.parametrize("op,plugin", _op_plugin_pairs())
@pytest.mark.parametrize("which", ["a", "b"])
def test_out_aliasing_an_input_raises_before_any_launch(op, plugin, which, monkeypatch):
    fn, ashape, bshape, extra = _ALIAS_CALLS[op]
    out_shape = (4, 4, 1, 1) if op == "conv2d_backward_weight" else (1, 4, 3, 3)
    buf = cuda.to_device(_rand(64))  # the aliased input and out: views of one device buffer
    shared = buf[:int(np.prod(ashape if which == "a" else bshape))].reshape(ashape if which == "a" else bshape)
    other = cuda.to_device(_rand(*(bshape if which == "a" else ashape)))
    a, b = (shared, other) if which == "a" else (other, shared)
    out = buf[:36].reshape(out_shape) if op != "conv2d_backward_weight" else buf[:16].reshape(out_shape)
    name = {"a": {"conv2d_backward_data": "grad_out"}.get(op, "x"),
            "b": {"conv2d_backward_weight": "grad_out"}.get(op, "weight")}[which]
    before = (a.copy_to_host(), b.copy_to_host())
    launched = []
    monkeypatch.setattr(convlab.runtime.launch, "launch", lambda *a, **k: launched.append(a))
    with pytest.raises(ValueError, match=f"out overlaps {name}"):
        fn(a, b, *extra, out=out, algorithm=plugin)
    assert not launched
    np.testing.assert_array_equal(a.copy_to_host(), before[0])
    np.testing.assert_array_equal(b.copy_to_host(), before[1])


def test_out_overlapping_a_view_of_the_same_device_buffer_raises():
    buf = cuda.to_device(_rand(2 * 36 + 8))
    x = buf[:36].reshape(1, 4, 3, 3)
    out = buf[8:44].reshape(1, 4, 3, 3)  # overlaps x's last 28 elements
    w = cuda.to_device(_rand(4, 4, 1, 1))
    with pytest.raises(ValueError, match="out overlaps x"):
        convlab.conv2d(x, w, out=out, algorithm="direct")
    apart = buf[36:72].reshape(1, 4, 3, 3)  # the same buffer, no overlap: fine
    y = convlab.conv2d(x, w, out=apart, algorithm="direct")
    hx, hw = x.copy_to_host(), w.copy_to_host()
    ref = reference.solve(convlab.problem_for("conv2d", hx, hw), hx, hw)
    np.testing.assert_allclose(y.copy_to_host(), ref, rtol=1e-5, atol=1e-5)


def test_numpy_out_sharing_memory_with_an_input_raises():
    x, w = _rand(1, 4, 3, 3), _rand(4, 4, 1, 1)
    with pytest.raises(ValueError, match="out overlaps x"):
        convlab.conv2d(x, w, out=x)
    with pytest.raises(ValueError, match="out overlaps grad_out"):
        convlab.conv2d_backward_weight(w.copy(), w, (4, 4, 1, 1), out=w.reshape(4, 4, 1, 1)[:])
    bias = _rand(4)
    x2 = _rand(4, 4, 1, 1)
    with pytest.raises(ValueError, match="out overlaps bias"):
        convlab.conv2d(x2[:1], x2, bias=bias, out=np.lib.stride_tricks.as_strided(
            bias, (1, 4, 1, 1), (16, 4, 4, 4)))


# ---- sizes that cannot fit ----------------------------------------------------------------------------
@pytest.mark.parametrize("call,match", [
    (lambda: convlab.conv2d(_rand(1, 4, 6, 6), _rand(4, 4, 3, 3), padding=10**6),
     r"padding=1000000 makes the output 1x4x2000004x2000004 \(5.96e\+04 GiB\), more than the "
     + ("simulator's budget \\(2 GiB\\)" if convlab.runtime.SIMULATOR else "device's memory")),
    (lambda: convlab.conv2d_backward_data(_rand(1, 4, 1, 1), _rand(4, 4, 1, 1), (1, 4, 10**6, 10**6),
                                          stride=10**6), r"input_shape=\(1, 4, 1000000, 1000000\) makes"),
    (lambda: convlab.conv2d_backward_weight(_rand(1, 4, 2, 2), _rand(1, 4, 3, 3),
                                            (4, 4, 2 * 10**5, 2 * 10**5), padding=10**5),
     r"padding=100000 with weight_shape=\(4, 4, 200000, 200000\) makes"),
    (lambda: convlab.conv_transpose2d(_rand(1, 4, 2, 2), _rand(4, 4, 1, 1), stride=10**6),
     r"stride=1000000 on x \(1, 4, 2, 2\) makes the output 1x4x1000001x1000001"),
])
def test_sizes_that_cannot_fit_raise_valueerror_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---- PyTorch's string paddings --------------------------------------------------------------------------
def test_padding_same_and_valid_follow_pytorch():
    x, w = _rand(1, 3, 6, 5), _rand(4, 3, 3, 5)
    same = convlab.conv2d(x, w, padding="same")
    assert same.shape == (1, 4, 6, 5)
    np.testing.assert_allclose(same, convlab.conv2d(x, w, padding=(1, 2)), rtol=1e-6)
    assert convlab.conv2d(x, w, padding="valid").shape == (1, 4, 4, 1)
    dilated = convlab.conv2d(x, w[:, :, :, :3], padding="same", dilation=2)  # 2 * (3 - 1) = 4: 2 each side
    assert dilated.shape == (1, 4, 6, 5)
    dy = _rand(1, 4, 6, 5)
    dx = convlab.conv2d_backward_data(dy, w, x.shape, padding="same")
    np.testing.assert_allclose(dx, convlab.conv2d_backward_data(dy, w, x.shape, padding=(1, 2)), rtol=1e-6)
    dw = convlab.conv2d_backward_weight(x, dy, w.shape, padding="same")
    np.testing.assert_allclose(dw, convlab.conv2d_backward_weight(x, dy, w.shape, padding=(1, 2)),
                               rtol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda x: convlab.conv2d(x, _rand(4, 3, 2, 3), padding="same"),
     "padding='same' with a 2x3 kernel .* odd total: PyTorch puts the extra one at the bottom/right"),
    (lambda x: convlab.conv2d(x, _rand(4, 3, 3, 3), padding="same", stride=2), "needs stride=1"),
    (lambda x: convlab.conv2d(x, _rand(4, 3, 3, 3), padding="full"), "'same' or 'valid'"),
    (lambda x: convlab.conv_transpose2d(x, _rand(3, 4, 3, 3), padding="same"),
     "conv_transpose2d takes padding as an int or a pair"),
])
def test_string_padding_refusals_are_clear(call, match):
    with pytest.raises(ValueError, match=match):
        call(_rand(1, 3, 6, 6))


# ---- one vocabulary for ops, config strings with spaces -------------------------------------------------
@pytest.mark.parametrize("public,short", [("conv2d", "forward"), ("conv2d_backward_data", "dgrad"),
                                          ("conv2d_backward_weight", "wgrad")])
def test_both_op_spellings_are_accepted(public, short):
    assert convlab.make_problem(public, 1, 4, 5, 5, 4, 3, 3) == convlab.make_problem(short, 1, 4, 5, 5,
                                                                                   4, 3, 3)
    args = {"conv2d": (_rand(1, 4, 5, 5), _rand(4, 4, 3, 3)),
            "conv2d_backward_data": (_rand(1, 4, 3, 3), _rand(4, 4, 3, 3), (1, 4, 5, 5)),
            "conv2d_backward_weight": (_rand(1, 4, 5, 5), _rand(1, 4, 3, 3), (4, 4, 3, 3))}[public]
    assert convlab.problem_for(short, *args) == convlab.problem_for(public, *args)
    assert convlab.explain(*args, op=short).problem.op == short
    x, w = _rand(1, 4, 3, 3), _rand(4, 2, 3, 3)
    assert convlab.problem_for("transpose", x, w) == convlab.problem_for("conv_transpose2d", x, w)
    with pytest.raises(ValueError, match="conv_transpose2d is a dgrad problem"):
        convlab.make_problem("transpose", 1, 4, 5, 5, 4, 3, 3)


def test_config_strings_parse_with_spaces_and_any_order():
    x, w = _rand(1, 4, 5, 5), _rand(4, 4, 3, 3)
    prob = convlab.problem_for("conv2d", x, w, padding=1)
    config = convlab.get_plugin("im2col").configs(prob)[-1]
    spaced = ", ".join(f"{k} = {config[k]}" for k in reversed(list(config)))
    y = convlab.conv2d(x, w, padding=1, algorithm=("im2col", spaced))
    np.testing.assert_allclose(y, reference.solve(prob, x, w), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="unknown config"):
        convlab.conv2d(x, w, padding=1, algorithm=("im2col", "BK=3"))


# ---- registering a name twice ---------------------------------------------------------------------------
def test_duplicate_plugin_name_raises_unless_replace():
    class First(convlab.Algorithm):
        name, ops = "_test_dup", frozenset({"forward"})

    class Second(convlab.Algorithm):
        name, ops = "_test_dup", frozenset({"forward"})

    try:
        convlab.register(First)
        with pytest.raises(ValueError, match="'_test_dup' is already registered .*replace=True"):
            convlab.register(Second)
        with pytest.raises(ValueError, match="already registered"):
            convlab.register(First)  # the same class again, too
        assert type(convlab.get_plugin("_test_dup")) is First
        assert convlab.register(Second, replace=True) is Second
        assert type(convlab.get_plugin("_test_dup")) is Second

        @convlab.register(replace=True)
        class Third(convlab.Algorithm):
            name, ops = "_test_dup", frozenset({"forward"})

        assert type(convlab.get_plugin("_test_dup")) is Third
        with pytest.raises(ValueError, match="direct"):
            registry.register(type("Direct2", (convlab.Algorithm,), {"name": "direct",
                                                                     "ops": frozenset({"forward"})}))
        assert type(convlab.get_plugin("direct")).__name__ != "Direct2"
    finally:
        convlab.unregister("_test_dup")


# ---- the simulator's cost ----------------------------------------------------------------------------------
@pytest.mark.skipif(not convlab.runtime.SIMULATOR, reason="a simulator-only warning")
def test_simulator_warns_once_per_launch_above_the_thread_budget(monkeypatch):
    import warnings

    from convlab.runtime import launch

    monkeypatch.setattr(launch, "_cost_warned", set())
    x, w = _rand(1, 4, 5, 5), _rand(4, 4, 3, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convlab.conv2d(x, w, padding=1, algorithm="direct")  # 100 outputs: under the default budget
    assert not [c for c in caught if issubclass(c.category, convlab.SimulatorCostWarning)]
    monkeypatch.setenv("CONVLAB_SIM_THREAD_BUDGET", "50")
    with pytest.warns(convlab.SimulatorCostWarning,
                      match=r"^convlab: kernel 'conv\.direct\.[\w.]+' launches \d+ threads .* CUDA simulator.*"
                            r"Shrink the problem.*"
                            r"CONVLAB_SIM_THREAD_BUDGET \(now 50\)"):
        convlab.conv2d(x, w, padding=1, algorithm="direct")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convlab.conv2d(x, w, padding=1, algorithm="direct")  # the same kernel and grid: once only
    assert not [c for c in caught if issubclass(c.category, convlab.SimulatorCostWarning)]


def test_kernel_label_names_the_factory_of_a_kernel_named_kernel():
    from convlab.runtime.launch import kernel_label

    def gather_kernel():
        def kernel():
            pass
        return kernel

    class Dispatcher:
        py_func = gather_kernel()

    label = kernel_label(Dispatcher())
    assert label.endswith("test_kernel_label_names_the_factory_of_a_kernel_named_kernel.gather_kernel.kernel")
    assert "<locals>" not in label
    assert kernel_label(object()) == "unnamed"


# ---- result files get the umask's mode ---------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_get_the_modes_a_plain_open_would(tmp_path, umask):
    import os
    import stat

    from convlab.runtime.fileio import atomic_write, atomic_write_json

    old = os.umask(umask)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        for path in (atomic_write(tmp_path / "sub" / "a.txt", "x"),
                     atomic_write_json(tmp_path / "b.json", {})):
            assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~umask
        assert not [p for p in tmp_path.rglob(".*.tmp")]  # no temporary file left behind
    finally:
        os.umask(old)


def test_an_entry_point_class_reusing_a_registered_name_is_reported(monkeypatch):
    from importlib import metadata

    class Impostor(convlab.Algorithm):
        name, ops = "direct", frozenset({"forward"})

    import types
    module = types.ModuleType("_edges_impostor")
    module.Impostor = Impostor
    monkeypatch.setitem(__import__("sys").modules, "_edges_impostor", module)
    fake = [metadata.EntryPoint("impostor", "_edges_impostor:Impostor", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda **kw: fake)
    registry.load()
    before = type(convlab.get_plugin("direct"))
    try:
        with pytest.warns(RuntimeWarning, match="impostor.*'direct' is already registered"):
            registry.load(reload=True)
        assert type(convlab.get_plugin("direct")) is before
    finally:
        for key in [k for k in registry._load_errors if "impostor" in k]:
            del registry._load_errors[key]


@pytest.mark.skipif(not convlab.runtime.SIMULATOR, reason="the simulator's behaviour")
def test_ctrl_c_stops_a_long_simulated_launch():
    """What the README says: KeyboardInterrupt reaches the caller once the running block finishes."""
    import signal
    import subprocess
    import sys
    import time

    child = ("import signal, sys, time, numpy as np, convlab\n"
             "signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal\n"
             "x = np.ones((1, 32, 32, 32), np.float32); w = np.ones((32, 32, 3, 3), np.float32)\n"
             "print('start', flush=True)\n"
             "try:\n"
             "    convlab.conv2d(x, w, padding=1, algorithm='direct')\n"
             "except KeyboardInterrupt:\n"
             "    print('interrupted', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-W", "ignore", "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "start"
        time.sleep(1.0)  # inside the launch (about 50 s uninterrupted)
        proc.send_signal(signal.SIGINT)
        sent = time.perf_counter()
        out, _ = proc.communicate(timeout=30)
        assert "interrupted" in out and time.perf_counter() - sent < 30
    finally:
        proc.kill()
