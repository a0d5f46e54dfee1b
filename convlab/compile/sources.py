"""The readable source of the kernels a plugin launches for one problem: what ``convlab source`` prints.

    text = sources_text("tensor_core", problem, "sm_90")            # the config the plugin would pick
    text = sources_text("implicit_gemm", problem, "sm_80", config="128x64x8_8x8")

The plugin's host code runs as in ``convlab compile`` (:func:`convlab.compile.collect.launches`: the
compile-only runtime, operands that are never read, launches collected instead of run), so every kernel
of the call is shown in launch order, layout copies and split-K sums included, each once. A kernel
written out as generated source (:mod:`convlab.kernels.source`) is printed as generated; a Python
kernel is printed as written, headed by its compile-time constants (the closure values Numba freezes:
tile sizes, flags, parameter positions) and followed by the generated device functions it calls.

Without ``config``, the config is the one the op would pick on the target without tuning: the plugin's
first config it accepts (:func:`convlab.ops.strategy.resolve` with the plugin's name). Must run in the
compile-only runtime (``CONVLAB_RUNTIME=compile``); :func:`run_isolated` starts one for a caller that
is not.
"""
from __future__ import annotations

import importlib
import inspect
import json
import linecache
import os
import subprocess
import sys
import textwrap
from typing import Any

from convlab.problem import Problem

#: the runtime a caller outside compile-only mode starts (as convlab.compile.driver's workers)
ENV = {"CONVLAB_RUNTIME": "compile", "NUMBA_ENABLE_CUDASIM": "0"}


def _py_func(kernel: Any) -> Any:
    return getattr(getattr(kernel, "dispatcher", kernel), "py_func", None)


def _generated(fn: Any) -> bool:
    return fn is not None and fn.__code__.co_filename.startswith("<")


def _constant(value: Any) -> str | None:
    """The text of a closure value worth showing (numbers, flags, short tuples, names), else None."""
    if isinstance(value, (bool, int, float, str)) or type(value).__module__ == "numpy":
        return repr(value.item() if hasattr(value, "item") and not isinstance(value, (bool, int, float, str))
                    else value)
    if isinstance(value, tuple) and len(value) <= 32 and all(_constant(v) is not None for v in value):
        if hasattr(value, "_fields"):  # a namedtuple (a ParamTable's positions)
            return f"{type(value).__name__}(" + ", ".join(f"{f}={getattr(value, f)!r}"
                                                         for f in value._fields) + ")"
        return "(" + ", ".join(_constant(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return None


def kernel_text(kernel: Any) -> str:
    """The source of one kernel (or device function) as described in the module doc."""
    fn = _py_func(kernel)
    if fn is None:
        return f"# {kernel!r}: no Python source\n"
    if _generated(fn):
        text = getattr(fn, "generated_source", None) or "".join(linecache.getlines(fn.__code__.co_filename))
        return f"# generated: {fn.__code__.co_filename}\n" + text
    where = f"{fn.__module__}.{fn.__qualname__} (line {fn.__code__.co_firstlineno})"
    lines = [f"# {where}"]
    called = []
    cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    if cells:
        lines.append("# compile-time constants:")
    for name, value in cells.items():
        text = _constant(value)
        inner = _py_func(value)
        if text is not None:
            lines.append(f"#   {name} = {text}")
        elif inner is not None:
            lines.append(f"#   {name} = device function {inner.__qualname__}")
            if _generated(inner):
                called.append(value)
    body = textwrap.dedent(inspect.getsource(fn))
    out = "\n".join(lines) + "\n" + body
    for device in called:
        out += "\n" + kernel_text(device)
    return out


def kernel_sources(plugin: str, problem: Problem, target: str, config: Any = None,
                   precision: str = "highest", layouts: tuple[str, str, str] = ("nchw", "nchw", "nchw"),
                   workspace_limit: int | None = None) -> tuple[Any, list[tuple[Any, Any]]]:
    """(the config, [(launch, kernel text)] in launch order, each kernel once) of ``plugin`` running
    ``problem`` on the named ``target`` (compile-only runtime; ValueError if the plugin declines)."""
    from convlab import runtime
    from convlab.ops import strategy
    from convlab.runtime.settings import float32_precision, get_workspace_limit
    from convlab.runtime.targets import get

    from .collect import launches
    from .corpus import Case

    if not runtime.COMPILE_ONLY:
        raise RuntimeError("kernel_sources runs in the compile-only runtime (CONVLAB_RUNTIME=compile): "
                           "use run_isolated")
    tgt = get(target)
    limit = get_workspace_limit() if workspace_limit is None else workspace_limit
    with float32_precision(precision):
        chosen = strategy.resolve(problem, plugin if config is None else (plugin, config), limit, tgt)
        known: dict[str, tuple[Any, tuple]] = {}
        found = launches(Case(plugin, problem, precision, layouts, chosen.config), tgt, known, limit)
    seen: set[str] = set()
    out = []
    for launch in found:
        if launch.kernel not in seen:
            seen.add(launch.kernel)
            out.append((launch, kernel_text(known[launch.kernel][0])))
    return chosen.config, out


def sources_text(plugin: str, problem: Problem, target: str, config: Any = None, precision: str = "highest",
                 layouts: tuple[str, str, str] = ("nchw", "nchw", "nchw")) -> str:
    """The text ``convlab source`` prints: a header naming the problem, target and config, then each
    kernel with its launch (grid, block, dynamic shared memory)."""
    cfg, kernels = kernel_sources(plugin, problem, target, config, precision, layouts)
    head = [f"# {plugin} on {target}: {problem.describe()}", f"# config {cfg.name}"
            + (f" (float32 precision {precision})" if problem.dtype == "float32" else ""),
            f"# {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}, in launch order"]
    parts = ["\n".join(head) + "\n"]
    for i, (launch, text) in enumerate(kernels):
        parts.append(f"\n# ---- kernel {i + 1} of {len(kernels)}: {launch.name}  grid {launch.grid}  "
                     f"block {launch.block}  dynamic shared {launch.shared} B\n" + text)
    return "".join(parts)


def run_isolated(request: dict) -> str:
    """:func:`sources_text` of ``request`` (its keyword arguments, the problem as ``Problem`` fields,
    ``imports``: modules to import first) in a compile-only child process; ValueError with the child's
    message when it fails."""
    env = dict(os.environ, **ENV)
    proc = subprocess.run([sys.executable, "-m", "convlab.compile.sources"], input=json.dumps(request),
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise ValueError(lines[-1] if lines else f"convlab source: child exited with {proc.returncode}")
    return proc.stdout


def _main() -> None:
    request = json.loads(sys.stdin.read())
    for module in request.pop("imports", ()):  # modules that register more plugins
        importlib.import_module(module)
    fields = request.pop("problem")  # JSON made the Problem's tuples lists
    problem = Problem(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
    request["layouts"] = tuple(request.get("layouts", ("nchw",) * 3))
    try:
        sys.stdout.write(sources_text(problem=problem, **request))
    except (ValueError, TypeError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    _main()
