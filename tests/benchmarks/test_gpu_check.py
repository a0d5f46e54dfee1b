"""tools/gpu_check.py: ``--list`` runs without a GPU, and every job of every step names a script the
repository has, with arguments that script's parser accepts (``convlab bench`` and ``convlab bench auto``
through the CLI's, tools/hopper_check.py through its ``--list``, benchmarks/fused_bench.py through its
parser)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from convlab.cli.parser import build_parser

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu_check.py"


def _load(path: Path):
    """The script at ``path`` as a module, its folder first on sys.path as when it runs (its siblings
    import)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.fixture(scope="module")
def gpu_check():
    return _load(SCRIPT)


def test_list_runs_without_a_gpu():
    done = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "auto/resnet50/float16" in done.stdout and "results/auto_bench/" in done.stdout


def test_every_job_names_a_script_here_with_arguments_it_takes(gpu_check):
    parser = build_parser()
    for step in gpu_check.steps(workers=2):
        for job in step.fill + step.jobs:
            argv = [a.replace("{dir}", "/tmp/x") for a in job.argv]
            if argv[1:4] == ["-m", "convlab.cli", "bench"]:
                args = parser.parse_args(argv[3:])
                assert args.func.__name__ in ("cmd_bench_auto", "cmd_bench"), job.name
                continue
            script = next((a for a in argv if a.endswith(".py") and "/" in a), None)
            if script is None:  # pytest, compute-sanitizer on a listed script: checked below
                continue
            assert (REPO / script).is_file(), f"{job.name}: {script} is not in the repository"
    benchmarks = {"benchmarks/cold_start.py", "benchmarks/overhead_bench.py", "benchmarks/gemm_bench.py",
                  "benchmarks/fused_bench.py", "benchmarks/fused_profile.py", "benchmarks/layer_profile.py"}
    used = {a for s in gpu_check.steps(workers=1) for j in s.jobs for a in j.argv if a.startswith("benchmarks/")}
    assert used == benchmarks
    gemm = next(j.argv for s in gpu_check.steps(workers=1) for j in s.jobs if "benchmarks/gemm_bench.py" in j.argv)
    module = _load(REPO / "benchmarks" / "gemm_bench.py")
    with pytest.raises(SystemExit) as help_exit:  # its parser knows every option the step passes
        module.main([a.replace("{dir}", "/tmp/x") for a in gemm[2:]] + ["--help"])
    assert help_exit.value.code == 0


def test_hopper_step_runs_the_hopper_check_with_arguments_it_takes(gpu_check, tmp_path):
    """The step's job parses in tools/hopper_check.py (``--list`` after them: no GPU needed), it counts as
    finished only once hopper_check marks its cases complete, and its summary counts them by status."""
    step = next(s for s in gpu_check.steps(workers=1) if s.name == "hopper")
    (job,) = step.jobs
    argv = [a.replace("{dir}", str(tmp_path)) for a in job.argv]
    assert argv[1] == "tools/hopper_check.py" and "--resume" in argv
    done = subprocess.run([*argv, "--list"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and "check/resnet50/" in done.stdout and "time/burn/" in done.stdout, done.stderr
    out = Path(argv[argv.index("--out") + 1])
    assert out / "complete" == tmp_path / step.done
    hopper = _load(REPO / "tools" / "hopper_check.py")
    (out / "cases").mkdir(parents=True)
    for cid, status in (("a", "ok"), ("b", "failed"), ("c", "ok")):
        (out / "cases" / f"{cid}.json").write_text(f'{{"id": "{cid}", "status": "{status}"}}')
    hopper.summarise(out, True)
    assert not (tmp_path / step.done).exists()
    line = gpu_check.summarize(step, tmp_path)
    assert line.startswith("hopper_check: 3 cases") and "'ok': 2" in line and "'failed': 1" in line, line
    hopper.summarise(out, False)
    assert (tmp_path / step.done).exists()


def test_steps_run_in_the_order_named_and_a_glob_in_list_order(gpu_check, capsys):
    assert gpu_check.main(["--steps", "fused,auto/mobilenetv2/float16,fused,auto/*/bfloat16", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    order = [s.name for s in gpu_check.steps(workers=1)]
    globbed = [n for n in order if n.startswith("auto/") and n.endswith("/bfloat16")]
    assert names == ["fused", "auto/mobilenetv2/float16", *globbed] and len(globbed) > 1


def test_fused_step_follows_hopper_and_runs_the_fused_bench_with_arguments_it_takes(gpu_check, tmp_path):
    """Right after ``hopper``; its job parses in benchmarks/fused_bench.py, whose own budget ends before the
    job's limit; finished once the bench marks every case done; its summary counts the rows."""
    order = [s.name for s in gpu_check.steps(workers=1)]
    assert order.index("fused") == order.index("hopper") + 1
    step = next(s for s in gpu_check.steps(workers=1) if s.name == "fused")
    (job,) = step.jobs
    argv = [a.replace("{dir}", str(tmp_path)) for a in job.argv]
    assert argv[1] == "benchmarks/fused_bench.py" and "--resume" in argv and step.what == "fused"
    assert argv[argv.index("--out") + 1] == str(tmp_path) and step.done == "complete"
    assert float(argv[argv.index("--budget") + 1]) + 60 <= job.limit
    module = _load(REPO / "benchmarks" / "fused_bench.py")
    with pytest.raises(SystemExit) as help_exit:
        module.main(argv[2:] + ["--help"])
    assert help_exit.value.code == 0
    rows = [{"passed": True}, {"passed": False, "error": "RuntimeError: x"}, {"passed": False}]
    (tmp_path / "fused.json").write_text(json.dumps({"rows": rows}))
    assert gpu_check.summarize(step, tmp_path) == "fused_bench: 3 rows, 1 checked, 1 errors"


def _profile_job(gpu_check, name: str, script: str, done: str):
    """(argv, module) of the one job of profiling step ``name``: it runs ``script``, the step is done at
    ``done``, and the script's parser takes every argument the job passes (``--help`` after them)."""
    step = next(s for s in gpu_check.steps(workers=1) if s.name == name)
    (job,) = step.jobs
    argv = [a.replace("{dir}", "/tmp/x") for a in job.argv]
    assert argv[1] == script and step.done == done
    module = _load(REPO / script)
    with pytest.raises(SystemExit) as help_exit:
        module.main(argv[2:] + ["--help"])
    assert help_exit.value.code == 0
    return argv, module


def _refuses(module, argv) -> None:
    """The script exits 2 (argparse's error) on a machine without CUDA, before any work."""
    with pytest.raises(SystemExit) as refused:
        module.main(argv[2:])
    assert refused.value.code == 2


def test_fused_profile_step_follows_fused_with_arguments_its_script_takes(gpu_check):
    """Right after ``fused``; its job parses in benchmarks/fused_profile.py (``--help`` after them), which
    refuses a machine without CUDA; the step is done once the script marks every case profiled."""
    order = [s.name for s in gpu_check.steps(workers=1)]
    assert order.index("fused/profile") == order.index("fused") + 1
    argv, module = _profile_job(gpu_check, "fused/profile", "benchmarks/fused_profile.py", "profile.complete")
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        _refuses(module, argv)


def test_layer_profile_step_names_suite_layers_and_refuses_a_machine_without_cuda(gpu_check):
    """Its job parses in benchmarks/layer_profile.py; every label it names is a layer of its suite; without
    a CUDA device the script refuses (exit 2) before any work; done once every case is profiled."""
    argv, module = _profile_job(gpu_check, "profile/layers", "benchmarks/layer_profile.py", "layers.complete")
    from convlab.bench.suite import load_suite

    opts = dict(zip(argv[2::2], argv[3::2]))
    labels = {e.label for e in load_suite(opts["--suite"]).entries}
    assert set(opts["--labels"].split(",")) <= labels
    from convlab.bench.user_calls import Side

    if not Side().gpu:
        _refuses(module, argv)
