"""Launch plans: the per-call work of an op done once per call signature.

The first call of an op with a given signature (op, each operand's kind/shape/strides/dtype/device,
options, ``algorithm``, workspace limit; see :func:`call_key`) goes the full way: argument checks, the
Problem, the strategy/autotuner's candidate, and the plugin's ``run``, recorded by
:func:`convlab.launch.recording`. The recording becomes a :class:`Plan`, memoized under the key. A
later call with the same key only builds the key, allocates its output and replays the launches
with the new operand pointers. Every check of the full path reads only what the key holds, and a
failing call stores no plan, so a bad argument raises the same error on every call.

A plan is dropped (and rebuilt on the next call) when the host state that chose it changes: plugins
registered/unregistered or marked broken, the autotuner's key policy, deterministic flag or its
remembered ``"auto"`` decision for this problem (see :func:`host_state`, :func:`decision_of`).
A plugin whose ``run`` does host work each call sets
``replayable = False``; its calls are never planned. Plans with aliased operands are not made.

Bounds: at most ``MAX_PLANS`` plans and ``MAX_HELD_BYTES`` bytes of device memory held by their
recorded workspaces (least recently used dropped first); :func:`clear` drops all.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Sequence

from . import launch, settings
from .autotune import tuner
from .plugin import registry

log = logging.getLogger(__name__)
MAX_PLANS = 256
MAX_HELD_BYTES = 512 * 2**20

_plans: "collections.OrderedDict[tuple, Plan]" = collections.OrderedDict()
_lock = threading.Lock()
_stats = {"built": 0, "replayed": 0}


class Plan:
    """The recorded launches of one call signature and the candidate that made them."""

    def __init__(self, candidate: Any, launches: Sequence[launch.Launch], state: tuple,
                 out_shape: tuple, dtype: str, decision: tuple | None = None) -> None:
        self.candidate, self.out_shape, self.dtype, self.decision = candidate, out_shape, dtype, decision
        self.launches = list(launches)
        self.state = state
        self.held_bytes = sum(rec.owned_bytes for rec in self.launches)
        self.thin = all(rec.thin is not None for rec in self.launches)

    def replay(self, operands: Sequence[Any], bases: Sequence[int], stream: Any) -> None:
        """Re-issue every launch with operand slot ``s`` at ``bases[s]`` (``operands[s]`` is the
        device array; only read when a launch has no thin path)."""
        for rec in self.launches:
            rec.replay(operands, bases, stream)


def freeze(value: Any) -> Any:
    """A hashable, type-exact form of an option (``True`` and ``1``, ``1`` and ``1.0`` differ)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(freeze(v) for v in value)
    hash(value)  # TypeError: not plannable
    return (type(value).__name__, value)


def call_key(op: str, signatures: Sequence[Any], options: Sequence[Any], algorithm: Any,
             workspace_limit: Any) -> tuple | None:
    """The plan key of a call, or None when it cannot be planned (host or unknown operands,
    unhashable options)."""
    if any(sig is False for sig in signatures):
        return None
    try:
        return (op, tuple(signatures), freeze(tuple(options)), freeze(algorithm), freeze(workspace_limit))
    except TypeError:
        return None


def host_state() -> tuple:
    """What a plan's candidate depends on besides the call: the registered plugins, those marked
    broken, the autotuner's key policy and deterministic flag, and the float32 precision (TF32
    plugins decline float32 under "highest"). Read from the modules' state directly: this runs on
    every planned call (under 1 us)."""
    return (registry.state(), settings.get_key_policy(), settings.get_deterministic(),
            settings.get_float32_precision())


def decision_of(problem: Any, workspace_limit: int) -> tuple | None:
    """(memo key, decision) of the autotuner's remembered ``"auto"`` choice for ``problem``; a plan
    made under ``"auto"`` is valid while that same decision object is remembered."""
    key = tuner.memo_key(problem, workspace_limit)
    return key, tuner.remembered(key)


def _valid(plan: Plan) -> bool:
    if plan.state != host_state():
        return False
    if plan.decision is None:
        return True
    key, decision = plan.decision
    return tuner.remembered(key) is decision


def lookup(key: tuple) -> Plan | None:
    """The plan of ``key`` when it exists and the host state that chose it is unchanged."""
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            return None
        _plans.move_to_end(key)
    if not _valid(plan):
        with _lock:
            _plans.pop(key, None)
        return None
    _stats["replayed"] += 1
    return plan


def store(key: tuple, plan: Plan) -> None:
    """Memoize ``plan`` under ``key`` within the bounds (see the module docstring)."""
    log.info("convlab plan for %s: %s %s, %d launch(es) recorded, thin path: %s, %d workspace bytes",
             key[0], plan.candidate.plugin.name, plan.candidate.config.name, len(plan.launches), plan.thin,
             plan.held_bytes)
    if plan.held_bytes > MAX_HELD_BYTES:
        return
    with _lock:
        _plans[key] = plan
        _plans.move_to_end(key)
        _stats["built"] += 1
        while len(_plans) > MAX_PLANS or held_bytes_locked() > MAX_HELD_BYTES:
            _plans.popitem(last=False)


def held_bytes_locked() -> int:
    return sum(p.held_bytes for p in _plans.values())


def replayable(candidate: Any) -> bool:
    """False for plugins that opt out of replay (``replayable = False``: host work every call)."""
    return bool(getattr(candidate.plugin, "replayable", True))


def aliased(spans: Sequence[tuple[int, int] | None]) -> bool:
    """True when two operands' memory ranges overlap."""
    live = [s for s in spans if s is not None and s[1] > 0]
    return any(a[0] < b[0] + b[1] and b[0] < a[0] + a[1]
               for i, a in enumerate(live) for b in live[i + 1:])


def clear() -> None:
    """Drop every plan (and the workspaces they hold)."""
    with _lock:
        _plans.clear()


def stats() -> dict[str, int]:
    """Plans built and replayed in this process, and the current count and held bytes."""
    with _lock:
        return dict(_stats, plans=len(_plans), held_bytes=held_bytes_locked())
