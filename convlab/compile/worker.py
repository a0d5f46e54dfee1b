"""The compile workers: processes in the compile-only runtime that collect the corpus and compile kernels.

Each worker is started as ``python -m convlab.compile.worker`` with ``CONVLAB_RUNTIME=compile``; it
reads one JSON request a line on stdin and answers one JSON line on stdout (``{"value": ...}`` or
``{"failure": ...}``): ``start`` with the spec, then ``corpus`` and ``compile`` with a kernel id. It
collects every
case's launches once (:func:`convlab.compile.collect.launches`: host code only, a few seconds), and
then compiles the kernels it is handed by id (:func:`compile_kernel`), so the parent can balance the
slow lowerings over its workers. The spec (a dict, pickled to the workers):

    targets   named targets ("sm_80", "sm_90")
    samples   bool: the plugins' sample problems
    suites    suite names or files
    shapes    single-shape dicts (convlab.bench.suite.make_entry's)
    plugins, ops, dtypes, configs, workspace_limit   as :func:`convlab.compile.corpus.cases`
    cover     bool: only the cases :func:`convlab.compile.corpus.cover` keeps
    picks     bool: only the cases :func:`convlab.compile.corpus.picks` keeps (the default mode's picks)
    imports   modules the workers import first (plugins registered there join the corpus)
    store     a kernel store directory (str) each kernel's cubin is written into, per target, or None
              (convlab.compile.store)
"""
from __future__ import annotations

import time
import traceback
from typing import Any

_state: dict[str, Any] = {}


def _problems(spec: dict) -> list:
    from convlab.bench.suite import single_shape_suite

    from .corpus import sample_problems, suite_problems

    found = sample_problems() if spec.get("samples", True) else []
    found += suite_problems(spec.get("suites") or ())
    for shape in spec.get("shapes") or ():
        found += [p for _, p in single_shape_suite(shape).problems()]
    return found


def start(spec: dict) -> None:
    """Collect the corpus of every target of ``spec`` (the worker initializer)."""
    from convlab.runtime.targets import get

    from . import collect
    from .corpus import cases, cover, picks

    import importlib

    for module in spec.get("imports") or ():  # modules that register more plugins
        importlib.import_module(module)
    problems = _problems(spec)
    known: dict[str, tuple[Any, tuple]] = {}
    plan: dict[str, dict[str, list]] = {}
    where: dict[str, set[str]] = {}  # kernel id -> the targets that launch it
    errors: list[dict] = []
    for name in spec["targets"]:
        target = get(name)
        per_case: dict[str, list] = {}
        found = cases(problems, target, plugins=spec.get("plugins"), ops=spec.get("ops") or
                      ("forward", "dgrad", "wgrad"), dtypes=spec.get("dtypes") or
                      ("float32", "float64", "float16", "bfloat16"), configs=spec.get("configs"),
                      workspace_limit=spec.get("workspace_limit"))
        if spec.get("picks"):
            found = picks(found, target, spec.get("workspace_limit"))
        for case in cover(found) if spec.get("cover") else found:
            try:
                found = collect.launches(case, target, known, spec.get("workspace_limit"))
            except Exception as exc:  # noqa: BLE001  (reported: a case whose host code fails to plan)
                errors.append({"target": name, "case": case.id, "error": f"{type(exc).__name__}: {exc}"})
                continue
            per_case[case.id] = [vars(launch) for launch in found]
            for launch in found:
                where.setdefault(launch.kernel, set()).add(name)
        plan[name] = per_case
    _state.update(known=known, plan=plan, where=where, errors=errors, spec=spec)


def corpus() -> dict:
    """The collected plan: {"cases": {target: {case id: [launch]}}, "kernels": {id: [targets]},
    "names": {id: name}, "errors": [...]}."""
    known = _state["known"].items()
    names = {kid: getattr(d.py_func, "__qualname__", "kernel") for kid, (d, _) in known}
    costs = {kid: len(getattr(d.py_func, "__code__", compile("", "", "exec")).co_code) for kid, (d, _) in known}
    return {"cases": _state["plan"], "kernels": {k: sorted(v) for k, v in _state["where"].items()},
            "names": names, "costs": costs, "errors": _state["errors"]}


def compile_kernel(kid: str) -> dict:
    """Lower kernel ``kid`` once and assemble it for every target that launches it: {target: result}."""
    from convlab.runtime.targets import get, using

    from . import store as kernel_store
    from .assemble import assemble, lower, ptx_hash, ptx_of

    dispatcher, argtypes = _state["known"][kid]
    targets = sorted((get(n) for n in _state["where"][kid]), key=lambda t: t.cc)
    from convlab.kernels.resources import allowed_spills, register_budgets

    max_registers = (getattr(dispatcher, "targetoptions", None) or {}).get("max_registers")
    spills, why = allowed_spills(dispatcher)
    out: dict[str, Any] = {"id": kid, "name": getattr(dispatcher.py_func, "__qualname__", "kernel"),
                           "argtypes": [str(t) for t in argtypes], "max_registers": max_registers,
                           "allowed_spills": spills, "allowed_spills_why": why,
                           "register_budgets": [list(b) for b in register_budgets(dispatcher)], "targets": {}}
    start_time = time.perf_counter()
    try:
        with using(targets[0]):  # the lowering is the same for every target of 8.0 or newer
            library = lower(dispatcher, argtypes)
    except Exception as exc:  # noqa: BLE001  (a kernel that does not compile is a reported error)
        error = f"lowering: {type(exc).__name__}: {exc}"[:2000]
        out["targets"] = {t.name: {"error": error, "trace": traceback.format_exc()[-3000:]} for t in targets}
        out["lower_seconds"] = round(time.perf_counter() - start_time, 2)
        return out
    out["lower_seconds"] = round(time.perf_counter() - start_time, 2)
    for target in targets:
        try:
            ptx = ptx_of(library, target)
        except Exception as exc:  # noqa: BLE001
            out["targets"][target.name] = {"error": f"NVVM: {type(exc).__name__}: {exc}"[:2000]}
            continue
        store = _state["spec"].get("store")
        result = vars(assemble(ptx, target, max_registers=max_registers, keep_cubin=bool(store)))
        cubin = result.pop("cubin")
        result.update(hash=ptx_hash(ptx), ptx_bytes=len(ptx))
        if store:
            result.update(kernel_store.put(dispatcher, argtypes, library, target, cubin, store))
        if _state["spec"].get("keep_ptx"):
            result["ptx"] = ptx
        out["targets"][target.name] = result
    return out


def main() -> None:
    import json
    import sys

    out = sys.stdout
    sys.stdout = sys.stderr  # anything printed by the code under compilation stays off the protocol
    handlers = {"start": lambda r: start(r["spec"]), "corpus": lambda r: corpus(),
                "compile": lambda r: compile_kernel(r["id"])}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"value": handlers[request["op"]](request)}
        except Exception as exc:  # noqa: BLE001  (sent back to the parent, which reports it)
            reply = {"failure": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
