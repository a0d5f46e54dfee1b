"""The problem: one immutable description of a convolution problem (:class:`Problem`, its builders and
shapes: ``model``), the builders' argument checks (``arguments``) and the op-name vocabulary
(``vocabulary``). Every name is importable from ``convlab.problem``."""
from convlab.dtypes import DTYPES, HALF_DTYPES, dtype_name, np_dtype, unit_roundoff  # noqa: F401

from .arguments import LengthError, Pair, as_pair, as_tuple, conv_output_size  # noqa: F401
from .model import Problem, make_problem, make_problem_nd  # noqa: F401
from .vocabulary import ND_OP_NAMES, NDIMS, OP_NAMES, OPS, op_ndim, public_op, short_op  # noqa: F401
