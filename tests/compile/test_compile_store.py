"""convlab compile --store: each compiled kernel's cubin filed under the key the runtime computes at its
launch on a GPU of the target's arch (convlab.compile.store, convlab.runtime.kernel_store)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convlab.cli.parser import main
from convlab.compile import toolchain
from convlab.compile.assemble import ptxas_path
from convlab.runtime import kernel_store

HERE = Path(__file__).resolve().parent
needs_cubins = pytest.mark.skipif(bool(toolchain.missing()) or not ptxas_path(),
                                  reason="numba-cuda's compiler libraries and ptxas (pip install 'convlab[compile]')")


@needs_cubins
def test_the_store_holds_every_kernels_cubin_under_the_key_the_runtime_computes(direct_report, direct_store):
    rows = direct_report.rows
    keys = {t: {r.get("store_key") for r in rows if r.target == t} for t in ("sm_80", "sm_90")}
    assert all(r.get("stored") for r in rows) and None not in keys["sm_80"] | keys["sm_90"]
    assert keys["sm_80"].isdisjoint(keys["sm_90"])  # the arch is part of the key
    files, size = kernel_store.entries(direct_store)
    assert files == len(rows) and size > sum(r.get("stored") for r in rows)
    for key in keys["sm_90"]:
        name, cubin = kernel_store.load(key, direct_store)
        assert cubin[:4] == b"\x7fELF" and name.startswith("_Z")
    env = dict(os.environ, CONVLAB_RUNTIME="compile", NUMBA_ENABLE_CUDASIM="0")
    child = subprocess.run([sys.executable, str(HERE / "store_keys.py"), "direct", "float32"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen["arch"] == "sm_90a" and seen["same_types"] and seen["cases"] > 0
    assert set(seen["keys"]) == keys["sm_90"]  # a 9.0 GPU's launches find every kernel in the store


def test_a_gpus_launches_have_the_keys_the_named_target_files_them_under():
    """Host code only (no compiler needed): on a 9.0 GPU of 114 SMs (not the named sm_90's 132), the
    tensor-core and implicit GEMM plugins launch exactly the kernels, by key, that a store for sm_90 holds."""
    env = dict(os.environ, CONVLAB_RUNTIME="compile", NUMBA_ENABLE_CUDASIM="0")
    child = subprocess.run([sys.executable, str(HERE / "store_keys.py"), "tma_wgmma,implicit_gemm", "float16", "114"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen["same_types"] and len(seen["keys"]) > 5 and seen["keys"] == seen["stored"]


def test_store_needs_a_directory_and_ptxas(tmp_path, monkeypatch, capsys):
    from convlab.compile import make_spec

    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="store must be a directory"):
        make_spec(["sm_90"], store=str(tmp_path / "file"))
    assert make_spec(["sm_90"], store="~/s")["store"] == os.path.expanduser("~/s")
    monkeypatch.setattr(toolchain, "missing", lambda: ())
    monkeypatch.setenv("CONVLAB_PTXAS", "none")
    ptxas_path.cache_clear()
    try:
        assert main(["compile", "--plugins", "direct", "--store", str(tmp_path / "s")]) == 1
    finally:
        ptxas_path.cache_clear()
    assert "--store needs ptxas" in capsys.readouterr().err
