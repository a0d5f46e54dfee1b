"""Kernels of multi-layer blocks (several convolutions in one kernel): the depthwise -> pointwise block
of inverted-residual networks (:mod:`convlab.kernels.block.dw_pw`)."""
