"""House rules over the source tree, checked without importing it: no source or doc file narrates the
project's development history, every import inside a function is one listed here with its reason, only
the runtime package imports numba.cuda, and results/ keeps its layout (the floors, the plugin boundary
and ``__init__.py`` are tests/core/test_layout.py's)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the project's source and documentation
SCOPE = ("convlab", "algorithms", "tests", "benchmarks", "tools", "docs", "notebooks", "README.md")
SUFFIXES = {".py", ".md", ".ipynb", ".sh", ".txt", ".cfg", ".toml", ".rst"}
#: the notes of results/ (its JSON, CSV and logs are what the tools wrote, left as they came): a
#: measurement is named by its commit, its date and its folder results/<what>/<device>/<commit>[-<run>]/
RESULTS_NOTES = ("results", {".md"})

#: phrases that narrate development instead of stating a decision: numbered sessions and rounds of
#: development, code "of before" or "before / after the restructure", folders named for sessions. A
#: comment states the decision, its number and the results/ folder that measured it.
HISTORY = re.compile("|".join([
    r"(?<![A-Za-z])[Ss]ession[ -]?\d+\b",          # "session 9", "session-2", "session10/", "gpu_session8"
    r"\b(?:development|dev) rounds?\b",
    r"\b[Rr]ound \d+\b(?! of (?:the )?(?:tuner|tuning|timing|sampling))",
    r"\bcode of before\b",
    r"\b(?:before|after) the (?:restructure|refactor(?:ing)?|rewrite)\b",
    r"\b(?:was|were) moved (?:here|to|from|out)\b",
    r"\b[Pp]reviously\b",
    r"\b(?:this|last|next|previous) session\b",
    r"results/h200/(?:session|history)",
]))


def _files() -> list[Path]:
    out = []
    for entry in SCOPE:
        path = ROOT / entry
        paths = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        out += [p for p in paths if p.suffix in SUFFIXES and "__pycache__" not in p.parts
                and p != Path(__file__).resolve()]
    folder, suffixes = RESULTS_NOTES
    out += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in suffixes]
    return sorted(out)


def history_phrases(text: str) -> list[str]:
    return [m.group(0) for m in HISTORY.finditer(text)]


def test_the_history_pattern_finds_what_it_is_for_and_spares_the_tuners_rounds():
    assert history_phrases("measured in session 9 (results/h200/session9/call1), Session10") == [
        "session 9", "results/h200/session", "Session10"]
    assert history_phrases("tools/gpu_session8.sh, ../session10/call3/") == ["session8", "session10"]
    assert history_phrases("the code of before; after the restructure; was moved to ops/") == [
        "code of before", "after the restructure", "was moved to"]
    assert history_phrases("round 2 of development; previously 0.8") == ["round 2", "previously"]
    assert history_phrases("the final round re-times the leaders; FINAL_ROUNDS rounds of sampling; "
                           "a Python session; round 1 of the tuner") == []


def test_no_source_or_doc_file_narrates_development_history():
    found = [f"{p.relative_to(ROOT)}:{n}: {phrase!r}"
             for p in _files() for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             for phrase in history_phrases(line)]
    assert not found, ("state the decision, its number and the results/ folder that measured it, not "
                       "when it was made:\n" + "\n".join(found))


#: imports inside functions, by importing package prefix: the reason they wait for the call
LAZY_PACKAGES = {
    "convlab.cli": "a subcommand imports what it runs: `convlab --help` loads no plugin, kernel or harness",
    "convlab.compile": "convlab compile's worker processes import, per task, what that task lowers",
    "convlab.sweep": "a Dask task imports what it runs in the worker process, when it runs",
    "convlab.examples": "the example's optional dependencies (torch, matplotlib) and the bench harness "
                        "load when its step runs",
}
#: (module, imported module): the path that needs it, the only one that pays for the import
LAZY_IMPORTS = {
    ("convlab.torch.fuse_block", "convlab.blocks"): "a block's kernels load numba.cuda: imported when one runs",
    ("convlab.torch.fuse_graph", "convlab.torch.fuse_block"): "convert(fuse=True, blocks=True) only",
    ("convlab.algorithms.widen", "convlab.problem"): "sample_problems, for the conformance suite only",
    ("convlab.algorithms.widen", "convlab.runtime.settings"): "the float32 candidates, planned per problem",
    ("convlab.call.operands", "convlab.runtime.scratch"): "outputs of device operands only",
    ("convlab.call.operands", "convlab.runtime.thin"): "outputs of device operands only (their stream)",
    ("convlab.kernels.arch.wgmma_sim", "convlab.runtime.device"): "the simulator's stand-in for wgmma only",
    ("convlab.kernels.data.layouts", "convlab.kernels.data.transpose"): "a layout copy, when one is needed",
    ("convlab.kernels.data.splitk", "convlab.kernels.data.convert"): "the split-K sum's kernel, built on use",
    ("convlab.kernels.tensor_core.launch", "convlab.kernels.tensor_core.warpgroup"): "wgmma configs only",
    ("convlab.kernels.tensor_core.warp", "convlab.kernels.tensor_core.warpgroup"): "wgmma configs only",
    ("convlab.ops.epilogue", "convlab.kernels.epilogue"): "its kernels import numba.cuda: a call, not an import",
    ("convlab.ops.full_path", "convlab.autotune.tuner"): "calls under algorithm='auto' only",
    ("convlab.ops.conv", "convlab.ops.explain"): "convlab.explain only",
    ("convlab.ops.explain", "convlab.runtime.settings"): "convlab.explain only",
    ("convlab.ops.explain", "convlab.runtime.targets"): "convlab.explain only",
    ("convlab.ops.strategy", "convlab.autotune"): "calls under algorithm='auto' only",
    ("convlab.plugin.contract", "convlab.runtime.settings"): "applicable() without a workspace_limit",
    ("convlab.plugin.contract", "convlab.runtime.targets"): "a predicate called without a target",
    ("convlab.runtime.arrays", "convlab.runtime.offline"): "the compile-only runtime's events only",
    ("convlab.runtime.kernel_cache", "convlab.runtime.settings"): "the disk cache's folder, when enabled",
    ("convlab.runtime.kernel_store", "convlab.runtime.settings"): "the default store's folder, once a setting",
    ("convlab.runtime.launch", "convlab.runtime.settings"): "the simulator's thread-budget warning only",
    ("convlab.runtime.scratch", "convlab.runtime.launch"): "whether a plan is being recorded, per borrow",
    ("convlab.testing.checks", "convlab.kernels.data.layouts"): "the channels-last property only",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = (["convlab", "algorithms", *rel.parts[1:]] if rel.parts[0] == "algorithms" else list(rel.parts))
    parts[-1] = parts[-1][:-3]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p) for p in [*(ROOT / "convlab").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")]}


def _lazy_imports(path: Path) -> set[str]:
    """convlab modules imported inside the functions of ``path`` (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("convlab")}
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module]) if node.module else ".".join(base)
                if target.startswith("convlab"):  # `from pkg import sub` imports the module pkg.sub
                    subs = {f"{target}.{a.name}" for a in node.names} & MODULES
                    found |= subs or {target}
    return found - {name}


def test_every_import_inside_a_function_is_listed_with_its_reason():
    unlisted, stale = [], set(LAZY_IMPORTS)
    for path in sorted([*(ROOT / "convlab").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")]):
        name = _module_name(path)
        if any(name == p or name.startswith(p + ".") for p in LAZY_PACKAGES):
            continue
        for target in sorted(_lazy_imports(path)):
            key = next((k for k in LAZY_IMPORTS if k[0] == name and (target == k[1] or
                        target.startswith(k[1] + "."))), None)
            if key is None:
                unlisted.append(f"{name} imports {target} inside a function")
            stale.discard(key)
    assert not unlisted, ("import at module level, or list the import in LAZY_IMPORTS with the path "
                          "that needs it:\n" + "\n".join(unlisted))
    assert not stale, f"listed imports that are gone: {sorted(stale)}"


def _imports_numba_cuda(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "numba.cuda" or a.name.startswith("numba.cuda.")
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (
                (node.module or "").startswith("numba.cuda")
                or (node.module == "numba" and any(a.name == "cuda" for a in node.names))):
            return True
    return False


def test_only_the_runtime_package_imports_numba_cuda():
    """Every form (``import numba.cuda as c``, ``from numba import jit, cuda``, ``from numba.cuda.x import
    y``, inside functions too); kernels and plugins take ``cuda`` from convlab.runtime (test_runtime.py
    pins the one module inside the package: state.py)."""
    assert _imports_numba_cuda(ast.parse("def f():\n    from numba import float32, cuda as c\n"))
    assert not _imports_numba_cuda(ast.parse("from convlab.runtime import cuda\nimport numba\n"))
    runtime = ROOT / "convlab" / "runtime"
    offenders = [str(p.relative_to(ROOT)) for p in
                 sorted([*(ROOT / "convlab").rglob("*.py"), *(ROOT / "algorithms").rglob("*.py")])
                 if runtime not in p.parents and _imports_numba_cuda(ast.parse(p.read_text()))]
    assert not offenders, f"import cuda from convlab.runtime instead: {offenders}"


FOLDER = re.compile(r"^[a-z][a-z0-9_]*/[a-z0-9-]+/[0-9a-f]{7,40}(?:-\d+)?$")


def test_results_are_kept_by_what_device_and_commit_each_with_its_readme():
    """results/<what>/<device>/<commit>[-<run>]/ with a README naming the command, the version, the
    date and the device; runs.json lists exactly these folders (the order tools rank by)."""
    results = ROOT / "results"
    runs = json.loads((results / "runs.json").read_text())["folders"]
    listed = [r["folder"] for r in runs]
    assert len(listed) == len(set(listed))
    folders = sorted({"/".join(p.relative_to(results).parts[:3]) for p in results.rglob("*")
                      if p.is_file() and len(p.relative_to(results).parts) >= 4})
    assert sorted(listed) == folders, set(listed) ^ set(folders)
    for folder in folders:
        assert FOLDER.match(folder), f"results/{folder}: not <what>/<device>/<commit>[-<run>]"
        readme = (results / folder / "README.md").read_text()
        for field in ("**Command**", "**Version**", "**Date**", "**Device**"):
            assert field in readme, f"results/{folder}/README.md names no {field}"
        commit = folder.split("/")[2].split("-")[0]
        assert f"`{commit}`" in readme
    loose = [p.name for p in results.iterdir() if p.is_file()]
    assert sorted(loose) == ["FINDINGS.md", "README.md", "runs.json"], loose
