"""The cost model behind the ``heuristic`` and ``tune`` modes: an estimated time per (plugin, config).

For a candidate's :class:`~.features.Features` ``f`` on a target (peak FLOP/s ``P`` of its arithmetic,
DRAM bandwidth ``W``)::

    main  = max(f.flops / (e_compute * P), f.bytes / (e_memory * W), f.l2_bytes / (l2_ratio * W))
            / f.wave_efficiency(SMs)
    t_ms  = 1e3 * (main + f.aux_bytes / (e_aux * W)) + f.launches * launch_ms + base_ms

``e_compute``, ``e_memory`` and ``l2_ratio`` belong to the candidate's group (family, arithmetic, op),
looked up as ``family|arith|op``, then ``family|arith|*``, then ``family|*|*``, then the defaults of
:data:`DEFAULT_EFFICIENCY` for the kernel's kind (the physics alone; the kind is the candidate's
declared ``f.kind``, "tensor" for tensor-core arithmetic); ``e_aux`` (the copies, unfolds, folds and split sums:
streaming kernels), ``launch_ms`` and ``base_ms`` are one value each. The constants are fitted on
measured times (``python -m convlab.modelfit``) and shipped as JSON per target class in
``convlab/autotune/model/<class>.json`` (class: the named target, e.g. ``sm_90``; a GPU's: its nearest
named class).

:func:`model_for` answers, for a target:

    a fitted file that loads            -> that Model
    no file for the class               -> the physics: DEFAULT_EFFICIENCY on the target's ceilings
    a corrupt or stale file             -> None, with a RuntimeWarning: callers rank by declared priority
    no ceilings (the simulator)         -> None: ranking by declared priority (no warning)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from convlab.runtime.targets import TARGETS, Target, get as get_target, nearest

from convlab.plugin.cost import ARITH_CEILING, TENSOR_ARITHS, Features

FORMAT = "convlab-costmodel/1"
#: the feature definitions a file was fitted on (the plugins' ``cost_features`` declarations and
#: convlab.plugin.cost): a file of another version is stale (its constants belong to other features) and
#: is not used
FEATURES_VERSION = 1
MODEL_DIR = Path(__file__).with_name("model")
#: efficiencies without a fitted file: a share of the target's ceilings per kind of kernel
#: (convlab.plugin.cost.KINDS: tensor-core tiles, SIMT GEMM tiles, a stencil over shared halo tiles, one
#: thread per output, any other)
DEFAULT_EFFICIENCY = {"tensor": 0.35, "simt_gemm": 0.45, "stencil": 0.2, "per_output": 0.03, "other": 0.3}
DEFAULT_MEMORY, DEFAULT_L2_RATIO, DEFAULT_AUX = 0.6, 3.0, 0.5
DEFAULT_LAUNCH_MS, DEFAULT_BASE_MS = 0.004, 0.008


@dataclass(frozen=True)
class Group:
    """Fitted efficiencies of one (family, arithmetic, op) group; ``rows``: measurements it was fitted on."""

    e_compute: float
    e_memory: float
    l2_ratio: float
    rows: int = 0


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def default_group(arith: str, kind: str = "other") -> Group:
    """The physics defaults of a group no file fits: DEFAULT_EFFICIENCY of the kernel's ``kind``
    ("tensor" for tensor-core arithmetic, "other" for a kind it does not know)."""
    kind = "tensor" if arith in TENSOR_ARITHS else kind
    return Group(DEFAULT_EFFICIENCY.get(kind, DEFAULT_EFFICIENCY["other"]), DEFAULT_MEMORY, DEFAULT_L2_RATIO)


def formula(flops: Any, nbytes: Any, l2: Any, aux: Any, launches: Any, wave: Any, peak: Any, bw: Any,
            e_compute: Any, e_memory: Any, l2_ratio: Any, e_aux: Any, launch_ms: Any, base_ms: Any) -> Any:
    """The module docstring's t_ms, on floats or numpy arrays alike (the fit evaluates it on arrays).
    FLOPs, bytes, FLOP/s and bytes/s in; milliseconds out."""
    main = np.maximum(np.maximum(flops / (e_compute * peak), nbytes / (e_memory * bw)), l2 / (l2_ratio * bw))
    return 1e3 * (main / wave + aux / (e_aux * bw)) + launches * launch_ms + base_ms


@dataclass
class Model:
    """Constants of the formula in the module docstring, for one target class."""

    target_class: str
    groups: dict[str, Group] = field(default_factory=dict)
    e_aux: float = DEFAULT_AUX
    launch_ms: float = DEFAULT_LAUNCH_MS
    base_ms: float = DEFAULT_BASE_MS
    source: str = "physics defaults"  # where the constants come from (a file, or the defaults)
    meta: dict[str, Any] = field(default_factory=dict)  # what the fit recorded (files, rows, date)

    def group(self, family: str, arith: str, op: str, kind: str = "other") -> Group:
        """The fitted group of (family, arith, op) (module docstring), else the defaults of ``kind``."""
        for key in (f"{family}|{arith}|{op}", f"{family}|{arith}|*", f"{family}|*|*"):
            if key in self.groups:
                return self.groups[key]
        return default_group(arith, kind)

    def measured(self, family: str, arith: str, op: str) -> bool:
        """Whether the fitted file holds a group for (family, arith, op) (the lookup :meth:`group` makes);
        False for every group of the physics defaults."""
        return any(k in self.groups for k in (f"{family}|{arith}|{op}", f"{family}|{arith}|*", f"{family}|*|*"))

    def estimate_ms(self, f: Features, op: str, target: Target) -> float:
        """Estimated milliseconds of one call (module docstring); inf on a target without ceilings."""
        return self.parts_ms(f, op, target)["total"]

    def parts_ms(self, f: Features, op: str, target: Target) -> dict[str, float]:
        """The formula's terms in ms: compute, memory, l2, wave (efficiency), aux, launches, total."""
        ceiling, share = ARITH_CEILING[f.arith]
        peak = target.tflops.get(ceiling, 0.0) * 1e12 * share
        bw = target.dram_bytes_per_s
        if peak <= 0 or bw <= 0:
            return {"total": math.inf}
        g = self.group(f.family, f.arith, op, f.kind)
        wave = f.wave_efficiency(target.sm_count)
        total = formula(f.flops, f.bytes, f.l2_bytes, f.aux_bytes, f.launches, wave, peak, bw, g.e_compute,
                        g.e_memory, g.l2_ratio, self.e_aux, self.launch_ms, self.base_ms)
        return {"compute": 1e3 * f.flops / (g.e_compute * peak), "memory": 1e3 * f.bytes / (g.e_memory * bw),
                "l2": 1e3 * f.l2_bytes / (g.l2_ratio * bw), "wave": wave,
                "aux": 1e3 * f.aux_bytes / (self.e_aux * bw), "launches": f.launches * self.launch_ms,
                "total": float(total)}

    def digest(self) -> str:
        """12 hex digits of sha256 over the constants (what a heuristic cache entry records)."""
        data = {k: v for k, v in self.to_dict().items() if k != "meta"}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

    # -- the JSON file --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON form: constants to 6 significant digits; a group is [e_compute, e_memory, l2_ratio,
        rows]."""
        return {"format": FORMAT, "features_version": FEATURES_VERSION, "target_class": self.target_class,
                "e_aux": _sig(self.e_aux), "launch_ms": _sig(self.launch_ms), "base_ms": _sig(self.base_ms),
                "groups": {k: [_sig(g.e_compute), _sig(g.e_memory), _sig(g.l2_ratio), g.rows]
                           for k, g in sorted(self.groups.items())},
                "meta": self.meta}

    @classmethod
    def from_dict(cls, data: Any, source: str = "") -> "Model":
        """The inverse of :meth:`to_dict`; ValueError saying what is wrong or stale."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"not a convlab cost model of format {FORMAT!r}")
        if data.get("features_version") != FEATURES_VERSION:
            raise ValueError(f"stale: fitted on features version {data.get('features_version')!r}, this "
                             f"convlab computes version {FEATURES_VERSION} (refit: python -m "
                             f"convlab.modelfit)")
        groups = {}
        for key, vals in dict(data["groups"]).items():
            e_c, e_m, ratio, rows = (float(v) for v in vals)
            if not all(math.isfinite(v) and v > 0 for v in (e_c, e_m, ratio)):
                raise ValueError(f"group {key!r} has a non-positive or non-finite constant")
            groups[str(key)] = Group(e_c, e_m, ratio, int(rows))
        scalars = [float(data[k]) for k in ("e_aux", "launch_ms", "base_ms")]
        if not all(math.isfinite(v) and v >= 0 for v in scalars) or scalars[0] <= 0:
            raise ValueError("e_aux, launch_ms and base_ms must be finite, e_aux positive")
        return cls(str(data["target_class"]), groups, *scalars, source=source or "fitted",
                   meta=dict(data.get("meta") or {}))


def target_class(target: Target) -> str:
    """The class a target's model file is named by: a named target's name, else the nearest class."""
    if target.name in TARGETS and TARGETS[target.name].cc == target.cc:
        return target.name
    return nearest(target.cc).name


_lock = threading.Lock()
_loaded: dict[Path, tuple[tuple[int, int] | None, Model | None]] = {}
_warned: set[str] = set()
_override: list[tuple[Model | None, Target | None]] = []


def _warn(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(f"convlab cost model: {message}", RuntimeWarning, stacklevel=4)


def load(path: str | Path) -> Model:
    """The model in ``path``; ValueError (corrupt, stale) or OSError (unreadable)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    try:
        return Model.from_dict(data, str(path))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed ({type(exc).__name__}: {exc})") from None


def model_file(target: Target) -> Path:
    return MODEL_DIR / f"{target_class(target)}.json"


def model_for(target: Target) -> Model | None:
    """The model for ``target``, or None when candidates are ranked by declared priority (module
    docstring). Files are read once (again when they change); a bad one warns once."""
    if _override:
        return _override[-1][0]
    if target.simulator or not target.tflops or target.dram_bytes_per_s <= 0:
        return None
    path = model_file(target)
    try:
        st = path.stat()
        stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    with _lock:
        hit = _loaded.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        if stamp is None:
            model: Model | None = Model(target_class(target))
        else:
            try:
                model = load(path)
                if model.target_class != target_class(target):
                    raise ValueError(f"stale: fitted for {model.target_class}, not {target_class(target)}")
            except (OSError, ValueError) as exc:
                _warn(f"{path} cannot be used ({exc}); candidates are ranked by the plugins' declared "
                      "priorities instead")
                model = None
        _loaded[path] = (stamp, model)
        return model


def ceilings_for(target: Target) -> Target | None:
    """The target whose ceilings and SM count estimates for ``target`` use: itself when it has
    ceilings, else the ``ceilings`` of an active :func:`using` block, else None (no estimate)."""
    if target.tflops and target.dram_bytes_per_s > 0:
        return target
    return _override[-1][1] if _override else None


@contextlib.contextmanager
def using(model: Model | None, ceilings: str | Target | None = None) -> Iterator[Model | None]:
    """``with using(model):``: :func:`model_for` answers ``model`` for every target inside the block
    (None: rank by declared priority); ``ceilings`` (a target or its name) stands in for the ceilings of
    a target without any (the simulator's), so estimates can be made there. For tests and
    experiments; not thread-local."""
    _override.append((model, None if ceilings is None else get_target(ceilings)))
    try:
        yield model
    finally:
        _override.pop()


def forget() -> None:
    """Drop the models read so far and the warnings given (files are read again when next needed)."""
    with _lock:
        _loaded.clear()
        _warned.clear()
