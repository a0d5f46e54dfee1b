"""The op-name vocabulary: the three canonical ops, the spatial dimensions, and the two spellings of every
op (public names such as ``conv2d_backward_data`` and short ones such as ``dgrad``) for N = 1, 2, 3."""
from __future__ import annotations

OPS = ("forward", "dgrad", "wgrad")
NDIMS = (1, 2, 3)

#: One vocabulary, two spellings: the public op names (canonical in the API: ``explain(op=...)``,
#: ``problem_for``) and the short names (canonical in ``Problem.op`` and on the command line). Both are
#: accepted everywhere; ``transpose`` is conv_transpose2d, whose problem is a dgrad one.
OP_NAMES = {"forward": "conv2d", "dgrad": "conv2d_backward_data", "wgrad": "conv2d_backward_weight",
            "transpose": "conv_transpose2d"}
#: The public names of every N: {N: {short name: public name}} (the 2D ones are :data:`OP_NAMES`).
ND_OP_NAMES = {n: {short: name.replace("2d", f"{n}d") for short, name in OP_NAMES.items()} for n in NDIMS}


def public_op(name: str) -> str:
    """The public op name of ``name`` (either spelling, any N; short names are 2D); ValueError listing
    them otherwise."""
    for names in ND_OP_NAMES.values():
        if name in names.values():
            return name
    if isinstance(name, str) and name in OP_NAMES:
        return OP_NAMES[name]
    raise ValueError(f"op must be one of {sorted(OP_NAMES.values())} (or {sorted(OP_NAMES)}; 1d and "
                     f"3d names alike), got {name!r}")


def short_op(name: str) -> str:
    """The short name of ``name`` (either spelling, any N): forward, dgrad, wgrad or transpose."""
    public = public_op(name)
    return next(k for names in ND_OP_NAMES.values() for k, v in names.items() if v == public)


def op_ndim(name: str) -> int:
    """N of an op name: 1, 2 or 3 from the public name, 2 for a short one."""
    public = public_op(name)
    return next(n for n, names in ND_OP_NAMES.items() if public in names.values())
