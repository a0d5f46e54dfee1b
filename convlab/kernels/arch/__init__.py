"""The GPU instructions convlab's kernels use, as Numba intrinsics (inline PTX), each with a simulator
stand-in of the same per-lane semantics: intrinsics.py, mma.py (mma_ptx.py, mma_sim.py), wgmma.py
(wgmma_ptx.py, wgmma_sim.py, wgmma_desc.py)."""
