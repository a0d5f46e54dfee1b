"""``convlab compile``: every GPU kernel of a corpus compiled for named targets, no GPU needed.

The table has one line per (target, kernel): threads a block, registers, spill bytes stored / loaded,
stack frame, static and dynamic shared memory, and why it fails, spills within its declared allowance or
is near a limit. Exit status 1 when numba-cuda cannot find its compiler libraries (one line naming the
extra to install, before any work), a kernel fails (convlab.compile.report), a case cannot be planned,
or ``--compare`` finds a kernel that changed.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from convlab.problem import DTYPES


_DESCRIPTION = """\
Compiles every kernel that each eligible plugin's configs would launch on the corpus's problems, to PTX
(NVVM) and to a cubin (ptxas, where found), for each target, on worker processes that need no GPU;
reports registers, spills, shared memory and ptxas warnings per kernel. Needs numba-cuda's CUDA compiler
libraries and ptxas: pip install "convlab[compile]".

Spill budget: a kernel may spill --max-spill bytes (stores + loads), or more where it declares an
allowance with its reason (convlab.kernels.resources.allow_spills, e.g. a register cap that keeps two
blocks an SM, chosen over spills to L1-cached local memory). Each allowance in use is shown: the
kernel's notes give its bytes and reason, and each target's summary counts the kernels over
--max-spill within their allowance.

Exit status 1 when the compiler libraries are missing (one line, before any work), on a compile or
ptxas error, a kernel beyond the target's limits, a kernel spilling over its budget, a case that cannot
be planned, or a --compare that finds changed kernels; 2 on bad arguments."""


def add_parser(sub: Any) -> None:
    from convlab.runtime.targets import GPU_TARGETS

    from .arg_types import nbytes, op_list, positive
    from .options import add_shape, add_switches, subcommand

    with subcommand(sub, "compile", cmd_compile, help="compile every GPU kernel for named targets (no GPU needed)",
                    formatter_class=argparse.RawDescriptionHelpFormatter, description=_DESCRIPTION,
                    epilog="examples:\n  convlab compile --target sm_90 --plugins tensor_core\n"
                           "  convlab compile --suite resnet50 --cover --json compile.json --hashes ptx.json\n"
                           "  convlab compile --cover --hashes after.json --compare before.json\n"
                           "  convlab compile --suite resnet50 --cover --store ~/.cache/convlab/store\n"
                           "  convlab compile --suite resnet50 --no-samples --picks --target sm_90 "
                           "--store ~/.cache/convlab/store") as p:
        p.add_argument("--target", action="append", choices=GPU_TARGETS, default=None,
                       help=f"a named target, repeatable (default: {', '.join(GPU_TARGETS)})")
        p.add_argument("--suite", action="append", default=[], metavar="NAME|FILE.json",
                       help="add a suite's problems to the corpus (repeatable)")
        p.add_argument("--no-samples", action="store_true", help="leave the plugins' sample problems out")
        p.add_argument("--plugins", metavar="A,B", default=None, help="only these plugins (default: all)")
        p.add_argument("--ops", type=op_list, default=None, metavar="OPS", help="only these ops")
        p.add_argument("--dtypes", default=None, metavar="LIST",
                       help=f"only these dtypes, comma-separated, of {','.join(DTYPES)} (float32 runs under "
                            "both precisions)")
        p.add_argument("--configs", type=positive, default=None, metavar="N",
                       help="each plugin's first N configs only (default: all)")
        add_switches(p, {
            "--cover": "a covering subset of the cases: every config, layout mix, bias flag and problem at least "
                       "once per plugin, op and dtype (convlab.compile.corpus.cover)",
            "--picks": "only each problem's pick in the default tuning mode (the cost model's), all-NCHW and "
                       "all-channels-last: the kernels a first call launches (convlab.compile.corpus.picks)"})
        p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="a module the workers import first, e.g. one that registers your plugins")
        p.add_argument("--jobs", type=positive, default=None, metavar="N", help="worker processes (default: CPUs)")
        p.add_argument("--max-spill", type=nbytes, default=0, metavar="BYTES",
                       help="spill bytes (stores + loads) a kernel may have, unless it declares a larger "
                            "allowance with its reason (default 0)")
        p.add_argument("--workspace-limit", type=nbytes, default=None, metavar="BYTES")
        p.add_argument("--json", default=None, metavar="FILE", help="write the full report as JSON")
        p.add_argument("--hashes", default=None, metavar="FILE",
                       help="write one PTX hash per launch of each case (compare two commits with --compare)")
        p.add_argument("--compare", default=None, metavar="HASHES.json",
                       help="compare this run's PTX hashes with an earlier --hashes file (exit 1 if any differ)")
        p.add_argument("--store", default=None, metavar="DIR",
                       help="write each kernel's cubin (per target) into this kernel store, which the runtime "
                            "loads instead of compiling (CONVLAB_KERNEL_STORE=DIR; needs ptxas)")
        p.add_argument("--markdown", default=None, metavar="FILE", help="write a summary as Markdown")
        add_switches(p, {
            "--wide": "do not cut the plugins and kernel columns (cut to 24 and 28 characters otherwise)",
            "--brief": "list only the kernels that fail, spill or are near a limit (and the summary)",
            "--quiet": "no progress line"})
        add_shape(p, required=False)


def _spec(args: argparse.Namespace) -> dict:
    from convlab.compile import make_spec
    from convlab.problem import OPS

    from .commands import _shape_spec

    dtypes = DTYPES if args.dtypes is None else tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    shapes = [_shape_spec(args)] if args.x is not None else []
    if (args.x is None) != (args.w is None):
        raise ValueError("a shape needs both --x and --w")
    plugins = None if args.plugins is None else [p.strip() for p in args.plugins.split(",") if p.strip()]
    if plugins:
        import importlib

        from convlab.plugin.registry import get as get_plugin

        for module in args.imports:  # the plugins they register are checked here as in the workers
            importlib.import_module(module)

        for name in plugins:
            get_plugin(name)  # ValueError listing the registered plugins
    return make_spec(args.target or ("sm_80", "sm_90"), samples=not args.no_samples, suites=args.suite,
                     shapes=shapes, plugins=plugins, ops=args.ops or OPS, dtypes=dtypes, configs=args.configs,
                     workspace_limit=args.workspace_limit, cover=args.cover, imports=args.imports,
                     store=args.store, picks=args.picks)


def cmd_compile(args: argparse.Namespace) -> int:
    from convlab.compile import compile_corpus, compare_hashes, toolchain
    from convlab.compile.assemble import INSTALL_HINT, ptxas_path

    spec = _spec(args)
    try:
        toolchain.require()  # once, before any worker starts
    except toolchain.ToolchainError as exc:
        print(f"convlab compile: {exc}", file=sys.stderr)
        return 1
    if ptxas_path() is None:
        if args.store:
            print(f"convlab compile: --store needs ptxas, which was not found; {INSTALL_HINT}", file=sys.stderr)
            return 1
        print(f"note: ptxas not found: PTX only (no registers or spills); {INSTALL_HINT}")

    def progress(done: int, total: int, result: dict) -> None:
        if not args.quiet:
            print(f"\r[{done}/{total}] {result['name'][-60:]:60}", end="", file=sys.stderr, flush=True)

    report = compile_corpus(spec, args.jobs, progress)
    if not args.quiet:
        print(file=sys.stderr)
    print(report.table(args.max_spill, wide=args.wide, brief=args.brief))
    as_json = report.to_json(args.max_spill)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(as_json, f, indent=1)
        print(f"wrote {args.json}")
    if args.markdown:
        from convlab.compile.report import markdown

        with open(args.markdown, "w") as f:
            f.write(markdown(as_json))
        print(f"wrote {args.markdown}")
    if args.store:
        print(_store_line(report, spec["store"]))
    hashes = report.hashes()
    if args.hashes:
        with open(args.hashes, "w") as f:
            json.dump(hashes, f, indent=1, sort_keys=True)
        print(f"wrote {args.hashes}")
    changed = 0
    if args.compare:
        with open(args.compare) as f:
            diff = compare_hashes(json.load(f), hashes)
        for target, d in diff.items():
            changed += len(d["changed"]) + len(d["only_before"]) + len(d["only_after"])
            print(f"{target}: {d['same']} cases with identical PTX, {len(d['changed'])} changed, "
                  f"{len(d['only_before'])} only before, {len(d['only_after'])} only after")
            for case in d["changed"] + d["only_before"] + d["only_after"]:
                print(f"  {case}")
    return 0 if report.ok(args.max_spill) and not changed else 1


def _store_line(report: Any, where: str) -> str:
    """One line: the cubins this run wrote into the store, those it left out and why, the store's size."""
    from convlab.runtime.kernel_store import entries

    stored = [r["stored"] for k in report.results for r in k["targets"].values() if "stored" in r]
    skipped: dict[str, int] = {}
    for k in report.results:
        for r in k["targets"].values():
            if "not_stored" in r:
                skipped[r["not_stored"]] = skipped.get(r["not_stored"], 0) + 1
    files, size = entries(where)
    left = "".join(f"; {n} not stored: {why}" for why, n in sorted(skipped.items()))
    return (f"store {where}: wrote {len(stored)} cubins ({sum(stored) / 2**20:.1f} MiB){left}; the store holds "
            f"{files} files, {size / 2**20:.1f} MiB")
