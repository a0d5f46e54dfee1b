"""benchmarks/profile_report.py's Report: each case on disk as soon as it is added (a cut run keeps its
finished cases), the ``.complete`` mark only once the script says every case ran."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from profile_report import Report  # noqa: E402  (the benchmarks folder is no package)


def test_report_writes_each_case_as_it_comes_and_marks_completion_last(tmp_path, capsys):
    out = tmp_path / "layers.md"
    report = Report(out, "# title")
    report.add("## case one\nbody one")
    assert out.read_text() == "# title\n\n## case one\nbody one\n"
    assert not out.with_suffix(".complete").exists()
    report.add("## case two")
    assert out.read_text().split("\n\n") == ["# title", "## case one\nbody one", "## case two\n"]
    report.complete()
    assert out.with_suffix(".complete").is_file()
    assert capsys.readouterr().out.splitlines() == ["## case one", "## case two"]
