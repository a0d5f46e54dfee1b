"""A public op bound to its options, algorithm and epilogue form, for a caller that repeats one call on new
operands (a converted module's forward, a block's separate form, convlab.torch's kernel calls):

    bound = BoundCall("conv2d", (stride, padding, dilation, groups), activation="relu", residual_at="before")
    bound.replay(x, w, bias, residual)   the output, or None where no stored plan serves the call
    bound(x, w, bias, residual)          replay, else the public op with those options (which records)

:meth:`BoundCall.replay` builds the key the op itself builds for a device call (convlab.call.plan.call_key
of the op's name, the operands' signatures, the options, ``algorithm``, no workspace limit, and the key of
the epilogue the op looks up before any check: convlab.ops.epilogue.run_with) from the parts frozen once
here, and replays the stored plan (convlab.ops.conv.replay). A hit is exactly the op's replay; anything the
key does not match misses. The op looks its plan up first only where its epilogue has no ``scale`` /
``shift`` (host values converted per call), so a call with them is not bound (:attr:`BoundCall.bindable`
False: :meth:`replay` gives None and the call runs the op). :meth:`~BoundCall.replay` serves every op
(dgrad and wgrad take no bias: None); calling the bound op runs the forward and transposed ops only
(their operands a, b, bias come before the options).
"""
from __future__ import annotations

from typing import Any

from convlab import ops as _ops
from convlab.call import operands, plan
from convlab.epilogue import describe
from convlab.ops import conv as _conv
from convlab.ops.epilogue import key_of


class BoundCall:
    """``op`` (a public op's name: "conv2d", "conv_transpose3d", "conv3d_backward_weight", ...) with
    ``options`` as the op takes them positionally after its operands, ``algorithm``, and the epilogue form
    (``activation``, whether a residual comes, ``residual_at``, whether scale / shift come). ValueError /
    TypeError for an epilogue the op would refuse; TypeError for unhashable options."""

    __slots__ = ("op", "options", "algorithm", "activation", "residual_at", "static", "epilogue", "bindable")

    def __init__(self, op: str, options: tuple, algorithm: Any = "auto", *, activation: Any = None,
                 residual: bool = False, residual_at: str = "before", scale: bool = False,
                 shift: bool = False) -> None:
        self.op, self.options, self.algorithm = op, tuple(options), algorithm
        self.activation, self.residual_at = activation, residual_at
        epi = describe(activation, residual, residual_at, scale, shift)
        self.epilogue = None if epi.is_identity else epi
        self.bindable = not (scale or shift)
        self.static = plan.static_key(self.options, algorithm, None)

    def replay(self, a: Any, b: Any, bias: Any = None, residual: Any = None) -> Any:
        """The op's output from its stored plan for these operands, or None (a miss, host operands, or an
        unbindable call): the caller runs the op."""
        if not self.bindable or (residual is not None) != (self.epilogue is not None
                                                            and self.epilogue.residual is not None):
            return None
        recs = (operands.adapt(a), operands.adapt(b), operands.adapt(bias), operands.ABSENT)
        signatures = (recs[0][0], recs[1][0], recs[2][0], None)
        if False in signatures:
            return None
        if self.epilogue is None:
            return _conv.replay(plan.assemble(self.op, signatures, self.static), recs, None)
        key = plan.assemble(self.op, signatures, self.static, key_of(self.epilogue, residual))
        return _conv.replay(key, recs, None, (residual, None, None))

    def __call__(self, a: Any, b: Any, bias: Any = None, residual: Any = None, *, scale: Any = None,
                 shift: Any = None) -> Any:
        """:meth:`replay`, else the public op on these operands with the bound options."""
        if scale is None and shift is None:
            found = self.replay(a, b, bias, residual)
            if found is not None:
                return found
        return getattr(_ops, self.op)(a, b, bias, *self.options, algorithm=self.algorithm,
                                     activation=self.activation, residual=residual,
                                     residual_at=self.residual_at, scale=scale, shift=shift)
