"""No module of convlab/ or algorithms/ reads another package's private names: a name starting with one
underscore (``_tile``, ``_gathered``; dunders such as ``__version__`` are public) belongs to its package,
so a module imports it, or reaches it as a module's attribute (``tc._gathered(...)``, ``getattr(mod,
"_x")``), only inside the package that defines it or a package below it (``convlab._version`` serves
every convlab package). A plugin is its own package (``algorithms/direct.py``
as much as ``algorithms/tensor_core/``), so one plugin's helpers are not another's, nor the autotuner's:
what several packages need is public where it lives. Checked on the source with ``ast``, without
importing it; imports inside functions count too. Other libraries' internals (numba's, torch's) are
outside this rule: the runtime and the front ends reach them where no public API does."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root)
    parts = ["convlab", *rel.parts] if rel.parts[0] == "algorithms" else list(rel.parts)
    parts[-1] = parts[-1][:-3]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def owner(module: str, packages: set[str]) -> str:
    """The package a module belongs to: a plugin (``convlab.algorithms.<name>``) as a whole, else the
    module itself when it is a package, else its parent package."""
    parts = module.split(".")
    if parts[:2] == ["convlab", "algorithms"] and len(parts) > 2:
        return ".".join(parts[:3])
    return module if module in packages else module.rsplit(".", 1)[0]


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if not level:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - level + 1]
    return ".".join(base + ([target] if target else []))


def foreign_private_reads(module: str, source: str, modules: set[str], packages: set[str]) -> list[str]:
    """Each read in ``source`` (module ``module``) of a private name of another package: what is read and
    how. ``modules``: every module of the tree (a dotted prefix in it is a module, the rest attributes);
    ``packages``: those that are packages (their ``__init__``)."""
    mine = owner(module, packages)
    is_package = module in packages
    bound: dict[str, str] = {}  # local name -> the module it stands for
    found: list[str] = []

    def check(dotted: str, how: str) -> None:
        """``dotted``: a convlab module path, then maybe attributes; flag its first private part when
        it belongs to another package than this module's or one above it."""
        parts = dotted.split(".")
        if parts[0] != "convlab":
            return
        for i in range(1, len(parts)):
            holder = ".".join(parts[:i])
            if not _private(parts[i]):
                continue
            where = owner(holder, packages)
            if where != mine and not mine.startswith(where + "."):
                found.append(f"{module}: {how} reads {holder}.{parts[i]} (private to {where})")
            return

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, "import")
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                check(f"{target}.{alias.name}", "from-import")
                if f"{target}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                check(".".join([bound[value.id], *chain]), "attribute")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            obj, name = node.args[0], node.args[1]
            if isinstance(obj, ast.Name) and obj.id in bound and isinstance(name, ast.Constant) \
                    and isinstance(name.value, str):
                check(f"{bound[obj.id]}.{name.value}", node.func.id)
    return sorted(set(found))


def _tree() -> tuple[dict[str, str], set[str]]:
    paths = sorted([*(ROOT / "convlab").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")])
    sources = {module_name(p): p.read_text() for p in paths}
    packages = {module_name(p) for p in paths if p.name == "__init__.py"}
    return sources, packages


def test_no_module_reads_another_packages_private_names():
    sources, packages = _tree()
    found = [line for name, text in sources.items()
             for line in foreign_private_reads(name, text, set(sources), packages)]
    assert not found, ("make the name public where it is defined (or move what two packages share to a "
                       "package below both):\n" + "\n".join(found))


def test_the_scan_finds_each_form_of_a_foreign_private_read():
    """Each form a module of the autotuner could use to read a plugin's helpers, and what stays allowed."""
    modules = {"convlab", "convlab.algorithms", "convlab.algorithms.depthwise", "convlab.algorithms.tensor_core",
               "convlab.algorithms.tensor_core.plugin", "convlab.algorithms.tensor_core.cost",
               "convlab.autotune", "convlab.autotune.reader", "convlab.kernels", "convlab.kernels.simt",
               "convlab.kernels.simt.tile"}
    packages = {"convlab", "convlab.algorithms", "convlab.algorithms.tensor_core", "convlab.autotune",
                "convlab.kernels", "convlab.kernels.simt"}
    scan = lambda name, text: foreign_private_reads(name, text, modules, packages)  # noqa: E731
    reader = ("def f():\n"
              "    from convlab.algorithms import depthwise as dw\n"
              "    from convlab.algorithms.tensor_core import plugin as tc\n"
              "    from convlab.algorithms.tensor_core.plugin import _padded\n"
              "    import convlab.kernels.simt.tile\n"
              "    return dw._tile(1), tc._gathered(2), getattr(tc, '_strided_dgrad'), "
              "convlab.kernels.simt.tile._PAD, tc.split_k, dw.__name__\n")
    assert sorted(line.split(" reads ")[1].split(" ")[0] for line in scan("convlab.autotune.reader", reader)) == [
        "convlab.algorithms.depthwise._tile", "convlab.algorithms.tensor_core.plugin._gathered",
        "convlab.algorithms.tensor_core.plugin._padded", "convlab.algorithms.tensor_core.plugin._strided_dgrad",
        "convlab.kernels.simt.tile._PAD"]
    inside = "from .plugin import _gathered, _padded\nfrom . import plugin\nx = plugin._strided_dgrad\n"
    assert scan("convlab.algorithms.tensor_core.cost", inside) == []  # one plugin's own modules
    assert scan("convlab.algorithms.depthwise", "from convlab.algorithms.tensor_core import plugin\n"
                                               "plugin._padded\n") != []  # another plugin's
    assert scan("convlab.autotune.reader", "import numpy as np\nnp._NoValue\n") == []  # another library's
    assert scan("convlab.autotune.reader", "from convlab.kernels import _impl\n") != []  # a private module
