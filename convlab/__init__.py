"""convlab: a Numba-CUDA laboratory for convolution algorithms.

Ops (PyTorch's conventions): :func:`conv2d`, :func:`conv2d_backward_data`, :func:`conv2d_backward_weight`,
:func:`conv_transpose2d`, and their 1D and 3D counterparts (:func:`conv1d`, :func:`conv3d`,
:func:`conv_transpose1d`, :func:`conv_transpose3d`, ``conv{1,3}d_backward_data/_weight``). Algorithms are plugins (:func:`plugins`, :func:`register`); :func:`explain` says
which apply to a problem and why not; :func:`tune` checks and times the candidates of chosen problems
(``algorithm="auto"`` runs the cost model's pick otherwise, convlab.autotune.modes). The package's floors, each importing only those below it:
runtime (the machine), kernels (shared GPU building blocks), plugin (the contract and the registry),
call (operands and launch plans), autotune, ops (the public ops), then bench, compile, cli, torch.
"""
from ._version import __version__
from .autotune.request import tune
from .ops import (conv1d, conv1d_backward_data, conv1d_backward_weight, conv2d, conv2d_backward_data,
                  conv2d_backward_weight, conv3d, conv3d_backward_data, conv3d_backward_weight, conv_transpose1d,
                  conv_transpose2d, conv_transpose3d, explain, problem_for)
from .plugin.contract import Algorithm, Config, Verdict
from .plugin.registry import get as get_plugin, load_errors, plugins, register, unregister
from .problem import Problem, make_problem, make_problem_nd
from .runtime import targets
from .runtime.context import reset
from .runtime.launch import SimulatorCostWarning
from .runtime.settings import (allow_lossy, float32_precision, get_allow_lossy, get_deterministic,
                               get_float32_precision, get_workspace_limit, set_allow_lossy, set_deterministic,
                               set_float32_precision, set_workspace_limit)
from .runtime.targets import Target

__all__ = ["Algorithm", "Config", "Verdict", "Target", "Problem", "make_problem", "make_problem_nd", "get_plugin", "load_errors",
           "plugins", "register", "unregister", "get_workspace_limit", "set_workspace_limit",
           "get_deterministic", "set_deterministic", "get_float32_precision", "set_float32_precision",
           "float32_precision", "get_allow_lossy", "set_allow_lossy", "allow_lossy", "conv2d", "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d",
           "conv1d", "conv1d_backward_data", "conv1d_backward_weight", "conv_transpose1d", "conv3d",
           "conv3d_backward_data", "conv3d_backward_weight", "conv_transpose3d",
           "explain", "problem_for", "tune", "reset", "targets", "SimulatorCostWarning", "__version__"]
