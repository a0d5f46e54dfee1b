"""Convolution building blocks shared by plugins: columns.py, unfold.py, fold.py and the depthwise
generators (depthwise_common.py, depthwise_conv.py, depthwise_wgrad.py)."""
