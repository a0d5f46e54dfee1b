"""The depthwise plugin (groups == C, any multiplier K / C; 1D-3D forward, dgrad and wgrad, forward fused
with epilogues): the plugin in plugin.py, its configs and launch plans in plan.py, its kernels in
convlab.kernels.conv.depthwise_*."""
from .plugin import Depthwise  # noqa: F401  (registers the plugin)
