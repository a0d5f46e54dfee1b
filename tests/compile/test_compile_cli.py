"""``convlab compile``'s first impression: one line naming the extra when numba-cuda's compiler libraries
are missing, and spill allowances shown with their reasons, the exit status following the help text.

No kernel is compiled here: the toolchain lookup is replaced where a test says so, and the report is
built from rows.
"""
import subprocess
import sys

import pytest

from convlab.cli import parser as cli
from convlab.compile import toolchain
from convlab.compile.report import Report, Row

WHY = "the 128-register cap of 256-thread blocks (occupancy over spills to L1-cached local memory)"


def _report(*rows: Row) -> Report:
    report = Report({"targets": ["sm_80"]}, {"cases": {}, "errors": []}, [], wall_seconds=1.0,
                    collect_seconds=0.0, jobs=1)
    report.rows = list(rows)
    return report


def _row(name: str, stores: int, loads: int, allowed: int = 0, why: str = "") -> Row:
    return Row("sm_80", name, f"family.{name}", ["implicit_gemm"], 1, 256, 0,
               {"registers": 128, "static_shared": 0, "spill_stores": stores, "spill_loads": loads,
                "allowed_spills": allowed, "allowed_spills_why": why})


def test_missing_compiler_libraries_give_one_line_naming_the_extra(monkeypatch, capsys):
    monkeypatch.setattr(toolchain, "missing", lambda: ("NVRTC", "NVVM", "nvJitLink"))
    ran = []
    monkeypatch.setattr("convlab.compile.compile_corpus", lambda *a, **k: ran.append(a))
    code = cli.main(["compile", "--target", "sm_90", "--plugins", "direct", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 1 and not ran and out == ""
    assert err.splitlines() == ['convlab compile: numba-cuda cannot find its CUDA compiler libraries (NVRTC, '
                                'NVVM, nvJitLink); install them with: pip install "convlab[compile]"']


def test_bad_arguments_are_reported_before_the_toolchain(monkeypatch, capsys):
    monkeypatch.setattr(toolchain, "missing", lambda: ("NVRTC",))
    assert cli.main(["compile", "--plugins", "nosuch"]) == 2
    assert "unknown algorithm 'nosuch'" in capsys.readouterr().err


def test_the_lookup_names_the_library_a_lookup_error_names():
    class DynamicLibNotFoundError(RuntimeError):
        pass

    error = DynamicLibNotFoundError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12": No such file')
    assert toolchain._what(error) == "NVRTC"
    assert toolchain._what(DynamicLibNotFoundError('Failure finding "libnvJitLink.so.13"')) == "nvJitLink"
    assert toolchain._what(OSError("cannot open")) == "OSError: cannot open"


@pytest.mark.skipif(not toolchain.missing(), reason="the compile extra is installed here (the missing-library "
                                                    "path is the monkeypatched test above)")
def test_a_base_install_gets_one_line_from_the_console_script():
    done = subprocess.run([sys.executable, "-m", "convlab.cli", "compile", "--target", "sm_90", "--plugins",
                           "direct", "--quiet"], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if "Warning" not in line and line.startswith("convlab")]
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert len(lines) == 1 and 'pip install "convlab[compile]"' in lines[0], done.stderr


def test_a_spill_within_its_declared_allowance_is_shown_with_its_reason():
    report = _report(_row("capped", 144, 148, allowed=320, why=WHY), _row("plain", 0, 0))
    assert report.ok(0) and not report.failures(0)
    table = report.table(0, brief=True)
    capped = next(line for line in table.splitlines() if "capped" in line)
    assert f"spills within its declared allowance of 320 bytes: {WHY}" in capped
    assert "plain" not in table  # --brief: neither failing, spilling nor near a limit
    assert "1 spilling (max 292 bytes; 1 over --max-spill 0 within their declared allowance)" in table
    assert report.to_json(0)["kernels"][0]["allowed"].endswith(WHY)
    assert report.summary(0)["sm_80"]["allowed_spilling"] == 1
    assert report.summary(300)["sm_80"]["allowed_spilling"] == 0  # --max-spill covers it: no allowance used


def test_a_spill_over_its_allowance_fails_and_names_the_allowance():
    report = _report(_row("capped", 200, 200, allowed=320, why=WHY), _row("undeclared", 8, 8))
    (over, why_over), (undeclared, why_undeclared) = report.failures(0)
    assert over.kernel == "capped" and why_over == [f"spills 200 bytes stored / 200 loaded, over the budget "
                                                    f"of 320 (its declared allowance: {WHY})"]
    assert why_undeclared == ["spills 8 bytes stored / 8 loaded, over the budget of 0"]
    assert report.failures(16) == [(over, why_over)]


@pytest.mark.parametrize("rows, status", [((("capped", 144, 148, 320),), 0), ((("capped", 200, 200, 320),), 1),
                                          ((("undeclared", 8, 8, 0),), 1)])
def test_the_exit_status_follows_the_spill_budget_the_help_states(monkeypatch, capsys, rows, status):
    monkeypatch.setattr(toolchain, "missing", lambda: ())
    report = _report(*(_row(name, s, ld, allowed, WHY if allowed else "") for name, s, ld, allowed in rows))
    monkeypatch.setattr("convlab.compile.compile_corpus", lambda *a, **k: report)
    assert cli.main(["compile", "--target", "sm_80", "--plugins", "direct", "--quiet"]) == status
    with pytest.raises(SystemExit):
        cli.main(["compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-spill bytes (stores + loads), or more where it declares an allowance with its reason" in text
    assert "a kernel spilling over its budget" in text and 'pip install "convlab[compile]"' in text
