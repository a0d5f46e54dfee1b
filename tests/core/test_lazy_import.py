"""``numba.cuda`` loads on first use (convlab.runtime.state.load_numba_cuda): importing convlab or
convlab.torch, ``convlab --help`` and argument errors never import it (nor ``numba``); the first call
loads it and runs, on the simulator as on a GPU. Each check runs in a fresh interpreter. The import's
cost beside ``import numba.cuda`` is measured by tools/import_cost.py (results/import_cost/cpu)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from convlab import runtime

REPO = Path(__file__).resolve().parents[2]

LOADED = "{m: m in sys.modules for m in ('numba', 'numba.cuda')}"  # an expression: which are imported


def _fresh(code: str, tmp_path: Path, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter (the repository's root as its folder, an empty cache folder);
    its last output line, a JSON object, decoded."""
    full = dict(os.environ, CONVLAB_CACHE_DIR=str(tmp_path), CONVLAB_KERNEL_STORE="none", **env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_convlab_loads_no_numba(tmp_path):
    loaded = _fresh(f"import sys, json, convlab\nprint(json.dumps({LOADED}))", tmp_path)
    assert loaded == {"numba": False, "numba.cuda": False}


def test_import_convlab_torch_loads_no_numba(tmp_path):
    pytest.importorskip("torch")
    loaded = _fresh(f"import sys, json, convlab.torch\nprint(json.dumps({LOADED}))", tmp_path)
    assert loaded == {"numba": False, "numba.cuda": False}


def test_cli_help_loads_no_numba(tmp_path):
    code = f"""
        import contextlib, io, json, sys
        from convlab.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(["--help"])
            except SystemExit as exc:
                assert exc.code == 0, exc.code
        assert "usage: convlab" in out.getvalue(), out.getvalue()[:300]
        print(json.dumps({LOADED}))
    """
    assert _fresh(code, tmp_path) == {"numba": False, "numba.cuda": False}


def test_argument_errors_load_no_numba(tmp_path):
    code = f"""
        import json, sys
        import numpy as np
        import convlab
        x = np.zeros((1, 2, 5, 5), np.float32)
        errors = []
        for call in (lambda: convlab.conv2d(x, np.zeros((3, 2, 3), np.float32)),         # weight's rank
                     lambda: convlab.conv2d(x, np.zeros((3, 4, 3, 3), np.float32)),      # channels
                     lambda: convlab.conv2d(x, np.zeros((3, 2, 3, 3), np.int32)),        # dtype
                     lambda: convlab.conv2d(x, np.zeros((3, 2, 3, 3), np.float32), stride=0)):
            try:
                call()
            except (ValueError, TypeError) as exc:
                errors.append(type(exc).__name__)
        assert len(errors) == 4, errors
        print(json.dumps({LOADED}))
    """
    assert _fresh(code, tmp_path) == {"numba": False, "numba.cuda": False}


def test_torch_argument_error_loads_no_numba(tmp_path):
    pytest.importorskip("torch")
    code = f"""
        import json, sys
        import torch
        import convlab.torch as ct
        try:
            ct.conv2d(torch.zeros(1, 2, 5, 5), torch.zeros(3, 2, 3))
        except (RuntimeError, ValueError, TypeError) as exc:
            assert "weight" in str(exc), exc
        else:
            raise AssertionError("a 3-D weight was accepted by conv2d")
        print(json.dumps({LOADED}))
    """
    assert _fresh(code, tmp_path) == {"numba": False, "numba.cuda": False}


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator runs the first call")
def test_first_call_on_the_simulator_loads_numba_cuda_and_runs(tmp_path):
    code = f"""
        import json, sys
        import numpy as np
        import convlab
        from convlab import reference, runtime
        before = {LOADED}
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((1, 2, 5, 5), np.float32), rng.standard_normal((3, 2, 3, 3), np.float32)
        y = convlab.conv2d(x, w, padding=1)
        error = float(np.abs(y - reference.forward(convlab.problem_for('conv2d', x, w, padding=1), x, w)).max())
        print(json.dumps({{"before": before, "after": {LOADED}, "error": error, "mode": runtime.MODE,
                          "simulator_shared_locked": runtime.cuda.simulator.kernelapi.FakeCUDAShared._convlab_locked}}))
    """
    out = _fresh(code, tmp_path)
    assert out["before"] == {"numba": False, "numba.cuda": False}
    assert out["after"] == {"numba": True, "numba.cuda": True} and out["mode"] == "simulator"
    assert out["simulator_shared_locked"] is True and out["error"] < 1e-4


def test_first_tiny_call_compiles_one_kernel(tmp_path):
    """The first tiny call of the default mode asks for one kernel and times nothing: in the compile-only
    runtime the launches it collects (what Numba compiles on a GPU), on a GPU the runtime's own count
    (convlab.runtime.origin.counts)."""
    gpu = runtime.HAS_DEVICE
    code = f"""
        import json, sys
        import numpy as np
        import convlab
        from convlab import autotune, runtime
        from convlab.runtime import offline, origin
        before = {LOADED}
        x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
        if runtime.COMPILE_ONLY:
            with offline.collecting() as requests:
                convlab.conv2d(x, w, padding=1)
            kernels = len({{id(r.dispatcher) for r in requests}})
        else:
            convlab.conv2d(x, w, padding=1)
            kernels = origin.counts["compiled"]
        print(json.dumps({{"before": before, "mode": runtime.MODE, "kernels": kernels,
                          "timed": autotune.stats()["timed"]}}))
    """
    out = _fresh(code, tmp_path, **({} if gpu else {"CONVLAB_RUNTIME": "compile", "CONVLAB_TARGET": "sm_90"}))
    assert out["before"] == {"numba": False, "numba.cuda": False}
    assert out["mode"] == ("gpu" if gpu else "compile")
    assert out["kernels"] == 1 and out["timed"] == 0, out
