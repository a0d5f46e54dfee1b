"""The names the documentation gives still exist: every dotted ``convlab.`` name resolves, and every
repository path names a file or folder.

Scanned: the text files of docs/ (Markdown, TOML, YAML), README.md and setup.cfg. Accepted:

- a dotted name ``convlab.a.b.c`` (not part of a longer word, path or file name: no letter, digit, ``_``,
  ``.``, ``/`` or ``-`` right before it) when its longest importable prefix imports and the rest are
  attributes of it (``convlab.compile.corpus.cover``, ``convlab.torch.convert``); a module whose import
  needs a missing optional dependency (torch without the torch extra) counts as unchecked here;
- a path starting with one of the repository's folders (``convlab/``, ``algorithms/``, ``tools/``,
  ``benchmarks/``, ``tests/``, ``notebooks/``, ``docs/``, ``results/``) when it exists, or exists with
  ``.ipynb`` appended (the notebooks are named without it); it ends before a ``<`` placeholder
  (``results/<what>/``) and loses a trailing ``.`` or ``,``;
- the names in :data:`DEFINED_HERE`, which the docs define rather than refer to.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = sorted([*(p for p in (REPO / "docs").rglob("*") if p.suffix in (".md", ".toml", ".yml", ".yaml")),
                  REPO / "README.md", REPO / "setup.cfg"])
DOTTED = re.compile(r"(?<![\w./-])convlab(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])(?:convlab|algorithms|tools|benchmarks|tests|notebooks|docs|results)/[\w./-]*")
#: names the docs define for the reader to create, with where
DEFINED_HERE = {"algorithms/depthwise_example.py": "the plugin guide's worked example, the file it writes"}


def _mentions(pattern: re.Pattern) -> dict[str, list[str]]:
    """Each match -> the files (relative) that mention it."""
    found: dict[str, list[str]] = {}
    for path in SCANNED:
        for match in pattern.finditer(path.read_text()):
            found.setdefault(match[0].rstrip(".,"), []).append(str(path.relative_to(REPO)))
    return found


def resolve(name: str) -> str:
    """"" when ``name`` resolves, "unchecked" when its module needs a missing optional dependency, else
    why it does not resolve."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:  # a parent that is not a package
            continue
        if found is None:
            continue
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("convlab"):
                return "unchecked"
            return f"importing {module_name} fails: {exc}"
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return f"{module_name} has no {'.'.join(parts[i:])}"
            obj = getattr(obj, attr)
        return ""
    return "no such module"


def test_the_scan_sees_the_docs():
    names, paths = _mentions(DOTTED), _mentions(PATH)
    assert "convlab.compile.compile_corpus" in names and "convlab.torch.convert" in names
    assert "tools/plugin_table.py" in paths and "docs/plugin_template/" in paths
    assert not DOTTED.search("api/convlab.md my_convlab.x convlab-compile/1")


def test_the_resolver_tells_a_stale_name():
    assert resolve("convlab.compile.corpus.cover") == "" and resolve("convlab.kernels.simt.tile.Tile") == ""
    assert resolve("convlab.kernels.tc_wgmma") == "convlab.kernels has no tc_wgmma"
    assert resolve("convlab.bench.no_such_function") == "convlab.bench has no no_such_function"


def test_every_dotted_convlab_name_in_the_docs_resolves():
    bad = {name: (why, files) for name, files in _mentions(DOTTED).items()
           if name not in DEFINED_HERE and (why := resolve(name)) not in ("", "unchecked")}
    assert not bad, "\n".join(f"{n}: {why} (in {', '.join(sorted(set(f)))})" for n, (why, f) in sorted(bad.items()))


def test_every_repository_path_in_the_docs_exists():
    def exists(path: str) -> bool:
        return (REPO / path).exists() or (REPO / f"{path}.ipynb").exists()

    bad = {path: files for path, files in _mentions(PATH).items() if path not in DEFINED_HERE and not exists(path)}
    assert not bad, "\n".join(f"{p} (in {', '.join(sorted(set(f)))})" for p, f in sorted(bad.items()))


@pytest.mark.parametrize("name", sorted(DEFINED_HERE))
def test_what_the_docs_define_is_not_in_the_repository(name):
    """A name the docs define for the reader must not exist already (else it is a reference: drop it here)."""
    assert not (REPO / name).exists()
