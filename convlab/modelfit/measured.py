"""Which measured rows the cost model is fitted and judged on: the selection over the committed results.

    rows    = every row of every GPU file under the results folder (:mod:`.readers`), ``history``
              folders left out (copies superseded by the files beside them)
    kept    = per (problem, plugin), the rows of the newest commit that measured that plugin on that
              problem, whatever the float32 precision (the plugin's kernels are the same)
    chosen  = per (problem, precision, candidate label), the newest row of those (the later run at that
              commit, then the later date)

Kernels change between commits, so a newer commit's time of a plugin on a problem supersedes every older
time of that plugin there (one plugin's candidates on a layer-op are never a mix of two kernel versions),
and only there: a run that measured a few layers again supersedes nothing on the layers it did not
measure. Commits rank by results/runs.json (:func:`.readers.run_ranks`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from .readers import (DEFAULT_LIMIT, TC_CONV_LIMIT, Measurement, Reader, network_of,  # noqa: F401
                      network_shapes, parse_config, run_ranks, split_label)

EXCLUDED_DIRS = ("history",)


def result_files(root: Path) -> list[Path]:
    """Every ``*.json`` under ``root`` outside the excluded (``history``) folders, sorted."""
    root = Path(root)
    return sorted(p for p in root.rglob("*.json")
                  if not any(part in EXCLUDED_DIRS for part in p.relative_to(root).parts[:-1]))


def _newest_commit(rows: list[Measurement], group: Callable[[Measurement], tuple]) -> list[Measurement]:
    """The rows whose commit is the newest among the rows of their group."""
    newest: dict[tuple, int] = {}
    for m in rows:
        g = group(m)
        newest[g] = max(newest.get(g, m.order[0]), m.order[0])
    return [m for m in rows if m.order[0] == newest[group(m)]]


def select(rows: Iterable[Measurement]) -> list[Measurement]:
    """``kept`` and ``chosen`` of the module docstring, sorted by network, problem, precision, label."""
    kept = _newest_commit(list(rows), lambda m: (m.problem.key(), m.plugin))
    best: dict[tuple, Measurement] = {}
    for m in kept:
        key = (m.context, m.label)
        if key not in best or m.order > best[key].order:
            best[key] = m
    return sorted(best.values(), key=lambda m: (m.network, m.problem.key(), m.precision, m.label))


def load(root: str | Path, files: Iterable[Path] | None = None) -> list[Measurement]:
    """The selected measurements under ``root`` (module docstring): every file of :func:`result_files`,
    or ``files``."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"results must be a folder of result files, got {str(root)!r}")
    reader = Reader(root)
    return select([m for path in (files if files is not None else result_files(root))
                   for m in reader.read(path)])


def by_context(rows: Iterable[Measurement]) -> dict[tuple, list[Measurement]]:
    """Rows grouped per layer-op (problem, precision). Under precision "high" every float32
    candidate of "highest" is a candidate too, so a "high" layer-op also holds those rows."""
    groups: dict[tuple, list[Measurement]] = {}
    rows = list(rows)
    for m in rows:
        groups.setdefault(m.context, []).append(m)
    for (key, precision), ms in list(groups.items()):
        if precision == "high":
            ms.extend(groups.get((key, "highest"), []))
    return groups
