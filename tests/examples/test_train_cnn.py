"""The training example: the network, the batch order, both backends, the summary and the CLI.

With backend convlab the network runs on Numba's CUDA simulator here (CPU tensors), so that test is one
forward and backward pass of a 4-image batch of 8x8 images.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from convlab.examples import train_cnn  # noqa: E402
from convlab.examples.train_cnn import ShapesNet, TrainConfig, batch_order, build, train  # noqa: E402
from convlab.examples.training_report import plot_losses, summarize, summary_text  # noqa: E402


def test_batch_order_is_seeded_whole_batches_of_epoch_permutations():
    order = batch_order(seed=5, n=10, batch=3, steps=7)
    assert order.shape == (7, 3)
    np.testing.assert_array_equal(order, batch_order(5, 10, 3, 7))
    assert not np.array_equal(order, batch_order(6, 10, 3, 7))
    for epoch in range(2):  # 3 whole batches per epoch, no sample twice within an epoch
        assert len(set(order[3 * epoch:3 * epoch + 3].ravel())) == 9
    with pytest.raises(ValueError, match="batch"):
        batch_order(0, 10, 11, 1)


def test_network_has_the_layers_the_example_promises():
    model = ShapesNet(num_classes=10, width=4)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)]
    assert any(m.stride == (2, 2) for m in convs) and any(m.padding == (1, 1) for m in convs)
    assert any(m.groups > 1 for m in convs)
    assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in convs) == 1
    assert any(m.bias is not None for m in convs) and any(m.bias is None for m in convs)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert model(torch.randn(3, 1, 12, 12)).shape == (3, 10)
    with pytest.raises(ValueError, match="multiple of 4"):
        model(torch.randn(3, 1, 10, 10))
    with pytest.raises(ValueError, match="width"):
        ShapesNet(width=3)
    with pytest.raises(ValueError, match="backend"):
        build("cublas", 0, TrainConfig.tiny(), "cpu")


def test_cudnn_backend_trains_on_an_easy_tiny_setup():
    config = TrainConfig.tiny(num_classes=2, noise=0.1, batch=16, steps=40, lr=1e-2, size=12, width=8)
    run = train("cudnn", 0, "cpu", config)
    losses = run["losses"]
    assert len(losses) == 40 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert run["final_loss"] == pytest.approx(np.mean(losses[-4:]))
    assert 0.0 <= run["test_accuracy"] <= 1.0 and run["test_loss"] > 0
    assert run["first_step_s"] > 0 and run["step_ms_median"] > 0
    again = train("cudnn", 0, "cpu", config, steps=2)  # the same seed replays the same start (the
    np.testing.assert_allclose(again["losses"], losses[:2], rtol=1e-5)  # cosine rate differs after)


def _loss_and_grads(model, x, y):
    model.train()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def test_convlab_first_step_matches_cudnn_on_the_simulator():
    convlab_torch = pytest.importorskip("convlab.torch")
    config = TrainConfig.tiny()
    reference, converted = build("cudnn", 7, config, "cpu"), build("convlab", 7, config, "cpu")
    kinds = [type(m) for m in converted.modules()]
    assert convlab_torch.Conv2d in kinds and convlab_torch.ConvTranspose2d in kinds
    assert torch.nn.Conv2d not in kinds and torch.nn.ConvTranspose2d not in kinds  # every conv swapped
    assert list(converted.state_dict()) == list(reference.state_dict())
    for (name, a), b in zip(reference.state_dict().items(), converted.state_dict().values()):
        assert torch.equal(a, b), f"{name}: the same seed must give the same initial weights"
    images, labels = train_cnn._dataset(config.n_train + config.n_test, config.size, config.data_seed,
                                        config.num_classes, config.noise)
    batch = torch.from_numpy(batch_order(7, config.n_train, config.batch, 1)[0])
    x, y = torch.from_numpy(images)[batch], torch.from_numpy(labels)[batch]
    want_loss, want = _loss_and_grads(reference, x, y)
    got_loss, got = _loss_and_grads(converted, x, y)
    assert got_loss == pytest.approx(want_loss, rel=1e-5)
    for name, grad in want.items():
        # up.bias feeds a BatchNorm, so its exact gradient is 0 and both sides hold rounding (~1e-8):
        # errors are relative to the gradient's norm, but to no less than 0.01
        err = float((got[name] - grad).norm() / max(float(grad.norm()), 1e-2))
        assert err < 1e-4, f"gradient of {name}: relative error {err:.2e}"


def _fake_run(backend, seed, final, accuracy, step_ms):
    return {"backend": backend, "seed": seed, "losses": [2.3, 1.0, final], "final_loss": final,
            "test_loss": final + 0.1, "test_accuracy": accuracy, "first_step_s": 1.0 + seed,
            "step_ms_median": step_ms}


def test_summary_says_whether_convlab_is_inside_cudnn_seed_range():
    runs = [_fake_run("cudnn", s, f, a, 2.0) for s, f, a in ((0, 0.30, 0.90), (1, 0.20, 0.94), (2, 0.25, 0.92))]
    inside = runs + [_fake_run("convlab", s, f, 0.91, 3.0) for s, f in ((0, 0.22), (1, 0.26), (2, 0.27))]
    summary = summarize(inside)
    assert summary["backends"]["cudnn"]["final_loss"] == pytest.approx({"mean": 0.25, "min": 0.2, "max": 0.3})
    assert summary["convlab_final_loss_inside_cudnn_range"] and summary["convlab_accuracy_inside_cudnn_range"]
    assert summary["step_time_ratio_convlab_over_cudnn"] == pytest.approx(1.5)
    assert summary["backends"]["convlab"]["first_step_s_max"] == 3.0
    outside = runs + [_fake_run("convlab", s, 0.5, 0.8, 3.0) for s in range(3)]
    summary = summarize(outside)
    assert not summary["convlab_final_loss_inside_cudnn_range"]
    assert not summary["convlab_accuracy_inside_cudnn_range"]
    text = summary_text(summary)
    assert "inside cuDNN's seed range:   NO" in text and "1.50x" in text


def test_cli_writes_results_and_figure_for_the_cudnn_backend(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, figure = tmp_path / "r" / "run.json", tmp_path / "f" / "loss.png"
    code = train_cnn.main(["--tiny", "--backends", "cudnn", "--seeds", "0", "1", "--steps", "4",
                           "--out", str(out), "--figure", str(figure)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["format"] == "convlab-training/1" and data["settings"]["steps"] == 4
    assert "torch" in data["versions"]
    assert data["torch_device"] == train_cnn.device_description(train_cnn.default_device())
    assert [(r["backend"], r["seed"], len(r["losses"])) for r in data["runs"]] == [("cudnn", 0, 4), ("cudnn", 1, 4)]
    assert data["summary"]["backends"]["cudnn"]["seeds"] == [0, 1]
    assert figure.stat().st_size > 5000
    assert "final loss, mean (min..max)" in capsys.readouterr().out
    again = tmp_path / "f" / "replot.png"  # --replot: the summary and figure from the JSON, no training
    assert train_cnn.main(["--replot", str(out), "--figure", str(again)]) == 0
    assert again.stat().st_size > 5000 and "final loss, mean (min..max)" in capsys.readouterr().out


def test_plot_overlays_one_line_per_seed_and_a_mean_per_backend():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [_fake_run(b, s, 0.2 + 0.01 * s, 0.9, 2.0) for b in ("cudnn", "convlab") for s in range(3)]
    fig, ax = plt.subplots()
    plot_losses(ax, runs, title="t")
    assert len(ax.lines) == 8  # 3 seeds + 1 mean, per backend
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 2 and "cuDNN" in labels[0] and "2.00 ms/step" in labels[0]
    plt.close(fig)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda)")
def test_both_backends_train_alike_on_the_gpu():
    """CUDA tensors: convlab's first loss equals cuDNN's (TF32 off, same seed), and both keep training."""
    pytest.importorskip("convlab.torch")
    config = TrainConfig.tiny(steps=20, batch=32, size=16, width=8, n_train=256, n_test=64, noise=0.1,
                              lr=1e-2)
    ref, new = (train(b, 3, "cuda", config) for b in ("cudnn", "convlab"))
    assert new["losses"][0] == pytest.approx(ref["losses"][0], rel=1e-5)
    np.testing.assert_allclose(new["losses"][:5], ref["losses"][:5], rtol=1e-3)
    assert all(np.isfinite(new["losses"])) and new["step_ms_median"] > 0
    assert np.mean(new["losses"][-5:]) < np.mean(new["losses"][:5]) - 0.1
