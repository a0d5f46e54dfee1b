"""The runtime module: simulator chosen by itself, and the only importer of numba.cuda."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from convlab import runtime

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _sim_flag(env_value):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if env_value is not None:
        env["NUMBA_ENABLE_CUDASIM"] = env_value
    out = subprocess.run([sys.executable, "-c", "import convlab.runtime as r; print(r.SIMULATOR)"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_simulator_forced_by_environment():
    assert _sim_flag("1") is True


def test_simulator_chosen_without_gpu():
    assert _sim_flag(None) is (not runtime._driver_has_gpu())


def test_only_runtime_imports_numba_cuda():
    pattern = re.compile(r"^\s*(from\s+numba\s+import\s+cuda|import\s+numba\.cuda|from\s+numba\.cuda\b)",
                         re.M)
    offenders = [str(p.relative_to(ROOT)) for folder in ("convlab", "algorithms")
                 for p in (ROOT / folder).rglob("*.py")
                 if pattern.search(p.read_text()) and p.name != "runtime.py"]
    assert offenders == [], f"only convlab/runtime.py may import numba.cuda: {offenders}"


def test_time_ms_on_this_device():
    calls = []
    times = runtime.time_ms(lambda: calls.append(1), warmup=2, repeat=3)
    if runtime.SIMULATOR:
        assert times is None and len(calls) == 2
    else:
        assert len(times) == 3 and len(calls) == 5
