"""The compile report: per (target, kernel) what ptxas said, checked against the target's limits.

A kernel fails its target when it does not lower, NVVM or ptxas reject it, ptxas warns that wgmma was
serialised (:data:`convlab.compile.assemble.FATAL_WARNINGS`), its registers or its shared memory (static
plus the largest dynamic request of its launches) exceed the target, the registers its warp roles run
with after ``setmaxnreg`` (:func:`convlab.kernels.resources.declare_registers`) take more than the
block's register file, a launch asks for more threads than a block may have, or it spills more than the budget (bytes of spill stores plus loads: the run's
``max_spill``, or what the kernel declares with :func:`convlab.kernels.resources.allow_spills`, with its
reason). A kernel *near* a limit (90% of the block's registers or of the shared memory, 240+ registers
a thread) is flagged.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from convlab.runtime.targets import get

FORMAT, HASHES_FORMAT = "convlab-compile/1", "convlab-ptx-hashes/1"
NEAR = 0.9  # a fraction of a limit that counts as near it
HASH_CHARS = 16  # hex digits of a PTX hash kept in a hashes file (64 bits: no collision among thousands)


@dataclass
class Row:
    """One kernel on one target."""

    target: str
    kernel: str
    name: str
    plugins: list[str]
    cases: int
    threads: int
    dynamic_shared: int
    result: dict

    def get(self, key: str) -> Any:
        return self.result.get(key)

    @property
    def shared(self) -> int:
        return (self.get("static_shared") or 0) + self.dynamic_shared

    @property
    def spills(self) -> int:
        return (self.get("spill_stores") or 0) + (self.get("spill_loads") or 0)

    @property
    def allowance(self) -> tuple[int, str]:
        """The spill bytes the kernel declares it may have, and why ((0, "") when it declares none)."""
        return self.get("allowed_spills") or 0, self.get("allowed_spills_why") or ""

    def allowed(self, max_spill: int) -> str:
        """A note when the kernel spills over ``max_spill`` but within its declared allowance ("" else)."""
        nbytes, why = self.allowance
        if not max_spill < self.spills <= nbytes:
            return ""
        return f"spills within its declared allowance of {nbytes} bytes: {why}"

    def problems(self, max_spill: int) -> list[str]:
        """Why this kernel fails its target (empty: it does not)."""
        from .assemble import FATAL_WARNINGS

        t = get(self.target)
        if self.get("error"):
            return [self.get("error")]
        out = [w for w in self.get("warnings") or [] if any(code in w for code in FATAL_WARNINGS)]
        regs = self.get("registers") or 0
        why = t.fits(threads=self.threads, shared=self.shared, registers=regs)
        if why:
            out.append(why)
        budgets = self.get("register_budgets") or []
        if sum(threads * regs for threads, regs in budgets) > t.regs_per_block:
            out.append(f"setmaxnreg budgets {budgets} take {sum(a * b for a, b in budgets)} registers, over "
                       f"{t.name}'s {t.regs_per_block}")
        if (self.get("static_shared") or 0) > t.smem_per_block:
            out.append(f"{self.get('static_shared')} bytes of static shared memory, over {t.smem_per_block}")
        budget = max(max_spill, self.allowance[0])
        if self.spills > budget:
            declared = f" (its declared allowance: {self.allowance[1]})" if budget > max_spill else ""
            out.append(f"spills {self.get('spill_stores')} bytes stored / {self.get('spill_loads')} loaded, "
                       f"over the budget of {budget}{declared}")
        return out

    def near(self) -> list[str]:
        t = get(self.target)
        regs = self.get("registers") or 0
        out = []
        if regs * self.threads >= NEAR * t.regs_per_block:
            out.append(f"{regs} x {self.threads} = {regs * self.threads} registers a block")
        if regs >= 240:
            out.append(f"{regs} registers a thread")
        if self.shared >= NEAR * t.smem_per_block_optin:
            out.append(f"{self.shared} bytes of shared memory")
        return out


class Report:
    """Everything one :func:`convlab.compile.compile_corpus` run found."""

    def __init__(self, spec: dict, corpus: dict, results: list[dict], *, wall_seconds: float,
                 collect_seconds: float, jobs: int) -> None:
        self.spec, self.corpus, self.results = spec, corpus, results
        self.wall_seconds, self.collect_seconds, self.jobs = wall_seconds, collect_seconds, jobs
        self.rows = self._rows()

    def _rows(self) -> list[Row]:
        usage: dict[tuple[str, str], dict] = {}
        for target, cases in self.corpus["cases"].items():
            for case_id, launches in cases.items():
                for launch in launches:
                    use = usage.setdefault((target, launch["kernel"]), {"plugins": set(), "cases": 0,
                                                                       "threads": 0, "shared": 0})
                    use["plugins"].add(case_id.split("/", 1)[0])
                    use["cases"] += 1
                    use["threads"] = max(use["threads"], launch["block"][0] * launch["block"][1] *
                                         launch["block"][2])
                    use["shared"] = max(use["shared"], launch["shared"])
        rows = []
        for result in self.results:
            for target, res in result["targets"].items():
                use = usage[(target, result["id"])]
                extra = {k: result.get(k) for k in ("lower_seconds", "argtypes", "max_registers",
                                                    "allowed_spills", "allowed_spills_why", "register_budgets")}
                rows.append(Row(target, result["id"], result["name"], sorted(use["plugins"]), use["cases"],
                                use["threads"], use["shared"], dict(res, **extra)))
        return sorted(rows, key=lambda r: (r.target, r.plugins, r.name, r.kernel))

    def failures(self, max_spill: int = 0) -> list[tuple[Row, list[str]]]:
        found = [(row, row.problems(max_spill)) for row in self.rows]
        return [(row, why) for row, why in found if why]

    def ok(self, max_spill: int = 0) -> bool:
        return not self.failures(max_spill) and not self.corpus["errors"]

    def summary(self, max_spill: int = 0) -> dict:
        """Per target: kernels, cases, registers (max, median), spilling kernels, the largest shared memory,
        failures and kernels near a limit."""
        out: dict[str, Any] = {}
        for target in self.spec["targets"]:
            rows = [r for r in self.rows if r.target == target]
            regs = sorted(r.get("registers") or 0 for r in rows)
            out[target] = {"kernels": len(rows), "cases": len(self.corpus["cases"].get(target, {})),
                           "registers_max": regs[-1] if regs else 0,
                           "registers_median": regs[len(regs) // 2] if regs else 0,
                           "spilling_kernels": sum(1 for r in rows if r.spills),
                           "allowed_spilling": sum(1 for r in rows if r.allowed(max_spill)),
                           "spill_bytes_max": max((r.spills for r in rows), default=0),
                           "stack_frame_max": max((r.get("stack_frame") or 0 for r in rows), default=0),
                           "shared_max": max((r.shared for r in rows), default=0),
                           "failures": sum(1 for r in rows if r.problems(max_spill)),
                           "near_limit": sum(1 for r in rows if r.near())}
        return out

    def to_json(self, max_spill: int = 0) -> dict:
        from convlab import runtime
        from convlab._version import __version__

        return {"format": FORMAT, "spec": self.spec, "max_spill": max_spill,
                "versions": {"convlab": __version__, **runtime.versions()},
                "wall_seconds": round(self.wall_seconds, 1), "collect_seconds": round(self.collect_seconds, 1),
                "jobs": self.jobs, "summary": self.summary(max_spill), "errors": self.corpus["errors"],
                "kernels": [{"target": r.target, "id": r.kernel, "name": r.name, "plugins": r.plugins,
                             "cases": r.cases, "threads": r.threads, "dynamic_shared": r.dynamic_shared,
                             **{k: v for k, v in r.result.items() if k != "ptx"},
                             "problems": r.problems(max_spill), "allowed": r.allowed(max_spill), "near": r.near()}
                            for r in self.rows]}

    def hashes(self) -> dict:
        """{"targets": {target: {"cases": {case id: [PTX hash of each launch]}, "kernels": {hash: name}}}}:
        two commits compare kernel by kernel (:func:`compare_hashes`)."""
        by_id = {(r.target, r.kernel): r for r in self.rows}
        short = lambda r: (r.get("hash") or "error")[:HASH_CHARS] if r is not None else "error"  # noqa: E731
        out: dict[str, Any] = {}
        for target, cases in self.corpus["cases"].items():
            out[target] = {
                "cases": {cid: [short(by_id.get((target, launch["kernel"]))) for launch in launches]
                          for cid, launches in sorted(cases.items())},
                "kernels": {short(r): r.name for r in self.rows if r.target == target and r.get("hash")}}
        return {"format": HASHES_FORMAT, "spec": self.spec, "targets": out}

    def table(self, max_spill: int = 0, wide: bool = False, brief: bool = False) -> str:
        """One line per (target, kernel) (``brief``: only those failing, spilling or near a limit), then
        the notes and the summary. The plugins and kernel columns are cut to 24 and 28 characters
        ('...' marks a cut) unless ``wide``; the notes are never cut."""
        shown = [r for r in self.rows if not brief or r.problems(max_spill) or r.near() or r.spills]
        names = {id(r): r.name.replace("<locals>.", "") for r in shown}
        pw = max([len(",".join(r.plugins)) for r in shown] + [24]) if wide else 24
        kw = max([len(n) for n in names.values()] + [28]) if wide else 28
        head = f"{'target':7} {'plugins':{pw}} {'kernel':{kw}} {'thr':>5} {'regs':>4} {'spill':>9} {'stack':>5} " \
               f"{'smem':>7} {'dyn':>7}  notes"
        lines = [head, "-" * len(head)]
        for r in shown:
            plugins = ",".join(r.plugins)
            plugins = plugins if len(plugins) <= pw else plugins[:pw - 3] + "..."
            name = names[id(r)]
            name = name if len(name) <= kw else "..." + name[-(kw - 3):]
            spill = f"{r.get('spill_stores') or 0}/{r.get('spill_loads') or 0}"
            notes = "; ".join(r.problems(max_spill) + [n for n in [r.allowed(max_spill)] if n] +
                              [f"near: {n}" for n in r.near()])
            lines.append(f"{r.target:7} {plugins:{pw}} {name:{kw}} {r.threads:5} {r.get('registers') or '-':>4} "
                         f"{spill:>9} {r.get('stack_frame') or 0:5} {r.get('static_shared') or 0:7} "
                         f"{r.dynamic_shared:7}  {notes}")
        for note in sorted({r.get("note") for r in self.rows if r.get("note")}):
            lines.append(f"note: {note}")
        for error in self.corpus["errors"]:
            lines.append(f"case error on {error['target']}: {error['case']}: {error['error']}")
        for target, s in self.summary(max_spill).items():
            lines.append(f"{target}: {s['kernels']} kernels from {s['cases']} cases; registers max "
                         f"{s['registers_max']} (median {s['registers_median']}); {s['spilling_kernels']} "
                         f"spilling (max {s['spill_bytes_max']} bytes; {s['allowed_spilling']} over --max-spill "
                         f"{max_spill} within their declared allowance); shared memory max {s['shared_max']} bytes; "
                         f"{s['failures']} failing, {s['near_limit']} near a limit")
        lines.append(f"{len(self.results)} kernels lowered in {self.wall_seconds:.0f} s on {self.jobs} workers "
                     f"(corpus collected in {self.collect_seconds:.0f} s)")
        return "\n".join(lines)


def markdown(report: dict) -> str:
    """A summary of a report's JSON (:meth:`Report.to_json`) as Markdown: per target the counts of
    kernels and cases, registers, spills and shared memory, then every kernel that spills, fails or is
    near a limit."""
    spec, summary = report["spec"], report["summary"]
    source = "the plugins' sample problems" if spec["samples"] else "no sample problems"
    lines = [f"Corpus: {source}"
             + (f", suites {', '.join(spec['suites'])}" if spec["suites"] else "")
             + (", the default mode's picks (convlab.compile.corpus.picks)" if spec.get("picks") else "")
             + (", covering subset (convlab.compile.corpus.cover)" if spec.get("cover") else ", every case")
             + ((", each plugin's first config" if spec["configs"] == 1 else f", each plugin's first "
                 f"{spec['configs']} configs") if spec.get("configs") else "")
             + f"; dtypes {', '.join(spec['dtypes'])}; ops {', '.join(spec['ops'])}. "
             f"{report['wall_seconds']:.0f} s on {report['jobs']} workers; numba-cuda "
             f"{report['versions'].get('numba_cuda')}.", "",
             "| target | kernels | cases | registers max / median | spilling kernels (max bytes; within a "
             "declared allowance) | "
             "stack frame max | shared memory max | failing | near a limit |", "|---" * 9 + "|"]
    for target, s in summary.items():
        lines.append(f"| {target} | {s['kernels']} | {s['cases']} | {s['registers_max']} / {s['registers_median']} "
                     f"| {s['spilling_kernels']} ({s['spill_bytes_max']}; {s.get('allowed_spilling', '-')}) | "
                     f"{s['stack_frame_max']} | "
                     f"{s['shared_max']} | {s['failures']} | {s['near_limit']} |")
    flagged = [k for k in report["kernels"] if k["problems"] or k["near"] or
               (k.get("spill_stores") or 0) + (k.get("spill_loads") or 0)]
    if flagged:
        lines += ["", "| target | kernel | plugins | threads | registers (cap) | spill stores / loads | "
                  "allowed | shared static + dynamic | notes |", "|---" * 9 + "|"]
        for k in flagged:
            notes = "; ".join(k["problems"] + [f"near: {n}" for n in k["near"]] +
                              ([k["allowed_spills_why"]] if k.get("allowed_spills_why") else []))
            lines.append(f"| {k['target']} | {k['name'].replace('<locals>.', '')} | {', '.join(k['plugins'])} | "
                         f"{k['threads']} | {k.get('registers')} ({k.get('max_registers') or '-'}) | "
                         f"{k.get('spill_stores')} / {k.get('spill_loads')} | {k.get('allowed_spills') or 0} | "
                         f"{k.get('static_shared')} + {k['dynamic_shared']} | {notes} |")
    return "\n".join(lines) + "\n"


def compare_hashes(before: dict, after: dict) -> dict:
    """Per target: the cases whose launch hashes differ, cases only in one file, and the kernel hashes
    only in one file (by name)."""
    out = {}
    for target in sorted(set(before["targets"]) | set(after["targets"])):
        b, a = before["targets"].get(target, {}), after["targets"].get(target, {})
        bc, ac = b.get("cases", {}), a.get("cases", {})
        out[target] = {"changed": sorted(c for c in set(bc) & set(ac) if bc[c] != ac[c]),
                       "only_before": sorted(set(bc) - set(ac)), "only_after": sorted(set(ac) - set(bc)),
                       "kernels_only_before": {h: n for h, n in b.get("kernels", {}).items()
                                               if h not in a.get("kernels", {})},
                       "kernels_only_after": {h: n for h, n in a.get("kernels", {}).items()
                                              if h not in b.get("kernels", {})},
                       "same": sum(1 for c in set(bc) & set(ac) if bc[c] == ac[c])}
    return out


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)
