"""The thin launch's parameter packing (convlab.runtime.thin), checkable without a GPU.

Every parameter of a packed launch must live in memory the record owns (no ctypes temporaries behind
the ``void**``), carry exactly the value and width Numba's own ``_prepare_args`` gives it, and a replay
must patch only the data-pointer slots. The comparison with Numba's packer runs in a child process
with the simulator off (Numba's real ``_Kernel._prepare_args`` on device arrays over fake memory)."""
import ctypes
import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numba.core import types as T

from convlab import runtime
from convlab.runtime import thin

# (Numba type, value) of every scalar kind the plugin kernels pass, and the ctypes type they take
SCALARS = [(T.uint32, np.uint32(4000000000), ctypes.c_uint32), (T.int32, np.int32(-3), ctypes.c_int32),
           (T.int64, np.int64(-9), ctypes.c_int64), (T.int64, 5, ctypes.c_int64),
           (T.float32, np.float32(2.5), ctypes.c_float), (T.float64, 1.5, ctypes.c_double),
           (T.boolean, True, ctypes.c_bool), (T.boolean, np.bool_(False), ctypes.c_bool)]


def _arrays():
    a = runtime.to_device(np.zeros((2, 3), np.float32))
    b = runtime.to_device(np.zeros(5, np.float64))[1:]
    return [a, b], [T.Array(T.float32, 2, "C"), T.Array(T.float64, 1, "C")]


def test_every_parameter_is_owned_by_the_record_and_reads_back_exactly():
    arrays, atypes = _arrays()
    args = arrays + [v for _, v, _ in SCALARS]
    params, starts = thin.flatten(atypes + [t for t, _, _ in SCALARS], args)
    assert starts[:2] == [0, 9] and len(params) == 9 + 7 + len(SCALARS)
    packed = thin.Packed(params)
    del params
    gc.collect()  # nothing the void** points at may be a collected temporary
    lo = ctypes.addressof(packed.buffer)
    hi = lo + ctypes.sizeof(packed.buffer)
    pointers = list(packed.pointers)
    assert all(lo <= p and p + thin.SLOT <= hi for p in pointers)
    assert len(set(pointers)) == len(pointers)
    got = packed.values()
    a, b = arrays
    assert got[:9] == [0, 0, 6, 4, runtime.device_pointer(a), 2, 3, 12, 4]
    assert got[9:16] == [0, 0, 4, 8, runtime.device_pointer(b), 4, 8]
    for (ty, value, ctype), index, read in zip(SCALARS, range(16, len(got)), got[16:]):
        assert packed.ctypes[index] is ctype, ty
        raw = ctypes.string_at(pointers[index], ctypes.sizeof(ctype))
        assert raw == bytes(ctype(value.item() if hasattr(value, "item") else value)), ty
        assert read == (bool(value) if ctype is ctypes.c_bool else value), ty


def test_a_replay_patches_only_the_data_pointers():
    arrays, atypes = _arrays()
    params, starts = thin.flatten(atypes + [T.float32], arrays + [np.float32(2.5)])
    packed = thin.Packed(params)
    before = packed.values()
    for index, new in ((starts[0] + 4, 0x1234500), (starts[1] + 4, 0x7777700)):
        packed.slot(index).value = new
    after = packed.values()
    changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
    assert changed == [4, 13] and after[4] == 0x1234500 and after[13] == 0x7777700
    assert after[-1] == 2.5


@pytest.mark.parametrize("ty, value", [(T.complex64, 1j), (T.float16, np.float16(1)),
                                       (T.UniTuple(T.int64, 2), (1, 2))])
def test_unsupported_parameters_never_take_the_thin_path(ty, value):
    assert thin.flatten([ty], [value]) is None


def test_host_arrays_never_take_the_thin_path():
    assert thin.flatten([T.Array(T.float32, 1, "C")], [np.zeros(3, np.float32)]) is None


CHILD = r"""
import ctypes, json, numpy as np
from numba.core import types as T
from numba.cuda.cudadrv.devicearray import DeviceNDArray
from convlab import runtime
from convlab.runtime import thin
assert not runtime.SIMULATOR
class Mem:  # device memory stand-in: only its address is read
    __cuda_memory__ = True
    def __init__(self, p): self.device_ctypes_pointer, self.size = ctypes.c_void_p(p), 1 << 20
    def view(self, o): return Mem(self.device_ctypes_pointer.value + o)
a = DeviceNDArray((2, 3), (12, 4), np.float32, gpu_data=Mem(0x10000))
b = DeviceNDArray((7,), (8,), np.float64, gpu_data=Mem(0x20000))
args = [a, b, np.uint32(4000000000), np.int32(-3), np.int64(-9), 5, np.float32(2.5), 1.5, True,
        np.bool_(False)]
tys = [T.Array(T.float32, 2, "C"), T.Array(T.float64, 1, "C"), T.uint32, T.int32, T.int64, T.int64,
       T.float32, T.float64, T.boolean, T.boolean]
params, _ = thin.flatten(tys, args)
bad = thin._check_against_numba(tys, args, params)
wrong = list(params); wrong[-4] = (ctypes.c_float, 3.5)
print(json.dumps({"same": bad, "detects": thin._check_against_numba(tys, args, wrong)}))
"""


def test_the_packing_equals_numbas_own_prepare_args():
    """Numba's real packer (simulator off in a child; device arrays over fake memory, no launch)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                           timeout=300)
    if child.returncode != 0 and "CUDA" in child.stderr and "driver" in child.stderr.lower():
        pytest.skip(f"numba.cuda does not import without the simulator here: {child.stderr[-300:]}")
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["same"] == ""
    assert result["detects"] == "parameter 20: packed 3.5, Numba packs 2.5"


def test_a_launch_passes_its_arguments_and_the_stream_s_wrapper_made_once(monkeypatch):
    """``driver_launch.cu_launch``: function, grid, block, shared size and the ``void**`` as given; the
    stream (an int handle, or a Numba stream with a cuda.bindings or ctypes handle) as its CUstream
    wrapper, made once per handle; a failed launch raises naming the CUresult."""
    from convlab.runtime import driver as driver_launch

    calls, made, result = [], [], [0]

    def fake_launch(*args):
        calls.append(args)
        return (result[0],)

    def fake_stream(handle):
        made.append(handle)
        return ("CUstream", handle)
    monkeypatch.setattr(driver_launch, "_bindings", [fake_launch, 0, fake_stream])
    monkeypatch.setattr(driver_launch, "_cu_streams", {})

    class NumbaStream:
        def __init__(self, handle):
            self.handle = handle
    for stream in (0, 0x77, NumbaStream(ctypes.c_void_p(0x5150)), NumbaStream(0x77), 0x77):
        driver_launch.cu_launch("fn", (7, 2, 1, 128, 1, 1), 4096, stream, 0xBEEF0)
    assert made == [0, 0x77, 0x5150]
    assert [c[8] for c in calls] == [("CUstream", h) for h in (0, 0x77, 0x5150, 0x77, 0x77)]
    assert all(c[:8] == ("fn", 7, 2, 1, 128, 1, 1, 4096) and c[9:] == (0xBEEF0, 0) for c in calls)
    result[0] = 400
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed: CUDA_ERROR_INVALID_HANDLE"):
        driver_launch.cu_launch("fn", (1, 1, 1, 1, 1, 1), 0, 0, 0)
