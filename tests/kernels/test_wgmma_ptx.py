"""The wgmma kernels compile for sm_90a on a machine without a GPU (tools/wgmma_ptx_check.py in a
process of its own, NUMBA_ENABLE_CUDASIM=0): wgmma.mma_async and its fences in the PTX, the dynamic
shared array aligned to 1024 bytes, no local memory; where ptxas is found, no spill and no warning (C7510
/ C7515: ptxas serialising the wgmma pipeline). Skipped when libNVVM cannot be loaded. The first f16
wgmma config (the largest: 128x256, 225 registers) and an f16 probe, ~15 s of compiling; the script's
``--configs all --probes`` checks every GPU config and probe (~5 minutes on one core)."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "wgmma_ptx_check.py")


def test_wgmma_kernels_compile_for_sm90a(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = tmp_path / "ptx.json"
    done = subprocess.run([sys.executable, SCRIPT, "--itypes", "f16", "--probes", "--probe-shapes", "64:128",
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode == 2:
        pytest.skip(done.stdout.strip()[-300:] or "NVVM unavailable")
    assert out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert len(rows) == 1 + 1 and done.returncode == 0, [r for r in rows if not r["ok"]]
    for row in rows:
        assert row["wgmma"] > 0 and row["wait"] > 0 and row["local"] == 0 and row["align1024"] > 0, row
        if result["ptxas"]:
            assert row["ptxas_rc"] == 0 and row["spill_stores"] == 0 and not row["warnings"], row
