"""The shared GPU building blocks of convlab's kernels: each defined once, used by every kernel family.

    tile.py         Tile: block/thread tile geometry, shared-memory size, validation rules
    intrinsics.py   u32 (the 32-bit index cast), vector shared loads, copy16, store4, load_cg, shared alignment
    source.py       Writer + compile_source: generated kernel source with tracebacks into it
    splitk.py       split-K planning (split_plan, sm_count) and the ordered reduction sum_partials
    gemm.py         the tiled GEMM family's launchers: gemm, matmul, Strided, pick_tiles, tile presets
    gemm_source.py  the tiled GEMM family's source generator and cached kernel factory
    mma.py          tensor-core intrinsics (inline PTX): mma.sync f16/bf16/tf32, ldmatrix, cp.async, to_tf32
    mma_ptx.py      their GPU definitions: llvmlite inline-PTX intrinsics (imported by mma.py on a GPU)
    mma_sim.py      their simulator stand-ins (same per-lane semantics, through a shared staging buffer)
    wgmma.py        warpgroup tensor-core intrinsics (sm_90a): wgmma.mma_async, its fences and groups, probes
    wgmma_ptx.py    their GPU definitions (inline PTX); wgmma_sim.py: simulator stand-ins + ordering checks
    wgmma_desc.py   wgmma matrix descriptors and the swizzled K-major layout they address (host arithmetic)
    tc_config.py    TcConfig: the tensor-core kernels' block / warp tiles, stages, register cap, instruction, rules
    tc_loads.py     the tensor-core loops' loading half: cp.async copies into swizzled stages, loader hooks
    tc_pipeline.py  the tensor-core main loop: multi-stage cp.async pipeline, swizzled shared tiles, mma.sync,
                    loader hooks (k-contiguous or m-contiguous A, batches, split-K)
    tc_wgmma.py     the same loop on wgmma warpgroups (Hopper): same loads, split-K, batches, epilogue
    tc_epilogue.py  its epilogue: the C tile staged through shared memory, stored in 16-byte vectors
    tc_launch.py    compiling a generated tensor-core kernel and configuring its launch (grid, shared memory)
    tc_gemm.py      the tensor-core GEMM (dense, batched, parted) on that pipeline
    tc_conv.py      the tensor-core implicit-GEMM convolution: NHWC gather or an NCHW 1x1 read, NCHW/NHWC stores
    transpose.py    layout copies (NCHW <-> NHWC, channel padding, filter flips, short rows) for the tensor-core path
    convert.py      fp16 / bf16 <-> fp32 device conversions shared by the kernels

Each building block has a simulator stand-in where the GPU version is an LLVM intrinsic, so the same
kernels run on Numba's CUDA simulator. Import the submodules directly (``from convlab.kernels.gemm
import gemm``); this package imports nothing itself.
"""
