"""convlab: a Numba-CUDA laboratory for 2D convolution algorithms.

Ops (NCHW, PyTorch's conventions): :func:`conv2d`, :func:`conv2d_backward_data`,
:func:`conv2d_backward_weight`, :func:`conv_transpose2d`. Algorithms are plugins (:func:`plugins`,
:func:`register`); :func:`explain` says which apply to a problem and why not.
"""
from ._version import __version__
from . import launch  # noqa: F401  first: every kernel defined from now on launches through it (runtime.jit)
from .launch import SimulatorCostWarning

from .plugin.contract import Algorithm, Config, Verdict
from .target import Target
from .problem import Problem, make_problem
from .plugin.registry import get as get_plugin, load_errors, plugins, register, unregister
from .settings import (float32_precision, get_deterministic, get_float32_precision,
                       get_workspace_limit, set_deterministic, set_float32_precision,
                       set_workspace_limit)
from .ops import (conv2d, conv2d_backward_data, conv2d_backward_weight,
                  conv_transpose2d, explain, problem_for)

__all__ = ["Algorithm", "Config", "Verdict", "Target", "Problem", "make_problem", "get_plugin", "load_errors",
           "plugins", "register", "unregister", "get_workspace_limit", "set_workspace_limit",
           "get_deterministic", "set_deterministic", "get_float32_precision",
           "set_float32_precision", "float32_precision", "conv2d",
           "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d", "explain",
           "problem_for", "SimulatorCostWarning", "__version__"]
