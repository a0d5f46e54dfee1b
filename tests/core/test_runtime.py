"""The runtime (convlab.runtime.device): simulator chosen by itself, and the only importer of numba.cuda
(convlab.runtime.state)."""
import os
import pathlib
import re
import subprocess
import sys

import time

import numpy as np
import pytest
from numba import float32

from convlab import runtime
from convlab.runtime import arrays, cuda, device

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
    assert _sim_flag(None) is (not device._driver_has_gpu())


def test_only_runtime_imports_numba_cuda():
    pattern = re.compile(r"^\s*(from\s+numba\s+import\s+cuda|import\s+numba\.cuda|from\s+numba\.cuda\b)",
                         re.M)
    offenders = [str(p.relative_to(ROOT)) for folder in ("convlab", "algorithms")
                 for p in (ROOT / folder).rglob("*.py")
                 if pattern.search(p.read_text()) and p != ROOT / "convlab" / "runtime" / "state.py"]
    assert offenders == [], f"only convlab/runtime/state.py may import numba.cuda: {offenders}"


def test_time_ms_on_this_device():
    calls = []
    times = runtime.time_ms(lambda: calls.append(1), warmup=2, repeat=3)
    if runtime.SIMULATOR:
        assert times is None and len(calls) == 2
    else:
        assert len(times) == 3 and len(calls) == 5


@runtime.jit
def _shared_round_trip(out):
    sa = cuda.shared.array(32, float32)
    sb = cuda.shared.array(32, float32)
    t = cuda.threadIdx.x
    sa[t] = t
    sb[t] = 2 * t
    cuda.syncthreads()
    bad = 0
    for i in range(32):
        if sa[i] != i or sb[i] != 2 * i:
            bad += 1
    out[t] = bad


@pytest.mark.skipif(not runtime.SIMULATOR, reason="simulator allocation race")
def test_simulator_threads_of_a_block_share_one_shared_array(monkeypatch):
    """A slow allocation (sleeping, so other threads run meanwhile) must not give threads private copies
    of a shared array: numba-cuda 0.30.4's unlocked lookup-then-allocate did, about once per few hundred
    launches (garbage reads in the first block), every time with this slowdown."""
    empty = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.002)
        return empty(*args, **kwargs)

    out = runtime.to_device(np.full(32, -1, np.int32))
    monkeypatch.setattr(np, "empty", slow_empty)
    _shared_round_trip[1, 32](out)
    monkeypatch.undo()
    assert not out.copy_to_host().any()


def test_bfloat16_travels_as_uint16_bits():
    """Numba's host copies need the buffer protocol, which ml_dtypes' bfloat16 (typecode 'E') lacks
    (H200: "cannot include dtype 'E' in a buffer"): runtime's copies move its uint16 bits instead."""
    import ml_dtypes

    assert arrays._bits_dtype(ml_dtypes.bfloat16) == np.dtype(np.uint16)
    assert arrays._bits_dtype(np.float16) is None and arrays._bits_dtype(np.float32) is None
    host = np.random.default_rng(0).standard_normal(7).astype(ml_dtypes.bfloat16)
    dev = runtime.to_device(host)
    assert np.array_equal(runtime.to_host(dev).view(np.uint16), host.view(np.uint16))
    runtime.copy_into(dev, host[::-1].copy())
    assert np.array_equal(runtime.to_host(dev).view(np.uint16), host[::-1].view(np.uint16))


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's stand-in of an inline-PTX intrinsic")
def test_an_inline_ptx_intrinsic_raises_when_called_on_the_simulator():
    from convlab.kernels.arch import mma_ptx, wgmma_ptx

    with pytest.raises(NotImplementedError, match="mma_ptx.to_tf32 is inline PTX"):
        mma_ptx.to_tf32(1.0)
    with pytest.raises(NotImplementedError, match="wgmma_ptx.wgmma_commit is inline PTX"):
        wgmma_ptx.wgmma_commit()
