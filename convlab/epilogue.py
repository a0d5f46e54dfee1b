"""The epilogue of a convolution: what happens to each output element after its reduction (and the
bias), per output channel ``k``:

    t = conv(x, w)[n, k, ...] + bias[k]
    t = t * scale[k] + shift[k]                  (scale, shift: each optional; eval BatchNorm folded)
    y = act(t + residual[n, k, ...])             residual "before" the activation
    y = act(t) + residual[n, k, ...]             residual "after" the activation

An :class:`Epilogue` describes the computation (which terms are present, the activation and its
parameter); the tensors (bias, scale, shift, residual) are operands passed beside it. Activations:

    identity    t
    relu        max(t, 0)
    relu6       min(max(t, 0), 6)
    leaky_relu  t if t >= 0 else negative_slope * t
    gelu        t/2 * (1 + erf(t / sqrt(2)))
    gelu_tanh   t/2 * (1 + tanh(sqrt(2/pi) * (t + 0.044715 t^3)))
    silu        t * sigmoid(t)
    sigmoid     1 / (1 + exp(-t))
    hardswish   t * min(max(t + 3, 0), 6) / 6
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ACTIVATIONS = ("identity", "relu", "relu6", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid", "hardswish")
#: where a residual is added: before or after the activation
RESIDUAL_AT = ("before", "after")
#: torch.nn.LeakyReLU's default negative slope
DEFAULT_NEGATIVE_SLOPE = 0.01


@dataclass(frozen=True)
class Epilogue:
    """Which epilogue terms are present (see the module docstring for the formula).

    ``activation``: one of :data:`ACTIVATIONS`; ``negative_slope``: leaky_relu's slope (a finite
    float; ignored by the other activations); ``scale`` / ``shift``: whether a per-output-channel
    factor / offset is applied; ``residual``: None (no residual), "before" or "after" the activation."""

    activation: str = "identity"
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE
    scale: bool = False
    shift: bool = False
    residual: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        slope = self.negative_slope
        if isinstance(slope, bool) or not isinstance(slope, (int, float)) or not math.isfinite(slope):
            raise TypeError(f"negative_slope must be a finite float, got {slope!r}")
        object.__setattr__(self, "negative_slope", float(slope))
        for name in ("scale", "shift"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.residual is not None and self.residual not in RESIDUAL_AT:
            raise ValueError(f"residual must be None or one of {RESIDUAL_AT}, got {self.residual!r}")

    @property
    def is_identity(self) -> bool:
        """True when the epilogue changes nothing (no scale, shift, residual; identity activation)."""
        return (self.activation == "identity" and not self.scale and not self.shift
                and self.residual is None)


def parse_activation(activation: Any) -> tuple[str, float]:
    """(name, negative_slope) of an ``activation=`` argument: None (identity), a name of
    :data:`ACTIVATIONS`, or ``("leaky_relu", slope)``. ValueError / TypeError naming ``activation``."""
    if activation is None:
        return "identity", DEFAULT_NEGATIVE_SLOPE
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS} or ('leaky_relu', slope), "
                             f"got {activation!r}")
        return activation, DEFAULT_NEGATIVE_SLOPE
    if isinstance(activation, tuple) and len(activation) == 2 and activation[0] == "leaky_relu":
        slope = activation[1]
        if isinstance(slope, bool) or not isinstance(slope, (int, float)) or not math.isfinite(slope):
            raise TypeError(f"activation's negative slope must be a finite float, got {slope!r}")
        return "leaky_relu", float(slope)
    raise TypeError(f"activation must be None, a name of {ACTIVATIONS} or ('leaky_relu', slope), "
                    f"got {activation!r}")


def describe(activation: Any = None, residual: bool = False, residual_at: Any = "before",
             scale: bool = False, shift: bool = False) -> Epilogue:
    """The :class:`Epilogue` of the public ops' epilogue arguments (``activation=``, whether a
    ``residual=``, ``scale=`` and ``shift=`` were given, and ``residual_at=``)."""
    name, slope = parse_activation(activation)
    if not isinstance(residual_at, str) or residual_at not in RESIDUAL_AT:
        raise ValueError(f"residual_at must be one of {RESIDUAL_AT}, got {residual_at!r}")
    return Epilogue(name, slope, bool(scale), bool(shift), residual_at if residual else None)
