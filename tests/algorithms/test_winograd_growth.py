"""winograd's declared error growth (algorithms/winograd/growth.json) against the measurement it names:
each entry is the measured growth times the margin, rounded up to two significant figures, and every
measured form is declared."""
from __future__ import annotations

import json
import math
from importlib.resources import files
from pathlib import Path

import pytest

from convlab.algorithms.winograd import accuracy

REPO = Path(__file__).resolve().parents[2]
DECLARED = json.loads(files("convlab.algorithms.winograd").joinpath("growth.json").read_text())


def ceil_2_figures(x: float) -> float:
    """``x`` rounded up to two significant figures (1.419 -> 1.5, 5942 -> 6000)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / unit - 1e-9) * unit


def measured_rows() -> list[dict]:
    """The measurement's rows for convlab's interpolation points (not the Lavin & Gray comparison)."""
    path = REPO / DECLARED["measured"]
    if not path.exists():
        pytest.skip(f"{DECLARED['measured']} is not in this tree (an installed wheel)")
    return [r for r in json.loads(path.read_text())["winograd"] if not r.get("points")]


def test_ceil_2_figures():
    assert [ceil_2_figures(x) for x in (1.419, 5942.2, 21.0, 0.0123)] == pytest.approx([1.5, 6000, 21, 0.013])


def test_every_declared_growth_is_the_measured_one_times_the_margin():
    rows = measured_rows()
    seen = set()
    for row in rows:
        op = "wgrad" if row["op"] == "wgrad" else "forward"
        name = f"{op} {row['key']}"
        declared = DECLARED["growth"][name][row["engine"]]
        assert declared == pytest.approx(ceil_2_figures(row["growth"] * DECLARED["margin"]), rel=1e-9), (
            name, row["engine"])
        seen.add((name, row["engine"]))
    listed = {(name, engine) for name, row in DECLARED["growth"].items() for engine in row}
    assert listed == seen, f"declared but not measured: {sorted(listed - seen)}"


def test_the_module_reads_the_file():
    assert accuracy.GROWTH[("forward", "F(4,3)xF(4,3)")]["simt"] == DECLARED["growth"]["forward F(4,3)xF(4,3)"]["simt"]
    assert len(accuracy.GROWTH) == len(DECLARED["growth"])
