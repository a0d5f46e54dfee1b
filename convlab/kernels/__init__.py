"""The shared GPU building blocks of convlab's kernels: each defined once, used by every plugin.

    source.py      Writer + compile_source: the one idiom for generated kernel source
    params.py      ParamTable: named int32 kernel parameters packed into one device array
    resources.py   what a kernel declares for ``convlab compile`` (the spills it may have, and why)
    arch/          the instructions, each with its simulator stand-in
                   intrinsics.py (u32, vector loads and stores, copy16, load_cg), mma.py (mma.sync,
                   ldmatrix, cp.async, TF32 / bf16 conversions: mma_ptx / mma_sim), wgmma.py (warpgroup
                   MMA and its fences: wgmma_ptx / wgmma_sim, descriptors in wgmma_desc)
    data/          moving data: transpose.py (layout copies), layouts.py (channels-last operands for a
                   plugin that takes NCHW), convert.py (fp16 / bf16 <-> fp32), splitk.py (split-K plans,
                   the ordered sum of partials)
    simt/          the SIMT GEMM: tile.py (Tile), gemm.py (launchers), gemm_source.py (the generator)
    tensor_core/   the tensor-core GEMM family: config.py (TcConfig), copy.py (cp.async loads into
                   swizzled stages, the A-loader interface), warp.py (the mma.sync loop), warpgroup.py
                   (the wgmma loop), epilogue.py (the staged epilogue, the store interface), launch.py,
                   gemm.py (dense, batched, parted GEMMs), conv.py (the implicit-GEMM loaders)
    conv/          convolution loop nests, each written once for 1, 2 and 3 spatial axes: axes.py (the
                   N a problem's kernels take, its N-d geometry, the generated sources' axis names),
                   direct.py (the direct kernels), columns.py (column-buffer plans, unfold / fold
                   launches), unfold.py, fold.py, depthwise_common / depthwise_conv / depthwise_wgrad.py
                   (the depthwise kernel generators)
    transform/     what the Winograd and FFT convolutions share: the batched GEMM over transform points,
                   constant-matrix codegen, operand addressing, float32 emulations for error measurement
    winograd/      toomcook.py (F(m, r) generated in rational arithmetic), transforms.py, fused.py
    fft/           stages.py (radix-4 / radix-2 passes), spectrum.py (r2c of patches), inverse.py (c2r)

Import the modules directly (``from convlab.kernels.simt.gemm import gemm``); the packages import
nothing themselves.
"""
