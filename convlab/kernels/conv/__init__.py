"""Convolution loop nests written once for 1, 2 and 3 spatial axes (axes.py): direct.py, columns.py,
unfold.py, fold.py and the depthwise generators (depthwise_common.py, depthwise_conv.py,
depthwise_wgrad.py)."""
