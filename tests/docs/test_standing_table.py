"""The table of where convlab stands against cuDNN, in the README and the docs, is the committed results'
(tools/standing_table.py)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("standing_table", REPO / "tools" / "standing_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_tables_are_the_results():
    tool = _tool()
    table = tool.table()
    for page in tool.PAGES:
        text = page.read_text()
        assert tool.replace_table(text, table, page) == text, \
            f"{page.relative_to(REPO)}: stale table; run python tools/standing_table.py --write"


def _row(label, dtype, op, layout, status="ok", ratio=None):
    auto = {"tune": {"ok": ratio is not None, "ratio": ratio}} if status != "declined" else {}
    return {"label": label, "dtype": dtype, "op": op, "layout": layout, "status": status, "auto": auto,
            "suite": "s"}


def test_geomean_lowest_and_counts_keep_declined_and_failed_rows(tmp_path):
    rows = [_row("a", "float16", "forward", "nchw", ratio=2.0), _row("b", "float16", "forward", "nchw", ratio=0.5),
            _row("c", "float16", "forward", "nchw", status="declined"),
            _row("d", "float16", "forward", "nchw", status="failed")]
    (tmp_path / "results" / "auto_bench" / "x").mkdir(parents=True)
    (tmp_path / "results" / "auto_bench" / "x" / "r.json").write_text(json.dumps(
        {"device": "GPU", "versions": {"torch": "t", "cudnn": "c", "convlab": "v"}, "rows": rows}))
    (tmp_path / "results" / "runs.json").write_text(json.dumps(
        {"folders": [{"folder": "auto_bench/x", "what": "auto_bench"}]}))
    text = _tool().table(tmp_path)
    assert "| float16 | forward | nchw | 1.00 | 2 | 0.50 (b) | 2 / 1 / 1 |" in text


def test_a_page_without_markers_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        _tool().replace_table("no table here", "| a |", tmp_path / "page.md")
