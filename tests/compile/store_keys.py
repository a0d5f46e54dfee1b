"""Run in the compile-only runtime (CONVLAB_RUNTIME=compile): print, as JSON, the kernel keys the runtime
computes at the launches of plugins' cases on a GPU of compute capability 9.0 with SMS SMs (a target
read from a stand-in device object, as convlab.runtime.targets.from_device reads one), the keys
``convlab compile --store`` files the same launches under for the named target sm_90, and whether Numba
types a device array as it types the compile-only runtime's stand-in of the same shape and strides.

    python tests/compile/store_keys.py PLUGIN[,PLUGIN...] DTYPE [SMS]
"""
import json
import sys
import types

import numpy as np
from numba import typeof
from numba.cuda.cudadrv.devicearray import DeviceNDArray

from convlab import runtime
from convlab.compile import collect, corpus
from convlab.runtime import kernel_cache
from convlab.runtime.offline import OfflineArray
from convlab.runtime.targets import from_device, get, using


class _Memory:  # a device allocation's stand-in: DeviceNDArray reads only its pointer
    device_ctypes_pointer = types.SimpleNamespace(value=0)


def _keys(found: list, target, key_of) -> set:
    keys = set()
    for case in found:
        known: dict = {}
        collect.launches(case, target, known)
        with using(target):
            keys |= {key_of(d, argtypes) for d, argtypes in known.values()}
    return keys


def main(plugins: str, dtype: str, sms: str = "132") -> None:
    device = types.SimpleNamespace(compute_capability=(9, 0), name=b"NVIDIA H100", MULTIPROCESSOR_COUNT=int(sms))
    gpu, named = from_device(device), get("sm_90")
    found = corpus.cases(corpus.sample_problems(), named, plugins=plugins.split(","), dtypes=[dtype])
    keys = _keys(found, gpu, lambda d, argtypes: kernel_cache.launch_key(d, argtypes, runtime.target().key))
    stored = _keys(found, named, lambda d, argtypes: kernel_cache.launch_key(d, argtypes, named.key))
    base = OfflineArray.empty((2, 3, 4, 5), np.float32)
    views = (base, base.transpose(0, 3, 1, 2), base[:, 1], base.reshape(-1), base[..., ::2])
    same = all(typeof(v) == typeof(DeviceNDArray(v.shape, v.strides, v.dtype, gpu_data=_Memory())) for v in views)
    print(json.dumps({"keys": sorted(keys), "stored": sorted(stored), "cases": len(found), "arch": gpu.key,
                      "same_types": same}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
