"""Launch plans: a candidate's launches for a problem, recorded once and replayed on new operands.

    record(candidate, problem, (a, b, bias, out), ...) -> Plan   run once (convlab.call.candidate), the
                                                                 launches recorded
    plan.run(recs, stream)     replay on a call's operand records (convlab.call.replay): the output
                               (``out`` or a new one), thin launches, one CUDA graph once repeated
    call_key, lookup, store    the current device's table of plans

The public op records the first call of each call signature (op, each operand's kind/shape/strides/
dtype/device, options, ``algorithm``, workspace limit; :func:`call_key`) after its argument checks, and
keeps the plan in the current device's table (:func:`store`, :func:`lookup`); a later call with the
same key only builds the key, allocates its output and replays. Every check of the full path reads only
what the key holds, and a failing call stores no plan, so a bad argument raises the same error on every
call. The autotuner records each candidate the same way and times its replays.

A stored plan is dropped (and rebuilt on the next call) when the host state that chose it changes: plugins
registered or unregistered, the autotuner's key policy, deterministic flag, float32 precision and the
workspace-limit setting (:func:`host_state`), or what its ``check`` says (the op's: its plugin not set
aside for the problem, and the remembered ``"auto"`` decision for it). Every such change bumps
:func:`convlab.runtime.settings.generation`; a lookup compares one integer and re-checks the plan only
when the generation moved. Calls whose ``out`` overlaps an input are not replayed (the full path runs).
Calls with channels-last operands are planned like any other (the strides are part of the key): the
recording holds the layout copies of a plugin that takes only NCHW (convlab.kernels.data.layouts) on
buffers the plan owns, and a new output is allocated channels-last when the first input is. A plugin
whose ``run`` does host work each call sets ``replayable = False``; its calls are never planned. Plans
with aliased operands are not made.

Bounds: at most ``MAX_PLANS`` plans and :func:`held_limit` bytes of device memory held by their
recorded workspaces (least recently stored dropped first; ``stats()["dropped"]`` counts them); :func:`clear`
drops all. Each plan holds its own workspaces (a layout copy of a plugin that takes only NCHW included), so a
training step's plans hold the sum of its calls' workspaces, and a step over the bound records every call
again each step: the bound grows with the device (:func:`held_bound`).
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Sequence

from convlab import runtime
from convlab.call import operands as _operands
from convlab.call.candidate import run_candidate
from convlab.call.replay import Plan, extents_of, held_by, host_state  # noqa: F401  (re-exported)
from convlab.runtime import context, launch, settings

log = logging.getLogger(__name__)
MAX_PLANS = 256
#: the floor of the bytes plans may hold (the simulator's and the compile-only runtime's bound)
MAX_HELD_BYTES = 512 * 2**20
#: a device's plans may hold 1/HELD_FRACTION of its memory when that is more than the floor: 5 GB on an
#: 80 GB H100. MobileNetV2's 112x112 blocks (benchmarks/fused_stacks.py) train in float16 channels-last on
#: plans that hold ~640 MB, computed from their picks' layout copies and workspaces: over the 512 MiB floor,
#: every call recorded again each step (results/fused/h200/1f62cd9: 45.9 ms a step against torch's 2.3)
HELD_FRACTION = 16


class Table:
    """The current device's plans (the context's "plans" store), least recently stored first."""

    def __init__(self) -> None:
        self.plans: "collections.OrderedDict[tuple, Plan]" = collections.OrderedDict()
        self.lock = threading.Lock()
        self.stats = {"built": 0, "replayed": 0, "dropped": 0}
        self.limit: int | None = None  # held_limit(), read once per device

    def clear(self) -> None:
        with self.lock:
            self.plans.clear()


def _table() -> Table:
    return context.current().store("plans", Table)


_PLAIN = frozenset({int, str})


def held_bound(total_memory: int | None) -> int:
    """The bytes plans may hold on a device of ``total_memory`` bytes (None: no device): the larger of
    :data:`MAX_HELD_BYTES` and 1/:data:`HELD_FRACTION` of its memory."""
    return max(MAX_HELD_BYTES, (total_memory or 0) // HELD_FRACTION)


def held_limit() -> int:
    """The current device's bound on the bytes its plans hold (:func:`held_bound` of its memory)."""
    if not runtime.HAS_DEVICE:
        return held_bound(None)
    table = _table()
    if table.limit is None:
        table.limit = held_bound(runtime.total_memory())
    return table.limit


def freeze(value: Any) -> Any:
    """A hashable, type-exact form of an option (``True`` and ``1``, ``1`` and ``1.0`` differ): an
    exact ``int`` or ``str`` stands for itself, anything else is tagged with its type."""
    kind = type(value)
    if kind is int or kind is str:
        return value
    if isinstance(value, (list, tuple)):
        if _PLAIN.issuperset(map(type, value)):  # a shape or an int pair: no call per element
            return (kind, *value)
        return (kind, *map(freeze, value))
    hash(value)  # TypeError: not plannable
    return (kind, value)


def call_key(op: str, signatures: tuple, options: tuple, algorithm: Any,
             workspace_limit: Any, epilogue: Any = None) -> tuple | None:
    """The plan key of a call, or None when it cannot be planned (host or unknown operands,
    unhashable options); an ``epilogue`` adds its ``plan_key()``."""
    if False in signatures:
        return None
    try:
        return assemble(op, signatures, static_key(options, algorithm, workspace_limit),
                        None if epilogue is None else epilogue.plan_key())
    except TypeError:
        return None


def static_key(options: tuple, algorithm: Any, workspace_limit: Any) -> tuple:
    """The part of a call's plan key that is not its operands: its options, ``algorithm`` and workspace
    limit, frozen (:func:`freeze`; TypeError when unhashable). A caller that repeats a call with fixed
    options (convlab.torch.steady) computes it once."""
    return freeze(options), freeze(algorithm), freeze(workspace_limit)


def assemble(op: str, signatures: tuple, static: tuple, epilogue_key: Any = None) -> tuple:
    """The plan key of ``op`` on operands of ``signatures`` with the :func:`static_key` ``static`` and,
    for a call with an epilogue, its ``plan_key()`` (convlab.ops.epilogue.key_of)."""
    if epilogue_key is None:
        return (op, signatures, *static)
    return (op, signatures, *static, epilogue_key)


def _valid(plan: Plan) -> bool:
    generation = settings.generation()
    if plan.state != host_state() or (plan.check is not None and not plan.check()):
        return False
    plan.generation = generation  # unchanged for this plan: quick check again until the next change
    return True


def lookup(key: tuple) -> Plan | None:
    """The plan of ``key`` when it exists and the host state that chose it is unchanged (one integer
    compare while nothing changed; see :func:`convlab.runtime.settings.generation`)."""
    table = _table()
    plan = table.plans.get(key)
    if plan is None:
        return None
    if plan.generation != settings.generation() and not _valid(plan):
        with table.lock:
            table.plans.pop(key, None)
        return None
    return plan


def store(key: tuple, plan: Plan) -> None:
    """Memoize ``plan`` under ``key`` within the bounds (see the module docstring)."""
    log.info("convlab plan for %s: %s %s, %d launch(es) recorded, thin path: %s, %d workspace bytes",
             key[0], plan.candidate.plugin.name, plan.candidate.config.name, len(plan.launches), plan.thin,
             plan.held_bytes)
    limit = held_limit()
    if plan.held_bytes > limit:
        return
    table = _table()
    plan.counts = table.stats
    with table.lock:
        table.plans[key] = plan
        table.plans.move_to_end(key)  # least recently stored dropped first
        table.stats["built"] += 1
        while len(table.plans) > MAX_PLANS or _held(table) > limit:
            table.plans.popitem(last=False)
            table.stats["dropped"] += 1


def _held(table: Table) -> int:
    return sum(p.held_bytes for p in table.plans.values())


def record(candidate: Any, problem: Any, arrays: Sequence[Any], *, workspace_limit: int, stream: Any = 0,
           signatures: Sequence[Any] = (), channels_last_out: bool = False,
           check: Callable[[], bool] | None = None, spans: Sequence[Any] | None = None,
           epilogue: Any = None) -> Plan:
    """Run ``candidate`` once on the device operands ``arrays`` = (a, b, bias or None, out) on ``stream``
    through :func:`convlab.call.candidate.run_candidate`, as the public op does, recording its launches;
    the :class:`Plan` replays them on other operands. ``spans``: each operand's (pointer, bytes) when the
    caller has them. ``epilogue``: a checked one (convlab.ops.epilogue.DeviceEpilogue) run with the
    candidate, its residual, scale and shift operand slots 4-6 (:meth:`Plan.run`'s ``extra``). The
    public op stores the plans it records (:func:`store`); the autotuner times the replays of one (what
    a call costs, graphs included). Raises what the plugin raises."""
    if spans is None:
        spans = [None if v is None else _operands.pointer(v) for v in arrays]
        spans += epilogue.spans() if epilogue is not None else []
    with launch.recording(spans) as recorded:
        run_candidate(candidate, problem, *arrays, workspace_limit, stream=stream, epilogue=epilogue)
    out = arrays[3]
    return Plan(candidate, recorded, tuple(out.shape), problem.dtype, signatures, channels_last_out, check)


def keepable(candidate: Any, problem: Any, limit: int) -> bool:
    """False when the candidate's workspace alone is over :func:`held_limit`: its plan would not be
    kept, and recording it would take its buffers out of the scratch pool for nothing (each call
    would then allocate them anew); such calls run unplanned on pooled buffers."""
    try:
        return candidate.plugin.workspace_bytes(problem, candidate.config, limit) <= held_limit()
    except Exception:  # noqa: BLE001  (a plugin that cannot say is recorded as before)
        return True


def replayable(candidate: Any) -> bool:
    """False for plugins that opt out of replay (``replayable = False``: host work every call)."""
    return bool(getattr(candidate.plugin, "replayable", True))


def aliased(spans: Sequence[tuple[int, int] | None]) -> bool:
    """True when two operands' memory ranges overlap."""
    live = [s for s in spans if s is not None and s[1] > 0]
    return any(a[0] < b[0] + b[1] and b[0] < a[0] + a[1]
               for i, a in enumerate(live) for b in live[i + 1:])


def clear() -> None:
    """Drop every plan of the current device (and the workspaces they hold)."""
    _table().clear()


def stats() -> dict[str, int]:
    """Plans built, replayed and dropped for the bounds on the current device, and the current count,
    held bytes and bound."""
    table = _table()
    with table.lock:
        held = _held(table)
    return dict(table.stats, plans=len(table.plans), held_bytes=held, held_limit=held_limit())
