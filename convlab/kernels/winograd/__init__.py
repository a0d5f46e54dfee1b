"""Winograd's minimal filtering: the generated transforms and the kernels that apply them.

    toomcook.py   F(m, r) by the Toom-Cook construction in exact rational arithmetic (A^T, G, B^T)
"""
