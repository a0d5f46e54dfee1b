"""The options several ``convlab`` commands share (the shape of one problem, the options every command
takes) and :func:`subcommand`, which gives each subparser its function and those options."""
from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator

from .arg_types import DTYPE_CHOICES, DTYPE_HELP, pair, padding, shape4

#: the one-shape options' help, in the commands that take every N and the transpose problem
_X_HELP = ("input shape (for --transpose: the conv_transpose2d input N,C_in,H,W); N,C,L is a conv1d, N,C,D,H,W "
           "a conv3d")
_W_HELP = "weight shape K,C/groups,R,S (for --transpose: C_in,C_out/groups,R,S); K,C,S for 1D, K,C,T,R,S for 3D"


def add_shape(p: argparse.ArgumentParser, required: bool, *, nd: bool = True) -> None:
    """The options of one shape (PyTorch conventions). ``nd``: named with their 1D and 3D spellings, and
    with ``--transpose`` and ``--output-padding``; without it, the 2D forward spelling only (source)."""
    g = p.add_argument_group("one shape (PyTorch conventions)")
    g.add_argument("--x", type=shape4, required=required, metavar="N,C,H,W", help=_X_HELP if nd else "input shape")
    g.add_argument("--w", type=shape4, required=required, metavar="K,C,R,S",
                   help=_W_HELP if nd else "weight shape K,C/groups,R,S")
    g.add_argument("--stride", type=pair, default=1, metavar="S|SH,SW|SD,SH,SW" if nd else "S|SH,SW")
    g.add_argument("--padding", type=padding, default=0,
                   metavar="P|PH,PW|PD,PH,PW|same|valid" if nd else "P|PH,PW|same|valid")
    g.add_argument("--dilation", type=pair, default=1, metavar="D|DH,DW|DD,DH,DW" if nd else "D|DH,DW")
    g.add_argument("--groups", type=int, default=1)
    g.add_argument("--bias", action="store_true",
                   help="with a bias operand (forward / transpose)" if nd else "with a bias operand (forward)")
    g.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", metavar="DTYPE", help=DTYPE_HELP)
    if nd:
        g.add_argument("--transpose", action="store_true", help="the shape is a conv_transpose2d (a dgrad problem)")
        g.add_argument("--output-padding", type=pair, default=None, metavar="OP", help="conv_transpose2d only")


def add_common(p: argparse.ArgumentParser, top: bool = False) -> None:
    """The options every command takes, before or after its name (a subcommand's own copy only
    overrides the top-level value when given)."""
    from convlab.runtime.settings import TUNE_MODES

    default = (lambda v: v) if top else (lambda v: argparse.SUPPRESS)
    p.add_argument("--debug", action="store_true", default=default(False), help="show tracebacks of errors")
    p.add_argument("--deterministic", action="store_true", default=default(False),
                   help="deterministic mode: exclude plugins whose results may vary bit-wise between runs "
                        "(as convlab.set_deterministic(True) or CONVLAB_DETERMINISTIC=1)")
    p.add_argument("--tune-mode", choices=TUNE_MODES, default=default(None), metavar="MODE",
                   help=f"how algorithm='auto' decides, one of {', '.join(TUNE_MODES)}: the cost model's "
                        "pick with nothing timed, its best candidates timed, or every one timed (as "
                        "convlab.autotune.set_mode or CONVLAB_TUNE_MODE; default: heuristic; convlab tune: tune)")


@contextlib.contextmanager
def subcommand(sub: Any, name: str, func: Any, *, common: bool = True,
               **parser_kw: Any) -> Iterator[argparse.ArgumentParser]:
    """The subparser ``name`` of ``sub`` (an ``add_subparsers`` action) that runs ``func``: the block adds
    its own options, then this adds the options every command takes, last in its help (``common``
    False: the block has added them itself, among its own)."""
    p = sub.add_parser(name, **parser_kw)
    yield p
    if common:
        add_common(p)
    p.set_defaults(func=func)


def add_switches(p: argparse.ArgumentParser | argparse._ArgumentGroup, switches: dict[str, str]) -> None:
    """On/off options (``store_true``, default False), flag -> help, in the table's order."""
    for flag, text in switches.items():
        p.add_argument(flag, action="store_true", help=text)
