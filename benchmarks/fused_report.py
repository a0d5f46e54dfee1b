"""benchmarks/fused_bench.py's report: issue 43's targets per fused row (``targets``) and fused.md, the rows
as a table with the check's legend (``markdown``)."""
from __future__ import annotations


def targets(rows: list[dict]) -> list[dict]:
    """Issue 43's targets per fused row: MobileNetV2 forward >= 1.3x torch eager; never slower than unfused."""
    out = []
    for r in (r for r in rows if r["variant"] in ("convlab_fused", "convlab_blocks")):
        t = {k: r.get(k) for k in ("stack", "dtype", "layout", "mode", "variant", "speedup_vs_torch",
                                   "speedup_vs_unfused")}
        t["not_slower_than_unfused"] = None if t["speedup_vs_unfused"] is None else t["speedup_vs_unfused"] >= 1.0
        if r["stack"].startswith("mobilenetv2") and r["mode"] == "forward":
            t["at_least_1.3x_torch"] = None if t["speedup_vs_torch"] is None else t["speedup_vs_torch"] >= 1.3
        out.append(t)
    return out


def markdown(data: dict) -> str:
    """fused.md: the rows as a table, the check's legend and the targets."""
    f = lambda v, p=3: "" if v is None else f"{v:.{p}f}"  # noqa: E731
    es = lambda v: " / ".join(f"{e:.2e}" for e in v)  # noqa: E731  (per output)
    lines = [f"# Fused epilogues and blocks against torch: {data['device']}", "",
             f"Command: `{data['command']}`; convlab {data['versions'].get('convlab')} at `{data['commit']}`, "
             f"torch {data['versions'].get('torch')}, tuning mode {data['tune_mode']}, {data['repeat']} rounds.", "",
             "| stack | dtype | layout | mode | variant | median ms | vs torch | vs convlab | first call s | rel err "
             "| torch err | bound | check | flips | fusions | records / step |", "|" + " --- |" * 16]
    for r in data["rows"]:
        check = "error" if "error" in r else "pass" if r["passed"] else "FAIL"
        errs = r.get("rel_errs", [r["rel_err"]] if "rel_err" in r else None)
        errs = [max(e, e2) for e, e2 in zip(errs, r.get("last_rel_errs", errs))] if errs else None
        err = es(errs) if errs else r.get("error", "")[:60].replace("|", "/")
        flips = f"{r['flips']} / {r.get('last_flips', '')}" if r.get("masked") else ""
        lines.append(f"| {r['stack']} | {r['dtype']} | {r['layout']} | {r['mode']} | {r['variant']} | "
                     f"{f(r.get('median_ms'))} | {f(r.get('speedup_vs_torch'), 2)} | "
                     f"{f(r.get('speedup_vs_unfused'), 2)} | {f(r.get('first_call_s'), 2)} | {err} | "
                     f"{es(r.get('torch_rel_errs', []))} | {es(r.get('bounds', []))} | {check} | {flips} | "
                     f"{r.get('fusions', '')} | {f(r.get('records_per_step'), 1)} |")
    lines += ["", "records / step: launch plans convlab recorded per step after the warm-up (0: every call "
              "replayed its plan).", "", f"rel err: each output's relative norm error (forward: the output; train: output / input "
              f"gradient; the worse of the first and last timed calls) against the reference, the same model, input "
              f"and gy in float64; a train row of a variant whose activations are modules: with the checked call's "
              f"ReLU / ReLU6 masks (benchmarks/fused_check.py). flips: mask elements on the other side of a kink "
              f"than float64's, first / last call. torch err: torch eager's (first call) against the row's "
              f"reference (masked, or float64's own masks). bound: max(TOL[dtype], FACTOR x torch err),"
              f" TOL {data.get('tol')}, FACTOR {data.get('factor')}. check: pass while each rel err is within its "
              f"bound (torch eager sets the bounds: it passes by construction); a failed check reports no time.", ""]
    for key in ("at_least_1.3x_torch", "not_slower_than_unfused"):
        got = [t[key] for t in data.get("targets", []) if t.get(key) is not None]
        lines.append(f"- target {key}: met by {sum(got)} of {len(got)} timed fused rows")
    return "\n".join(lines + [""])
