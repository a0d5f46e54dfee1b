"""The SIMT implicit-GEMM family: the ``implicit_gemm`` plugin (plugin.py), its gather kernels for forward
and dgrad (forward.py, gathers.py: the stride phases of dgrad), its wgrad kernel (wgrad.py) and what
they share (common.py: split-K plans, the register caps, the tile's store)."""
from .plugin import ImplicitGemm, tile_of  # noqa: F401  (registers the plugin)
