"""The torch.fx path of ``convert(model, fuse=True)`` (convlab.torch.fuse): trace the model, find Conv ->
BatchNorm -> activation -> add chains in its graph, and build a ``torch.fx.GraphModule`` whose chains
are single calls of fused convolutions.

A chain grows from a convolution module called at one site with one positional input, none of whose
parameters the graph reads directly; each further node must be the only user of the one before it: an
eval-mode BatchNorm (folded), an add (``operator.add`` / ``iadd`` / ``torch.add`` without ``alpha``) of
a tensor that does not depend on the chain (the residual, "before" the activation), an activation
(module, ``torch.nn.functional`` function, ``torch.relu`` / ``torch.sigmoid`` or the ``relu`` /
``sigmoid`` methods), then an add ("after") when none came before it. The fused call takes the chain's
place, after the residual is computed.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from convlab.epilogue import DEFAULT_NEGATIVE_SLOPE
from .fuse import CONVS, foldable, fused_conv, module_activation
from .modules import _ConvlabModule

_ADDS = (operator.add, operator.iadd, torch.add)
_SIMPLE = {F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", F.silu: "silu", torch.sigmoid: "sigmoid",
           F.sigmoid: "sigmoid", F.hardswish: "hardswish"}
_METHODS = {"relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "sigmoid_": "sigmoid"}


class _Tracer(fx.Tracer):
    """torch's tracer with convlab's convolution modules kept as leaves (their forward checks shapes)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _ConvlabModule) or super().is_leaf_module(m, qualname)


def _activation(node: fx.Node, modules: dict) -> tuple[str, float] | None:
    """(activation, slope) of a node that applies a fusable activation to its first argument, else None."""
    extra = list(node.args[1:]) + list(node.kwargs.values())
    if any(isinstance(a, fx.Node) for a in extra):
        return None
    if node.op == "call_module":
        return module_activation(modules[node.target])
    if node.op == "call_method":
        name = _METHODS.get(node.target)
        return None if name is None or extra else (name, DEFAULT_NEGATIVE_SLOPE)
    if node.op != "call_function":
        return None
    if node.target in _SIMPLE:
        return _SIMPLE[node.target], DEFAULT_NEGATIVE_SLOPE
    if node.target is F.leaky_relu:
        slope = node.args[1] if len(node.args) > 1 else node.kwargs.get("negative_slope", 0.01)
        return ("leaky_relu", float(slope)) if isinstance(slope, (int, float)) else None
    if node.target is F.gelu:
        name = {"none": "gelu", "tanh": "gelu_tanh"}.get(node.kwargs.get("approximate", "none"))
        return None if name is None or len(node.args) > 1 else (name, DEFAULT_NEGATIVE_SLOPE)
    return None


def _depends(node: Any, on: fx.Node) -> bool:
    """Whether ``node`` is ``on`` or computed from it."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n is on:
            return True
        if isinstance(n, fx.Node) and n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return False


def _only_user(node: fx.Node) -> fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _residual(add: fx.Node | None, cur: fx.Node, start: fx.Node) -> fx.Node | None:
    """The other operand of ``add`` when it adds ``cur`` and a tensor independent of the chain."""
    if (add is None or add.op != "call_function" or add.target not in _ADDS or add.kwargs
            or len(add.args) != 2 or add.args[0] is add.args[1]):
        return None
    a, b = add.args
    other = b if a is cur else a if b is cur else None
    return other if isinstance(other, fx.Node) and not _depends(other, start) else None


def _chain(node: fx.Node, modules: dict) -> tuple | None:
    """(nodes, bn, activation, residual node, residual_at) of the chain starting at the conv ``node``."""
    conv, nodes, bn, act, residual, at = modules[node.target], [node], None, None, None, None
    nxt = _only_user(node)
    if nxt is not None and nxt.op == "call_module" and foldable(conv, modules[nxt.target]):
        bn = modules[nxt.target]
        nodes.append(nxt)
        nxt = _only_user(nxt)
    other = _residual(nxt, nodes[-1], node)
    if other is not None:
        residual, at = other, "before"
        nodes.append(nxt)
        nxt = _only_user(nxt)
    if nxt is not None and nxt.args and nxt.args[0] is nodes[-1] and _activation(nxt, modules) is not None:
        act = _activation(nxt, modules)
        nodes.append(nxt)
        if residual is None:
            other = _residual(_only_user(nxt), nxt, node)
            if other is not None:
                residual, at = other, "after"
                nodes.append(_only_user(nxt))
    return (nodes, bn, act, residual, at) if len(nodes) > 1 else None


def fuse_graph(model: nn.Module, algorithm: str, blocks: bool = False) -> fx.GraphModule | None:
    """A GraphModule of ``model`` with its chains fused (``blocks``: then its depthwise -> pointwise
    pairs, convlab.torch.fuse_block); None when it does not trace or has nothing to fuse."""
    try:
        graph = _Tracer().trace(model)
    except Exception:  # any tracing failure (data-dependent control flow, ...): the module patterns
        return None
    gm = fx.GraphModule(model, graph, type(model).__name__)
    modules = dict(gm.named_modules())
    sites: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            sites[node.target] = sites.get(node.target, 0) + 1
        elif node.op == "get_attr":  # a conv whose weight the graph reads itself keeps its weight
            owner = node.target.rpartition(".")[0]
            sites[owner] = sites.get(owner, 0) + 2
    fused = 0
    for node in list(gm.graph.nodes):
        if (node.op != "call_module" or type(modules.get(node.target)) not in CONVS
                or sites[node.target] != 1 or len(node.args) != 1 or node.kwargs):
            continue
        found = _chain(node, modules)
        if found is None:
            continue
        nodes, bn, act, residual, at = found
        originals = tuple(modules[n.target] for n in nodes if n.op == "call_module")
        gm.set_submodule(node.target, fused_conv(modules[node.target], bn, act, at, algorithm, originals))
        with gm.graph.inserting_before(nodes[-1]):
            args = (node.args[0],) if residual is None else (node.args[0], residual)
            call = gm.graph.call_module(node.target, args)
        nodes[-1].replace_all_uses_with(call)
        for n in reversed(nodes):
            gm.graph.erase_node(n)
        fused += 1
    if blocks:
        from .fuse_block import fuse_blocks_graph
        fused += fuse_blocks_graph(gm, algorithm)
    if not fused:
        return None
    gm.graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    gm.meta["convlab_unfused"] = model  # revert's way back (meta: no submodule, and deepcopy keeps it)
    return gm
