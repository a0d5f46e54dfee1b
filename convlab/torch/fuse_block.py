"""``convert(model, fuse=True, blocks=True)``: a depthwise convolution (with what convlab.torch.fuse
fused into it) directly followed by a 1x1 convolution (likewise) runs as one
:func:`convlab.blocks.depthwise_pointwise` call, the intermediate tensor kept in shared memory.

A pair qualifies when, in eval mode, the first is a 2D convolution with groups = in = out channels, zero
padding given as numbers and no residual, and the second a 1x1 one (stride 1, no padding, groups 1) of
its channels whose only input is the first's output. In the torch.fx graph the pair's two calls become
one call of a :class:`DepthwisePointwise` at the 1x1's name; in an ``nn.Sequential`` it takes the
depthwise's place and the 1x1's place holds a :class:`convlab.torch.fuse.Fused` placeholder. The module
runs its two convolutions apart (exactly the unfused model) whenever the fused kernel cannot serve the
call: in training mode, when autograd needs a gradient, for unbatched or mixed-dtype inputs, a residual
of another shape, dtype or device, or under autocast. Pairs are fused only with ``algorithm="auto"``: a
named plugin keeps each layer on that plugin. ``revert`` restores the original modules.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn

from .fuse import CONVS, Fused, _FusedConv, unfuse


def _conv(m: nn.Module) -> bool:
    """A convolution module of convlab.torch.fuse.CONVS (exact classes) or one it fused."""
    return type(m) in CONVS or isinstance(m, _FusedConv)


def is_depthwise(m: nn.Module) -> bool:
    """A 2D convolution module with groups = in = out channels, numeric zero padding, no residual."""
    return (_conv(m) and len(m.kernel_size) == 2 and m.groups == m.in_channels == m.out_channels
            and m.padding_mode == "zeros" and not isinstance(m.padding, str)
            and getattr(m, "residual_at", None) is None and not m.training)


def is_pointwise(m: nn.Module, channels: int) -> bool:
    """A 1x1 2D convolution module of ``channels`` inputs: stride 1, no padding, groups 1."""
    return (_conv(m) and tuple(m.kernel_size) == (1, 1) and tuple(m.stride) == (1, 1)
            and not isinstance(m.padding, str) and tuple(m.padding) == (0, 0) and m.groups == 1
            and m.in_channels == channels and m.padding_mode == "zeros" and not m.training)


def _activation(m: nn.Module) -> Any:
    name = getattr(m, "activation", "identity")
    return (name, m.negative_slope) if name == "leaky_relu" else name


def _layout(t: torch.Tensor) -> str | None:
    """"nchw" / "nhwc" for a dense 4-D tensor (C-contiguous wins), else None."""
    if t.is_contiguous():
        return "nchw"
    return "nhwc" if t.is_contiguous(memory_format=torch.channels_last) else None


class DepthwisePointwise(nn.Module):
    """A depthwise convolution ``dw`` then a 1x1 ``pw`` (each possibly a fused convolution) as one
    fused block; ``forward(input, residual=None)``, the residual where ``pw`` takes one."""

    def __init__(self, dw: nn.Module, pw: nn.Module, algorithm: str = "auto") -> None:
        super().__init__()
        self.dw, self.pw, self.algorithm = dw, pw, algorithm
        self.training = dw.training  # fused in eval mode only

    def _fits(self, input: torch.Tensor, residual: torch.Tensor | None) -> bool:
        """Whether the fused kernel serves this call (else the two convolutions run apart)."""
        dw, pw = self.dw, self.pw
        tensors = [input, dw.weight, pw.weight] + [t for t in (dw.bias, pw.bias, residual) if t is not None]
        if (self.training or input.dim() != 4 or torch._C._is_any_autocast_enabled()
                or any(t.dtype != input.dtype or t.device != input.device for t in tensors)
                or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))):
            return False
        if input.is_cuda and _layout(input) is None:
            return False
        return residual is None or (self._residual_fits(input, residual)
                                    and (not input.is_cuda or _layout(residual) == _layout(input)))

    def forward(self, input: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        from convlab.blocks import depthwise_pointwise

        dw, pw = self.dw, self.pw
        if not self._fits(input, residual):
            t = dw(input)
            return pw(t) if residual is None else pw(t, residual)
        at = getattr(pw, "residual_at", None) or "before"
        return depthwise_pointwise(
            input, dw.weight.detach(), pw.weight.detach(), None if dw.bias is None else dw.bias.detach(),
            None if pw.bias is None else pw.bias.detach(), dw.stride, dw.padding, dw.dilation,
            dw_activation=_activation(dw), activation=_activation(pw), residual=residual, residual_at=at,
            algorithm=self.algorithm)

    def _residual_fits(self, input: torch.Tensor, residual: torch.Tensor) -> bool:
        """Whether ``residual`` has the block's output shape (N, K, P, Q)."""
        dw = self.dw
        out = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, k, s, p, d in
               zip(input.shape[2:], dw.kernel_size, dw.stride, dw.padding, dw.dilation)]
        return tuple(residual.shape) == (input.shape[0], self.pw.out_channels, *out)

    def unfused(self) -> nn.Module:
        """The depthwise convolution as it was before fusing (revert's way back)."""
        return unfuse(self.dw)

    def extra_repr(self) -> str:
        return "fused=depthwise+pointwise"


def fuse_blocks_sequential(model: nn.Module, algorithm: str) -> int:
    """Fuse depthwise -> pointwise neighbours of every ``nn.Sequential`` of ``model`` in place
    (placeholders between them skipped); the number of pairs fused."""
    count = 0
    if algorithm != "auto":
        return 0
    for seq in [m for m in model.modules() if type(m) is nn.Sequential]:
        names = list(seq._modules)
        for i, name in enumerate(names):
            dw = seq._modules[name]
            if not is_depthwise(dw):
                continue
            j = i + 1
            while j < len(names) and isinstance(seq._modules[names[j]], Fused):
                j += 1
            if j < len(names) and is_pointwise(seq._modules[names[j]], dw.out_channels) \
                    and getattr(seq._modules[names[j]], "residual_at", None) is None:
                pw = seq._modules[names[j]]
                setattr(seq, name, DepthwisePointwise(dw, pw, algorithm))
                setattr(seq, names[j], Fused(pw, name))
                count += 1
    return count


def fuse_blocks_graph(gm: fx.GraphModule, algorithm: str) -> int:
    """Fuse depthwise -> pointwise call pairs of ``gm``'s graph (each module called once, the first's
    output used by the second only); the number of pairs fused. The caller recompiles."""
    if algorithm != "auto":
        return 0
    modules = dict(gm.named_modules())
    sites: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op in ("call_module", "get_attr"):
            owner = node.target if node.op == "call_module" else node.target.rpartition(".")[0]
            sites[owner] = sites.get(owner, 0) + (1 if node.op == "call_module" else 2)
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or node.kwargs or not node.args:
            continue
        first = node.args[0]
        if (not isinstance(first, fx.Node) or first.op != "call_module" or len(first.users) != 1
                or len(first.args) != 1 or first.kwargs or sites.get(first.target) != 1
                or sites.get(node.target) != 1 or first.target not in modules):
            continue
        dw, pw = modules[first.target], modules.get(node.target)
        if pw is None or not is_depthwise(dw) or not is_pointwise(pw, dw.out_channels):
            continue
        gm.set_submodule(node.target, DepthwisePointwise(dw, pw, algorithm))
        node.args = (first.args[0],) + tuple(node.args[1:])
        gm.graph.erase_node(first)
        count += 1
    return count
