"""How an op picks its (plugin, config): the strategy rules, one line each.

- ``"auto"``: the autotuner's winner for the shape key (from its cache, else timed and checked on the
  GPU now); on the simulator, without a cached entry, the highest declared priority and its first config.
- ``"auto"`` again, if the chosen plugin's kernel raises: that plugin is excluded (with a warning naming
  it) for the rest of the process and the next choice runs (ops.py).
- ``"<plugin name>"``: that plugin, with its first applicable config; if it declines, ValueError
  quoting its reason (never a silent fallback).
- ``("<plugin name>", config)``: that plugin and config (a Config, a dict, or the config's name).
- a :class:`~convlab.plugin.registry.Candidate`: used as is, after the same applicability check.
- ``direct`` accepts every valid float32/float64 problem and ``widen`` every fp16/bf16 one (on the
  float32 plugins), so ``"auto"`` always finds a candidate.
"""
from __future__ import annotations

from typing import Any

from . import registry
from .contract import config_from
from convlab.problem import Problem
from .registry import Candidate

Strategy = Any  # "auto" | str | tuple[str, Config | dict | str] | Candidate


def by_priority(problem: Problem, workspace_limit: int) -> Candidate:
    """The highest-priority eligible plugin with its first applicable config."""
    for plugin in registry.plugins(problem.op):
        for config in registry.safe_configs(plugin, problem):
            if registry.verdict(plugin, problem, config, workspace_limit):
                return Candidate(plugin, config)
    raise ValueError(f"no registered plugin can run {problem.describe()}")


def _forced(plugin_name: str, config: Any, problem: Problem, workspace_limit: int) -> Candidate:
    plugin = registry.get(plugin_name)
    configs = registry.safe_configs(plugin, problem)
    if config is not None:
        chosen = config_from(config, configs)
        verdict = registry.verdict(plugin, problem, chosen, workspace_limit)
        if not verdict:
            raise ValueError(f"algorithm {plugin_name!r} with config {chosen.name} cannot run "
                             f"{problem.describe()}: {verdict.reason}")
        return Candidate(plugin, chosen)
    first = None
    for chosen in configs:
        verdict = registry.verdict(plugin, problem, chosen, workspace_limit)
        if verdict:
            return Candidate(plugin, chosen)
        first = verdict if first is None else first
    reason = first.reason if first is not None else "it offers no configuration for this problem"
    raise ValueError(f"algorithm {plugin_name!r} cannot run {problem.describe()}: {reason}")


def resolve(problem: Problem, strategy: Strategy, workspace_limit: int) -> Candidate:
    """Turn a user's ``algorithm=`` argument into the candidate that will run ``problem``."""
    if isinstance(strategy, Candidate):
        return _forced(strategy.plugin.name, strategy.config, problem, workspace_limit)
    if isinstance(strategy, tuple):
        if len(strategy) != 2 or not isinstance(strategy[0], str):
            raise TypeError(f"algorithm must be 'auto', a plugin name or (name, config), got {strategy!r}")
        return _forced(strategy[0], strategy[1], problem, workspace_limit)
    if not isinstance(strategy, str):
        raise TypeError(f"algorithm must be 'auto', a plugin name or (name, config), got {strategy!r}")
    if strategy == "auto":
        return auto(problem, workspace_limit)
    return _forced(strategy, None, problem, workspace_limit)


def auto(problem: Problem, workspace_limit: int) -> Candidate:
    """The ``"auto"`` rule: :func:`convlab.autotune.choose` (cached tuning result, else tuned on a GPU,
    else, on the simulator, the highest declared priority)."""
    from convlab import autotune

    return autotune.choose(problem, workspace_limit)
