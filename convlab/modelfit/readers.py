"""The committed result files the cost model's fit reads, as :class:`Measurement` rows.

Four file formats are read (anything else is skipped; see :meth:`Reader.read`):

    bench     ``convlab bench`` JSON (convlab/bench/report.py): each row a problem with its candidates'
              ``op_median_ms`` (through the public op) or ``median_ms``; each plugin's first config
    tc_conv   the lists of ``results/tc_conv/`` (each folder's README names the command that wrote them):
              tensor_core rows by suite label, ``op_ms`` (else ``ours_ms``); dtype "tf32" is float32 under
              precision "high"
    autotune  ``benchmarks/autotune_bench.py`` JSON: every config's ``exhaustive_ms`` per problem
    cache     autotuner cache files (convlab/autotune/cache.py): every candidate's ``median_ms``

The first two give *layer* rows (one config per plugin and layer), the last two *sweep* rows (every
config). Only GPU files are read (a file marked ``simulator`` gives nothing), and of them the rows whose
status is ok with a positive time. Times are in milliseconds.

A row's ``order`` is (its commit's rank, its run's rank, its date): a file's run is its
``<what>/<device>/<commit>[-<run>]`` folder, and commits and runs rank by their order in the results
folder's ``runs.json`` (results/README.md: the order measured; a commit ranks where it first appears);
files outside the runs listed there rank first, by their date.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from convlab.bench.suite import builtin_suites, load_suite
from convlab.plugin.contract import Config
from convlab.problem import Problem

DEFAULT_LIMIT = 256 * 2**20  # convlab's default workspace limit, which bench, tuner and caches ran under
TC_CONV_LIMIT = 2**31  # the workspace limit the results/tc_conv runs used


@dataclass(frozen=True)
class Measurement:
    """One candidate's measured time on one problem (``precision``: "highest" or "high", float32 only)."""

    problem: Problem
    precision: str
    plugin: str
    config: str
    ms: float
    network: str
    kind: str  # "layer" or "sweep"
    file: str
    order: tuple
    workspace_limit: int = DEFAULT_LIMIT  # the limit the row was measured under (bytes)

    @property
    def label(self) -> str:
        return f"{self.plugin}[{self.config}]"

    @property
    def context(self) -> tuple:
        """The layer-op this row belongs to: (problem key, precision)."""
        return (self.problem.key(), self.precision)


def split_label(label: str) -> tuple[str, str]:
    """``"plugin[config]"`` -> ("plugin", "config")."""
    plugin, _, rest = label.partition("[")
    return plugin, rest[:-1] if rest.endswith("]") else rest


def parse_config(text: str) -> Config:
    """A config from its ``Config.name`` text (``"BK=8,BM=64"``; ``"default"``: empty); ints where the
    value is one."""
    if text in ("", "default"):
        return Config()
    items: dict[str, Any] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            items[key.strip()] = int(value)
        except ValueError:
            items[key.strip()] = value.strip()
    return Config(items)


def network_of(suite: str) -> str:
    """The network a suite measures: its name without the batch suffix that ``--batch`` and the
    ``burn_b4`` suite add (``resnet50_b8`` -> resnet50, ``burn_b4`` -> burn; ``efficientnet_b0`` is a
    name of its own)."""
    base = re.sub(r"_b\d+$", "", suite)
    return base if base != suite and base in _suite_names() else suite


@functools.cache
def _suite_names() -> frozenset[str]:
    return frozenset(builtin_suites())


def _shape_key(problem: Problem) -> tuple:
    """A problem's key with the dtype left out (suites are float32; the same layers run in others)."""
    return problem.replace(dtype="float32").key()


@functools.cache
def network_shapes() -> dict[str, frozenset[tuple]]:
    """Network -> the shape keys (dtype aside) of its layers, over the built-in suites."""
    shapes: dict[str, set[tuple]] = {}
    for name in builtin_suites():
        if name != "tiny":
            shapes.setdefault(network_of(name), set()).update(
                _shape_key(p) for _, p in load_suite(name).problems())
    return {k: frozenset(v) for k, v in shapes.items()}


def _suite_index() -> tuple[dict[tuple, str], dict[str, list[tuple[str, Problem]]]]:
    """Problem key -> network, and suite label -> [(network, problem)] over the built-in suites."""
    by_key: dict[tuple, str] = {}
    by_label: dict[str, list[tuple[str, Problem]]] = {}
    for name in builtin_suites():
        if name == "tiny":
            continue
        for entry, problem in load_suite(name).problems():
            by_key.setdefault(_shape_key(problem), network_of(name))
            by_label.setdefault(entry.label, []).append((network_of(name), problem))
    return by_key, by_label


def run_ranks(root: Path) -> dict[str, tuple[int, int]]:
    """Run folder -> (its commit's rank, its own rank), both from 1 in the order of ``root/runs.json``
    (a commit ranks where it first appears); empty without the file."""
    try:
        folders = [str(f["folder"]) for f in json.loads((Path(root) / "runs.json").read_text())["folders"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    commits: dict[str, int] = {}
    ranks = {}
    for i, folder in enumerate(folders, 1):
        commit = folder.split("/")[-1].split("-")[0]
        ranks[folder] = (commits.setdefault(commit, len(commits) + 1), i)
    return ranks


def _precision(problem: Problem, plugin: str, key: str = "") -> str:
    """Precision class of a row: "high" for float32 under TF32 (a tensor_core row, or a cache key
    ``float32+high``), else "highest"."""
    if problem.dtype != "float32":
        return "highest"
    return "high" if plugin == "tensor_core" or "float32+high" in key else "highest"


class Reader:
    """Turns one results file into measurements (see the module docstring for the formats)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.by_key, self.by_label = _suite_index()
        self.ranks = run_ranks(root)

    def _order(self, path: Path, date: str = "") -> tuple:
        """(commit rank, run rank, date) of a file (module docstring)."""
        folder = "/".join(path.relative_to(self.root).parts[:3])
        return (*self.ranks.get(folder, (0, 0)), date)

    def row(self, path: Path, problem: Problem, label: str, ms: Any, network: str, kind: str,
            order: tuple, key: str = "", limit: int = DEFAULT_LIMIT) -> Measurement | None:
        if not isinstance(ms, (int, float)) or not ms > 0:
            return None
        plugin, config = split_label(label)
        return Measurement(problem, _precision(problem, plugin, key), plugin, config, float(ms),
                           network or self.by_key.get(_shape_key(problem), "other"), kind,
                           path.relative_to(self.root).as_posix(), order, limit)

    def bench(self, path: Path, data: dict) -> Iterator[Measurement]:
        order = self._order(path, str(data.get("date", "")))
        limit = (data.get("settings") or {}).get("workspace_limit") or DEFAULT_LIMIT
        for res in data.get("results", []):
            try:
                problem = Problem.from_dict(res["problem"])
            except (KeyError, TypeError, ValueError):
                continue
            for c in res.get("candidates", []):
                if c.get("status") == "ok":
                    ms = c.get("op_median_ms") or c.get("median_ms")
                    m = self.row(path, problem, f"{c['plugin']}[{c['config']}]", ms,
                                 network_of(str(res.get("suite", ""))), "layer", order, limit=limit)
                    if m is not None:
                        yield m

    def tc_conv(self, path: Path, rows: list) -> Iterator[Measurement]:
        order = self._order(path)
        for r in rows:
            if not isinstance(r, dict) or r.get("part") != "bench" or r.get("status") != "ok":
                continue
            found = self.by_label.get(str(r.get("shape")), [])
            dtype = "float32" if r.get("dtype") == "tf32" else r.get("dtype")
            match = [(net, p) for net, p in found if p.op == r.get("op")]
            if not match or "config" not in r:
                continue
            net, base = match[0]
            problem = base.replace(dtype=dtype)
            m = self.row(path, problem, f"tensor_core[{r['config']}]", r.get("op_ms") or r.get("ours_ms"),
                         net, "layer", order, limit=TC_CONV_LIMIT)
            if m is not None:
                yield m

    def autotune(self, path: Path, data: dict) -> Iterator[Measurement]:
        order = self._order(path, str(data.get("date", "")))
        for shape in data.get("shapes", []):
            try:
                problem = Problem.from_dict(shape["problem"])
            except (KeyError, TypeError, ValueError):
                continue
            errors = shape.get("exhaustive_errors") or {}
            for label, ms in (shape.get("exhaustive_ms") or {}).items():
                if label not in errors:
                    m = self.row(path, problem, label, ms, "", "sweep", order, shape.get("key", ""))
                    if m is not None:
                        yield m

    def cache(self, path: Path, data: dict) -> Iterator[Measurement]:
        for key, entry in data.get("entries", {}).items():
            try:
                problem = Problem.from_dict(entry["problem"])
            except (KeyError, TypeError, ValueError):
                continue
            order = self._order(path, str(entry.get("written_at", "")))
            for c in entry.get("results", []):
                if isinstance(c, dict) and c.get("status") == "ok":
                    ms = c.get("op_median_ms") or c.get("median_ms")
                    m = self.row(path, problem, f"{c['plugin']}[{c['config']}]", ms, "", "sweep", order, key)
                    if m is not None:
                        yield m

    def read(self, path: Path) -> list[Measurement]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        if isinstance(data, list):
            return list(self.tc_conv(path, data))
        if not isinstance(data, dict) or data.get("simulator"):
            return []
        if data.get("format") == "convlab-bench/1":
            return list(self.bench(path, data))
        if data.get("benchmark") == "autotune":
            return list(self.autotune(path, data))
        if data.get("format") == 1 and isinstance(data.get("entries"), dict):
            return list(self.cache(path, data))
        return []
