"""What the transform-domain convolutions (Winograd, FFT) share.

    codegen.py    unrolled constant-matrix products for generated kernels
    gemm.py       the batched GEMM over transform points (SIMT, or tensor cores)
    emulate.py    host float32 emulations of their arithmetic, for measuring error growth in float64
    correlation.py  the correlation that forward, dgrad and wgrad run, and its tiles (both plugins' plans)
"""
