"""convlab: a Numba-CUDA laboratory for 2D convolution algorithms.

Ops (NCHW, PyTorch's conventions): :func:`conv2d`, :func:`conv2d_backward_data`,
:func:`conv2d_backward_weight`, :func:`conv_transpose2d`. Algorithms are plugins (:func:`plugins`,
:func:`register`); :func:`explain` says which apply to a problem and why not.
"""
__version__ = "0.1.0"

from .plugin import Algorithm, Config, Verdict  # noqa: E402
from .problem import Problem, make_problem  # noqa: E402
from .registry import get as get_plugin, load_errors, plugins, register, unregister  # noqa: E402
from .settings import get_workspace_limit, set_workspace_limit  # noqa: E402
from . import explain as _explain_module  # noqa: E402,F401  (load the submodule before the function
#                                           named explain below takes over the package attribute)
from .ops import (conv2d, conv2d_backward_data, conv2d_backward_weight,  # noqa: E402
                  conv_transpose2d, explain, problem_for)

__all__ = ["Algorithm", "Config", "Verdict", "Problem", "make_problem", "get_plugin", "load_errors",
           "plugins", "register", "unregister", "get_workspace_limit", "set_workspace_limit", "conv2d",
           "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d", "explain",
           "problem_for", "__version__"]
