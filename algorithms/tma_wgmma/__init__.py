"""The ``tma_wgmma`` plugin: Hopper convolutions on the Tensor Memory Accelerator and warp-specialized,
persistent wgmma (plugin.py; its tile configs in configs.py, its cost features in cost.py), on
convlab.kernels.hopper."""
from .plugin import TmaWgmma  # noqa: F401  (registers the plugin)
