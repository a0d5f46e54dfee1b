"""The ``convlab`` command line: the parser and :func:`main` (the console script); the argument types
(text -> value) are in :mod:`convlab.cli.arg_types`, the options several commands share in
:mod:`convlab.cli.options`.

Subcommands (demo, list, explain, bench, plot, check) live in :mod:`convlab.cli.commands`, ``tune`` in
:mod:`convlab.cli.tune_cmd`, ``bench auto`` and ``bench report`` in :mod:`convlab.cli.bench_cmd`, ``compile`` in :mod:`convlab.cli.compile_cmd`, ``source`` in :mod:`convlab.cli.source_cmd`. Exit status:
0 success, 1 a check or command failed, 2 bad arguments (argparse's convention: the message, no
traceback; ``--debug`` shows the traceback instead). ``--debug``, ``--deterministic`` and
``--tune-mode`` may be given before or after the subcommand.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .arg_types import (  # also importable from here (convlab.cli.parser.nbytes, ...)
    DTYPE_CHOICES, DTYPE_HELP, algorithm, dtype_list, nbytes, op_list, op_name, padding, pair, positive, shape4,
    split_dtype)
from .commands import cmd_bench, cmd_check, cmd_demo, cmd_explain, cmd_list, cmd_plot
from .options import add_common, add_shape, add_switches, subcommand
from .tune_cmd import cmd_tune


# ---- the parser -----------------------------------------------------------------------------------
_EPILOG = """examples:
  convlab demo                                    every plugin on a small problem, checked; what auto picks
  convlab list                                    plugins and built-in suites
  convlab explain --x 16,3,227,227 --w 96,3,11,11 --stride 4
  convlab bench --suite burn --ops forward --out bench-results
  convlab bench --x 16,64,56,56 --w 64,64,3,3 --padding 1 --plugins direct
  convlab bench auto --suite resnet50 --dtypes float16 --out auto      algorithm='auto' against cuDNN
  convlab bench report bench-results/burn.json                          the rows and the ratios to cuDNN
  convlab plot bench-results/burn.json -o bench-results/plots
  convlab tune --suite resnet50
  convlab tune --suite resnet50 --dtypes float32,float16,bfloat16 --workers 2     one process per GPU
  convlab tune --suite resnet50 --scheduler tcp://host:8786                      an existing Dask cluster
  convlab check direct
  convlab compile --target sm_90 --suite resnet50 --cover    every GPU kernel through ptxas, no GPU needed
  convlab source tensor_core --x 8,64,56,56 --w 64,64,3,3 --padding 1 --dtype float16   its kernels' source
On a machine without a GPU kernels run on Numba's CUDA simulator: commands then use tiny problems and no
time is measured."""


def _bench_args(p: argparse.ArgumentParser, ops_default: tuple[str, ...]) -> None:
    from convlab.problem import OPS

    p.add_argument("--suite", action="append", metavar="NAME|FILE.json",
                   help="built-in suite name (see 'convlab list') or a suite JSON file; repeatable "
                        "(default: burn on a GPU, tiny on the simulator)")
    p.add_argument("--ops", type=op_list, default=ops_default, metavar="OPS",
                   help=f"comma-separated subset of {','.join(OPS)} (default: all); conv_transpose2d "
                        "entries are dgrad problems")
    p.add_argument("--workspace-limit", type=nbytes, default=None, metavar="BYTES",
                   help="scratch memory per call, e.g. 256M (default: convlab's setting)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="run the suites' layers at batch N (suite names get a _bN suffix)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("sweeps on several GPUs or a cluster (Dask: pip install 'convlab[distributed]')")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--workers", type=positive, default=None, metavar="N",
                       help="a local cluster of N worker processes, one per GPU (CUDA_VISIBLE_DEVICES "
                            "pinned; on the simulator N simulator workers)")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="an existing Dask cluster, e.g. tcp://host:8786 (one 'dask worker --nthreads 1 "
                            "--resources GPU=1' per GPU)")
    g.add_argument("--dtypes", type=dtype_list, default=None, metavar="LIST",
                   help="run every shape in these dtypes: float32,float16,bfloat16,float64, and float32+high "
                        "(float32 under precision 'high': TF32 allowed) (default: the suite's; bench: "
                        "sweeps only)")
    g.add_argument("--limit", type=positive, default=None, metavar="K",
                   help="only the first K shapes of each suite (bench: sweeps only)")
    add_shape(p, required=False)
    add_common(p)


def build_parser() -> argparse.ArgumentParser:
    from convlab._version import __version__
    from convlab.problem import OPS

    parser = argparse.ArgumentParser(prog="convlab", description="convlab: a Numba-CUDA laboratory for "
                                     "convolution algorithms (1D, 2D and 3D; forward, dgrad, wgrad): plugins "
                                     "checked against float64, an autotuner, benchmarks beside cuDNN, kernels "
                                     "compiled for GPU targets.", epilog=_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"convlab {__version__}")
    add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    with subcommand(sub, "demo", cmd_demo, help="every plugin on a small problem, checked against the reference",
                    description="Runs every plugin on a small problem for each op, checks it against the "
                    "float64 reference and shows what 'auto' picks (timed on a GPU; beside cuDNN when "
                    "PyTorch is installed). Exit status 1 if a plugin disagrees with the reference.") as p:
        add_switches(p, {"--no-torch": "skip the cuDNN baseline", "--quiet": "no progress bar"})

    with subcommand(sub, "list", cmd_list, help="registered plugins and built-in suites",
                    description="Lists the registered plugins, highest priority first (the order 'auto' "
                    "tries them in when nothing was timed), with their ops, whether they are deterministic "
                    "and what each does, and plugins that failed to load; then the built-in benchmark "
                    "suites with their shapes, problems and description."):
        pass  # the common options only

    with subcommand(sub, "explain", cmd_explain, help="for one shape: which plugins apply, why not, what is picked",
                    description="Which plugins apply to one problem, why the others decline, their "
                    "workspace, and what the strategy picks. Exit status 1 when nothing is picked (a forced "
                    "plugin that declines: the 'picked:' line says why), 2 on bad arguments, an unknown "
                    "plugin or config among them.") as p:
        add_shape(p, required=True)
        p.add_argument("--op", type=op_name, default=None, metavar="OP",
                       help="which problem of the shape: forward, dgrad, wgrad or transpose (= --transpose), "
                            "or the public names conv2d, conv2d_backward_data, conv2d_backward_weight, "
                            "conv_transpose2d (default: forward)")
        p.add_argument("--algorithm", type=algorithm, default="auto",
                       help="'auto', a plugin name, or NAME[CONFIG] such as 'im2col[BK=8,BM=64,BN=64]' "
                            "(default: auto)")
        p.add_argument("--workspace-limit", type=nbytes, default=None, metavar="BYTES")
        from convlab.runtime.targets import TARGETS

        p.add_argument("--target", choices=sorted(TARGETS), default=None,
                       help="explain for a named target instead of this machine (nothing is timed then)")

    with subcommand(sub, "bench", cmd_bench, common=False, help="time every eligible plugin (and cuDNN) on a suite",
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="For every problem and op: each eligible plugin's median time (CUDA "
                    "events; plugin.run and the public op with the plugin forced), TFLOP/s, GB/s, extra "
                    "device memory, the autotuner's pick, and cuDNN's time on the same inputs, timed in "
                    "interleaved rounds, with the ratio (when PyTorch with CUDA is importable). Every "
                    "plugin is first checked against a float64 reference; wrong or failing ones are "
                    "recorded and not timed, and each timed path's last output is checked again. Writes "
                    "DIR/NAME.json and .csv (after every problem). 'convlab bench auto': algorithm='auto' "
                    "as a user gets it against cuDNN; 'convlab bench report': tables from results files.") as p:
        _bench_args(p, OPS)
        p.add_argument("--plugins", metavar="A,B", help="only these plugins (default: all registered)")
        p.add_argument("--all-configs", action="store_true", help="time every config, not only the first")
        p.add_argument("--repeat", type=int, default=30, help="timed runs per candidate (default 30)")
        p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
        p.add_argument("--max-seconds", type=float, default=2.0,
                       help="time budget per candidate; cuts --repeat for slow ones (min 3 runs; default 2)")
        add_switches(p, {"--no-torch": "skip the cuDNN baseline", "--no-auto": "skip the autotuner's pick"})
        p.add_argument("--out", default="bench-results", metavar="DIR", help="output folder (default bench-results)")
        p.add_argument("--name", default=None, help="file stem (default: the suite names joined by '+')")
        p.add_argument("--seed", type=int, default=0, help="seed of the random operands")
        add_switches(p, {
            "--force": "allow large suites on the simulator",
            "--check-replay": "on the simulator: also check each plugin through the public op, its recorded plan "
                              "replayed (a GPU run checks every path it times)",
            "--simulator-wall-clock": "on the simulator: record one run's wall-clock time per candidate, so that "
                                      "'convlab plot' can chart it (simulator wall-clock, not GPU speed)"})
        from .bench_cmd import add_parsers as add_bench_subcommands

        add_bench_subcommands(p)

    with subcommand(sub, "plot", cmd_plot, help="charts from results files (matplotlib, PNG)",
                    description="Per suite: a chart of time, cuDNN ratio or TFLOP/s by plugin and shape "
                    "(one panel per op), and a roofline against the GPU's measured ceilings.") as p:
        p.add_argument("results", nargs="+", metavar="RESULTS.json")
        p.add_argument("-o", "--output", default="plots", metavar="DIR", help="output folder (default plots)")
        p.add_argument("--metric", choices=("auto", "ratio", "time", "tflops"), default="auto",
                       help="bar chart value (auto: ratio when cuDNN was measured, else time)")
        p.add_argument("--peak-tflops", type=float, default=None,
                       help="compute ceiling in TFLOP/s (default: H200 fp32 SGEMM, 50.7)")
        p.add_argument("--peak-tbps", type=float, default=None,
                       help="memory ceiling in TB/s (default: H200 device copy, 4.24)")

    with subcommand(sub, "tune", cmd_tune, common=False, help="pre-tune a suite into the autotuner's cache",
                    description="Tune every problem of the suites (or one shape) into the autotuner's "
                    "cache file, so that later runs answer from the cache: in mode tune (each plugin's "
                    "best candidates by the cost model checked and timed) unless --tune-mode or "
                    "CONVLAB_TUNE_MODE names exhaustive (every candidate timed) or --tune-mode heuristic "
                    "(the cost model's picks stored, nothing timed). On the simulator the autotuner "
                    "picks by declared priority and caches nothing.") as p:
        _bench_args(p, OPS)
        add_switches(p, {"--retune": "tune again even where the cache answers",
                         "--clear-cache": "delete this device's cache first",
                         "--verbose": "every candidate's median and check"})

    with subcommand(sub, "check", cmd_check, help="run the conformance suite on one plugin",
                    description="Runs every conformance check (convlab.testing) on every op of one "
                    "plugin over hypothesis-drawn problems, one line each: 'ok (N examples)', or FAIL with "
                    "the property, the smallest failing problem (hypothesis shrinks it) and the error; "
                    "exit status 1 if any fails. The number of examples follows "
                    "$CONVLAB_HYPOTHESIS_PROFILE (small on the simulator).") as p:
        p.add_argument("plugin", help="plugin name (see 'convlab list')")
        p.add_argument("--ops", type=op_list, default=None, metavar="OPS", help="only these ops")
        p.add_argument("--checks", default=None, metavar="A,B", help="only these checks (check_* names)")
        p.add_argument("--max-examples", type=int, default=None, help="hypothesis examples per check")
        p.add_argument("--mutants", action="store_true",
                       help="instead, run the suite on the plugin's planted bugs (convlab.testing.mutants: the "
                       "output-level ones, the built-in kernel-level ones and the plugin's own mutants()); exit "
                       "status 1 if one survives")

    from .compile_cmd import add_parser as add_compile
    from .source_cmd import add_parser as add_source

    add_compile(sub)
    add_source(sub)
    return parser


def _dtype_precision(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """``--dtype float32+high``: ``args.dtype`` becomes float32 and the float32 precision the command
    runs under ("high") is returned (None: the current one). A command with its own ``--precision``
    (source) gets it there; a conflicting explicit ``--precision`` is a usage error (exit 2)."""
    token = getattr(args, "dtype", None)
    if token is None:
        return None
    args.dtype, precision = split_dtype(token)
    if hasattr(args, "precision") and precision is not None:
        if args.precision not in (None, precision):
            parser.error(f"{args.command}: --dtype {token} runs float32 under precision "
                         f"{precision!r}, but --precision is {args.precision!r}")
        args.precision = precision
    return precision


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``convlab`` console script; returns the exit status."""
    from convlab.runtime import settings

    parser = build_parser()
    args = parser.parse_args(argv)
    precision = _dtype_precision(parser, args)
    previous = settings.set_deterministic(True) if args.deterministic else None
    previous_mode = settings.set_tune_mode(args.tune_mode) if args.tune_mode else None
    try:
        if precision is None:
            return args.func(args)
        with settings.float32_precision(precision):
            return args.func(args)
    except (ValueError, TypeError) as exc:
        if args.debug:
            raise
        sub = f"convlab {args.command}"
        print(f"{sub}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        sys.stdout = open(os.devnull, "w")
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            settings.set_deterministic(previous)
        if previous_mode is not None:
            settings.set_tune_mode(previous_mode)


if __name__ == "__main__":
    sys.exit(main())
