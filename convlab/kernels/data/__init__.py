"""Kernels that move or convert data: transpose.py, layouts.py, convert.py, splitk.py."""
