"""What importing convlab costs beside ``import numba.cuda``, each case in fresh interpreters.

    python tools/import_cost.py [--runs 9] [--out results/import_cost/cpu/COMMIT] [--tree PATH]

Each case runs ``--runs`` times, the cases interleaved (run 1 of every case, then run 2, ...) so that a
busy machine weighs on all of them alike. A case is a setup (not counted) and a statement; a run gives

    import_us   ``python -X importtime``: the cumulative microseconds of the top-level entries the
                statement imports (``import numba.cuda``: its one entry, ``numba`` nested in it)
    wall_s      the statement's seconds in the interpreter (``time.perf_counter``), imports and call

and each case's medians are divided by those of ``import numba.cuda`` of the same run. ``--tree`` measures
another checkout's convlab (``git archive`` of a commit's ``convlab/``), run in that folder. The
cases: ``import convlab``; ``import convlab.torch`` cold and with torch already imported (the cost
convlab adds to a torch program); ``convlab --help``; an argument error of ``convlab.conv2d`` (a 3-D
weight) after ``import convlab``. Writes ``import_cost.json`` under ``--out``; prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "-- convlab import_cost: the statement starts --"
CASES = {  # name: (setup, statement)
    "numba.cuda": ("", "import numba.cuda"),
    "convlab": ("", "import convlab"),
    "convlab.torch": ("", "import convlab.torch"),
    "convlab.torch after torch": ("import torch", "import convlab.torch"),
    "convlab --help": ("import contextlib, io",
                       "from convlab.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
                       "    try:\n        main(['--help'])\n    except SystemExit:\n        pass"),
    "argument error": ("import numpy as np",
                       "import convlab\ntry:\n    convlab.conv2d(np.zeros((1, 2, 5, 5), np.float32), "
                       "np.zeros((3, 2, 3), np.float32))\nexcept ValueError:\n    pass\nelse:\n"
                       "    raise SystemExit('no ValueError')"),
}


def program(setup: str, statement: str) -> str:
    """The interpreter's code: the setup, the mark on stderr, the statement timed, its seconds on stdout,
    and whether numba.cuda was imported."""
    return "\n".join([setup, "import sys, time", f"sys.stderr.write({MARK!r} + '\\n'); sys.stderr.flush()",
                      "_t0 = time.perf_counter()", f"exec({statement!r})", "_t1 = time.perf_counter()",
                      "print(_t1 - _t0, 'numba.cuda' in sys.modules)"])


def top_level_us(stderr: str) -> int:
    """The sum of the cumulative microseconds of the top-level importtime entries after the mark."""
    total, started = 0, False
    for line in stderr.splitlines():
        if line.startswith(MARK):
            started = True
            continue
        if not (started and line.startswith("import time:")):
            continue
        fields = line.split("|")
        if len(fields) == 3 and fields[1].strip().isdigit() and not fields[2].startswith("  "):
            total += int(fields[1])
    return total


def run_once(setup: str, statement: str, env: dict, cwd: Path) -> dict:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", program(setup, statement)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{statement!r} failed:\n{done.stderr[-2000:]}")
    seconds, loaded = done.stdout.split()[-2:]
    return {"import_us": top_level_us(done.stderr), "wall_s": float(seconds), "numba.cuda": loaded == "True"}


def versions(env: dict, cwd: Path) -> dict:
    code = ("import json, sys, importlib.metadata as m\n"
            "out = {'python': sys.version.split()[0]}\n"
            "for name in ('convlab', 'numba', 'numba-cuda', 'numpy', 'torch'):\n"
            "    try:\n        out[name] = m.version(name)\n    except m.PackageNotFoundError:\n        pass\n"
            "import convlab; out['convlab_path'] = convlab.__file__\nprint(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=cwd)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--out", type=Path, help="a folder for import_cost.json")
    parser.add_argument("--tree", type=Path, help="measure this checkout's convlab (PYTHONPATH)")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    env, cwd = dict(os.environ), (args.tree or ROOT).resolve()
    if args.tree:  # its folder first on the path (``python -c`` puts the working folder first)
        env["PYTHONPATH"] = os.pathsep.join([str(cwd), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cases = ["numba.cuda", *[c for c in args.cases if c != "numba.cuda"]]
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    load_before = os.getloadavg()
    for i in range(args.runs):
        for case in cases:
            runs[case].append(run_once(*CASES[case], env, cwd))
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)
    base = {k: statistics.median(r[k] for r in runs["numba.cuda"]) for k in ("import_us", "wall_s")}
    summary = {}
    for case in cases:
        medians = {k: statistics.median(r[k] for r in runs[case]) for k in ("import_us", "wall_s")}
        summary[case] = {"setup": CASES[case][0], "statement": CASES[case][1], **medians,
                         "import_ratio": round(medians["import_us"] / base["import_us"], 3),
                         "wall_ratio": round(medians["wall_s"] / base["wall_s"], 3),
                         "imports_numba_cuda": all(r["numba.cuda"] for r in runs[case]),
                         "runs": runs[case]}
    data = {"what": "import_cost", "date": date.today().isoformat(), "runs": args.runs,
            "machine": {"platform": platform.platform(), "processor": platform.machine(),
                        "cpus": os.cpu_count(), "load_average_1_5_15_min": {"before": load_before,
                                                                          "after": os.getloadavg()}},
            "versions": versions(env, cwd), "cases": summary}
    print(f"{'case':28} {'import ms':>10} {'ratio':>7} {'wall ms':>9} {'ratio':>7}  numba.cuda")
    for case, s in summary.items():
        print(f"{case:28} {s['import_us'] / 1e3:10.1f} {s['import_ratio']:7.3f} {s['wall_s'] * 1e3:9.1f} "
              f"{s['wall_ratio']:7.3f}  {'imported' if s['imports_numba_cuda'] else '-'}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "import_cost.json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
