"""FFT convolution kernels: radix-4 / radix-2 passes in shared memory and the transforms built on them.

    stages.py     the DIT passes (a generator), bit reversal, twiddle tables
    spectrum.py   real patches (image tiles, filters, dy tiles) -> half spectra in the GEMM's layout
    inverse.py    half spectra (a GEMM's output, or products formed inline) -> outputs, overlap-save kept
"""
