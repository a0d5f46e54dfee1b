"""The public ops and what they stand on: argument checks (arguments.py), the strategy rules that pick a
(plugin, config) (strategy.py), ``explain`` (explain.py), and the ops themselves (conv.py)."""
from . import explain as _explain  # noqa: F401  (first: importing the submodule later would rebind
#                                      convlab.ops.explain, the function below, to the module)
from .conv import (conv2d, conv2d_backward_data, conv2d_backward_weight, conv_transpose2d, explain,  # noqa: F401
                   problem_for, call_problem)
