"""Judging the cost model on measured layer-ops: regret of its pick and of its top-k set, per network held
out of the fit.

A *layer-op* is one problem under one float32 precision (:func:`.measured.by_context`) with the
candidates measured on it. For a model and a layer-op (only its measured candidates count, since an
unmeasured pick's time is unknown)::

    best       = the lowest measured time
    heuristic  = the candidate of lowest estimate;       regret = t(heuristic) / best - 1
    priority   = the highest declared priority's first config (the pick without a model), same regret
    top-k set  = each plugin's k candidates of lowest estimate;  hit = some member within HIT_MARGIN of best

Leave one network out: for each network, fit on every row whose layer is not one of that network's
(a layer shared by two suites belongs to both) and judge that network's layer-ops. Layer-ops with one
measured candidate say nothing about a choice and are counted apart; so are those where no plugin has
more than k measured configs (the top-k set then holds every candidate: a hit by construction).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from convlab.plugin import registry
from convlab.problem import Problem
from convlab.runtime.targets import Target

from convlab.autotune.costmodel import Model
from convlab.autotune.features import Features, features

from . import measured
from .fitting import Row, fit

HIT_MARGIN = 0.05  # a top-k set hits when one of its candidates is within 5 % of the best measured


@dataclass(frozen=True)
class Cand:
    """A measured candidate of a layer-op with its features."""

    plugin: str
    config: str
    ms: float
    features: Features
    priority: int
    config_rank: int  # its index in the plugin's configs today (a large number: not offered today)

    @property
    def label(self) -> str:
        return f"{self.plugin}[{self.config}]"


@dataclass
class LayerOp:
    network: str
    problem: Problem
    precision: str
    cands: list[Cand] = field(default_factory=list)

    def rows(self) -> list[Row]:
        return [Row(c.features, self.problem.op, c.ms) for c in self.cands]


@dataclass(frozen=True)
class Judgement:
    layer: LayerOp
    best: Cand
    pick: Cand
    priority_pick: Cand
    hit: bool
    topk_informative: bool

    @property
    def regret(self) -> float:
        return self.pick.ms / self.best.ms - 1

    @property
    def priority_regret(self) -> float:
        return self.priority_pick.ms / self.best.ms - 1


def layer_ops(rows: Iterable[measured.Measurement], target: Target) -> list[LayerOp]:
    """The layer-ops of ``rows`` with each candidate's features on ``target`` (plugins not registered
    here, or configs they cannot read, are left out)."""
    registry.load()
    out = []
    for (_, precision), ms in measured.by_context(rows).items():
        newest: dict[str, measured.Measurement] = {}
        for m in ms:
            if m.label not in newest or m.order > newest[m.label].order:
                newest[m.label] = m
        first = ms[0]
        layer = LayerOp(first.network, first.problem, precision)
        for m in newest.values():
            try:
                plugin = registry.get(m.plugin)
            except ValueError:
                continue
            config = measured.parse_config(m.config)
            names = [c.name for c in registry.safe_configs(plugin, m.problem, target)]
            rank = names.index(config.name) if config.name in names else 10**6
            layer.cands.append(Cand(m.plugin, m.config, m.ms,
                                    features(plugin, m.problem, config, target, m.workspace_limit),
                                    plugin.priority, rank))
        if layer.cands:
            out.append(layer)
    return out


def top_k(model: Model, layer: LayerOp, target: Target, k: int) -> list[Cand]:
    """Each plugin's ``k`` candidates of lowest estimate."""
    est = {c.label: model.estimate_ms(c.features, layer.problem.op, target) for c in layer.cands}
    chosen = []
    for plugin in {c.plugin for c in layer.cands}:
        mine = sorted((c for c in layer.cands if c.plugin == plugin), key=lambda c: est[c.label])
        chosen += mine[:k]
    return chosen


def judge(model: Model, layer: LayerOp, target: Target, k: int) -> Judgement:
    best = min(layer.cands, key=lambda c: c.ms)
    pick = min(layer.cands, key=lambda c: (model.estimate_ms(c.features, layer.problem.op, target), c.label))
    prio = min(layer.cands, key=lambda c: (-c.priority, c.config_rank, c.label))
    chosen = top_k(model, layer, target, k)
    hit = min(c.ms for c in chosen) <= best.ms * (1 + HIT_MARGIN)
    counts = [sum(c.plugin == p for c in layer.cands) for p in {c.plugin for c in layer.cands}]
    return Judgement(layer, best, pick, prio, hit, max(counts) > k)


def shape_key(problem: Problem) -> tuple:
    return problem.replace(dtype="float32").key()


def held_out_fit(layers: Sequence[LayerOp], network: str, target: Target, target_class: str) -> Model:
    """A model fitted on every layer-op whose layer is not one of ``network``'s."""
    held = measured.network_shapes().get(network, set()) | \
        {shape_key(lay.problem) for lay in layers if lay.network == network}
    rows = [r for lay in layers if shape_key(lay.problem) not in held for r in lay.rows()]
    return fit(rows, target, target_class)


def leave_one_out(layers: Sequence[LayerOp], target: Target, target_class: str, k: int,
                  networks: Iterable[str] | None = None) -> dict[str, tuple[Model, list[Judgement]]]:
    """Per network: the model fitted without it and the judgements of its layer-ops."""
    nets = sorted({lay.network for lay in layers} - {"other"}) if networks is None else list(networks)
    out = {}
    for net in nets:
        model = held_out_fit(layers, net, target, target_class)
        out[net] = (model, [judge(model, lay, target, k) for lay in layers if lay.network == net])
    return out


def geomean_regret(regrets: Sequence[float]) -> float:
    """exp(mean(log(1 + regret))) - 1 (0 for none)."""
    if not regrets:
        return 0.0
    return math.exp(sum(math.log1p(r) for r in regrets) / len(regrets)) - 1


@dataclass(frozen=True)
class Summary:
    """The figures of one table row (judgements of layer-ops with two or more candidates)."""

    layer_ops: int
    single: int
    heuristic_geomean: float
    heuristic_worst: float
    heuristic_within: float  # share of layer-ops whose pick is within HIT_MARGIN of the best
    priority_geomean: float
    priority_worst: float
    topk_hit: float
    topk_informative: int
    topk_hit_informative: float


def summarise(judgements: Sequence[Judgement]) -> Summary:
    multi = [j for j in judgements if len(j.layer.cands) > 1]
    info = [j for j in multi if j.topk_informative]
    share = lambda js, f: sum(map(f, js)) / len(js) if js else float("nan")  # noqa: E731
    return Summary(len(multi), len(judgements) - len(multi), geomean_regret([j.regret for j in multi]),
                   max((j.regret for j in multi), default=0.0),
                   share(multi, lambda j: j.regret <= HIT_MARGIN),
                   geomean_regret([j.priority_regret for j in multi]),
                   max((j.priority_regret for j in multi), default=0.0),
                   share(multi, lambda j: j.hit), len(info), share(info, lambda j: j.hit))
