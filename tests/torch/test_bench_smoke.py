"""benchmarks/torch_wrapper_bench.py: refuses on the simulator without --allow-sim; with it, every case
runs (CPU tensors) and the JSON has device, versions and a median per case."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
from convlab import runtime  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "torch_wrapper_bench.py"


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator smoke test")
def test_torch_wrapper_bench_smoke(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    refused = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env,
                             timeout=120)
    assert refused.returncode == 2 and "needs a CUDA GPU" in refused.stderr
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--allow-sim", "--n", "1", "--batches", "1",
                           "--warmup", "0", "--algorithm", "direct", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["simulator"] is True and data["versions"]["torch"]
    cases = [f"{a}/{b}" for a, bs in (("forward", ("torch", "base_op", "eager", "eager_grad", "custom_op")),
                                       ("fwd_bwd", ("torch", "base_ops", "eager", "custom_op")),
                                       ("model_step", ("torch", "convlab"))) for b in bs]
    assert sorted(data["medians_us"]) == sorted(cases)
    assert all(v > 0 for v in data["medians_us"].values())
    for name in ("forward/base_op", "forward/eager", "forward/custom_op"):
        assert data["benchmark"][f"rel_err/{name}"] < 1e-5
