"""Compile the fused depthwise -> pointwise kernels (convlab.kernels.block.dw_pw) for sm_80 / sm_90 and
print ptxas's registers, spills and static shared memory per kernel; no GPU needed.

    CONVLAB_RUNTIME=compile python tools/dw_pw_compile.py [--target sm_90] [--dtypes float32,float16]

Cases: MobileNetV2's depthwise -> pointwise-linear pairs (eval BatchNorm folded: a scale and shift on
each layer, relu6 after the depthwise, a residual on the two stride-1 repeats of a stage), NCHW and
channels-last. Exit status 1 on a ptxas error or any spill, 2 when numba-cuda's CUDA compiler
libraries are missing (tests/kernels/test_dw_pw_compile.py runs one case).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from convlab import runtime
from convlab.blocks.dw_pw import depthwise_pointwise
from convlab.compile import toolchain
from convlab.compile.assemble import assemble, lower, ptx_of
from convlab.dtypes import np_dtype
from convlab.runtime import offline
from convlab.runtime.targets import get as get_target, using

#: (C, H, stride, K, residual): the depthwise 3x3 and projection 1x1 of MobileNetV2 blocks
CASES = ((32, 112, 1, 16, False), (96, 112, 2, 24, False), (144, 56, 1, 24, True), (576, 14, 1, 96, True),
         (960, 7, 1, 320, False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=("sm_80", "sm_90"))
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--cases", type=int, default=len(CASES), help="the first N of CASES")
    opts = parser.parse_args(argv)
    if not runtime.COMPILE_ONLY:
        parser.error("run with CONVLAB_RUNTIME=compile")
    found = toolchain.missing()
    if found:
        print(toolchain.message(found))
        return 2
    failed = 0
    print(f"{'target':7} {'dtype':9} {'layout':6} {'C,H,s,K':16} {'regs':>4} {'spill st/ld':>11} {'smem':>5}")
    for name in opts.target or ("sm_80", "sm_90"):
        target = get_target(name)
        for dtype in opts.dtypes.split(","):
            d = np_dtype(dtype)
            for c, h, s, k, res in CASES[:opts.cases]:
                for cl in (False, True):
                    x = runtime.empty((1, h, h, c), d) if cl else runtime.empty((1, c, h, h), d)
                    x = x.transpose(0, 3, 1, 2) if cl else x
                    p = (h - 1) // s + 1
                    r = runtime.empty((1, p, p, k), d).transpose(0, 3, 1, 2) if cl else runtime.empty((1, k, p, p), d)
                    with using(target), offline.collecting() as requests:
                        depthwise_pointwise(x, runtime.empty((c, 1, 3, 3), d), runtime.empty((k, c, 1, 1), d),
                                            None, None, s, 1, dw_activation="relu6", dw_scale=np.ones(c),
                                            dw_shift=np.zeros(c), scale=np.ones(k), shift=np.zeros(k),
                                            residual=r if res else None, algorithm="fused")
                        req = requests[-1]
                        asm = assemble(ptx_of(lower(req.dispatcher, req.argtypes), target), target)
                    spills = (asm.spill_stores or 0, asm.spill_loads or 0)
                    failed += bool(asm.error) or any(spills)
                    print(f"{name:7} {dtype:9} {'NHWC' if cl else 'NCHW':6} {f'{c},{h},{s},{k}':16} "
                          f"{asm.registers or 0:4d} {f'{spills[0]}/{spills[1]}':>11} {asm.static_shared or 0:5d}"
                          f"{' ' + asm.error if asm.error else ''}{' ' + asm.note if asm.note else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
