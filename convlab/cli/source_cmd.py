"""``convlab source``: the generated source of the kernels one plugin launches for one shape.

The kernels are those of the config the plugin would run on the target without tuning (its first
config that accepts the problem), or of ``--config``; the default target is sm_90 (the H200 class the
project measures on), ``--target sm_80`` for an Ampere GPU's plan, ``--target simulator`` for the tiny
tiles the simulator runs. The plugin's host code runs in a
compile-only child process (:mod:`convlab.compile.sources`): no GPU, nothing executed.
"""
from __future__ import annotations

import argparse
from typing import Any

DEFAULT_TARGET = "sm_90"


def add_parser(sub: Any) -> None:
    from convlab.runtime.settings import FLOAT32_PRECISIONS
    from convlab.runtime.targets import TARGETS

    from .arg_types import op_name
    from .options import add_shape, subcommand

    with subcommand(sub, "source", cmd_source, help="print the generated source of a plugin's kernels for one shape",
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    description=__doc__.split("\n\n")[1].replace("\n", " "),
                    epilog="examples:\n"
                           "  convlab source tensor_core --op forward --x 8,64,56,56 --w 64,64,3,3 "
                           "--padding 1 --dtype float16\n"
                           "  convlab source implicit_gemm --op wgrad --x 8,64,56,56 --w 64,64,3,3 "
                           "--padding 1 --target sm_80\n"
                           "  convlab source tensor_core --op forward --x 2,16,8,8 --w 16,16,3,3 "
                           "--dtype float16 --target simulator --config BK=16,BM=32,BN=32,STAGES=2,WM=16,WN=32") as p:
        p.add_argument("plugin", help="plugin name (see 'convlab list')")
        p.add_argument("--op", type=op_name, default="forward", help="forward (default), dgrad or wgrad")
        p.add_argument("--target", choices=tuple(TARGETS), default=DEFAULT_TARGET,
                       help=f"the target the plugin plans for (default {DEFAULT_TARGET})")
        p.add_argument("--config", default=None, metavar="NAME",
                       help="this config (its name, as 'convlab explain' lists them) instead of the plugin's first")
        p.add_argument("--precision", choices=FLOAT32_PRECISIONS, default=None,
                       help="float32 precision ('high' lets tensor-core plugins run TF32, as --dtype "
                            "float32+high) (default: highest)")
        p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="a module to import first, e.g. one that registers your plugin")
        add_shape(p, required=True, nd=False)


def problem_of(args: argparse.Namespace) -> Any:
    """The canonical problem of the shape and ``--op`` (ValueError for an invalid shape)."""
    from convlab.bench.suite import single_shape_suite

    spec = {"x": args.x, "w": args.w, "stride": args.stride, "padding": args.padding, "dilation": args.dilation,
            "groups": args.groups, "bias": args.bias and args.op == "forward", "dtype": args.dtype,
            "ops": [args.op]}
    return single_shape_suite(spec).problems()[0][1]


def cmd_source(args: argparse.Namespace) -> int:
    import dataclasses
    import importlib

    from convlab.compile.sources import run_isolated
    from convlab.plugin.registry import get as get_plugin

    from convlab.ops import strategy
    from convlab.runtime.settings import float32_precision, get_workspace_limit
    from convlab.runtime.targets import get

    for module in args.imports:
        importlib.import_module(module)
    get_plugin(args.plugin)  # ValueError listing the registered plugins
    problem = problem_of(args)
    args.precision = args.precision or "highest"
    with float32_precision(args.precision):  # a plugin that declines, or a config it does not offer: here
        strategy.resolve(problem, args.plugin if args.config is None else (args.plugin, args.config),
                         get_workspace_limit(), get(args.target))
    print(run_isolated({"plugin": args.plugin, "target": args.target, "config": args.config,
                        "precision": args.precision, "problem": dataclasses.asdict(problem),
                        "imports": args.imports}), end="")
    return 0
