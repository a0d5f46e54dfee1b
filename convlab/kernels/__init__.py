"""The shared GPU building blocks of convlab's kernels: each defined once, used by every kernel family.

    tile.py         Tile: block/thread tile geometry, shared-memory size, validation rules
    intrinsics.py   u32 (the 32-bit index cast), vector shared loads, load_cg, shared alignment
    source.py       Writer + compile_source: generated kernel source with tracebacks into it
    splitk.py       split-K planning (split_plan, sm_count) and the ordered reduction sum_partials
    gemm.py         the tiled GEMM family's launchers: gemm, matmul, Strided, pick_tiles, tile presets
    gemm_source.py  the tiled GEMM family's source generator and cached kernel factory
    mma.py          tensor-core intrinsics (inline PTX): mma.sync f16/bf16/tf32, ldmatrix, cp.async, to_tf32
    mma_ptx.py      their GPU definitions: llvmlite inline-PTX intrinsics (imported by mma.py on a GPU)
    mma_sim.py      their simulator stand-ins (same per-lane semantics, through a shared staging buffer)
    tc_gemm.py      the tensor-core GEMM: multi-stage cp.async pipeline, swizzled shared tiles, mma.sync

Each building block has a simulator stand-in where the GPU version is an LLVM intrinsic, so the same
kernels run on Numba's CUDA simulator. Import the submodules directly (``from convlab.kernels.gemm
import gemm``); this package imports nothing itself.
"""
