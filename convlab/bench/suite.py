"""Benchmark suites as data: the built-in ones (``convlab/suites/*.json``), user files, single shapes.

A suite file is JSON::

    {"name": "burn", "description": "...",
     "problems": [
        {"x": [N, C, H, W], "w": [K, C/groups, R, S],           conv2d geometry (the default kind);
         "stride": 1, "padding": 0, "dilation": 1, "groups": 1,  ints or [h, w] pairs, all optional
         "bias": false, "dtype": "float32", "label": "...",      optional
         "ops": ["forward", "dgrad", "wgrad"]},                 optional: which of the three to run
        {"kind": "conv_transpose2d", "x": [N, C_in, H, W], "w": [C_in, C_out/groups, R, S],
         "stride": 2, "padding": 1, "output_padding": 0, "bias": true}
     ]}

1D and 3D entries have 3- / 5-element shapes ([N, C, L] / [N, C, D, H, W], weights alike) and kind
``conv1d`` / ``conv3d`` (the default follows the rank of x) or ``conv_transpose1d`` / ``conv_transpose3d``;
stride / padding / dilation are ints or N-lists. A 1D entry's problems are its 2D embeddings
(``Problem.lowered()``), the problems the ops run.

A conv2d entry gives up to three problems (forward, dgrad, wgrad) over one forward geometry; its bias, if
any, belongs to forward only. A conv_transpose2d entry is one dgrad problem (its bias is added to dx), built
by the same code as :func:`convlab.conv_transpose2d`, so a suite shape is validated exactly like a call.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from convlab.ops import problem_for
from convlab.problem import OPS, Problem

KINDS = tuple(f"{k}{n}d" for n in (1, 2, 3) for k in ("conv", "conv_transpose"))
_KEYS = {"x", "w", "stride", "padding", "dilation", "groups", "bias", "dtype", "label", "ops", "kind",
         "output_padding"}


@dataclass(frozen=True)
class _Shaped:
    """Stands in for an array where only ``shape`` and ``dtype`` matter (problem building)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class SuiteEntry:
    """One shape of a suite: its label, kind and the problems (one per op) it stands for."""

    label: str
    kind: str
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    entries: tuple[SuiteEntry, ...]

    def problems(self, ops: Iterable[str] = OPS) -> list[tuple[SuiteEntry, Problem]]:
        """(entry, problem) pairs whose op is in ``ops``, in suite order."""
        wanted = set(ops)
        return [(e, p) for e in self.entries for p in e.problems if p.op in wanted]

    def with_batch(self, n: int) -> "Suite":
        """The same layers at batch ``n`` (named ``<name>_b<n>``)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"batch must be an int >= 1, got {n!r}")
        entries = tuple(SuiteEntry(e.label, e.kind, tuple(p.replace(n=n) for p in e.problems))
                        for e in self.entries)
        return Suite(f"{self.name}_b{n}", f"{self.description} (at batch {n})", entries)


def builtin_suites() -> list[str]:
    """Names of the suites shipped in ``convlab/suites``."""
    folder = resources.files("convlab") / "suites"
    return sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".json"))


def _label(kind: str, x: tuple[int, ...], w: tuple[int, ...], spec: dict[str, Any]) -> str:
    text = f"n{x[0]} {'x'.join(map(str, x[1:]))} w{'x'.join(map(str, (w[0],) + w[2:]))}"
    for key, short, default in (("stride", "s", 1), ("padding", "p", 0), ("dilation", "d", 1),
                                ("output_padding", "op", 0)):
        value = spec.get(key, default)
        if isinstance(value, str):  # padding "same" / "valid"
            text += f" p{value}"
            continue
        axes = (value,) * (len(x) - 2) if isinstance(value, int) else tuple(value)
        if axes != (default,) * len(axes):
            text += f" {short}{axes[0] if len(set(axes)) == 1 else 'x'.join(map(str, axes))}"
    if spec.get("groups", 1) != 1:
        text += f" g{spec['groups']}"
    if spec.get("bias"):
        text += " +bias"
    return ("T " + text) if kind.startswith("conv_transpose") else text


def _shape(value: Any, name: str) -> tuple[int, ...]:
    if (not isinstance(value, (list, tuple)) or len(value) not in (3, 4, 5)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ValueError(f"{name} must be a list of 4 ints (3 for 1D, 5 for 3D), got {value!r}")
    return tuple(value)


def make_entry(spec: dict[str, Any], where: str = "shape") -> SuiteEntry:
    """Build a :class:`SuiteEntry` from one ``problems`` item; ValueError naming ``where`` if invalid."""
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected an object, got {spec!r}")
    unknown = set(spec) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    x, w = _shape(spec.get("x"), f"{where}: x"), _shape(spec.get("w"), f"{where}: w")
    kind = spec.get("kind", f"conv{len(x) - 2}d")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    if len(w) != len(x) or not kind.endswith(f"{len(x) - 2}d"):
        size = int(kind[-2]) + 2
        raise ValueError(f"{where}: a {kind} entry has x and w of {size} entries (each a list of {size} ints), "
                         f"got x {list(x)} and w {list(w)}")
    dtype = spec.get("dtype", "float32")
    common = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec.items()
              if k in ("stride", "padding", "dilation", "groups")}
    try:
        if not kind.startswith("conv_transpose"):
            if "output_padding" in spec:
                raise ValueError("output_padding applies to conv_transpose entries only")
            bias = _Shaped((w[0],), dtype) if spec.get("bias") else None
            fwd = problem_for(kind, _Shaped(x, dtype), _Shaped(w, dtype), bias, **common).lowered()
            ops = spec.get("ops", list(OPS))
            if not isinstance(ops, list) or not ops or not set(ops) <= set(OPS):
                raise ValueError(f"ops must be a non-empty list drawn from {OPS}, got {ops!r}")
            problems = tuple(fwd if op == "forward" else fwd.replace(op=op, bias=False)
                             for op in OPS if op in ops)
        else:
            if spec.get("ops", ["dgrad"]) != ["dgrad"]:
                raise ValueError(f"a {kind} entry is one dgrad problem; drop 'ops'")
            bias = _Shaped((w[1] * spec.get("groups", 1),), dtype) if spec.get("bias") else None
            op_pad = spec.get("output_padding", 0)
            problems = (problem_for(kind, _Shaped(x, dtype), _Shaped(w, dtype), bias,
                                    output_padding=tuple(op_pad) if isinstance(op_pad, list) else op_pad,
                                    **common).lowered(),)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    label = spec.get("label") or _label(kind, x, w, spec)
    return SuiteEntry(str(label), kind, problems)


def suite_from_dict(data: Any, source: str) -> Suite:
    """Validate and build a suite from parsed JSON (``source`` names it in error messages)."""
    if not isinstance(data, dict) or not isinstance(data.get("problems"), list) or not data["problems"]:
        raise ValueError(f"{source}: a suite is an object with a non-empty 'problems' list")
    name = data.get("name") or Path(source).stem
    entries = tuple(make_entry(item, f"{source}: problems[{i}]") for i, item in enumerate(data["problems"]))
    return Suite(str(name), str(data.get("description", "")), entries)


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a suite JSON file by path."""
    path = Path(name_or_path)
    if name_or_path.endswith(".json") or path.exists():
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"cannot read suite file {name_or_path}: {exc.strerror}") from None
    elif name_or_path in builtin_suites():
        text = (resources.files("convlab") / "suites" / f"{name_or_path}.json").read_text()
    else:
        raise ValueError(f"unknown suite {name_or_path!r}; built-in suites: {builtin_suites()} "
                         f"(or give the path of a suite JSON file)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name_or_path}: not valid JSON ({exc})") from None
    return suite_from_dict(data, name_or_path)


def single_shape_suite(spec: dict[str, Any], name: str = "cli") -> Suite:
    """A one-entry suite for a shape given on the command line."""
    entry = make_entry(spec, "shape")
    return Suite(name, entry.label, (entry,))
