"""Winograd's minimal filtering: the generated transforms and the kernels that apply them.

    toomcook.py    F(m, r) by the Toom-Cook construction in exact rational arithmetic (A^T, G, B^T)
    transforms.py  the non-fused form's gathers and scatters: patch transforms and the output transform
    fused.py       the fused kernel: input transform, GEMM over channels and output transform in one
"""
