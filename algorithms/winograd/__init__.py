"""Winograd convolution: F(m x m, 3 x 3) and F(m, r) on one axis, fused and non-fused (plugin.py)."""
from .plugin import Winograd  # noqa: F401  (registers the plugin)
