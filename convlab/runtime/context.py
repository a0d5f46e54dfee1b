"""The per-device context: every table of state convlab keeps for a device, and :func:`reset`.

Launch plans, the scratch and output pools, the autotuner's remembered decisions, the plugins set aside
for a problem, device-resident parameter tables, loaded kernels and wrapped external streams all live in
the current device's :class:`Context`, each in a named store that its module owns:

    ctx = context.current()
    plans = ctx.store("plans", collections.OrderedDict)     # made on first use, the same dict after
    table = ctx.cached("implicit_gemm.params", key, make)    # get or make, under the context's lock
    ctx.on_reset("scratch", release)                         # run by reset() (e.g. free device memory)

:func:`reset` (``convlab.reset()``) empties every store of the current context and runs its reset
hooks: plans, pools and tables are dropped (their device memory freed), remembered decisions forgotten
(the tuning cache on disk stays). Nothing else holds device state, so no import order matters and a
reset process convolves as a new one would.

Threads: one context per device (a GPU's device id; one for the simulator and for compile-only), shared
by the threads using it. A store is a plain container: a module that mutates one holds ``ctx.lock`` (a
re-entrant lock) or its own lock. Launch state (the ambient stream, a plan being recorded) is per thread
(convlab.runtime.launch). On the simulator, whose kernels are not thread-safe, launches are serialised.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from convlab.runtime import device


class Context:
    """The named stores and reset hooks of one device (see the module docstring)."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.lock = threading.RLock()
        self._stores: dict[str, Any] = {}
        self._hooks: dict[str, Callable[[], None]] = {}

    def store(self, name: str, factory: Callable[[], Any] = dict) -> Any:
        """The store called ``name``, made by ``factory`` on first use."""
        found = self._stores.get(name)
        if found is None:
            with self.lock:
                found = self._stores.setdefault(name, factory())
        return found

    def cached(self, name: str, key: Any, make: Callable[[], Any], limit: int = 0) -> Any:
        """``store(name)[key]``, made by ``make()`` when absent (under the lock: made once); with a
        ``limit``, the store keeps that many entries, the oldest made dropped first."""
        table = self.store(name)
        try:
            return table[key]
        except KeyError:
            pass
        with self.lock:
            if key not in table:
                if limit and len(table) >= limit:
                    del table[next(iter(table))]  # dicts keep insertion order: the oldest first
                table[key] = make()
            return table[key]

    def on_reset(self, name: str, hook: Callable[[], None]) -> None:
        """Run ``hook()`` at :meth:`reset` (one hook per name: registering again replaces it)."""
        with self.lock:
            self._hooks[name] = hook

    def reset(self) -> None:
        """Run the reset hooks, then empty every store."""
        with self.lock:
            hooks = list(self._hooks.values())
        for hook in hooks:
            hook()
        with self.lock:
            for value in self._stores.values():
                clear = getattr(value, "clear", None)
                if clear is not None:
                    clear()

    def names(self) -> list[str]:
        """The stores made so far."""
        with self.lock:
            return sorted(self._stores)


_contexts: dict[Any, Context] = {}
_lock = threading.Lock()
_one: list[Context] = []  # the only context, when there is one device (the common case: no lookup)


def _device_key() -> Any:
    if not device.HAS_DEVICE:
        return device.MODE
    return ("gpu", int(device.cuda.get_current_device().id))


def current() -> Context:
    """The context of the current device (made on first use)."""
    if _one:
        return _one[0]
    key = _device_key()
    found = _contexts.get(key)
    if found is None:
        with _lock:
            found = _contexts.setdefault(key, Context(key))
            if not device.HAS_DEVICE or device.driver_gpu_count() == 1:
                _one[:] = [found]
    return found


def reset() -> None:
    """Drop everything convlab holds for the current device: launch plans and their graphs, the scratch
    and output pools (device memory freed), the autotuner's remembered decisions (not its disk cache),
    the plugins set aside for a problem, parameter tables and loaded kernels."""
    current().reset()
