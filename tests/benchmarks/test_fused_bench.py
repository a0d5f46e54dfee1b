"""benchmarks/fused_bench.py: refuses the simulator without --smoke; --smoke runs every variant of a
MobileNetV2 stack (forward and train) and a ResNet-50 one (forward, through --resume), each row checked
against the float64 reference within max(TOL, FACTOR x torch eager's own error); the check's bounds per
output; --budget leaves later cases out without marking the run complete, --without unregisters plugins, and a case that fails while
timed keeps a row with the error."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
from convlab import runtime  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import fused_bench  # noqa: E402
import fused_check  # noqa: E402

SMOKE = ["--smoke", "--dtypes", "float32", "--layouts", "channels_last", "--compile-backend", "eager"]


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the refusal is the simulator's")
def test_refuses_the_simulator_without_smoke(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fused_bench.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr
    assert not (tmp_path / "fused.json").exists()


def test_smoke_rows_are_checked_timed_and_resumed(tmp_path):
    out = str(tmp_path)
    assert fused_bench.main([*SMOKE, "--models", "mobilenetv2*", "--out", out]) == 0
    data = json.loads((tmp_path / "fused.json").read_text())
    assert data["smoke"] and data["versions"]["torch"] and data["versions"]["numba_cuda"] and data["commit"]
    assert (tmp_path / "complete").exists() and "| convlab_blocks |" in (tmp_path / "fused.md").read_text()
    got = {(r["mode"], r["variant"]): r for r in data["rows"]}
    assert set(got) == {("forward", v) for v in fused_bench.VARIANTS} | {
        ("train", v) for v in fused_bench.VARIANTS if v != "convlab_blocks"}
    for (mode, variant), row in got.items():
        assert "error" not in row, (mode, variant, row.get("traceback"))
        assert row["passed"] and row["tol"] == fused_bench.TOL["float32"]
        masked = mode == "train" and variant != "torch.compile"
        assert row["masked"] is masked and row["reference"] == "float64" + masked * ", the call's activation masks"
        assert ("flips" in row and "last_flips" in row) is masked and len(row["plain_rel_errs"]) == len(row["rel_errs"])
        assert len(row["rel_errs"]) == len(row["bounds"]) == (2 if mode == "train" else 1)
        assert ("records_per_step" in row) == variant.startswith("convlab")
        assert row["rel_err"] == max(row["rel_errs"]) and row["last_rel_err"] == max(row["last_rel_errs"])
        assert all(e <= b for e, b in zip(row["rel_errs"] + row["last_rel_errs"], row["bounds"] * 2))
        eager = got[(mode, "torch")]["rel_errs" if masked else "plain_rel_errs"]  # the row's own reference
        assert row["torch_rel_errs"] == eager and 0 < row["rel_err"] < row["tol"]
        assert row["median_ms"] > 0 and row["speedup_vs_torch"] > 0 and row["first_call_s"] > 0
    assert got[("forward", "convlab_fused")]["fusions"] > 0 and got[("forward", "convlab")]["fusions"] == 0
    assert got[("forward", "torch")]["speedup_vs_torch"] == 1.0
    assert {(t["mode"], t["variant"]) for t in data["targets"]} == {
        ("forward", "convlab_fused"), ("forward", "convlab_blocks"), ("train", "convlab_fused")}
    assert all("at_least_1.3x_torch" in t for t in data["targets"] if t["mode"] == "forward")

    (tmp_path / "complete").unlink()
    argv = [*SMOKE, "--models", "*", "--modes", "forward", "--variants", "convlab_fused", "--resume", "--out", out]
    assert fused_bench.main(argv) == 0
    rows = json.loads((tmp_path / "fused.json").read_text())["rows"]
    resnet = [r for r in rows if r["stack"].startswith("resnet50")]
    assert len(rows) == len(got) + 2 and [r["variant"] for r in resnet] == ["torch", "convlab_fused"]
    assert all(r["passed"] and r["median_ms"] > 0 for r in resnet) and (tmp_path / "complete").exists()


def test_the_check_bounds_each_output_by_torch_eagers_own_error():
    torch = pytest.importorskip("torch")
    f, tol = fused_bench.FACTOR, fused_bench.TOL["float32"]
    ref = (torch.ones(100, dtype=torch.float64), torch.ones(100, dtype=torch.float64))

    def off(e0: float, e1: float) -> tuple:  # outputs at relative norm errors e0, e1 from ref
        return tuple(torch.full((100,), 1 + e, dtype=torch.float64) for e in (e0, e1))
    eager: dict = {}
    assert fused_check.check(eager, off(1e-3, 1e-5), ref, None, "float32") == pytest.approx([1e-3, 1e-5])
    assert eager["passed"] and eager["bounds"] == pytest.approx([f * 1e-3, tol])  # passes by construction
    for got, passed in ((off(.97 * f * 1e-3, .95 * tol), True), (off(1.03 * f * 1e-3, 1e-5), False),
                        (off(1e-3, 1.05 * tol), False)):
        row: dict = {}
        fused_check.check(row, got, ref, eager["rel_errs"], "float32")
        assert row["passed"] is passed and row["torch_rel_errs"] == eager["rel_errs"]
        fused_check.check(row, off(0, 0), ref, eager["rel_errs"], "float32", "last_")
        assert row["passed"] is passed and row["last_rel_err"] == 0  # a failed first check stays failed
    row = {}
    fused_check.check(row, off(0, 0), ref, eager["rel_errs"], "float32")
    fused_check.check(row, off(1.03 * f * 1e-3, 0), ref, eager["rel_errs"], "float32", "last_")
    assert not row["passed"] and row["rel_err"] == 0  # the last timed call is held to the same bounds


def test_budget_starts_no_case_past_it(tmp_path):
    assert fused_bench.main([*SMOKE, "--budget", "0", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "fused.json").read_text())
    assert data["rows"] == [] and len(data["skipped"]) == 4 and not (tmp_path / "complete").exists()


def test_without_unregisters_the_named_plugins_and_rejects_unknown_ones(tmp_path, monkeypatch):
    import convlab

    dropped: list[str] = []
    monkeypatch.setattr(convlab, "unregister", dropped.append)  # the other tests keep every plugin
    assert fused_bench.main([*SMOKE, "--budget", "0", "--without", "tf32x3", "--out", str(tmp_path)]) == 0
    assert dropped == ["tf32x3"] and json.loads((tmp_path / "fused.json").read_text())["without"] == ["tf32x3"]
    with pytest.raises(SystemExit):
        fused_bench.main([*SMOKE, "--without", "no_such_plugin", "--out", str(tmp_path)])
    assert dropped == ["tf32x3"]


def test_a_row_on_the_plain_reference_is_bounded_by_torch_eagers_plain_error(tmp_path, monkeypatch):
    """torch.compile records no masks: its bounds come from torch eager's error against float64's own
    masks, not from torch eager's masked one (here a masked reference 0.1 % off, so the two differ)."""
    real = fused_bench.masked_reference

    def off(torch, *args):
        ref, flips = real(torch, *args)
        return tuple(r * 1.001 for r in ref), flips
    monkeypatch.setattr(fused_bench, "masked_reference", off)
    argv = [*SMOKE, "--models", "mobilenetv2*", "--modes", "train", "--variants", "torch,torch.compile",
            "--out", str(tmp_path)]
    assert fused_bench.main(argv) == 0
    eager, compiled = json.loads((tmp_path / "fused.json").read_text())["rows"]
    assert eager["rel_errs"][0] > 5e-4 > eager["plain_rel_errs"][0]
    assert compiled["torch_rel_errs"] == eager["plain_rel_errs"] and not compiled["masked"]
    assert compiled["bounds"] == [max(fused_bench.TOL["float32"], fused_bench.FACTOR * e) for e in eager["plain_rel_errs"]]


def test_a_case_failing_while_timed_keeps_its_error_row(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("timing failed")
    monkeypatch.setattr(fused_bench, "_interleaved", broken)
    argv = [*SMOKE, "--models", "resnet50*", "--modes", "forward", "--variants", "torch", "--out", str(tmp_path)]
    assert fused_bench.main(argv) == 0
    (row,) = json.loads((tmp_path / "fused.json").read_text())["rows"]
    assert row["variant"] == "*" and not row["passed"] and row["error"] == "RuntimeError: timing failed"
    assert "| error |" in (tmp_path / "fused.md").read_text()


def _relu_net(torch):
    """Conv -> ReLU -> Conv -> ReLU6, float64, with the first ReLU's input set to exactly 0 at one element."""
    g = torch.Generator().manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU(inplace=True),
                              torch.nn.Conv2d(3, 2, 1), torch.nn.ReLU6()).double()
    for p in net.parameters():
        p.data.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    x = torch.randn(2, 2, 5, 5, generator=g, dtype=torch.float64)
    return net, x, torch.randn(2, 2, 5, 5, generator=g, dtype=torch.float64)


def test_masked_reference_with_the_float64_masks_is_the_plain_reference():
    torch = pytest.importorskip("torch")
    net, x, gy = _relu_net(torch)
    rec = fused_check.MaskRecorder(net)
    assert rec.modules == ["1", "3"]
    out = rec.record(lambda: fused_bench._call(torch, net, x.clone().requires_grad_(True), gy)())
    (y, gx), flips = fused_check.masked_reference(torch, net, x, gy, rec.masks)
    assert flips == 0 and torch.equal(y, out[0]) and torch.allclose(gx, out[1], rtol=0, atol=1e-14)
    assert [len(v) for v in rec.masks.values()] == [1, 1]
    assert all(not m._forward_hooks for m in net.modules())  # no hook outside record


def test_masked_reference_takes_the_recorded_branch_of_a_kink():
    """One element of the first ReLU's mask flipped by hand: the reference's x.grad is the gradient with
    that element on the other branch (the chain rule through it by hand), its output unchanged."""
    torch = pytest.importorskip("torch")
    net, x, gy = _relu_net(torch)
    rec = fused_check.MaskRecorder(net)
    rec.record(lambda: net(x))
    masks = {k: [m.clone() for m in v] for k, v in rec.masks.items()}
    masks["1"][0][0, 1, 2, 2] = ~masks["1"][0][0, 1, 2, 2]
    (y, gx), flips = fused_check.masked_reference(torch, net, x, gy, masks)
    assert flips == 1 and torch.equal(y, net(x).detach())
    conv1, conv2 = net[0], net[2]
    xr = x.clone().requires_grad_(True)
    a = conv1(xr)
    d1 = masks["1"][0].double()
    h = torch.relu(a).detach() + (a - a.detach()) * d1
    b = conv2(h)
    d3 = ((torch.nn.functional.relu6(b) > 0) & (torch.nn.functional.relu6(b) < 6)).double()
    (torch.nn.functional.relu6(b).detach() + (b - b.detach()) * d3).backward(gy)
    assert torch.allclose(gx, xr.grad, rtol=0, atol=1e-13)
    x2 = x.clone().requires_grad_(True)
    net(x2).backward(gy)
    assert not torch.allclose(gx, x2.grad, rtol=0, atol=1e-6)  # the flip moved x.grad
