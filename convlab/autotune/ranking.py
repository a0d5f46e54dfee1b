"""The cost model's order of a problem's candidates (what modes "heuristic" and "tune" act on).

    rank(problem, candidates, workspace_limit, target)
        model = costmodel.model_for(target)
        model found:   candidates sorted by estimated ms, estimates kept; estimates within RESOLUTION of
                       the best remaining one, among the configs of a plugin that declares
                       ``ordered_configs`` (its configs listed best first, as measured), are ties taken
                       in that plugin's order
                       (features on ``target``, estimates on its ceilings: costmodel.ceilings_for);
                       measured first: when some candidate's group (family, arith, op) is in the fitted
                       file, the candidates of groups it never measured rank after them, whatever their
                       estimate (``Ranking.unmeasured`` names those groups)
        none (the simulator, a corrupt or stale file): registry order, i.e. declared priority
    top_per_plugin(ranking, k): each plugin's k best, in the ranking's order (best first overall)

Nothing here compiles or runs a kernel: features come from the plugins' planning methods.

Measured first: a group's constants come from timed kernels; a group without any gets the physics defaults
(costmodel.DEFAULT_EFFICIENCY), which assume a kernel as good as its kind. On an H100 at cf6fe41
(results/auto_bench/h100/cf6fe41) the defaults made the heuristic pick tma_wgmma for float16 wgrad (3-4.6 ms
against cuDNN's 0.05-0.09 ms: 0.02 of cuDNN) and fused winograd for a float16 depthwise layer (4.1 ms against
0.06 ms), over fitted tensor_core and widen candidates. Mode "tune" still times each plugin's best.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from convlab.plugin.registry import Candidate
from convlab.problem import Problem
from convlab.runtime.targets import Target, current as current_target

from . import costmodel
from .features import features


@dataclass
class Ranking:
    """Candidates best first, their estimates in ms (empty when ranked by priority) and how."""

    order: list[Candidate]
    estimates: dict[str, float] = field(default_factory=dict)
    how: str = ""  # "cost model (<source>)" or "declared priority (<why>)"
    model: str = "priority"  # what made the order: the model's identity, or "priority"
    unmeasured: list[str] = field(default_factory=list)  # groups ranked after the measured ones

    @property
    def by_model(self) -> bool:
        return bool(self.estimates)


#: the ranking rule's name, part of a model's identity, so a cache entry made under another rule is stale
RULE = "measured-first+ties"
#: estimates of one ``ordered_configs`` plugin's configs closer than this (relative) are ties: the model
#: cannot tell them apart (a fitted group's held-out regret is 1.3 %, results/autotune_model), while the
#: plugin's measured order can. On an H200
#: the depthwise configs of MobileNetV2's 32@112 layer were estimated within 0.4 % of each other and the
#: model's pick (8x8, VH 2) ran 1.87x the time of the plugin's first config (16x32, VH 4):
#: results/depthwise/h200/0fec88e (float32) and results/auto_bench/h200/1f62cd9 (float16)
RESOLUTION = 0.02


def _tolerant_order(cands: list[Candidate], key: dict[str, tuple]) -> list[Candidate]:
    """``cands`` by ``key`` = (rank-after flag, estimate); a candidate of a plugin that declares
    ``ordered_configs`` is preceded by the configs that plugin lists before it whose keys are within
    RESOLUTION of its own (same flag): the model's near-ties keep the plugin's measured order."""
    pending = sorted(range(len(cands)), key=lambda i: (key[cands[i].label], i))
    order: list[Candidate] = []
    while pending:
        head = cands[pending[0]]
        at = 0
        if getattr(head.plugin, "ordered_configs", False):
            flag, est = key[head.label]
            bound, near = (flag, est * (1 + RESOLUTION)), 1
            while near < len(pending) and key[cands[pending[near]].label] <= bound:
                near += 1
            ties = [j for j in range(near) if cands[pending[j]].plugin is head.plugin]
            at = min(ties, key=lambda j: pending[j])  # the plugin's earliest listed of its ties
        order.append(cands[pending.pop(at)])
    return order


def model_identity(model: costmodel.Model) -> str:
    """A short text that changes when the model's constants do: its class and a hash of them."""
    return f"{model.target_class}:{model.digest()}:{RULE}"


def _no_model_reason(target: Target) -> str:
    if target.simulator:
        return "the simulator has no ceilings to model"
    if not target.tflops or target.dram_bytes_per_s <= 0:
        return f"target {target.name} has no ceilings to model"
    return f"the cost model file of {costmodel.target_class(target)} cannot be used (see its warning)"


def rank(problem: Problem, cands: list[Candidate], workspace_limit: int,
         target: Target | None = None) -> Ranking:
    """The module docstring's order of ``cands`` (a candidate whose estimate fails goes last)."""
    target = current_target() if target is None else target
    model = costmodel.model_for(target)
    ceilings = costmodel.ceilings_for(target)
    if model is None or ceilings is None or not cands:
        return Ranking(list(cands), {}, f"declared priority ({_no_model_reason(target)})")
    estimates, group = {}, {}
    for cand in cands:
        try:
            f = features(cand.plugin, problem, cand.config, target, workspace_limit)
            est = model.estimate_ms(f, problem.op, ceilings)
            if not model.measured(f.family, f.arith, problem.op):
                group[cand.label] = f"{f.family}|{f.arith}|{problem.op}"
        except Exception:  # a plugin's planning method raising: rank it last, never fail tuning
            est = math.inf
        estimates[cand.label] = est if math.isfinite(est) else math.inf
    finite = {k: v for k, v in estimates.items() if math.isfinite(v)}
    if not finite:
        return Ranking(list(cands), {}, "declared priority (no candidate could be estimated)")
    if all(label in group for label in finite):  # nothing measured: the estimates alone
        group = {}
    order = _tolerant_order(cands, {c.label: (c.label in group, estimates[c.label]) for c in cands})
    return Ranking(order, finite, f"cost model ({model.source})", model_identity(model),
                   sorted({group[c.label] for c in cands if c.label in group and c.label in finite}))


def top_per_plugin(ranking: Ranking, k: int) -> list[Candidate]:
    """Each plugin's ``k`` best candidates, in the ranking's order."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    taken: dict[str, int] = {}
    out = []
    for cand in ranking.order:
        if taken.get(cand.plugin.name, 0) < k:
            taken[cand.plugin.name] = taken.get(cand.plugin.name, 0) + 1
            out.append(cand)
    return out
