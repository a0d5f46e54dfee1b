"""The error growth of the transform convolutions (winograd, fft), measured in float64 on the CPU.

For each form a plugin offers, the relative-norm error (against convlab.reference.solve in float64) of
its arithmetic as convlab.kernels.transform.emulate reproduces it in float32, divided by the error of
direct fp32 FMA accumulation on the same inputs; the largest ratio over reduction lengths, input
distributions (standard normal, uniform [0, 1)) and seeds is the form's growth. The plugins' accuracy
modules declare these numbers, times a margin (algorithms/winograd/accuracy.py, algorithms/fft/accuracy.py).

    python tools/transform_accuracy.py [--out DIR] [--quick]

writes DIR/accuracy.json and DIR/README.md (default DIR: results/transform_accuracy/cpu/<commit>/) and
prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

from convlab import reference
from convlab.kernels.transform import emulate
from convlab.kernels.winograd.toomcook import LAVIN_POINTS, POINTS, winograd
from convlab.measure import rel_error
from convlab.problem import make_problem

ROOT = Path(__file__).resolve().parents[1]
DISTS = {"normal": lambda rng, shape: rng.standard_normal(shape),
         "uniform": lambda rng, shape: rng.random(shape)}


def _draw(rng, dist: str, shape) -> np.ndarray:
    return DISTS[dist](rng, shape).astype(np.float32).astype(np.float64)


def winograd_forms(quick: bool) -> list[dict]:
    """Every (op class, F per axis, engine) the winograd plugin runs (dgrad shares forward's)."""
    forms = []
    engines = ("simt", "tf32x3", "f16", "bf16")
    for m in (2, 4, 6):
        forms += [dict(op="forward", h=(m, 3), w=(m, 3), engine=e) for e in engines]
        forms.append(dict(op="wgrad", h=(3, m), w=(3, m), engine="simt"))
        forms.append(dict(op="forward", h=(m, 3), w=(m, 3), engine="simt", points="lavin"))
    for r in range(2, 8):
        for m in (2, 4, 6):
            if m + r - 1 <= 8 and not (quick and r not in (3, 7)):
                forms += [dict(op="forward", h=(1, 1), w=(m, r), engine=e) for e in engines]
                forms.append(dict(op="wgrad", h=(1, 1), w=(r, m), engine="simt"))
    return forms


def measure_winograd(form: dict, quick: bool) -> dict:
    """The worst ratio of ``form``'s error to direct FMA's (module docstring), and the cases behind it."""
    pts = LAVIN_POINTS if form.get("points") == "lavin" else POINTS
    th, tw = winograd(*form["h"], pts), winograd(*form["w"], pts)
    one_d = form["h"] == (1, 1)
    worst, cases = 0.0, []
    seeds = (0,) if quick else (0, 1)
    lengths = (4, 32) if quick else (4, 32, 128)
    for seed in seeds:
        for dist in DISTS:
            for c in lengths:
                rng = np.random.default_rng(seed)
                if form["op"] == "forward":
                    r, s = th.r, tw.r
                    h, w = (1, 64 + s - 1) if one_d else (24 + r - 1, 24 + s - 1)
                    x, wt = _draw(rng, dist, (2 if one_d else 1, c, h, w)), _draw(rng, dist, (8, c, r, s))
                    prob = make_problem("forward", x.shape[0], c, h, w, 8, r, s)
                    ref = reference.solve(prob, x, wt, None)
                    err = rel_error(emulate.winograd(x, wt, th, tw, form["engine"]), ref)
                    base = rel_error(emulate.direct_fma(x, wt), ref)
                else:
                    r, s = th.m, tw.m
                    p, q = (1, c) if one_d else (max(2, c // 8), max(2, c // 8))
                    x = _draw(rng, dist, (2, 8, p + r - 1, q + s - 1))
                    dy = _draw(rng, dist, (2, 8, p, q))
                    prob = make_problem("wgrad", 2, 8, p + r - 1, q + s - 1, 8, r, s)
                    ref = reference.solve(prob, x, dy, None)
                    err = rel_error(emulate.winograd_wgrad(x, dy, th, tw), ref)
                    base = rel_error(emulate.direct_wgrad_fma(x, dy), ref)
                ratio = err / base
                cases.append(dict(seed=seed, dist=dist, length=prob.reduction_length, err=err, fma=base,
                                  ratio=ratio))
                worst = max(worst, ratio)
    return dict(form, key=f"{th.name}x{tw.name}", growth=worst, cases=cases)


#: FFT sizes (NH, NW) measured, each with a short filter: the worst case (direct's error grows with the
#: reduction, the transform's with the size, so the ratio is largest for the shortest filter a size holds)
FFT_FORMS = [((4, 4), (2, 2)), ((8, 8), (3, 3)), ((16, 16), (3, 3)), ((32, 32), (3, 3)), ((1, 16), (1, 2)),
             ((1, 64), (1, 3)), ((1, 256), (1, 3)), ((1, 1024), (1, 3))]


def measure_fft(nf: tuple[int, int], filt: tuple[int, int], quick: bool) -> dict:
    """The worst ratio of the FFT form's error to direct FMA's over channels (1, 4, 32), distributions
    and seeds: a forward correlation over several tiles a plane."""
    worst, cases = 0.0, []
    r, s = filt
    tile = (nf[0] - r + 1, nf[1] - s + 1)
    h, w = (1, 3 * tile[1] + s - 1) if nf[0] == 1 else (3 * tile[0] + r - 1, 3 * tile[1] + s - 1)
    for seed in ((0,) if quick else (0, 1)):
        for dist in DISTS:
            for c in ((1, 4) if quick else (1, 4, 32)):
                rng = np.random.default_rng(seed)
                x, wt = _draw(rng, dist, (2, c, h, w)), _draw(rng, dist, (4, c, r, s))
                prob = make_problem("forward", 2, c, h, w, 4, r, s)
                ref = reference.solve(prob, x, wt, None)
                err = rel_error(emulate.fft_conv(x, wt, nf), ref)
                base = rel_error(emulate.direct_fma(x, wt), ref)
                cases.append(dict(seed=seed, dist=dist, length=prob.reduction_length, err=err, fma=base,
                                  ratio=err / base))
                worst = max(worst, err / base)
    return dict(nf=list(nf), filter=list(filt), growth=worst, cases=cases)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="fewer forms, lengths and seeds (a smoke run)")
    args = ap.parse_args(argv)
    commit = _commit()
    out = args.out or ROOT / "results" / "transform_accuracy" / "cpu" / commit
    rows = [measure_winograd(f, args.quick) for f in winograd_forms(args.quick)]
    for row in rows:
        print(f"winograd {row['op']:<8} {row['key']:<16} {row['engine']:<7} {row.get('points', 'convlab'):<8} "
              f"growth {row['growth']:.3g}", flush=True)
    ffts = [measure_fft(nf, filt, args.quick) for nf, filt in FFT_FORMS]
    for row in ffts:
        print(f"fft {row['nf'][0]}x{row['nf'][1]} filter {row['filter'][0]}x{row['filter'][1]} growth "
              f"{row['growth']:.3g}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    device = f"cpu ({platform.processor() or platform.machine()}), numpy {np.__version__}"
    command = " ".join(["python tools/transform_accuracy.py", *(sys.argv[1:] if argv is None else argv)])
    meta = dict(commit=commit, date=datetime.date.today().isoformat(), device=device, command=command)
    (out / "accuracy.json").write_text(json.dumps(dict(meta, winograd=rows, fft=ffts), indent=1) + "\n")
    (out / "README.md").write_text(
        f"# Error growth of the transform convolutions\n\n- **Command**: `{meta['command']}`\n"
        f"- **Version**: convlab `{commit}`\n- **Date**: {meta['date']}\n- **Device**: {meta['device']}, float64 "
        "references, float32 emulation (convlab.kernels.transform.emulate)\n\n`accuracy.json`: per form, the "
        "largest ratio of its relative error to direct fp32 FMA's over the cases listed with it.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
