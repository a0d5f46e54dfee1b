"""Built-in algorithm plugins, installed as ``convlab.algorithms``: one module or package per family.

    direct.py        one thread per output element: every problem, the fallback
    explicit_gemm/   im2col (forward, wgrad) and col2im (dgrad): a column buffer and the SIMT GEMM
    implicit_gemm/   the SIMT implicit GEMM: operand tiles gathered into shared memory, any shape
    tensor_core/     the tensor-core implicit GEMM (mma.sync, wgmma) and its 3xTF32 variant tf32x3
    tma_wgmma/       Hopper: TMA im2col copies feeding warp-specialized, persistent wgmma (sm_90a)
    depthwise/       depthwise convolutions (groups == C), generated per layer shape; forward fuses epilogues
    widen.py         fp16 / bf16 problems on the float32 plugins
    winograd/        Winograd F(m x m, 3 x 3) and F(m, r): generated transforms, fused and non-fused (lossy)
    fft/             FFT convolution: overlap-save tiles, real-to-complex transforms in shared memory (lossy)

The registry imports every module and package here; each registers its plugin classes with
``@register`` (convlab.plugin.registry). A plugin imports the kernel layer (``convlab.kernels``), the
contract (``convlab.plugin``), the problem and the runtime, never another plugin: what two plugins
share lives in the kernel layer. See ``direct.py`` for the smallest complete example.
"""
