"""Fitting the cost model's constants (:mod:`convlab.autotune.costmodel`) to measured times in log space,
with a robust loss.

    loss = sum over rows of rho(log t_model(row) - log t_measured(row))
    rho(e) = 2 s**2 (sqrt(1 + (e / s)**2) - 1)          (pseudo-Huber, s = ROBUST_SCALE)

rho is e**2 for residuals well under s and grows like 2 s |e| beyond: a row whose time belongs to a kernel
other than the one its features describe (a row of an older commit, timed on a route since replaced)
pulls its group with a bounded gradient instead of its squared residual. On results/ at 743c455, the
leave-one-network-out regret is 1.9 % with s = 0.5 (2.2 % with 0.3, 2.3 % with 1.0) against 4.0 % for
least squares, one Burn TF32 wgrad row of 720ef48 (7.3 ms, timed before the wgrad slices) having moved
its group's compute efficiency from 1.0 to 0.42 (results/autotune_model/sm90/743c455/README.md).

Rows are (Features, op, measured ms). Two phases, each ROUNDS rounds of two steps:

    phase 1  groups ``family|arith|*`` (every row of the family and arithmetic, all ops)
    phase 2  groups ``family|arith|op`` with at least MIN_GROUP_ROWS rows, started from their phase-1
             group (an op with fewer rows keeps the coarse group)
    step a   each group's (e_compute, e_memory, l2_ratio) by Nelder-Mead on the group's rows, the shared
             constants held
    step b   the shared (e_aux, launch_ms, base_ms) by Nelder-Mead on every row, the groups held

Every constant is searched as its logarithm and clipped to BOUNDS (a compute efficiency above the
ceiling or a launch above 50 us is a fit gone astray, not physics). The formula is ``costmodel.formula`` itself,
evaluated on numpy arrays; nothing here needs scipy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from convlab.runtime.targets import Target

from convlab.autotune.costmodel import Group, Model, default_group, formula
from convlab.autotune.features import ARITH_CEILING, Features

#: the log residual (a factor e**0.5, about 1.65) beyond which a row's pull on the fit stops growing
ROBUST_SCALE = 0.5
MIN_GROUP_ROWS = 6  # rows an op-specific group needs to be fitted on its own
ROUNDS = 3
#: clip ranges: compute efficiency (at most the ceiling), memory efficiency (above 1: operands served
#: from L2), l2 ratio (multiples of DRAM bandwidth), e_aux, launch and base ms
BOUNDS = {"compute": (1e-4, 1.0), "memory": (1e-4, 1.5), "ratio": (0.3, 30.0), "aux": (0.02, 1.5),
          "launch": (1e-4, 0.05),
          "base": (1e-4, 0.1)}


def robust_loss(err: np.ndarray, scale: float | None = None) -> float:
    """The sum of the pseudo-Huber rho(err) (module docstring) at ``scale`` (default ROBUST_SCALE)."""
    s = ROBUST_SCALE if scale is None else scale
    x = err / s  # 2 s**2 (sqrt(1 + x**2) - 1), written without the cancellation for small x
    return float(np.sum(2 * err * err / (np.sqrt(1 + x * x) + 1)))


@dataclass(frozen=True)
class Row:
    """One measured candidate: its features, op and measured milliseconds."""

    features: Features
    op: str
    ms: float


def nelder_mead(fn: Callable[[np.ndarray], float], x0: Sequence[float], step: float = 0.5,
                iters: int = 400, tol: float = 1e-9) -> np.ndarray:
    """Minimise ``fn`` from ``x0`` (the standard reflection / expansion / contraction / shrink steps)."""
    n = len(x0)
    simplex = [np.asarray(x0, float)] + [np.asarray(x0, float) + step * np.eye(n)[i] for i in range(n)]
    values = [fn(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tol * (abs(values[0]) + tol):
            break
        centre = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        refl = centre + (centre - worst)
        f_refl = fn(refl)
        if f_refl < values[0]:
            exp = centre + 2.0 * (centre - worst)
            f_exp = fn(exp)
            simplex[-1], values[-1] = (exp, f_exp) if f_exp < f_refl else (refl, f_refl)
        elif f_refl < values[-2]:
            simplex[-1], values[-1] = refl, f_refl
        else:
            contr = centre + 0.5 * (worst - centre)
            f_contr = fn(contr)
            if f_contr < values[-1]:
                simplex[-1], values[-1] = contr, f_contr
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [fn(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def _clip(value: float, bound: str) -> float:
    lo, hi = BOUNDS[bound]
    return min(hi, max(lo, value))


class _Batch:
    """The rows as arrays (one entry per row), for the vectorised formula."""

    def __init__(self, rows: Sequence[Row], target: Target) -> None:
        f = [r.features for r in rows]
        col = lambda name: np.array([getattr(x, name) for x in f], float)  # noqa: E731
        self.flops, self.bytes = col("flops"), col("bytes")
        self.l2, self.aux = col("l2_bytes"), col("aux_bytes")
        self.launches = col("launches")
        self.wave = np.array([x.wave_efficiency(target.sm_count) for x in f])
        self.peak = np.array([target.tflops.get(ARITH_CEILING[x.arith][0], 0.0) * 1e12 *
                              ARITH_CEILING[x.arith][1] for x in f])
        self.bw = target.dram_bytes_per_s
        self.log_ms = np.log(np.array([r.ms for r in rows]))
        if np.any(self.peak <= 0) or self.bw <= 0:
            raise ValueError(f"target {target.name} lacks the ceilings of some rows' arithmetic")

    def loss(self, e_c: np.ndarray, e_m: np.ndarray, ratio: np.ndarray, model: Model,
             mask: np.ndarray | None = None) -> float:
        t = formula(self.flops, self.bytes, self.l2, self.aux, self.launches, self.wave, self.peak, self.bw,
                    e_c, e_m, ratio, model.e_aux, model.launch_ms, model.base_ms)
        err = np.log(t) - self.log_ms
        return robust_loss(err if mask is None else err[mask])


class _Fit:
    """Per-row group constants beside the batch; one group or the shared constants moved at a time."""

    def __init__(self, rows: Sequence[Row], target: Target, model: Model) -> None:
        self.rows, self.model, self.batch = rows, model, _Batch(rows, target)
        self.key = [""] * len(rows)
        self.e_c, self.e_m, self.ratio = (np.ones(len(rows)) for _ in range(3))

    def assign(self, key: str, index: np.ndarray) -> None:
        group = self.model.groups[key]
        for i in index:
            self.key[i] = key
        self.e_c[index], self.e_m[index], self.ratio[index] = group.e_compute, group.e_memory, group.l2_ratio

    def fit_group(self, key: str) -> None:
        index = np.array([i for i, k in enumerate(self.key) if k == key])
        start = self.model.groups[key]

        def make(x: np.ndarray) -> Group:
            return Group(_clip(math.exp(x[0]), "compute"), _clip(math.exp(x[1]), "memory"),
                         _clip(math.exp(x[2]), "ratio"), len(index))

        def fn(x: np.ndarray) -> float:
            g = make(x)
            e_c, e_m, ratio = self.e_c.copy(), self.e_m.copy(), self.ratio.copy()
            e_c[index], e_m[index], ratio[index] = g.e_compute, g.e_memory, g.l2_ratio
            mask = np.zeros(len(self.rows), bool)
            mask[index] = True
            return self.batch.loss(e_c, e_m, ratio, self.model, mask)

        x = nelder_mead(fn, [math.log(start.e_compute), math.log(start.e_memory), math.log(start.l2_ratio)])
        self.model.groups[key] = make(x)
        self.assign(key, index)

    def fit_shared(self) -> None:
        m = self.model

        def apply(x: np.ndarray) -> None:
            m.e_aux, m.launch_ms, m.base_ms = (_clip(math.exp(x[0]), "aux"), _clip(math.exp(x[1]), "launch"),
                                               _clip(math.exp(x[2]), "base"))

        def fn(x: np.ndarray) -> float:
            apply(x)
            return self.batch.loss(self.e_c, self.e_m, self.ratio, m)

        apply(nelder_mead(fn, [math.log(m.e_aux), math.log(m.launch_ms), math.log(m.base_ms)]))


def fit(rows: Sequence[Row], target: Target, target_class: str) -> Model:
    """A Model of ``target_class`` fitted on ``rows`` measured on ``target`` (module docstring)."""
    rows = [r for r in rows if r.ms > 0 and math.isfinite(r.ms)]
    if not rows:
        raise ValueError("rows must hold at least one measurement with a positive time")
    model = Model(target_class, source="fitted")
    state = _Fit(rows, target, model)
    coarse: dict[str, list[int]] = {}
    fine: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        f = r.features
        coarse.setdefault(f"{f.family}|{f.arith}|*", []).append(i)
        fine.setdefault(f"{f.family}|{f.arith}|{r.op}", []).append(i)
    for key, index in coarse.items():
        first = rows[index[0]].features  # a family's rows share its kind
        model.groups[key] = default_group(first.arith, first.kind)
        state.assign(key, np.array(index))
    for phase in (coarse, {k: v for k, v in fine.items() if len(v) >= MIN_GROUP_ROWS}):
        if phase is not coarse:
            for key, index in phase.items():
                family, arith, _ = key.split("|")
                model.groups[key] = model.groups[f"{family}|{arith}|*"]
                state.assign(key, np.array(index))
        for _ in range(ROUNDS):
            for key in sorted(phase):
                state.fit_group(key)
            state.fit_shared()
    return model


def rms_log_error(model: Model, rows: Sequence[Row], target: Target) -> float:
    """Root mean square of log(t_model / t_measured) over ``rows`` (0.1: about 10 % off)."""
    errs = [math.log(model.estimate_ms(r.features, r.op, target) / r.ms) for r in rows]
    return math.sqrt(sum(e * e for e in errs) / max(1, len(errs)))
