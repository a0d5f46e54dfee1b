"""The notebooks run headless, top to bottom, with their size switch at ``tiny``.

Each notebook executes in a Jupyter kernel (nbclient, kernel ``python3`` running this interpreter),
through ``notebooks/run_all.py`` as the lead's GPU run does; one also goes through run_all's Jupyter-free
``inline`` engine, the one used where Jupyter is not installed. The committed ``.ipynb`` files must match
their paired percent-format ``.py`` files and carry no outputs.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
#: what each notebook must print (besides running without an error) and the figure it saves
EXPECTED = {
    "01_algorithms_tour": (["relative error", "GEMM view (M, N, K)", "direct"], "01_time_by_plugin.png"),
    "02_autotuner": (["source: cache", "both under key", "after clearing"], "02_winner_map.png"),
    "03_add_a_plugin": (["all 7 checks passed", "notebook_winograd_forgets_bias failed",
                         "needs stride 1, got (2, 2)"], "03_winograd_vs_others.png"),
    "04_training_with_convlab": (["same parameters after convert: True", "ConvTranspose2d", "step time convlab / ",
                                  "'s seed range", "training loss "], "04_training_loss.png"),
    "05_transform_algorithms": (["exact in rational arithmetic: True", "declines: float32 precision 'highest'",
                                 "lossy: ", "executed / dense FLOPs", "GPU numbers: ",
                                 "FFT's estimate beats every other plugin's from kernel size"], "05_winograd_error.png"),
}
#: notebooks that need an optional extra (skipped cleanly where it is missing)
NEEDS = {"04_training_with_convlab": "torch"}


def _run_all():
    spec = importlib.util.spec_from_file_location("convlab_notebooks_run_all", NOTEBOOKS / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(nb: dict) -> str:
    """All stream and text outputs of an executed notebook."""
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


def _errors(nb: dict) -> list[str]:
    return [f"{out['ename']}: {out['evalue']}" for cell in nb["cells"] for out in cell.get("outputs", [])
            if out["output_type"] == "error"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"CONVLAB_NOTEBOOK_SIZE": "tiny", "CONVLAB_FIGURE_DIR": str(tmp_path / "figures"),
            "CONVLAB_CACHE_DIR": str(tmp_path / "cache")}


def test_every_notebook_is_known():
    assert NAMES == sorted(EXPECTED)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_matches_its_percent_script(name):
    jupytext = pytest.importorskip("jupytext")  # in the notebooks and test extras
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    paired = jupytext.read(NOTEBOOKS / f"{name}.py")
    assert nb["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    mine = [(c["cell_type"], "".join(c["source"]).strip()) for c in nb["cells"]]
    theirs = [(c.cell_type, c.source.strip()) for c in paired.cells]
    assert mine == theirs, f"{name}.ipynb and {name}.py differ: run `jupytext --sync notebooks/{name}.py`"
    assert not any(c.get("outputs") for c in nb["cells"]), f"commit {name}.ipynb without outputs"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_in_a_kernel(name, tmp_path):
    for module in ("nbformat", "nbclient", "ipykernel"):  # the notebooks extra (the GPU image has none)
        pytest.importorskip(module)
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    run_all = _run_all()
    out = tmp_path / f"{name}.ipynb"
    error = run_all.run_nbclient(NOTEBOOKS / f"{name}.ipynb", out, _env(tmp_path), timeout=300)
    assert error is None, error
    nb = json.loads(out.read_text())
    assert not _errors(nb)
    text = _text(nb)
    expected, figure = EXPECTED[name]
    for phrase in expected:
        assert phrase in text, f"{name} did not print {phrase!r}"
    assert "size: tiny" in text
    if name == "04_training_with_convlab":
        _check_training(text)
    assert (tmp_path / "figures" / figure).stat().st_size > 1000
    assert any("image/png" in out.get("data", {}) for c in nb["cells"] for out in c.get("outputs", []))


def _check_training(text: str) -> None:
    """Notebook 04 at its simulator size: both sides learn their batch (the loss falls by a third or more,
    alike step for step), and torch's side is named for what ran it (no cuDNN without a GPU)."""
    import re

    import torch

    found = {who: (float(a), float(b)) for who, a, b in
             re.findall(r"^(\S+(?: CPU)?) +seed 0: training loss (\d+\.\d+) -> (\d+\.\d+) over", text, flags=re.M)}
    reference = "cuDNN" if torch.cuda.is_available() else "torch CPU"
    assert set(found) == {"convlab", reference}, found
    assert all(last < 2 / 3 * first for first, last in found.values()), found
    assert abs(found["convlab"][1] - found[reference][1]) < 0.05, found
    if not torch.cuda.is_available():
        assert "cuDNN" not in text and "step time convlab / torch CPU" in text


def test_run_all_inline_engine_needs_no_jupyter(tmp_path, monkeypatch):
    for key, value in _env(tmp_path).items():
        if key != "CONVLAB_FIGURE_DIR":  # run_all sets it to OUT_DIR/figures
            monkeypatch.setenv(key, value)
    code = _run_all().main([str(tmp_path / "out"), "--only", "05", "--engine", "inline", "--size", "tiny"])
    assert code == 0
    nb = json.loads((tmp_path / "out" / "05_transform_algorithms.ipynb").read_text())
    expected, figure = EXPECTED["05_transform_algorithms"]  # the quickest notebook on the simulator
    assert not _errors(nb) and all(phrase in _text(nb) for phrase in expected)
    assert all(c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code")
    assert (tmp_path / "out" / "figures" / figure).is_file()


def test_winner_map_uses_the_shared_plugin_colours():
    """Notebook 02's map colours each plugin as every other chart does (convlab.bench.plot.plugin_color)."""
    pytest.importorskip("matplotlib")
    from convlab.bench.plot import plugin_color

    for path in (NOTEBOOKS / "02_autotuner.py", NOTEBOOKS / "02_autotuner.ipynb"):
        text = path.read_text()
        assert "ListedColormap([plugin_color(name) for name in plugins])" in text, path
        assert "get_cmap(" not in text, path
    assert len({plugin_color(p) for p in ("direct", "im2col", "col2im", "implicit_gemm", "cudnn")}) == 5
