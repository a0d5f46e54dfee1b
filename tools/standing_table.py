"""Where convlab stands against cuDNN, generated from the committed results of ``convlab bench auto``.

    python tools/standing_table.py              print the table (Markdown)
    python tools/standing_table.py --write      rewrite it in README.md and docs/results.md (between the
                                                markers) and draw docs/img/standing.png (matplotlib)
    python tools/standing_table.py --check      exit 1 if a page's table differs from the results'

The source is the newest ``auto_bench`` folder of results/runs.json: per dtype, op and layout, the
geometric mean over the measured layers of cuDNN's faster layout / convlab (the tuner's pick in the
default mode, through the public op on torch tensors; > 1: convlab faster), the lowest layer, and the
rows' statuses (declined and failed rows are counted, never averaged). A new GPU run committed under
results/auto_bench/ updates the README, the docs and the figure by ``--write``.
tests/docs/test_standing_table.py runs ``--check``.
"""
from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_pages  # noqa: E402  (beside this file)
from generated_pages import replace_between  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "results.md")
FIGURE = ROOT / "docs" / "img" / "standing.png"
START = "<!-- standing-table:start (tools/standing_table.py --write) -->"
END = "<!-- standing-table:end -->"
#: the tuning modes a table may show, in order of preference: the default mode (what a user's first call
#: runs) before "tune"; a table shows the first that its run measured
MODES = ("heuristic", "tune")
DEFAULT_MODE = MODES[0]


def mode_of(rows: list[dict]) -> str:
    """The first of MODES that some row measured (DEFAULT_MODE when none did)."""
    seen = {m for r in rows for m in r.get("auto", {})}
    return next((m for m in MODES if m in seen), DEFAULT_MODE)


def latest_run(root: Path = ROOT) -> Path:
    """The newest results/auto_bench folder, by its position in results/runs.json."""
    runs = json.loads((root / "results" / "runs.json").read_text())["folders"]
    folders = [f["folder"] for f in runs if f["what"] == "auto_bench"]
    if not folders:
        raise SystemExit("results/runs.json lists no auto_bench folder")
    return root / "results" / folders[-1]


def rows_of(folder: Path) -> tuple[list[dict], dict]:
    """Every row of the folder's auto_bench JSON files, and the first file's device and versions."""
    rows, meta = [], {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if "rows" not in data:  # gpu_check.json: the run's record, not a benchmark file
            continue
        rows += data["rows"]
        meta = meta or {"device": data["device"], "versions": data["versions"]}
    return rows, meta


def groups(rows: list[dict], mode: str = DEFAULT_MODE) -> dict[tuple[str, str, str], dict]:
    """(dtype, op, layout) -> geomean ratio, its count, the lowest layer, the statuses."""
    out: dict = defaultdict(lambda: {"ratios": [], "status": defaultdict(int)})
    for r in rows:
        g = out[(r["dtype"], r["op"], r["layout"])]
        g["status"][r["status"]] += 1
        col = r.get("auto", {}).get(mode, {})
        if col.get("ok") and col.get("ratio"):
            g["ratios"].append((col["ratio"], r["label"]))
    for g in out.values():
        vals = [v for v, _ in g["ratios"]]
        g["geomean"] = math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None
        g["lowest"] = min(g["ratios"]) if g["ratios"] else None
    return dict(out)


def table(root: Path = ROOT) -> str:
    folder = latest_run(root)
    rows, meta = rows_of(folder)
    v = meta["versions"]
    suites = sorted({r.get("suite", "?") for r in rows})
    layers = len({(r.get("suite"), r["label"]) for r in rows})
    mode = mode_of(rows)
    lines = [f"{meta['device']}, torch {v.get('torch')}, cuDNN {v.get('cudnn')}, convlab {v.get('convlab')}; "
             f"suites {', '.join(suites)} ({layers} layers measured); source "
             f"`{folder.relative_to(root)}`. Ratio: cuDNN's faster layout / "
             f"convlab's `auto` (mode `{mode}`, the public op on torch tensors), geometric mean over the "
             "layers; > 1: convlab faster.", "",
             "| dtype | op | layout | ratio | layers | lowest layer | rows ok / declined / failed |",
             "| --- | --- | --- | ---: | ---: | --- | --- |"]
    for (dtype, op, layout), g in sorted(groups(rows, mode).items()):
        st = g["status"]
        low = f"{g['lowest'][0]:.2f} ({g['lowest'][1]})" if g["lowest"] else "-"
        ratio = f"{g['geomean']:.2f}" if g["geomean"] else "-"
        lines.append(f"| {dtype} | {op} | {layout} | {ratio} | {len(g['ratios'])} | {low} | "
                     f"{st.get('ok', 0)} / {st.get('declined', 0)} / "
                     f"{sum(n for s, n in st.items() if s not in ('ok', 'declined'))} |")
    return "\n".join(lines)


def replace_table(text: str, new: str, page: Path) -> str:
    """``text`` with the part between the markers replaced by ``new``; ValueError without the markers."""
    return replace_between(text, new, page, START, END)


def figure(path: Path = FIGURE, root: Path = ROOT) -> None:
    """A bar per (dtype, op), one colour per layout, the line at 1 (cuDNN's faster layout)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rows_of(latest_run(root))[0]
    g = groups(rows, mode_of(rows))
    keys = sorted({(d, o) for d, o, _ in g})
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, layout in enumerate(("nchw", "channels_last")):
        vals = [(g.get((d, o, layout)) or {}).get("geomean") or 0 for d, o in keys]
        ax.bar([k + (i - 0.5) * 0.38 for k in range(len(keys))], vals, 0.38, label=layout)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(keys)), [f"{d}\n{o}" for d, o in keys], fontsize=8)
    ax.set_ylabel("cuDNN best / convlab auto")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return generated_pages.main(argv, __doc__, table, PAGES, START, END, "standing_table.py", after_write=figure)


if __name__ == "__main__":
    sys.exit(main())
