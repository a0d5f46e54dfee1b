"""``convlab.explain``: which plugins apply to a problem, why the others do not, and what is picked."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from convlab import autotune
from convlab.autotune.ranking import rank
from convlab.problem import Problem
from convlab.runtime import origin
from convlab.runtime.targets import Target, current as current_target

from convlab.plugin import registry
from convlab.plugin.contract import config_from
from convlab.ops import strategy


@dataclass
class PluginRow:
    """One plugin's answer for a problem (timings are filled in by the autotuner when it ran)."""

    name: str
    priority: int
    eligible: bool
    reason: str
    configs: int
    workspace_bytes: int | None
    median_ms: float | None = None
    check: str = ""
    estimate_ms: float | None = None  # the cost model's lowest estimate among its configs
    accuracy: str = ""  # the plugin's accuracy note on its first config (Algorithm.accuracy_note)


@dataclass
class Explanation:
    problem: Problem
    rows: list[PluginRow]
    chosen: str | None
    chosen_config: str | None
    source: str  # how the choice was made: "priority", "forced", "cache", "tuned", ...
    notes: list[str] = field(default_factory=list)
    tuning: Any = None  # the autotuner's TuneResult (algorithm="auto"): every candidate's median, check
    target: Target | None = None  # the machine the verdicts are for
    estimates: dict[str, float] = field(default_factory=dict)  # the cost model's ms per candidate label
    why_none: str = ""  # when nothing is picked: why (what the op would raise with this algorithm)
    picked_by: str = ""  # whose pick: "tuned", "model" (mode heuristic), "priority" or "forced" (TuneResult.picked_by)
    kernels: str = ""  # where the chosen candidate's kernels came from (convlab.runtime.origin.describe)

    def __str__(self) -> str:
        lines = [f"problem: {self.problem.describe()}"]
        if self.target is not None:
            lines.append(f"target: {self.target.describe()}")
        lines += [
                 f"GEMM view (M, N, K) per group: {self.problem.gemm_shape()}, "
                 f"{self.problem.flops / 1e9:.3g} GFLOP"]
        width = max([len(r.name) for r in self.rows] + [6])
        for r in self.rows:
            mark = "*" if r.name == self.chosen else " "
            status = "eligible" if r.eligible else f"declines: {r.reason}"
            extra = ""
            if r.eligible and r.workspace_bytes:
                extra += f"  workspace {r.workspace_bytes / 2**20:.2f} MiB"
            if r.estimate_ms is not None:
                extra += f"  est {r.estimate_ms:.4g} ms"
            if r.median_ms is not None:
                extra += f"  median {r.median_ms:.4g} ms"
            if r.check:
                extra += f"  check {r.check}"
            if r.eligible and r.accuracy:
                extra += f"  accuracy: {r.accuracy}"
            lines.append(f" {mark} {r.name:<{width}}  prio {r.priority:>3}  {status}{extra}")
        lines += self._candidate_lines()
        origin = {"cache": "from the cache", "tuned": "tuned now", "priority": "by declared priority",
                  "heuristic": "by the cost model, nothing timed"}
        lines.append(f"picked: {self.chosen}[{self.chosen_config}] ({origin.get(self.source, self.source)})"
                     if self.chosen is not None else f"picked: nothing: {self.why_none}")
        if self.picked_by:  # whose pick it is; the tuning's own words carry its mode
            lines.append("pick: " + (self.tuning.pick_text() if self.tuning is not None and self.chosen
                                     else _PICKED_BY[self.picked_by]))
        lines.extend(f"note: {n}" for n in self.notes)
        if self.kernels:
            lines.append(f"kernels of the pick: {self.kernels}")
        return "\n".join(lines)

    def _candidate_lines(self) -> list[str]:
        """Every candidate: the cost model's estimate beside its measured median, where there are."""
        est = self.estimates
        if self.tuning is not None and self.tuning.candidates:
            won = self.tuning.winner_label
            rows = [(c.label, c.median_ms, f"{c.verdict}{' (dropped early)' if c.dropped_early else ''}")
                    for c in self.tuning.candidates]
        elif est:
            won = f"{self.chosen}[{self.chosen_config}]"
            rows = [(label, None, "not timed") for label in sorted(est, key=est.get)]
        else:
            return []
        lines = ["candidates (" + ("estimate, " if est else "") + "median, check):"]
        width = max(len(r[0]) for r in rows)
        for label, med, verdict in rows:
            guess = (f"{'est ' + format(est[label], '.4g') + ' ms' if label in est else '-':>16}  "
                     if est else "")
            med_text = "-" if med is None else f"{med:.4g} ms"
            lines.append(f" {'*' if label == won else ' '} {label:<{width}}  {guess}{med_text:>12}  {verdict}")
        return lines

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython display
        p.text(str(self))


_PICKED_BY = {"model": "the cost model's (mode 'heuristic': nothing timed)",
              "priority": "declared priority (no cost model applies: nothing timed)",
              "forced": "forced by algorithm="}


def plugin_rows(prob: Problem, workspace_limit: int, target: Target | None = None) -> list[PluginRow]:
    """One row per registered plugin: its verdict on ``target`` (default: the current one), configs and
    workspace."""
    target = current_target() if target is None else target
    rows = []
    for plugin in registry.plugins():
        configs = registry.safe_configs(plugin, prob, target)
        verdict = registry.verdict(plugin, prob, configs[0] if configs else None, workspace_limit, target)
        ws, note = None, ""
        if verdict and configs:
            try:
                ws = plugin.workspace_bytes(prob, configs[0], workspace_limit, target=target)
                note = plugin.accuracy_note(prob, configs[0])
            except Exception:
                ws = None
        rows.append(PluginRow(plugin.name, plugin.priority, verdict.ok, verdict.reason, len(configs), ws,
                              accuracy=note))
    return rows


def explain_problem(prob: Problem, *, algorithm: Any = "auto", workspace_limit: int,
                    target: Target | str | None = None) -> Explanation:
    """The rows, the pick and how it was made, with the cost model's estimates. On a ``target`` other
    than the current one (e.g. a named GPU target on a machine without one) nothing is timed: the pick
    under "auto" is by priority, or the cost model's in mode "heuristic"."""
    from convlab.runtime.settings import get_float32_precision, get_tune_mode
    from convlab.runtime.targets import get as get_target

    here = current_target()
    target = here if target is None else get_target(target)
    notes: list[str] = []
    if prob.ndim == 1:  # the ops run a conv1d as its 2D embedding (convlab.ops.conv_nd)
        notes.append(f"1D problem {prob.describe()} runs as its 2D embedding (H = R = P = 1, operands "
                     f"viewed with a unit height) on the 2D plugins")
        prob = prob.lowered()
    _check_forced(prob, algorithm, target)
    rows = plugin_rows(prob, workspace_limit, target)
    if prob.dtype == "float32":  # TF32 plugins are candidates only under "high"
        notes.append(f"float32 precision: {get_float32_precision()}")
    tuning, estimates, picked_by = None, {}, "forced"
    if isinstance(algorithm, str) and algorithm == "auto":
        notes.append(autotune.modes.describe(get_tune_mode()))
    try:
        if target != here:
            cand = (strategy.by_priority(prob, workspace_limit, target) if algorithm == "auto" else
                    strategy.resolve(prob, algorithm, workspace_limit, target))
            source = picked_by = "priority" if algorithm == "auto" else "forced"
            notes.append(f"target {target.name} is not this machine's ({here.name}): nothing was timed")
            ranked = _ranking(prob, workspace_limit, target)
            estimates = ranked.estimates
            if algorithm == "auto" and ranked.by_model:  # what mode "heuristic" would run there
                if get_tune_mode() == "heuristic":
                    cand, source, picked_by = ranked.order[0], "heuristic", "model"
                    notes.append(f"the pick is the first of the {ranked.how}")
                else:
                    notes.append(f"mode 'heuristic' would pick {ranked.order[0].label} (the first of the "
                                 f"{ranked.how})")
            if ranked.unmeasured:
                notes.append("ranked after the measured groups, whatever their estimate (the fitted file "
                             f"holds no times of them): {', '.join(ranked.unmeasured)}")
        elif isinstance(algorithm, str) and algorithm == "auto":
            tuning = autotune.tune(prob, workspace_limit=workspace_limit)
            estimates = dict(tuning.estimates)
            _fill_rows(rows, tuning)
            if tuning.winner is None:
                raise RuntimeError(f"no candidate ran correctly: {tuning.reason}")
            cand, source, picked_by = tuning.winner, tuning.source, tuning.picked_by
            if tuning.source != "cache":
                notes.append(tuning.reason)
            notes.extend(tuning.notes)
        else:
            cand, source = strategy.resolve(prob, algorithm, workspace_limit), "forced"
        chosen, cfg = cand.plugin.name, cand.config.name
    except (ValueError, RuntimeError) as exc:  # the forced plugin declines, or no candidate ran correctly
        chosen, cfg, source, why_none, picked_by = None, None, "none", str(exc), ""
    else:
        why_none = ""
    _fill_estimates(rows, estimates)
    explanation = Explanation(prob, rows, chosen, cfg, source, notes, tuning, target, estimates, why_none,
                              picked_by)
    if chosen is not None:
        explanation.kernels = (origin.describe(prob, cand.label) if target == here else
                               f"not launched here (target {target.name})")
    return explanation


def _check_forced(prob: Problem, algorithm: Any, target: Target) -> None:
    """The errors the ops raise for an ``algorithm`` that names no registered plugin or no config of
    it (TypeError, ValueError listing the choices); a plugin that declines ``prob`` is no error here."""
    if isinstance(algorithm, str) and algorithm == "auto":
        return
    if isinstance(algorithm, registry.Candidate):
        name, config = algorithm.plugin.name, algorithm.config
    elif isinstance(algorithm, tuple) and len(algorithm) == 2 and isinstance(algorithm[0], str):
        name, config = algorithm
    elif isinstance(algorithm, str):
        name, config = algorithm, None
    else:
        raise TypeError(f"algorithm must be 'auto', a plugin name or (name, config), got {algorithm!r}")
    plugin = registry.get(name)  # ValueError listing the registered plugins
    if config is not None:
        config_from(config, registry.safe_configs(plugin, prob, target))


def _ranking(prob: Problem, workspace_limit: int, target: Target) -> Any:
    """The cost model's order of the candidates on ``target`` (empty estimates without a model)."""
    from convlab.runtime.settings import get_deterministic, get_tune_configs

    cands = registry.candidates(prob, workspace_limit, per_plugin=get_tune_configs(), target=target)
    cands = [c for c in cands if c.plugin.deterministic or not get_deterministic()]
    return rank(prob, cands, workspace_limit, target)


def _fill_estimates(rows: list[PluginRow], estimates: dict[str, float]) -> None:
    """Per plugin: the lowest estimate among its candidates."""
    for row in rows:
        mine = [ms for label, ms in estimates.items() if label.split("[", 1)[0] == row.name]
        row.estimate_ms = min(mine) if mine else None


def _fill_rows(rows: list[PluginRow], tuning: Any) -> None:
    """Per plugin: the best median among its configs that passed the check, else the first problem."""
    for row in rows:
        mine = [c for c in tuning.candidates if c.plugin == row.name and c.status != "not run"]
        good = [c for c in mine if c.status == "ok" and c.median_ms is not None]
        if good:
            row.median_ms = min(c.median_ms for c in good)
            row.check = f"ok ({len(good)}/{len(mine)} configs)" if len(mine) > 1 else "ok"
        elif mine:
            row.check = mine[0].verdict
        elif row.eligible and not any(c.plugin == row.name for c in tuning.candidates):
            row.check = "excluded: not deterministic (deterministic mode is on)"
