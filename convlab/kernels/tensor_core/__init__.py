"""The tensor-core GEMM family on one pipeline: config.py, copy.py, warp.py (mma.sync), warpgroup.py
(wgmma), epilogue.py, launch.py, gemm.py, conv.py."""
