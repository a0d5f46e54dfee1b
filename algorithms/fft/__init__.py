"""FFT convolution: overlap-save tiles, real-to-complex transforms in shared memory (plugin.py)."""
from .plugin import Fft  # noqa: F401  (registers the plugin)
