"""The public ops and what they stand on: argument checks (arguments.py), the strategy rules that pick a
(plugin, config) (strategy.py), ``explain`` (explain.py), and the ops themselves (conv.py: 2D; conv_nd.py: 1D and 3D)."""
from . import explain as _explain  # noqa: F401  (first: importing the submodule later would rebind
#                                      convlab.ops.explain, the function below, to the module)
from .conv import (conv2d, conv2d_backward_data, conv2d_backward_weight, conv_transpose2d, explain,  # noqa: F401
                   problem_for)
from .conv_nd import (call_problem, conv1d, conv1d_backward_data, conv1d_backward_weight, conv3d,  # noqa: F401
                      conv3d_backward_data, conv3d_backward_weight, conv_transpose1d, conv_transpose3d)
