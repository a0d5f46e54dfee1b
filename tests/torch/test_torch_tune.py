"""convlab.torch.tune: every convolution layer of a converted model (forward, dgrad, wgrad) tuned in the
requested mode, the per-layer summary (shape, pick, whose pick, where its kernels came from;
convlab.torch.report), the model's gradients and batch-norm
statistics and the tuning mode left as they were, and bad arguments.

On the simulator the tuner times nothing without a timer: the tuner's entry is wrapped to pass fake
milliseconds (each candidate is still run and checked on the simulator), so "tune" really checks
and times; each plugin's first config only (``set_tune_configs(1)``) and no lossy plugin (Winograd,
FFT) keep it short."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab import autotune  # noqa: E402
from convlab.autotune import tuner  # noqa: E402
from convlab.runtime import settings  # noqa: E402


def _model():
    torch.manual_seed(0)
    return ct.convert(nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1)),
        nn.Conv2d(4, 3, 1)))


@pytest.fixture
def fake_timing(tmp_path, monkeypatch):
    """A private cache, fake milliseconds (by label length) for every tuning, one config a plugin."""
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    real = tuner.tune
    timed = []

    def timer(cand):
        timed.append(cand.label)
        return [1.0 + 0.01 * len(cand.label)] * 6

    monkeypatch.setattr(tuner, "tune", lambda problem, **kw: real(problem, timer=timer, **kw))
    configs, mode, lossy = settings.set_tune_configs(1), autotune.get_mode(), settings.set_allow_lossy(False)
    autotune.clear_cache(memory=True, disk=False)
    yield timed
    settings.set_tune_configs(configs)
    settings.set_allow_lossy(lossy)
    autotune.set_mode(mode)
    autotune.clear_cache(memory=True, disk=False)


def test_tune_tunes_every_conv_layer_and_restores_the_model(fake_timing):
    model = _model()
    x = torch.randn(1, 2, 5, 5)
    model[1].running_mean.fill_(0.5)
    stats = model[1].running_mean.clone()
    autotune.set_mode("heuristic")
    summary = ct.tune(model, (x,), budget=30.0, progress=False)
    assert fake_timing and autotune.get_mode() == "heuristic"
    rows = {(r.layer, r.op): r for r in summary.layers}
    # the first layer's input needs no gradient: no dgrad there
    assert set(rows) == {("0", "forward"), ("0", "wgrad"), ("3.0", "forward"), ("3.0", "dgrad"), ("3.0", "wgrad"),
                         ("4", "forward"), ("4", "dgrad"), ("4", "wgrad")}
    assert all(r.picked_by == "tuned" and r.source == "tuned" and r.pick for r in summary.layers), str(summary)
    assert rows[("0", "forward")].shape.startswith("forward") and "x(1, 2, 5, 5)" in rows[("0", "forward")].shape
    assert summary.counts() == {"tuned": 8} and summary.mode == "tune"
    assert str(summary).splitlines()[0] == "convlab.torch.tune (mode tune): 8 layer-ops, 8 tuned"
    assert all(p.grad is None for p in model.parameters())
    torch.testing.assert_close(model[1].running_mean, stats)
    count = len(fake_timing)
    again = ct.tune(model, x, progress=False)  # this process remembers: nothing timed again
    assert len(fake_timing) == count and {r.picked_by for r in again.layers} == {"tuned"}
    autotune.clear_cache(memory=True, disk=False)
    again = ct.tune(model, x, progress=False)  # the disk cache answers (a later process)
    assert len(fake_timing) == count and {r.source for r in again.layers} == {"cache"}
    heuristic = ct.tune(model, x, mode="heuristic", progress=False)  # the default mode's picks: the tuned ones
    assert len(fake_timing) == count and {r.picked_by for r in heuristic.layers} == {"tuned"}


def test_tune_reports_forced_layers_and_the_model_picks(fake_timing):
    model = _model()
    model[4].algorithm = "direct"
    summary = ct.tune(model, torch.randn(1, 2, 4, 4), mode="heuristic", backward=False, progress=False)
    assert not fake_timing  # heuristic: nothing timed
    rows = [(r.layer, r.op, r.picked_by) for r in summary.layers]
    assert rows == [("0", "forward", "priority"), ("3.0", "forward", "priority"), ("4", "forward", "forced")]


def test_report_says_whose_pick_and_where_its_kernels_came_from(fake_timing):
    model = _model()
    x = torch.randn(1, 2, 4, 4)
    first = ct.report(model, x, backward=False)  # the default mode's picks: nothing timed
    assert not fake_timing and first.mode == "heuristic" and len(first.layers) == 3
    assert {r.picked_by for r in first.layers} == {"priority"}  # the simulator's picks (a GPU's: "model")
    assert all(r.kernels.endswith("simulated (no binary)") and r.kernels[0].isdigit() for r in first.layers), \
        str(first)
    assert all(f"; {r.kernels})" in line for r, line in zip(first.layers, str(first).splitlines()[1:]))
    ct.tune(model, x, backward=False, progress=False)
    tuned = ct.report(model, x, backward=False)
    assert len(fake_timing) and {r.picked_by for r in tuned.layers} == {"tuned"}
    assert all("simulated (no binary)" in r.kernels for r in tuned.layers), str(tuned)
    model[4].algorithm = "direct"
    forced = [r for r in ct.report(model, x, backward=False).layers if r.picked_by == "forced"]
    assert [(r.layer, r.kernels) for r in forced] == [("4", "")]


def test_tune_bad_arguments():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        ct.tune("model", torch.ones(1))
    with pytest.raises(ValueError, match="no convlab convolution layers"):
        ct.tune(nn.Linear(2, 2), torch.ones(1, 2))
    with pytest.raises(TypeError, match="example_inputs must be a tensor"):
        ct.tune(_model(), 3)
    with pytest.raises(ValueError, match="mode must be one of"):
        ct.tune(_model(), torch.ones(1, 2, 4, 4), mode="fast")
    with pytest.raises(ValueError, match="budget"):
        ct.tune(_model(), torch.ones(1, 2, 4, 4), budget=-2)
