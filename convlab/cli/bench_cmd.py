"""The subcommands of ``convlab bench``: ``auto`` (``algorithm="auto"`` as a user gets it, against cuDNN:
convlab.bench.auto) and ``report`` (tables from results files: convlab.bench.report, convlab.bench.coverage).

``convlab bench`` without a subcommand is the suite harness (convlab.cli.commands.cmd_bench).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import UsageError

#: ``--smoke``: one tiny layer, for the simulator (every code path, no meaningful time)
SMOKE = {"name": "smoke", "problems": [{"label": "3x3 p1", "x": [1, 4, 5, 5], "w": [4, 4, 3, 3], "padding": 1}]}
AUTO_DTYPES = ("float32", "float32+fma", "float32+high", "float16", "bfloat16")
AUTO_EPILOG = """examples:
  convlab bench auto --suite resnet50 --suite mobilenetv2 --out auto/resnet50      (a GPU with PyTorch)
  convlab bench auto --suite burn --dtypes float16 --plugins tensor_core --out tc   one plugin's best vs cuDNN
  convlab bench auto --smoke --out /tmp/auto_smoke                                  the simulator: code paths"""


def _tokens(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        got = tuple(t.strip() for t in text.split(",") if t.strip())
        bad = [t for t in got if t not in allowed]
        if bad or not got:
            raise argparse.ArgumentTypeError(f"unknown {bad or text!r}; choose from {', '.join(allowed)}")
        return got
    return parse


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
        if 0 <= i < n:
            return i, n
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, got {text!r}")


def add_parsers(bench: argparse.ArgumentParser) -> None:
    """``auto`` and ``report`` under the ``bench`` parser (optional: plain ``convlab bench`` runs suites)."""
    from convlab.problem import OPS
    from convlab.runtime.settings import TUNE_MODES

    from .arg_types import op_list, positive
    from .options import subcommand

    sub = bench.add_subparsers(dest="bench_command", metavar="[auto|report]", required=False)
    with subcommand(sub, "auto", cmd_bench_auto,
                    help="algorithm='auto' through the public ops and convlab.torch against cuDNN",
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=AUTO_EPILOG,
                    description="Per suite layer, op, dtype and layout: the first call under each tuning mode "
                    "(tuning included), the pick checked against float64 (its output, an out= call, "
                    "convlab.torch), every eligible config forced through the public op (the oracle), "
                    "then each mode's pick, each plugin's best and cuDNN in NCHW and channels_last timed "
                    "in interleaved rounds, every contender's last timed output checked again. Writes "
                    "STEM.json (after every layer-op) and STEM.md.") as p:
        p.add_argument("--out", required=True, metavar="STEM", help="writes STEM.json and STEM.md")
        p.add_argument("--suite", action="append", default=None, metavar="NAME|FILE.json",
                       help="suite name or JSON, repeatable (default: resnet50 and mobilenetv2); its conv2d layers")
        p.add_argument("--dtypes", type=_tokens(AUTO_DTYPES), default=AUTO_DTYPES[:4], metavar="LIST",
                       help=f"of {', '.join(AUTO_DTYPES)} (float32+fma: without tf32x3; float32+high: TF32 on "
                            "both sides; default: the first four)")
        p.add_argument("--layouts", type=_tokens(("nchw", "channels_last")), default=("nchw", "channels_last"))
        p.add_argument("--ops", type=op_list, default=OPS, metavar="OPS", help=f"subset of {','.join(OPS)}")
        p.add_argument("--modes", type=_tokens(TUNE_MODES), default=TUNE_MODES, metavar="LIST",
                       help=f"tuning modes timed, of {', '.join(TUNE_MODES)} (default: all)")
        p.add_argument("--limit", type=positive, default=None, metavar="K", help="the first K layers of each suite")
        p.add_argument("--repeat", type=positive, default=30, help="samples per contender over the rounds (30)")
        p.add_argument("--probe", type=positive, default=5, help="oracle: samples per (plugin, config) (5)")
        p.add_argument("--no-oracle", dest="oracle", action="store_false",
                       help="leave out the oracle: the picks against cuDNN only, for a short GPU run")
        p.add_argument("--plugins", default=None, metavar="A,B", help="only these plugins (and direct) registered")
        p.add_argument("--resume", action="store_true", help="keep the rows of an existing STEM.json, run the rest")
        p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                       help="only the layer-ops whose index mod N is I (parallel processes filling a kernel cache)")
        p.add_argument("--cache-dir", default=None, metavar="DIR",
                       help="the tuning and kernel cache folder (default: a new temporary one; the run empties "
                            "its tuning cache once per layout, so never point it at a cache you keep)")
        p.add_argument("--smoke", action="store_true", help="one tiny layer, one sample: the simulator's run")

    with subcommand(sub, "report", cmd_bench_report, help="tables from convlab bench results files",
                    description="Every row of the files (a (suite, layer, op) row of a later file replaces "
                    "an earlier one's), then per suite and op the geometric mean of cuDNN's time / the "
                    "fastest checked candidate's through the public op, the lowest, the winners, and the "
                    "layers to look at (Markdown).") as p:
        p.add_argument("results", nargs="+", metavar="RESULTS.json")
        p.add_argument("--plugins", default=None, metavar="A,B", help="only these candidates count in the ratios")

@contextlib.contextmanager
def _cache_folder(cache_dir: str | None) -> Iterator[None]:
    """``CONVLAB_CACHE_DIR`` set to the run's own folder (default: a new temporary one), restored after."""
    before = os.environ.get("CONVLAB_CACHE_DIR")
    os.environ["CONVLAB_CACHE_DIR"] = cache_dir or tempfile.mkdtemp(prefix="convlab-bench-auto-")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CONVLAB_CACHE_DIR", None)
        else:
            os.environ["CONVLAB_CACHE_DIR"] = before


def _command(args: argparse.Namespace) -> str:
    """The command line of this run, every option spelled out (the results' README names it)."""
    words = ["convlab bench auto", "--out", args.out]
    words += [w for s in args.suite or () for w in ("--suite", s)]
    for flag, value in (("--dtypes", args.dtypes), ("--layouts", args.layouts), ("--ops", args.ops),
                        ("--modes", args.modes)):
        words += [flag, ",".join(value)]
    words += ["--repeat", str(args.repeat), "--probe", str(args.probe)]
    for flag, value in (("--limit", args.limit), ("--plugins", args.plugins), ("--cache-dir", args.cache_dir)):
        words += [flag, str(value)] if value is not None else []
    words += ["--shard", "/".join(map(str, args.shard))] if args.shard != (0, 1) else []
    words += [flag for flag, on in (("--no-oracle", not args.oracle), ("--resume", args.resume),
                                    ("--smoke", args.smoke)) if on]
    return " ".join(words)


def cmd_bench_auto(args: argparse.Namespace) -> int:
    from convlab.bench import auto
    from convlab.bench.suite import load_suite, suite_from_dict
    from convlab.plugin import registry

    opts = auto.AutoOptions(dtypes=args.dtypes, layouts=args.layouts, ops=args.ops, modes=args.modes,
                            repeat=args.repeat, probe=args.probe, oracle=args.oracle)
    if args.smoke:
        opts.repeat, opts.probe, opts.rounds, opts.warmup = 1, 1, 1, 0
    suites = [suite_from_dict(SMOKE, "smoke")] if args.smoke else [
        load_suite(s) for s in args.suite or ("resnet50", "mobilenetv2")]
    command = _command(args)
    keep = None if args.plugins is None else {n.strip() for n in args.plugins.split(",") if n.strip()} | {"direct"}
    others = tuple(p.name for p in registry.plugins() if keep is not None and p.name not in keep)
    with _cache_folder(args.cache_dir), auto.without(others):
        data = auto.run(suites, opts, Path(args.out), command, limit=args.limit, shard=args.shard,
                        resume=args.resume)
    print(f"wrote {args.out}.json and .md: " + ", ".join(f"{k} {v}" for k, v in data["summary"]["status"].items()))
    return 0


def cmd_bench_report(args: argparse.Namespace) -> int:
    from convlab.bench import coverage, report

    files = [report.load(path) for path in args.results]
    rows = coverage.merged(files)
    if not rows:
        raise UsageError("the results files hold no rows")
    print(report.table([report.ProblemResult.from_dict(rec) for rec in rows.values()]), end="\n\n")
    plugins = None if args.plugins is None else {n.strip() for n in args.plugins.split(",") if n.strip()}
    print(coverage.markdown(*coverage.coverage(rows, plugins), plugins))
    return 0
