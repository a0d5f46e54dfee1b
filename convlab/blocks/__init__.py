"""Multi-layer blocks run as one fused kernel or as their layers apart: :func:`depthwise_pointwise`
(an inverted-residual block's depthwise kxk then pointwise 1x1; convlab.blocks.dw_pw)."""
from .dw_pw import (ALGORITHMS, Choice, depthwise_pointwise, explain_depthwise_pointwise,
                    reference_depthwise_pointwise)

__all__ = ["ALGORITHMS", "Choice", "depthwise_pointwise", "explain_depthwise_pointwise",
           "reference_depthwise_pointwise"]
