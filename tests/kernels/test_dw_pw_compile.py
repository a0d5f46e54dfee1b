"""The fused depthwise -> pointwise kernels compile for sm_90 without a GPU (tools/dw_pw_compile.py in a
compile-only process of its own): MobileNetV2's first pair in float16, NCHW and channels-last; where
ptxas is found, no spill. Skipped when numba-cuda's compiler libraries are missing."""
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "dw_pw_compile.py")


def test_dw_pw_kernels_compile_for_sm90_without_spills():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CONVLAB_RUNTIME"] = "compile"
    done = subprocess.run([sys.executable, SCRIPT, "--target", "sm_90", "--dtypes", "float16", "--cases", "1"],
                          env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode == 2 and "cannot find" in done.stdout:
        pytest.skip(done.stdout.strip()[-300:])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("sm_90")]
    assert len(rows) == 2 and all(row[5] == "0/0" for row in rows), done.stdout
    if "ptxas not found" not in done.stdout:
        assert all(0 < int(row[4]) <= 255 and int(row[6]) > 0 for row in rows), done.stdout
