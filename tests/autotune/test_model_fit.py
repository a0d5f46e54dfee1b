"""Fitting and judging the cost model on small synthetic datasets (convlab.modelfit.fitting, measured,
evaluate, fit): the fit recovers known constants, the loader keeps the newest commit's ok rows of GPU
files, leave-one-network-out scores a right model near zero regret and a wrong one badly, and
``python -m convlab.modelfit`` writes a model that loads and a report of the figures.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from convlab.autotune import costmodel
from convlab.modelfit import evaluate, fit as fit_cli, fitting, measured
from convlab.autotune.costmodel import Group, Model
from convlab.autotune.features import Features
from convlab.bench.suite import load_suite
from convlab.plugin import registry
from convlab.runtime.targets import get as get_target

SM90 = get_target("sm_90")
TRUTH = Model("sm_90", {"fa|fp32|*": Group(0.4, 0.7, 3.0), "fb|f16|*": Group(0.6, 0.5, 5.0),
                        "fa|fp32|wgrad": Group(0.2, 0.7, 3.0)}, e_aux=0.4, launch_ms=0.005, base_ms=0.012)


def _synthetic_rows(n: int = 160, noise: float = 0.02) -> list[fitting.Row]:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(n):
        family, arith = ("fa", "fp32") if i % 2 else ("fb", "f16")
        op = ("forward", "dgrad", "wgrad")[i % 3]
        f = Features(family, arith, float(10 ** rng.uniform(8, 11.5)), float(10 ** rng.uniform(5, 9)),
                     float(10 ** rng.uniform(4, 8)), int(rng.integers(1, 5)), int(rng.integers(50, 5000)), 1,
                     256, 2, float(10 ** rng.uniform(5, 9)))
        rows.append(fitting.Row(f, op, TRUTH.estimate_ms(f, op, SM90) * math.exp(rng.normal(0, noise))))
    return rows


def test_fit_recovers_known_constants():
    rows = _synthetic_rows()
    model = fitting.fit(rows, SM90, "sm_90")
    assert fitting.rms_log_error(model, rows, SM90) < 0.05
    assert fitting.rms_log_error(TRUTH, rows, SM90) < 0.05 < fitting.rms_log_error(Model("sm_90"), rows, SM90)
    assert model.group("fa", "fp32", "wgrad").e_compute == pytest.approx(0.2, rel=0.15)
    assert model.group("fa", "fp32", "forward").e_compute == pytest.approx(0.4, rel=0.15)
    assert model.group("fb", "f16", "dgrad").e_compute == pytest.approx(0.6, rel=0.15)
    assert model.launch_ms == pytest.approx(0.005, rel=0.3) and model.base_ms == pytest.approx(0.012, rel=0.3)
    with pytest.raises(ValueError, match="rows"):
        fitting.fit([], SM90, "sm_90")


def test_robust_loss_is_square_near_zero_and_linear_far_out():
    assert fitting.robust_loss(np.array([1e-3])) == pytest.approx(1e-6, rel=1e-3)
    s = fitting.ROBUST_SCALE
    far = fitting.robust_loss(np.array([100.0 * s])) / fitting.robust_loss(np.array([50.0 * s]))
    assert far == pytest.approx(2.0, rel=0.02)  # linear: doubling the residual doubles the loss


def test_a_row_timed_on_another_kernel_moves_the_fit_little(monkeypatch):
    """Rows whose times are 8x their features' (a replaced kernel's times): the robust fit keeps the
    group's compute efficiency near the truth, least squares (a huge scale) does not."""
    rows = _synthetic_rows()
    wgrad = [i for i, r in enumerate(rows) if r.features.family == "fa" and r.op == "wgrad"][:3]
    for i in wgrad:
        rows[i] = fitting.Row(rows[i].features, "wgrad", rows[i].ms * 8)
    robust = fitting.fit(rows, SM90, "sm_90").group("fa", "fp32", "wgrad").e_compute
    monkeypatch.setattr(fitting, "ROBUST_SCALE", 1e9)  # rho(e) = e**2 there
    squares = fitting.fit(rows, SM90, "sm_90").group("fa", "fp32", "wgrad").e_compute
    assert abs(math.log(robust / 0.2)) < 0.5 * abs(math.log(squares / 0.2))


def test_nelder_mead_finds_a_quadratic_minimum():
    x = fitting.nelder_mead(lambda v: float((v[0] - 3) ** 2 + 2 * (v[1] + 1) ** 2), [0.0, 0.0])
    assert x == pytest.approx([3.0, -1.0], abs=1e-3)


def test_judge_scores_a_misranked_layer_op():
    """The model ranks the slower of two configs first: regret 1.0, a top-1 miss, a top-2 hit."""
    f = lambda flops: Features("p", "fp32", flops, 1e3, 0.0, 1, 10_000, 1, 256, 2)  # noqa: E731
    layer = evaluate.LayerOp("net", load_suite("burn").problems()[0][1], "highest", [
        evaluate.Cand("p", "A=1", 1.0, f(1e12), 5, 0), evaluate.Cand("p", "A=2", 2.0, f(1e10), 5, 1)])
    one, two = (evaluate.judge(TRUTH, layer, SM90, k) for k in (1, 2))
    assert one.pick.config == "A=2" and one.regret == pytest.approx(1.0) and one.priority_regret == 0
    assert not one.hit and one.topk_informative and two.hit and not two.topk_informative
    s = evaluate.summarise([one])
    assert (s.layer_ops, s.heuristic_worst, s.topk_hit, s.heuristic_within) == (1, pytest.approx(1.0), 0.0, 0.0)
    assert evaluate.geomean_regret([1.0, 0.0]) == pytest.approx(math.sqrt(2) - 1)


def _bench(path, date, results, simulator=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "convlab-bench/1", "date": date, "simulator": simulator,
                                "settings": {}, "results": results}))


def _result(suite, problem, cands):
    return {"suite": suite, "problem": problem.to_dict(), "candidates": [
        {"plugin": p, "config": c, "status": s, "median_ms": ms, "op_median_ms": None}
        for p, c, s, ms in cands]}


def _runs(root, *folders):
    """results/runs.json listing ``folders`` in the order measured."""
    (root / "runs.json").write_text(json.dumps({"folders": [{"folder": f} for f in folders]}))


def test_loader_keeps_the_newest_commit_and_ok_gpu_rows(tmp_path):
    entry, fwd = load_suite("burn").problems(["forward"])[0]
    wg = load_suite("burn").problems(["wgrad"])[0][1]
    first, cached, second, tc_run = "bench/h200/aaaaaaa", "autotune/h200/aaaaaaa-2", "bench/h200/bbbbbbb", \
        "tc_conv/h200/ccccccc"
    _runs(tmp_path, first, cached, second, tc_run)
    _bench(tmp_path / first / "burn.json", "2026-01-01", [
        _result("burn", fwd, [("implicit_gemm", "A=1", "ok", 2.0), ("im2col", "B=1", "ok", 3.0),
                              ("direct", "default", "wrong", 0.1)]),
        _result("burn", wg, [("implicit_gemm", "A=1", "ok", 4.0)])])
    _bench(tmp_path / second / "burn.json", "2026-01-02",
           [_result("burn", fwd, [("implicit_gemm", "A=2", "ok", 1.5)])])
    cache = {"format": 1, "entries": {"k": {"problem": fwd.to_dict(), "results": [
        {"plugin": "implicit_gemm", "config": "A=3", "status": "ok", "median_ms": 1.0},
        {"plugin": "im2col", "config": "B=2", "status": "ok", "median_ms": 2.5}]}}}
    (tmp_path / cached).mkdir(parents=True)
    (tmp_path / cached / "cache.json").write_text(json.dumps(cache))
    tc = [{"part": "bench", "shape": entry.label, "op": "forward", "dtype": "tf32", "config": "T=1",
           "status": "ok", "op_ms": 0.5}, {"part": "bench", "shape": entry.label, "op": "forward",
                                          "dtype": "float16", "status": "declined"}]
    (tmp_path / tc_run).mkdir(parents=True)
    (tmp_path / tc_run / "tc_conv_float32.json").write_text(json.dumps(tc))
    late = [_result("burn", fwd, [("direct", "default", "ok", 9.0)])]
    _bench(tmp_path / "bench" / "history" / "old.json", "2027-01-01", late)  # superseded copies
    _bench(tmp_path / "sim.json", "2027-01-01", late, simulator=True)  # simulator times mean nothing
    (tmp_path / "notes.json").write_text("{not json")
    rows = {(m.problem.op, m.label, m.precision): m for m in measured.load(tmp_path)}
    assert set(rows) == {("forward", "implicit_gemm[A=2]", "highest"), ("forward", "im2col[B=1]", "highest"),
                         ("forward", "im2col[B=2]", "highest"), ("wgrad", "implicit_gemm[A=1]", "highest"),
                         ("forward", "tensor_core[T=1]", "high")}
    assert rows[("forward", "implicit_gemm[A=2]", "highest")].ms == 1.5  # the later commit supersedes the first
    assert rows[("forward", "tensor_core[T=1]", "high")].workspace_limit == measured.TC_CONV_LIMIT
    assert all(m.network == "burn" for m in rows.values())
    contexts = measured.by_context(rows.values())
    high = next(ms for (key, prec), ms in contexts.items() if prec == "high")
    assert {m.plugin for m in high} == {"tensor_core", "implicit_gemm", "im2col"}  # "high" holds "highest"
    assert measured.parse_config("BK=8,BM=64,via=x") == {"BK": 8, "BM": 64, "via": "x"}
    assert measured.network_of("resnet50_b8") == "resnet50" and measured.network_of("efficientnet_b0") == \
        "efficientnet_b0"
    with pytest.raises(ValueError, match="folder"):
        measured.load(tmp_path / "absent")


def test_a_newer_commit_supersedes_only_what_it_measured_again(tmp_path):
    """A sweep of two configs on two layers, both layers measured again at a newer commit, then one of
    them at a newer one still: each layer keeps its newest commit's row, and the older sweep of that
    plugin never comes back on either (a run of a few layers supersedes nothing else)."""
    (e1, p1), (e2, p2) = load_suite("burn").problems(["forward"])[:2]
    sweep, full, partial = "sweep/h200/aaaaaaa", "tc_conv/h200/bbbbbbb", "tc_conv/h200/ccccccc"
    _runs(tmp_path, sweep, full, partial)
    entries = {f"k{i}|float32+high": {"problem": p.to_dict(), "results": [
        {"plugin": "tensor_core", "config": c, "status": "ok", "median_ms": 7.0} for c in ("T=1", "T=2")]}
        for i, p in enumerate((p1, p2))}
    (tmp_path / sweep).mkdir(parents=True)
    (tmp_path / sweep / "cache.json").write_text(json.dumps({"format": 1, "entries": entries}))
    for folder, layers, ms in ((full, (e1, e2), 0.5), (partial, (e1,), 0.4)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "tc_conv_float32.json").write_text(json.dumps([
            {"part": "bench", "shape": e.label, "op": "forward", "dtype": "tf32", "config": "T=1",
             "status": "ok", "op_ms": ms} for e in layers]))
    rows = {(m.problem.key(), m.label): (m.ms, m.file.split("/")[2]) for m in measured.load(tmp_path)}
    assert rows == {(p1.key(), "tensor_core[T=1]"): (0.4, "ccccccc"),
                    (p2.key(), "tensor_core[T=1]"): (0.5, "bbbbbbb")}


def _synthetic_results(root, model, suites=("burn", "resnet50"), entries=5):
    """Bench files whose times are ``model``'s estimates of a few candidates per plugin (every op)."""
    registry.load()
    for suite in suites:
        results = []
        for entry_, problem in load_suite(suite).problems()[:3 * entries]:
            cands = []
            for name in ("implicit_gemm", "im2col", "col2im", "direct"):
                plugin = registry.get(name)
                if not registry.verdict(plugin, problem, None, measured.DEFAULT_LIMIT, SM90):
                    continue
                for cfg in registry.safe_configs(plugin, problem, SM90)[:3]:
                    f = evaluate.features(plugin, problem, cfg, SM90, measured.DEFAULT_LIMIT)
                    cands.append((name, cfg.name, "ok", model.estimate_ms(f, problem.op, SM90)))
            results.append(_result(suite, problem, cands))
        _bench(root / "bench" / "h200" / "aaaaaaa" / f"{suite}.json", "2026-01-01", results)
    _runs(root, "bench/h200/aaaaaaa")


def test_leave_one_out_and_the_fit_command(real, tmp_path):
    truth = Model("sm_90", {"implicit_gemm|fp32|*": Group(0.5, 0.3, 2.0), "im2col|fp32|*": Group(0.3, 0.8, 3.0),
                            "col2im|fp32|*": Group(0.35, 0.8, 3.0), "direct|fp32|*": Group(0.01, 1.0, 3.0)},
                  e_aux=0.4, launch_ms=0.004, base_ms=0.01)
    _synthetic_results(tmp_path / "results", truth)
    layers = evaluate.layer_ops(measured.load(tmp_path / "results"), SM90)
    assert {lay.network for lay in layers} == {"burn", "resnet50"} and len(layers) == 30
    loo = evaluate.leave_one_out(layers, SM90, "sm_90", 2)
    right = evaluate.summarise([j for _, js in loo.values() for j in js])
    assert right.layer_ops == 30 and right.heuristic_geomean < 0.05 and right.topk_hit >= 0.9
    assert right.topk_informative > 0 and right.priority_geomean > right.heuristic_geomean
    wrong = Model("sm_90", {"direct|fp32|*": Group(1.0, 1.5, 30.0)}, launch_ms=0.0001, base_ms=0.0001)
    bad = evaluate.summarise([evaluate.judge(wrong, lay, SM90, 1) for lay in layers])
    assert bad.heuristic_geomean > 1.0 and bad.heuristic_worst > 10  # direct picked: far from the best
    out, report = tmp_path / "model" / "sm_90.json", tmp_path / "report" / "model.md"
    argv = ["--results", str(tmp_path / "results"), "--out", str(out), "--report", str(report)]
    assert fit_cli.main(argv) == 0
    model = costmodel.load(out)
    assert model.target_class == "sm_90" and model.meta["rows"] == sum(len(lay.cands) for lay in layers)
    assert set(model.meta["files"]) == {"bench/h200/aaaaaaa/burn.json", "bench/h200/aaaaaaa/resnet50.json"}
    text = report.read_text()
    assert "| burn | 15 |" in text and "| resnet50 | 15 |" in text and "**met**" in text
    assert "python -m convlab.modelfit" in text and "`bench/h200/aaaaaaa/burn.json`" in text
    data = json.loads((report.parent / fit_cli.FIGURES).read_text())
    assert data["all"]["heuristic_geomean"] < 0.05 and set(data["k_choices"]) == {"1", "2", "3", "4"}
    first = out.read_text()
    fit_cli.main(["--results", str(tmp_path / "results"), "--out", str(out)])
    assert out.read_text() == first  # deterministic: the same data gives the same file
    with pytest.raises(SystemExit):  # argparse: exit status 2
        fit_cli.main(["--results", str(tmp_path / "absent"), "--out", str(out)])
    (tmp_path / "empty").mkdir()
    assert fit_cli.main(["--results", str(tmp_path / "empty"), "--out", str(out)]) == 1
