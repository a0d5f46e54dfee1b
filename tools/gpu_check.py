"""The GPU check of convlab in one resumable script: the tests, the sanitizers, the user's path against
cuDNN, the cold start, the host cost, the GEMMs, the Hopper kernels (tools/hopper_check.py), the fused
epilogues and blocks against torch (benchmarks/fused_bench.py) and the transform plugins (winograd, fft)
against cuDNN, each step's files under results/ as it finishes.

    python tools/gpu_check.py --resume --budget 560           # on the GPU machine, from the repository root
    python tools/gpu_check.py --list                          # the steps, in order (no GPU needed)
    python tools/gpu_check.py --collect ARCHIVE.tgz           # here: unpack a call's results, list them in runs.json

Steps run in the order of :func:`steps` (tests and sanitizers first, then the measurements); a step writes
``results/<what>/<device>/<commit>/`` (its logs, JSON, a README naming command, version, date and device,
and ``gpu_check.json``: each job's exit status and seconds). ``--resume`` skips a step whose folder says it
finished; an ``auto`` step cut by the budget keeps its rows and the next call measures the rest
(``convlab bench auto --resume``). A step starts only while ``--budget`` leaves it its ``least`` seconds, so a
call ends inside the device's 10-minute limit; ``--archive FILE`` packs every folder this call wrote.

Each ``auto`` step (``convlab bench auto``) first fills the disk kernel cache of its ``--cache-dir`` in
parallel processes (``--shard``, no timings), then measures in one process alone on the GPU with that
cache: the tuner's default pick through the public op on torch CUDA tensors against cuDNN interleaved,
both layouts, every output (the last timed call's too) checked against float64.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SUITES_FIRST, SUITES_THEN = ("resnet50", "mobilenetv2"), ("burn", "efficientnet_b0", "resnext50", "unet3d",
                                                          "r2plus1d_18", "wavenet")
DTYPES_FIRST = ("float16", "bfloat16", "float32")
FILL, CACHE = "/tmp/gpu_check_fill", "/tmp/gpu_check_cache"  # an auto step's fill logs; its kernel cache
STORE = "/tmp/gpu_check_store"  # the cold start's kernel store: the default mode's picks, built on the CPUs


@dataclass
class Job:
    """One process of a step: its argv, its log (under the step's folder), its own time limit."""
    name: str
    argv: list[str]
    limit: int
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Step:
    """A step: jobs run side by side (``fill`` first, untimed, then ``jobs``); ``done`` names the file
    whose presence means it finished; ``least``: seconds it needs to be worth starting. An ``untimed``
    step (tests, sanitizers) runs beside the next untimed ones; a timed step waits until they end."""
    name: str
    what: str
    about: str
    jobs: list[Job]
    done: str
    least: int
    fill: list[Job] = field(default_factory=list)
    untimed: bool = False


def auto_step(suite: str, token: str, workers: int) -> Step:
    """``convlab bench auto`` on one suite and dtype under the default tuning mode (heuristic: the cost
    model's pick, nothing timed before the first call): ``workers`` processes fill the disk kernel cache
    (``--shard``, one sample), then one process measures alone on the GPU with that cache."""
    stem = f"auto_{suite}_{token.replace('+', '_')}"
    common = [PY, "-m", "convlab.cli", "bench", "auto", "--suite", suite, "--dtypes", token, "--modes", "heuristic",
              "--no-oracle", "--layouts", "nchw,channels_last", "--cache-dir", f"{CACHE}/{stem}"]
    fill = [Job(f"{stem}.fill{i}", [*common, "--repeat", "1", "--shard", f"{i}/{workers}", "--out",
                                    f"{FILL}/{stem}_{i}"], 240) for i in range(workers)]
    return Step(f"auto/{suite}/{token}", "auto_bench",
                f"`algorithm=\"auto\"` (default mode heuristic) on {suite} in {token} against cuDNN, both layouts",
                [Job(stem, [*common, "--repeat", "10", "--resume", "--out", f"{{dir}}/{stem}"], 600)],
                f"{stem}.md", 120, fill)


def transform_steps(workers: int) -> list[Step]:
    """winograd and fft against cuDNN and the exact plugins (``convlab bench``: every config, checked first),
    then the tuner's pick with them in reach (``convlab bench auto``), in exact float32 (precision "highest")."""
    exact = "winograd,fft,implicit_gemm,tf32x3,im2col,col2im,depthwise"
    out = []
    for suite, about in (("resnet50_3x3", "ResNet-50's 3x3 stride-1 layers in exact float32"),
                         ("large_kernels", "the large-kernel layers (ConvNeXt 7x7 depthwise, 1D 31- to 80-tap)")):
        stem = f"transform_{suite}"
        out.append(Step(f"transform/{suite}", "bench", f"winograd and fft against cuDNN and the exact plugins on "
                        f"{about}: every config", [Job(stem, [PY, "-m", "convlab.cli", "bench", "--suite", suite,
                                                               "--plugins", exact, "--all-configs", "--repeat", "10",
                                                               "--out", "{dir}", "--name", stem], 590)],
                        f"{stem}.json", 200))
        out.append(auto_step(suite, "float32", workers))
    return out


def steps(workers: int) -> list[Step]:
    pytest = [PY, "-m", "pytest", "-n", "13", "-v", "-rfE", "-p", "no:benchmark", "-p", "no:cacheprovider",
              "--junitxml={dir}/gpu-tests.xml", "tests"]
    san = ["compute-sanitizer", "--report-api-errors", "no", "--print-limit", "20"]
    out = [Step("tests", "tests", "the test suite on real CUDA at the convlab-gpu hypothesis profile",
                [Job("gpu-tests", pytest, 560, {"CONVLAB_HYPOTHESIS_PROFILE": "convlab-gpu",
                                                 "CONVLAB_FAILURE_LOG": "{dir}/failures.log"})],
                "gpu-tests.xml", 300, untimed=True),
           Step("sanitize", "sanitizer", "compute-sanitizer memcheck and racecheck on tools/sanitize_cases.py "
                "(every plugin, op, dtype and N it claims)",
                [Job("memcheck", [*san, "--tool", "memcheck", PY, "tools/sanitize_cases.py"], 500),
                 Job("racecheck", [*san, "--tool", "racecheck", PY, "tools/sanitize_cases.py"], 500,
                     {"SANITIZE_CONFIGS": "1"})], "memcheck.log", 200, untimed=True)]
    out += [auto_step(s, t, workers) for s in SUITES_FIRST for t in DTYPES_FIRST]
    out += [Step("coldstart", "autotune_cold_start", "one training step of ResNet-50 and MobileNetV2 from "
                 "empty caches in the default mode (heuristic), without and with a kernel store of its picks, beside cuDNN with cudnn.benchmark on and off, fresh processes",
                 [Job("step", [PY, "benchmarks/cold_start.py", "gpu", "--suite", "resnet50", "--suite",
                               "mobilenetv2", "--dtype", "float16", "--timeout", "200", "--modes",
                               "heuristic,cudnn.benchmark=True,cudnn.benchmark=False",
                               "--store", STORE, "--out", "{dir}/step_float16"], 590)], "step_float16.md", 300,
                 [Job("store", [PY, "-m", "convlab.cli", "compile", "--picks", "--no-samples", "--suite", "resnet50",
                                "--suite", "mobilenetv2", "--dtypes", "float16", "--target", "sm_90", "--brief",
                                "--quiet", "--store", STORE, "--json", "{dir}/store_compile.json"], 240)]),
            Step("host", "overhead", "host cost per call of the public ops on a tiny layer against PyTorch",
                 [Job("overhead", [PY, "benchmarks/overhead_bench.py", "--out", "{dir}/overhead.json"], 300)],
                 "overhead.json", 120),
            Step("gemm", "tc_gemm", "the tensor-core GEMM at 4096^3 in fp16, bf16 and TF32 against cuBLAS",
                 [Job("tc_gemm", [PY, "benchmarks/gemm_bench.py", "--itypes", "f16", "bf16", "tf32", "--configs",
                                  "mma", "--out", "{dir}/tc_gemm.json"], 300)], "tc_gemm.json", 120),
            Step("hopper", "hopper", "tools/hopper_check.py: the Hopper probes, tma_wgmma on ResNet-50 / Burn layers "
                 "(each op and dtype) against float64, then timed against cuDNN channels-last (sm_90 only)",
                 [Job("hopper_check", [PY, "tools/hopper_check.py", "--resume", "--budget", "420", "--out",
                                       "{dir}/check"], 560)], "check/complete", 300),
            Step("fused", "fused", "benchmarks/fused_bench.py: ResNet-50 and MobileNetV2 block stacks forward and "
                 "train, convlab fused epilogues and blocks against convlab unfused, torch eager and torch.compile",
                 # train first: its float32 x.grad check along each call's activation masks (fused_check.py) is
                 # unmeasured; results/fused/h100/cdf96a4 failed 4 float32 train cases on the plain reference
                 [Job("fused_bench", [PY, "benchmarks/fused_bench.py", "--modes", "train,forward", "--resume",
                                      "--budget", "380", "--out", "{dir}"], 500)], "complete", 240),
            Step("fused/profile", "fused_profile", "benchmarks/fused_profile.py: where the fused stacks' time "
                 "goes, fused beside unfused: GPU and host ms per step, torch.profiler's kernels, cProfile",
                 # forward in both layouts: ResNet-50's 56x56x256 float16 NCHW stack ran slower fused than
                 # unfused (results/fused/h100/65f736e: 1.100 against 0.927 ms), its channels-last one faster
                 [Job("fused_profile", [PY, "benchmarks/fused_profile.py", "--modes", "forward", "--layouts",
                                        "nchw,channels_last", "--out", "{dir}/profile.md"], 420)], "profile.complete", 180),
            Step("fused/profile/train", "fused_profile", "benchmarks/fused_profile.py --modes train: where a "
                 "training step's time goes, convlab (its calls bound: convlab.torch.bound_calls) beside its "
                 "whole path",
                 # convlab trained 0.59-0.98x torch eager in float16 (results/fused/h100/cdf96a4); host cost
                 # of a training step unmeasured
                 [Job("fused_profile_train", [PY, "benchmarks/fused_profile.py", "--modes", "train", "--layouts",
                                              "nchw,channels_last", "--out", "{dir}/train.md"], 420)],
                 "train.complete", 180),
            Step("profile/layers", "layer_profile", "benchmarks/layer_profile.py: where single layers' time goes, "
                 "the tuner's pick beside cuDNN: torch.profiler's kernels of each call",
                 # the ResNet-50 float16 layers furthest behind cuDNN (results/auto_bench/h100/65f736e: wgrad
                 # 0.30-0.41 of cuDNN at 0.12-0.14 ms whatever the layer's size)
                 [Job("layer_profile", [PY, "benchmarks/layer_profile.py", "--suite", "resnet50", "--labels",
                                        "c4 3x3,c5 1x1 reduce (first),c2 3x3,c3 3x3 s2", "--ops", "wgrad,forward",
                                        "--out", "{dir}/layers.md"], 300)], "layers.complete", 120)]
    out += [auto_step(s, t, workers) for s in SUITES_THEN for t in DTYPES_FIRST]
    out += transform_steps(workers)
    out += [auto_step(s, "float32+high", workers) for s in SUITES_FIRST + SUITES_THEN]
    return out


def git_commit() -> str:
    env = os.environ.get("CONVLAB_COMMIT")
    if env:
        return env[:7]
    try:
        return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("no git here: pass --commit (the commit this tree is)") from None


def device_tag() -> str:
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        raise SystemExit("no GPU here (nvidia-smi failed): this script runs on a GPU machine") from None
    for tag in ("h200", "h100", "a100"):
        if tag in name.lower():
            return tag
    return "".join(c for c in name.lower() if c.isalnum()) or "gpu"


def versions() -> str:
    code = ("import json, numba, numpy, convlab; from numba import cuda; import torch; "
            "print(json.dumps({'numba': numba.__version__, 'numba-cuda': getattr(cuda, '__version__', '?'), "
            "'numpy': numpy.__version__, 'convlab': convlab.__version__, 'torch': torch.__version__, "
            "'cudnn': torch.backends.cudnn.version(), 'device': torch.cuda.get_device_name()}))")
    got = subprocess.run([PY, "-c", code], cwd=ROOT, capture_output=True, text=True)
    return got.stdout.strip() or got.stderr.strip()[-300:]


def write_readme(folder: Path, step: Step, commit: str, tag: str, vers: str, record: dict) -> None:
    cmds = "\n".join(f"  - `{' '.join(a.replace(PY, 'python') for a in j['argv'])}`" for j in record["jobs"])
    lines = [f"# {step.what}: {tag}, convlab `{commit}`: {step.about}", "",
             f"- **What**: {step.about} (`tools/gpu_check.py`, step `{step.name}`).",
             f"- **Command**: `python tools/gpu_check.py --steps '{step.name}'`, which ran\n{cmds}",
             f"- **Version**: convlab at commit `{commit}`; {vers}.",
             f"- **Date**: recorded {datetime.date.today().isoformat()}.",
             f"- **Device**: one NVIDIA {tag.upper()} (the device field of each JSON and versions above).",
             f"- **Status**: {record['status']}; per job: " + ", ".join(
                 f"{j['name']} rc={j['rc']} in {j['seconds']:.0f} s" for j in record["jobs"]) + "."]
    (folder / "README.md").write_text("\n".join(lines) + "\n")


def start_jobs(jobs: list[Job], folder: Path, deadline: float, logs: Path | None = None) -> list[tuple]:
    """Start ``jobs`` side by side, each under min(its limit, the time left). Logs go to ``logs``
    (default: the step's folder)."""
    procs = []
    for job in jobs:
        argv = [a.replace("{dir}", str(folder)) for a in job.argv]
        limit = max(1, min(job.limit, int(deadline - time.time())))
        (logs or folder).mkdir(parents=True, exist_ok=True)
        log = open((logs or folder) / f"{job.name}.log", "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1", CONVLAB_KERNEL_CACHE="1",
                   **{k: v.replace("{dir}", str(folder)) for k, v in job.env.items()})
        procs.append((job, argv, time.time(), log,
                      subprocess.Popen(["timeout", "-k", "10", str(limit), *argv], cwd=ROOT, env=env,
                                       stdout=log, stderr=subprocess.STDOUT)))
    return procs


def wait_jobs(procs: list[tuple]) -> list[dict]:
    """Each started job's exit status and seconds (124 / 137: cut by its time limit)."""
    out = []
    for job, argv, t0, log, proc in procs:
        rc = proc.wait()
        log.close()
        out.append({"name": job.name, "argv": argv, "rc": rc, "seconds": round(time.time() - t0, 1),
                    "cut": rc in (124, 137)})
    return out


def summarize(step: Step, folder: Path) -> str:
    """One line: the test counts and failures, the sanitizer summaries, the Hopper cases, the fused
    benchmark's rows or the rows of an auto step, by status."""
    if step.what == "tests" and (folder / "gpu-tests.xml").exists():
        import xml.etree.ElementTree as ET
        suite = ET.parse(folder / "gpu-tests.xml").getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        bad = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
               if c.find("failure") is not None or c.find("error") is not None]
        return (f"tests {suite.get('tests')} failures {suite.get('failures')} errors {suite.get('errors')} "
                f"skipped {suite.get('skipped')}" + (": " + "; ".join(bad[:8]) if bad else ""))
    if step.what == "sanitizer":
        got = []
        for tool in ("memcheck", "racecheck"):
            log = folder / f"{tool}.log"
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            got.append(f"{tool}: " + " | ".join(l.strip() for l in text if "SUMMARY" in l or " runs, " in l))
        return "; ".join(got)
    by_status = lambda rows: {s: sum(r["status"] == s for r in rows) for s in {r["status"] for r in rows}}  # noqa: E731
    if step.what == "hopper" and (folder / "check" / "summary.json").exists():
        rows = json.loads((folder / "check" / "summary.json").read_text())["cases"]
        return f"hopper_check: {len(rows)} cases {by_status(rows)}"
    if step.what == "fused" and (folder / "fused.json").exists():
        rows = json.loads((folder / "fused.json").read_text())["rows"]
        return (f"fused_bench: {len(rows)} rows, {sum(r['passed'] for r in rows)} checked, "
                f"{sum('error' in r for r in rows)} errors")
    for js in folder.glob("auto_*.json"):
        rows = json.loads(js.read_text())["rows"]
        return f"{js.stem}: {len(rows)} rows {by_status(rows)}"
    return ", ".join(p.name for p in sorted(folder.iterdir()))[:200]


def collect(archive: Path) -> None:
    """Unpack a call's archive into results/ and list its new folders in results/runs.json."""
    with tarfile.open(archive) as tar:
        tar.extractall(ROOT, filter="data")
        folders = sorted({"/".join(Path(n).parts[1:4]) for n in tar.getnames() if len(Path(n).parts) > 4})
    runs_path = ROOT / "results" / "runs.json"
    runs = json.loads(runs_path.read_text())
    listed = {r["folder"] for r in runs["folders"]}
    for f in folders:
        if f not in listed:
            what, dev, commit = f.split("/")
            runs["folders"].append({"folder": f, "what": what, "device": dev, "commit": commit, "run": 1,
                                    "date": datetime.date.today().isoformat()})
    runs_path.write_text(json.dumps(runs, indent=1) + "\n")
    print("\n".join(folders))


def ensure_installed() -> None:
    """An editable install of this checkout when ``convlab.algorithms`` does not import (the built-in
    plugins live in ``algorithms/``, mapped by the install: a checkout on PYTHONPATH alone lacks them)."""
    probe = subprocess.run([PY, "-c", "import convlab.algorithms"], cwd=ROOT, capture_output=True)
    if probe.returncode:
        subprocess.run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", "."],
                       cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="*", help="comma-separated step names or globs, run in that order (a glob's steps in --list order; "
                         "default: all)")
    ap.add_argument("--resume", action="store_true", help="skip the steps whose folder says they finished")
    ap.add_argument("--budget", type=int, default=560, help="seconds this call may take (start no step after)")
    ap.add_argument("--workers", type=int, default=8, help="processes that fill the kernel cache of an auto step")
    ap.add_argument("--commit", default=None, help="the commit measured (default: git's HEAD)")
    ap.add_argument("--archive", default=None, help="pack the folders this call wrote into this .tgz")
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--collect", default=None, help="unpack an archive into results/ (on your machine)")
    args = ap.parse_args(argv)
    if args.collect:
        collect(Path(args.collect))
        return 0
    wanted = [s.strip() for s in args.steps.split(",") if s.strip()]
    known = steps(args.workers)  # run in the order --steps names them (a glob's matches in --list order)
    plan = list({s.name: s for w in wanted for s in known if fnmatch.fnmatch(s.name, w)}.values())
    if args.list:
        print("\n".join(f"{s.name:28s} results/{s.what}/  ({s.about})" for s in plan))
        return 0
    if not plan:
        raise SystemExit(f"--steps {args.steps!r} matches no step; --list shows them")
    t_end, commit, tag = time.time() + args.budget, args.commit or git_commit(), device_tag()
    os.environ["CONVLAB_COMMIT"] = commit  # the benchmarks record this commit, not the copy's git HEAD
    ensure_installed()
    vers, wrote, report, pending = versions(), [], [], []

    def finish(step: Step, folder: Path, fill: list[dict], jobs: list[dict]) -> None:
        finished = (folder / step.done).exists() and not any(j["cut"] or j["rc"] in (-9, -15) for j in jobs)
        record = {"step": step.name, "status": "finished" if finished else "cut by the budget, to resume",
                  "fill": fill, "jobs": jobs, "versions": vers}
        (folder / "gpu_check.json").write_text(json.dumps(record, indent=1))
        write_readme(folder, step, commit, tag, vers, record)
        wrote.append(folder)
        report.append((step.name, record["status"], summarize(step, folder)))

    def drain() -> None:
        while pending:
            step, folder, procs = pending.pop(0)
            finish(step, folder, [], wait_jobs(procs))

    for step in plan:
        folder = ROOT / "results" / step.what / tag / commit
        if args.resume and (folder / step.done).exists():
            report.append((step.name, "done earlier", summarize(step, folder)))
            continue
        if not step.untimed:
            drain()  # nothing else on the GPU while it is timed
        if t_end - time.time() < step.least:
            report.append((step.name, "not started (budget)", ""))
            continue
        folder.mkdir(parents=True, exist_ok=True)
        print(f"[{time.strftime('%H:%M:%S')}] {step.name}", flush=True)
        if step.untimed:
            pending.append((step, folder, start_jobs(step.jobs, folder, t_end)))
            continue
        fill = wait_jobs(start_jobs(step.fill, folder, min(t_end - 60, time.time() + 240),
                                    Path(FILL))) if step.fill else []
        finish(step, folder, fill, wait_jobs(start_jobs(step.jobs, folder, t_end)))
    drain()
    print(f"\n{'step':28s} {'status':30s} summary")
    for name, status, line in report:
        print(f"{name:28s} {status:30s} {line}")
    if args.archive:
        with tarfile.open(args.archive, "w:gz") as tar:
            for folder in wrote:
                tar.add(folder, arcname=str(folder.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
