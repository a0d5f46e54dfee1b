"""Explicit GEMMs over a column buffer: im2col (forward, wgrad) and col2im (dgrad), on the SIMT tiled GEMM
(convlab.kernels.simt) and the column plans, unfold and fold of convlab.kernels.conv."""
from .col2im import Col2im  # noqa: F401  (registers the plugin)
from .im2col import Im2col  # noqa: F401
