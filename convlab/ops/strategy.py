"""How an op picks its (plugin, config): the strategy rules, one line each.

- ``"auto"``: the autotuner's winner for the shape key (from its cache, else timed and checked on the
  GPU now); on the simulator, without a cached entry, the highest declared priority and its first config.
- ``"auto"`` again, if the chosen plugin's kernel raises: that plugin is set aside for that problem
  (with a warning naming it; convlab.plugin.registry.set_aside) and the next choice runs (ops/conv.py).
- ``"<plugin name>"``: that plugin, with its first applicable config; if it declines, ValueError
  quoting its reason (never a silent fallback).
- ``("<plugin name>", config)``: that plugin and config (a Config, a dict, or the config's name).
- a :class:`~convlab.plugin.registry.Candidate`: used as is, after the same applicability check.
- ``direct`` accepts every valid float32/float64 problem and ``widen`` every fp16/bf16 one (on the
  float32 plugins), so ``"auto"`` always finds a candidate.
"""
from __future__ import annotations

from typing import Any

from convlab.plugin import registry
from convlab.plugin.contract import config_from
from convlab.problem import Problem
from convlab.runtime.targets import Target
from convlab.plugin.registry import Candidate

Strategy = Any  # "auto" | str | tuple[str, Config | dict | str] | Candidate


def by_priority(problem: Problem, workspace_limit: int, target: Target | None = None) -> Candidate:
    """The highest-priority eligible plugin with its first applicable config (on ``target``,
    default: the current one)."""
    for plugin in registry.plugins(problem.op):
        for config in registry.safe_configs(plugin, problem, target):
            if registry.verdict(plugin, problem, config, workspace_limit, target):
                return Candidate(plugin, config)
    raise ValueError(f"no registered plugin can run {problem.describe()}")


def _forced(plugin_name: str, config: Any, problem: Problem, workspace_limit: int,
            target: Target | None = None) -> Candidate:
    plugin = registry.get(plugin_name)
    configs = registry.safe_configs(plugin, problem, target)
    if config is not None:
        chosen = config_from(config, configs)
        verdict = registry.verdict(plugin, problem, chosen, workspace_limit, target)
        if not verdict:
            raise ValueError(f"algorithm {plugin_name!r} with config {chosen.name} cannot run "
                             f"{problem.describe()}: {verdict.reason}")
        return Candidate(plugin, chosen)
    first = None
    for chosen in configs:
        verdict = registry.verdict(plugin, problem, chosen, workspace_limit, target)
        if verdict:
            return Candidate(plugin, chosen)
        first = verdict if first is None else first
    if first is None:  # no config: the plugin's own predicate says why, else that none fits the target
        first = registry.verdict(plugin, problem, None, workspace_limit, target)
    reason = first.reason if not first.ok else "it offers no configuration for this problem"
    raise ValueError(f"algorithm {plugin_name!r} cannot run {problem.describe()}: {reason}")


def resolve(problem: Problem, strategy: Strategy, workspace_limit: int,
            target: Target | None = None) -> Candidate:
    """Turn a user's ``algorithm=`` argument into the candidate that will run ``problem`` (on
    ``target``, default the current one; "auto" tunes only on the current one)."""
    if isinstance(strategy, Candidate):
        return _forced(strategy.plugin.name, strategy.config, problem, workspace_limit, target)
    if isinstance(strategy, tuple):
        if len(strategy) != 2 or not isinstance(strategy[0], str):
            raise TypeError(f"algorithm must be 'auto', a plugin name or (name, config), got {strategy!r}")
        return _forced(strategy[0], strategy[1], problem, workspace_limit, target)
    if not isinstance(strategy, str):
        raise TypeError(f"algorithm must be 'auto', a plugin name or (name, config), got {strategy!r}")
    if strategy == "auto":
        return auto(problem, workspace_limit) if target is None else by_priority(problem, workspace_limit,
                                                                                 target)
    return _forced(strategy, None, problem, workspace_limit, target)


def auto(problem: Problem, workspace_limit: int) -> Candidate:
    """The ``"auto"`` rule: :func:`convlab.autotune.choose` (cached tuning result, else tuned on a GPU,
    else, on the simulator, the highest declared priority)."""
    from convlab import autotune

    return autotune.choose(problem, workspace_limit)
