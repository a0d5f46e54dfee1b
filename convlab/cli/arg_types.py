"""Argument types of the ``convlab`` command line (:mod:`convlab.cli.parser`): text -> value, or an
``argparse.ArgumentTypeError`` whose message names the expected form (argparse prints it, exit status 2).

    shape4      'N,C,H,W' (or NxCxHxW; N,C,L for 1D, N,C,D,H,W for 3D) -> [3, 4 or 5 ints]
    pair        'P', 'H,W' (or 'D,H,W' for 3D) -> int or [2 or 3 ints]
    padding     pair, or 'same' / 'valid'                 nbytes     '256M', '1GiB', '268435456' -> bytes
    op_name     one op, either spelling -> the short one  op_list    'forward,dgrad' -> ('forward', 'dgrad')
    positive    an int >= 1                               dtype_list 'float32,float16' -> dtype names
    algorithm   'auto', a plugin name, or NAME[CONFIG] -> str or (name, config text)

``--dtype`` takes one of :data:`DTYPE_CHOICES` (the library's dtypes, and ``float32+high``: float32
under float32 precision "high", TF32 allowed, the token the sweeps' ``--dtypes`` use);
:func:`split_dtype` turns the token into (dtype, precision).
"""
from __future__ import annotations

import argparse

from convlab.sweep.core import DTYPE_TOKENS, HIGH

#: What ``--dtype`` accepts, in every command that takes one shape: the sweeps' ``--dtypes`` tokens.
DTYPE_CHOICES = DTYPE_TOKENS
#: The ``--dtype`` help text, the same in every command.
DTYPE_HELP = (f"operand dtype, one of {', '.join(DTYPE_CHOICES)}; {HIGH} is float32 under float32 "
              "precision 'high' (TF32 allowed, as convlab.set_float32_precision('high')) (default: float32)")


def split_dtype(token: str) -> tuple[str, str | None]:
    """A ``--dtype`` token -> (dtype, float32 precision it asks for, or None for the current one)."""
    return ("float32", "high") if token == HIGH else (token, None)


def _ints(text: str, count: tuple[int, ...], what: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace("x", ",").split(",")]
    except ValueError:
        values = []
    if len(values) not in count:
        raise argparse.ArgumentTypeError(f"expected {' or '.join(map(str, count))} comma-separated ints "
                                         f"({what}), got {text!r}")
    return values


def shape4(text: str) -> list[int]:
    return _ints(text, (4, 3, 5), "e.g. 16,3,227,227; 1D N,C,L; 3D N,C,D,H,W")


def pair(text: str) -> int | list[int]:
    values = _ints(text, (1, 2, 3), "one int, h,w or d,h,w")
    return values[0] if len(values) == 1 else values


def padding(text: str) -> int | list[int] | str:
    """--padding: one int, h,w, or PyTorch's 'same' / 'valid' (as the ops take it)."""
    return text.strip() if text.strip() in ("same", "valid") else pair(text)


def nbytes(text: str) -> int:
    """'268435456', '256M', '1GiB' -> bytes (the same forms as ``convlab.set_workspace_limit``)."""
    from convlab.runtime.settings import parse_bytes

    try:
        return parse_bytes(text, "byte count")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def op_name(text: str) -> str:
    """An op in either spelling (conv2d or forward, conv2d_backward_data or dgrad, ...) -> the short one."""
    from convlab.problem import short_op

    try:
        return short_op(text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def op_list(text: str) -> tuple[str, ...]:
    from convlab.problem import OPS, short_op

    try:
        ops = tuple(short_op(o.strip()) for o in text.split(",") if o.strip())
    except ValueError:
        ops = ()
    if not ops or "transpose" in ops:
        raise argparse.ArgumentTypeError(f"ops must be a comma-separated subset of {','.join(OPS)} (or "
                                         f"conv2d, conv2d_backward_data, conv2d_backward_weight), got "
                                         f"{text!r}; a conv_transpose2d shape is a dgrad problem")
    return ops


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}")
    return value


def dtype_list(text: str) -> tuple[str, ...]:
    from convlab.sweep.core import parse_dtypes

    try:
        return parse_dtypes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def algorithm(text: str) -> str | tuple[str, str]:
    """'auto', a plugin name, or NAME[CONFIG] (as ``explain`` prints it, e.g. 'im2col[BK=8, BM=64]')."""
    text = text.strip()
    if text.endswith("]") and "[" in text:
        name, config = text[:-1].split("[", 1)
        return name.strip(), config
    return text
