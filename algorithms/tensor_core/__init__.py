"""The tensor-core implicit-GEMM family: the ``tensor_core`` plugin (plugin.py: fp16 / bf16, TF32 for
float32 under "high"; its configs in configs.py, wgrad in wgrad.py, strided dgrad in strided.py) and its
3xTF32 variant ``tf32x3`` (tf32x3.py), on convlab.kernels.tensor_core."""
from .configs import tc_config, to_config  # noqa: F401
from .plugin import TensorCore, split_k  # noqa: F401  (registers the plugin)
from .tf32x3 import TensorCoreTf32x3  # noqa: F401
