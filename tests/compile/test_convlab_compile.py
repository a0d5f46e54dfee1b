"""convlab compile: kernels compiled for named targets by workers in the compile-only runtime (no GPU).

Needs numba-cuda's compiler libraries (the ``compile`` extra); ptxas (the nvidia-cuda-nvcc wheel) for registers and spills.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convlab.compile import compare_hashes, compile_corpus, make_spec, toolchain
from convlab.compile.assemble import normalised, ptxas_path
from convlab.compile.report import Row

HERE = Path(__file__).resolve().parent


needs_nvvm = pytest.mark.skipif(bool(toolchain.missing()), reason="numba-cuda's compiler libraries "
                                "(pip install 'convlab[compile]')")


@needs_nvvm
def test_every_kernel_of_a_plugin_compiles_for_both_targets(direct_report):
    rows = direct_report.rows
    names = {r.name.split(".")[-1] for r in rows}
    assert {"forward", "dgrad", "wgrad_partial"} <= names  # direct's kernels, and the layout copies
    assert {r.target for r in rows} == {"sm_80", "sm_90"}
    assert direct_report.ok() and not direct_report.failures()
    if ptxas_path():
        assert all(r.get("registers") and r.get("spill_stores") == 0 for r in rows)
    summary = direct_report.summary()
    assert summary["sm_90"]["kernels"] == len([r for r in rows if r.target == "sm_90"]) > 3
    assert "kernels lowered" in direct_report.table()


@needs_nvvm
def test_ptx_hashes_are_the_same_in_another_process_and_differ_by_target(direct_report):
    again = compile_corpus(make_spec(["sm_80", "sm_90"], plugins=["direct"], dtypes=["float32"]), jobs=1)
    first, second = direct_report.hashes(), again.hashes()
    diff = compare_hashes(first, second)
    assert all(not d["changed"] and not d["only_before"] and not d["only_after"] for d in diff.values())
    assert diff["sm_90"]["same"] == len(first["targets"]["sm_90"]["cases"]) > 0
    assert set(first["targets"]["sm_80"]["kernels"]).isdisjoint(first["targets"]["sm_90"]["kernels"])


def test_compare_names_the_changed_cases():
    before = {"targets": {"sm_90": {"cases": {"a": ["h1"], "b": ["h2"], "c": ["h3"]}, "kernels": {"h1": "k"}}}}
    after = {"targets": {"sm_90": {"cases": {"a": ["h1"], "b": ["h9"], "d": ["h4"]}, "kernels": {"h9": "k"}}}}
    d = compare_hashes(before, after)["sm_90"]
    assert (d["same"], d["changed"], d["only_before"], d["only_after"]) == (1, ["b"], ["c"], ["d"])
    assert d["kernels_only_after"] == {"h9": "k"}


def test_normalised_ptx_drops_names_comments_and_debug_lines():
    ptx = ".visible .entry _ZN6cudapy7convlab3fooE(\n// a comment\n.loc 1 2 3\n\tld.param.u64 %rd1, [_ZN6cudapyE_param_0];"
    assert normalised(ptx) == ".visible .entry SYM(\n\tld.param.u64 %rd1, [SYM];"


def test_normalised_ptx_numbers_shared_arrays_by_appearance():
    """Numba numbers shared arrays with a process-wide counter: the same kernel compiled after others
    names them _cudapy_smem_16 instead of _cudapy_smem_7; their order of appearance is what counts."""
    first = ".shared .b8 _cudapy_smem_7[64];\n.shared .b8 _cudapy_smem_8[32];\nmov.u64 %rd1, _cudapy_smem_8;"
    later = first.replace("smem_8", "smem_21").replace("smem_7", "smem_20")
    other_array = first.replace("mov.u64 %rd1, _cudapy_smem_8", "mov.u64 %rd1, _cudapy_smem_7")
    assert normalised(first) == normalised(later) != normalised(other_array)


def test_limits_spills_and_serialised_wgmma_fail_a_kernel():
    def row(threads=256, **result):
        return Row("sm_80", "k", "kernel", ["p"], 1, threads, 0, {"registers": 64, "static_shared": 0,
                                                               "spill_stores": 0, "spill_loads": 0, **result})
    assert row().problems(0) == []
    assert "over sm_80's 65536" in row(threads=512, registers=160).problems(0)[0]
    assert row(spill_stores=8, allowed_spills=16).problems(0) == []  # what the kernel declared
    assert "spills 8 bytes" in row(spill_stores=8).problems(0)[0] and row(spill_stores=8).problems(16) == []
    assert "static shared" in row(static_shared=50000).problems(0)[-1]
    assert row(warnings=["ptxas warning : (C7515) wgmma serialized"]).problems(0)
    assert row(error="ptxas: error").problems(0) == ["ptxas: error"]
    assert row(registers=250).near() and not row().near()


@needs_nvvm
def test_a_kernel_over_the_shared_memory_limit_fails_and_the_cli_exits_1(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "convlab.cli", "compile", "--target", "sm_90", "--plugins",
                           "_test_greedy_shared", "--import", "faulty_compile_plugin", "--dtypes", "float32",
                           "--ops", "forward", "--json", str(out), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(out.read_text())
    greedy = [k for k in report["kernels"] if k["name"].endswith("_greedy")]
    assert greedy and all(k["problems"] for k in greedy)
    if ptxas_path():
        assert any("shared" in p for k in greedy for p in k["problems"])


def test_bad_targets_and_specs_are_refused_before_any_work():
    with pytest.raises(ValueError, match="unknown target 'sm_10'"):
        make_spec(["sm_10"])
    with pytest.raises(ValueError, match="runs Python, not PTX"):
        make_spec(["simulator"])
    with pytest.raises(ValueError, match="dtypes must be among"):
        make_spec(["sm_90"], dtypes=["int8"])
    with pytest.raises(ValueError, match="corpus is empty"):
        make_spec(["sm_90"], samples=False)


@needs_nvvm
def test_without_ptxas_the_ptx_stage_runs_and_the_report_says_how_to_install(monkeypatch):
    monkeypatch.setenv("CONVLAB_PTXAS", "none")
    report = compile_corpus(make_spec(["sm_90"], plugins=["direct"], dtypes=["float64"], ops=["forward"]), jobs=1)
    assert report.ok() and all(r.get("hash") and r.get("registers") is None for r in report.rows)
    assert "nvidia-cuda-nvcc" in report.table()


def test_the_table_cuts_long_plugin_and_kernel_names_unless_wide():
    from convlab.compile.report import Report

    long_name = "implicit_gemm.forward.make_forward.<locals>.kernel_with_a_long_generated_name"
    plugins = ["implicit_gemm", "tensor_core", "tf32x3", "widen"]
    report = Report({"targets": ["sm_90"]}, {"cases": {}, "errors": []}, [], wall_seconds=1.0, collect_seconds=0.0, jobs=1)
    report.rows = [Row("sm_90", "k", long_name, plugins, 1, 128, 0, {"registers": 32})]
    narrow, wide = report.table().splitlines()[2], report.table(wide=True).splitlines()[2]
    full = long_name.replace("<locals>.", "")
    assert full not in narrow and f" ...{full[-25:]} " in narrow and f" {','.join(plugins)[:21]}... " in narrow
    assert f" {','.join(plugins)} {full} " in wide
