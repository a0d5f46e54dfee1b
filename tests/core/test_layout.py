"""The package's import structure: every import inside ``convlab`` and its plugins points down the
floors below (no cycles, not even through imports inside functions), no module reaches for the names
of the top-level package, no plugin imports another, ``__init__.py`` files hold re-exports only, and
the entry modules import alone in a fresh interpreter."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import convlab

ROOT = Path(convlab.__file__).parent
PLUGINS = Path(convlab.algorithms.__file__).parent if hasattr(convlab, "algorithms") else ROOT.parent / "algorithms"


def _module_name(path: Path) -> str:
    base, prefix = (PLUGINS, ["convlab", "algorithms"]) if PLUGINS in path.parents else (ROOT, ["convlab"])
    parts = [*prefix, *path.relative_to(base).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted([*ROOT.rglob("*.py"), *PLUGINS.rglob("*.py")])}
#: the floors, lowest first: a module imports modules of its own floor or below only
FLOORS = [("convlab._version", "convlab.runtime", "convlab.dtypes", "convlab.problem", "convlab.reference",
           "convlab.epilogue"),
          ("convlab.kernels",),
          ("convlab.plugin",),
          ("convlab.algorithms", "convlab.call", "convlab.measure"),
          ("convlab.autotune",),
          ("convlab.ops", "convlab.blocks"),
          ("convlab.bench", "convlab.compile", "convlab.sweep", "convlab.testing", "convlab.torch"),
          ("convlab.modelfit",),
          ("convlab.examples", "convlab.cli"),
          ("convlab",)]
#: what a plugin may import besides its own package: the kernel layer and the plugin contract
PLUGIN_MAY_IMPORT = ("convlab.runtime", "convlab.dtypes", "convlab.problem", "convlab.epilogue", "convlab.kernels",
                     "convlab.plugin")


def floor(module: str) -> int:
    """The floor of a module: that of its longest matching prefix."""
    best = (-1, len(FLOORS) - 1)
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), level)
    return best[1]


def _imports(name: str, path: Path) -> set[str]:
    """convlab modules that ``name`` imports anywhere in its source (module level or in functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("convlab"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("convlab"):
                continue
            for alias in node.names:  # `from pkg import sub` imports the submodule pkg.sub
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    found.discard(name)
    return {m for m in found if m in MODULES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_every_import_points_to_its_floor_or_below():
    up = sorted(f"{name} (floor {floor(name)}) imports {dep} (floor {floor(dep)})"
                for name, deps in GRAPH.items() if name != "convlab"
                for dep in deps if dep != "convlab" and floor(dep) > floor(name))
    assert not up, "imports pointing up:\n" + "\n".join(up)


def _plugin_of(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["convlab", "algorithms"] and len(parts) > 2 else None


def test_no_plugin_imports_another_or_above_the_contract():
    found = []
    for name, deps in GRAPH.items():
        mine = _plugin_of(name)
        if mine is None:
            continue
        for dep in deps:
            if dep == "convlab" or _plugin_of(dep) == mine:
                continue
            if _plugin_of(dep) is not None or not dep.startswith(PLUGIN_MAY_IMPORT):
                found.append(f"{name} imports {dep}")
    assert not found, "\n".join(found)


def _lazy_reexport(node: ast.AST) -> bool:
    """A module ``__getattr__`` (PEP 562) that re-exports names on first read, as convlab.runtime does for
    numba.cuda: a re-export, not logic."""
    return isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and len(node.body) <= 4


def test_init_files_hold_no_logic():
    long = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()
            if path.name == "__init__.py" and len(path.read_text().splitlines()) > 40 and name != "convlab"}
    assert not long, f"__init__.py files over 40 lines: {long}"
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        logic = [type(node).__name__ for node in tree.body
                 if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign, ast.If, ast.Try))
                 and not _lazy_reexport(node)]
        assert not logic, f"{name} defines {logic}: keep __init__.py to docstrings and re-exports"


def test_no_core_module_imports_the_top_level_package():
    offenders = sorted(n for n, deps in GRAPH.items() if n != "convlab" and "convlab" in deps)
    assert not offenders, f"import from a submodule instead of the package's re-exports: {offenders}"


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_imports_form_no_cycle():
    graph = {n: {d for d in deps if d != "convlab"} for n, deps in GRAPH.items() if n != "convlab"}
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_planted_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("module", ["convlab.autotune", "convlab.ops.strategy", "convlab.bench.harness",
                                    "convlab.cli", "convlab.testing", "convlab.runtime.fileio",
                                    "convlab.runtime.settings", "convlab.modelfit.fit",
                                    # inline PTX: intrinsics that raise when called on the simulator
                                    "convlab.kernels.arch.mma_ptx", "convlab.kernels.arch.wgmma_ptx"])
def test_module_imports_alone(module):
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
