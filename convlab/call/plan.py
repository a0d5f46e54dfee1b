"""Launch plans: a candidate's launches for a problem, recorded once and replayed on new operands.

    record(candidate, problem, (a, b, bias, out), ...) -> Plan   run once, the launches recorded
    plan.run(a, b, bias, out, stream)                    replay: the output (``out`` or a new one),
                                                         thin launches, one CUDA graph once repeated

The public op records the first call of each call signature (op, each operand's kind/shape/strides/
dtype/device, options, ``algorithm``, workspace limit; :func:`call_key`) after its argument checks, and
keeps the plan in the current device's table (:func:`store`, :func:`lookup`); a later call with the
same key only builds the key, allocates its output and replays. Every check of the full path reads only
what the key holds, and a failing call stores no plan, so a bad argument raises the same error on every
call. The autotuner records each candidate the same way and times its replays.

A stored plan is dropped (and rebuilt on the next call) when the host state that chose it changes: plugins
registered or unregistered, the autotuner's key policy, deterministic flag, float32 precision and the
workspace-limit setting (:func:`host_state`), or what its ``check`` says (the op's: its plugin not set
aside for the problem, and the remembered ``"auto"`` decision for it). Every such change bumps :func:`convlab.runtime.settings.generation`;
a lookup compares one integer and re-checks the plan only when the generation moved. Calls whose ``out`` overlaps an input are not replayed (the full path runs).
Calls with channels-last operands are planned like any other (the strides are part of the key): the
recording holds the layout copies of a plugin that takes only NCHW (convlab.kernels.data.layouts) on buffers the
plan owns, and a new output is allocated channels-last when the first input is. A plugin whose
``run`` does host work each call sets
``replayable = False``; its calls are never planned. Plans with aliased operands are not made.

Bounds: at most ``MAX_PLANS`` plans and ``MAX_HELD_BYTES`` bytes of device memory held by their
recorded workspaces (least recently stored dropped first); :func:`clear` drops all.
"""
from __future__ import annotations

import collections
import logging
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np

from convlab.call import graphs as _graphs
from convlab.call import operands as _operands
from convlab.call.candidate import run_candidate
from convlab.plugin import registry
from convlab.runtime import context, launch, settings
from convlab.runtime.thin import stream_handle as _stream_handle

log = logging.getLogger(__name__)
MAX_PLANS = 256
MAX_HELD_BYTES = 512 * 2**20


class Table:
    """The current device's plans (the context's "plans" store), least recently stored first."""

    def __init__(self) -> None:
        self.plans: "collections.OrderedDict[tuple, Plan]" = collections.OrderedDict()
        self.lock = threading.Lock()
        self.stats = {"built": 0, "replayed": 0}

    def clear(self) -> None:
        with self.lock:
            self.plans.clear()


def _table() -> Table:
    return context.current().store("plans", Table)


class Plan:
    """The recorded launches of one call signature and the candidate that made them.

    Everything a replay needs beyond the operands is fixed here once: the output's shape, dtype and
    allocator (torch, on the first operand's device, or the output pool), the device whose current
    stream a torch call runs on, and the thin launches (see :meth:`run`)."""

    def __init__(self, candidate: Any, launches: Sequence[launch.Launch], out_shape: tuple, dtype: str,
                 signatures: Sequence[Any] = (), channels_last_out: bool = False,
                 check: Callable[[], bool] | None = None) -> None:
        self.candidate, self.out_shape, self.dtype = candidate, out_shape, dtype
        self.check = check  # what else the plan depends on (an "auto" decision): True while valid
        self.counts: dict | None = None  # the table's counters, once the plan is stored
        self.channels_last_out = channels_last_out  # a new output is allocated channels-last
        self.launches = list(launches)
        self.state = host_state()
        self.generation = settings.generation()
        self.held_bytes = held_by(self.launches)
        self.thin = all(rec.thin is not None for rec in self.launches)
        self.thins = [rec.thin for rec in self.launches] if self.thin else []
        self.graphs = _graphs.Graphs(self.thins)  # used on a GPU only: thin launches are GPU-only
        self.extents = extents_of(signatures)  # bytes of each operand, from the key
        first = signatures[0] if signatures else None
        self.torch_device = first[4] if first and first[0] == "torch" else None  # None: not torch
        self.numba_out = first is not None and first is not False and first[0] != "torch"
        self._empty = self._raw_stream = None
        if self.torch_device is not None:
            torch = sys.modules["torch"]
            self._empty = torch.empty
            self._out_args = (self.out_shape,)
            self._out_kwargs = {"dtype": getattr(torch, dtype), "device": torch.device("cuda", self.torch_device)}
            if channels_last_out:
                self._out_kwargs["memory_format"] = (torch.channels_last_3d if len(self.out_shape) == 5
                                                     else torch.channels_last)
            self._raw_stream = _operands.raw_stream_getter()

    def _writes_an_input(self, bases: list[int], recs: Sequence[Any]) -> bool:
        """True when ``out`` (at ``bases[3]``) overlaps an input's memory (the inputs may overlap each
        other: they are only read). Extents from the key when it has them."""
        extents = self.extents or [rec.nbytes for rec in recs]
        lo, size = bases[3], extents[3]
        return size > 0 and any(n > 0 and p < lo + size and lo < p + n
                                for p, n, rec in zip(bases[:3], extents[:3], recs) if rec[2] is not None)

    def replay(self, operands: Sequence[Any], bases: Sequence[int], stream: Any) -> None:
        """Re-issue every launch with operand slot ``s`` at ``bases[s]`` (``operands[s]`` is the
        device array; only read when a launch has no thin path)."""
        for rec in self.launches:
            rec.replay(operands, bases, stream)

    def run(self, recs: Sequence[Any], stream: Any) -> Any:
        """One planned call on the operand records ``recs`` = (a, b, bias, out) (convlab.call.operands:
        absent ones :data:`~convlab.call.operands.ABSENT`): the output (``out`` or a new one), replayed
        on the call's stream. None when this call cannot replay (operands that overlap ``out``): the
        caller takes the full path."""
        ra, rb, rbias, rout = recs
        out = rout[2]
        torch_call = self._empty is not None
        if stream is None and torch_call and self._raw_stream is not None:
            handle, st = self._raw_stream(self.torch_device), None  # rule 2 for a torch first operand
        else:
            st = _operands.resolve_stream(stream, recs)
            handle = _stream_handle(st)
        if out is not None:
            result, at = out, rout[1]
        else:
            if torch_call:
                result = self._empty(*self._out_args, **self._out_kwargs)
            else:
                result = _operands.empty_like_kind(ra, self.out_shape, self.dtype, st,
                                                   channels_last=self.channels_last_out)
            at = _operands.data_pointer(result)
        bases = [ra[1], rb[1], rbias[1], at]
        if out is not None and self._writes_an_input(bases, recs):
            return None
        if self.thin:
            if not self.graphs.run(bases, handle):  # a graph of the launches (convlab.call.graphs), else each
                self.replay(None, bases, handle)
        else:
            values = (ra[2], rb[2], rbias[2], result)
            devs = [None if v is None else _operands.as_device(v) for v in values]
            if st is None:
                st = _operands.resolve_stream(None, recs)
            self.replay(devs, bases, st)
        if self.counts is not None:
            self.counts["replayed"] += 1
        return result


def extents_of(signatures: Sequence[Any]) -> list[int] | None:
    """Bytes (elements x itemsize, as :func:`convlab.call.operands.pointer` counts) of each operand of a
    call key's signatures (0 for an absent one); None when a signature does not say."""
    out = []
    for sig in signatures:
        if sig is None:
            out.append(0)
        else:
            size = _itemsize(sig[3]) if sig and sig[0] in ("torch", "numba") else None
            if not size:
                return None
            out.append(int(np.prod(sig[1], dtype=np.int64)) * size)
    return out if len(out) == 4 else None


def _itemsize(dtype: Any) -> int | None:
    """Bytes per element of a torch dtype or a numpy dtype (or its string); None when unknown."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def held_by(launches: Sequence[launch.Launch]) -> int:
    """Device bytes the recorded launches keep alive, each buffer once: the sub-batches of an
    explicit-GEMM call all launch on one column buffer (counting it per launch made a plan of a large
    layer look too big to keep, so every call recorded again on a freshly allocated buffer)."""
    total, reach = 0, -1  # the union of the [ptr, ptr + bytes) ranges: views of one buffer overlap
    for lo, nbytes in sorted((ptr, n) for rec in launches for ptr, n in rec.owned):
        hi = lo + nbytes
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


_PLAIN = frozenset({int, str})


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
             workspace_limit: Any) -> tuple | None:
    """The plan key of a call, or None when it cannot be planned (host or unknown operands,
    unhashable options)."""
    if False in signatures:
        return None
    try:
        return (op, signatures, freeze(options), freeze(algorithm), freeze(workspace_limit))
    except TypeError:
        return None


def host_state() -> tuple:
    """What a plan's candidate depends on besides the call: the registered plugins, the autotuner's key
    policy and deterministic flag, the float32 precision (TF32 plugins
    decline float32 under "highest") and the workspace-limit setting. Read only when
    :func:`convlab.runtime.settings.generation` moved since the plan was last checked."""
    return (registry.state(), settings.get_key_policy(), settings.get_deterministic(),
            settings.get_float32_precision(), settings.get_workspace_limit())


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
    if plan.held_bytes > MAX_HELD_BYTES:
        return
    table = _table()
    plan.counts = table.stats
    with table.lock:
        table.plans[key] = plan
        table.plans.move_to_end(key)  # least recently stored dropped first
        table.stats["built"] += 1
        while len(table.plans) > MAX_PLANS or _held(table) > MAX_HELD_BYTES:
            table.plans.popitem(last=False)


def _held(table: Table) -> int:
    return sum(p.held_bytes for p in table.plans.values())


def record(candidate: Any, problem: Any, arrays: Sequence[Any], *, workspace_limit: int, stream: Any = 0,
           signatures: Sequence[Any] = (), channels_last_out: bool = False,
           check: Callable[[], bool] | None = None, spans: Sequence[Any] | None = None) -> Plan:
    """Run ``candidate`` once on the device operands ``arrays`` = (a, b, bias or None, out) on ``stream``
    through :func:`convlab.call.candidate.run_candidate`, as the public op does, recording its launches;
    the :class:`Plan` replays them on other operands. ``spans``: each operand's (pointer, bytes) when the
    caller has them. The public op stores the plans it records (:func:`store`); the autotuner times the
    replays of one (what a call costs, graphs included). Raises what the plugin raises."""
    if spans is None:
        spans = [None if v is None else _operands.pointer(v) for v in arrays]
    with launch.recording(spans) as recorded:
        run_candidate(candidate, problem, *arrays, workspace_limit, stream=stream)
    out = arrays[3]
    return Plan(candidate, recorded, tuple(out.shape), problem.dtype, signatures, channels_last_out, check)


def keepable(candidate: Any, problem: Any, limit: int) -> bool:
    """False when the candidate's workspace alone is over ``MAX_HELD_BYTES``: its plan would not be
    kept, and recording it would take its buffers out of the scratch pool for nothing (each call
    would then allocate them anew); such calls run unplanned on pooled buffers."""
    try:
        return candidate.plugin.workspace_bytes(problem, candidate.config, limit) <= MAX_HELD_BYTES
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
    """Plans built and replayed on the current device, and the current count and held bytes."""
    table = _table()
    with table.lock:
        return dict(table.stats, plans=len(table.plans), held_bytes=_held(table))
