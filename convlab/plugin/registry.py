"""The plugin registry.

Built-in plugins live in ``convlab.algorithms`` (the repository's ``algorithms/`` folder): every module
there not starting with ``_`` is imported, and each ``@register``-decorated class becomes a plugin.
Plugins from other installed packages are found through the entry-point group ``convlab.algorithms``
(each entry point names a module or a plugin class). A plugin that fails to import, or whose predicate
raises, is reported by name and excluded; it never breaks the others. A plugin whose kernel raises on a
problem under "auto" is set aside for that problem only (:func:`set_aside`, kept in the device's context).
"""
from __future__ import annotations

import importlib
import pkgutil
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Iterable, TypeVar

from .contract import Algorithm, Config, Verdict
from convlab.problem import Problem
from convlab.runtime import context
from convlab.runtime.settings import bump_generation, get_allow_lossy
from convlab.runtime.targets import Target, current as current_target

ENTRY_POINT_GROUP = "convlab.algorithms"

_plugins: dict[str, Algorithm] = {}
_load_errors: dict[str, str] = {}
_loaded = False
_loading = False

A = TypeVar("A", bound=type)


def register(cls: A | None = None, *, replace: bool = False) -> Any:
    """Class decorator: instantiate ``cls`` and add it to the registry under ``cls.name``.

    ``@register``, ``@register(replace=True)`` and ``register(Cls, replace=True)`` all work. A name that
    is already registered raises ValueError unless ``replace=True`` (re-running a notebook cell, a test
    that swaps in an edited class)."""
    if cls is None:
        return lambda c: register(c, replace=replace)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise TypeError(f"@register expects a subclass of convlab.Algorithm, got {cls!r}")
    if not cls.name or not isinstance(cls.name, str):
        raise ValueError(f"plugin class {cls.__qualname__} needs a non-empty string 'name'")
    if not _loading:
        load()  # the built-ins first: a user's class cannot take a built-in's name unless replacing it
    unknown = set(cls.ops) - {"forward", "dgrad", "wgrad"}
    if not cls.ops or unknown:
        raise ValueError(f"plugin {cls.name!r}: ops must be a non-empty subset of forward/dgrad/wgrad")
    existing = _plugins.get(cls.name)
    if existing is not None and not replace:
        raise ValueError(f"a plugin named {cls.name!r} is already registered "
                         f"({type(existing).__module__}.{type(existing).__qualname__}); choose another "
                         f"name, or pass replace=True to replace it")
    _plugins[cls.name] = cls()
    bump_generation()
    return cls


def unregister(name: str) -> None:
    """Remove a plugin (used by tests and notebooks that register throw-away plugins)."""
    _plugins.pop(name, None)
    bump_generation()


def _load_builtin() -> None:
    package = importlib.import_module("convlab.algorithms")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"convlab.algorithms.{info.name}")
        except Exception as exc:  # a broken plugin must not break the others
            _report(f"convlab.algorithms.{info.name}", exc)


def _load_entry_points() -> None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if (isinstance(obj, type) and issubclass(obj, Algorithm)
                    and type(_plugins.get(obj.name)) is not obj):
                register(obj)  # a name taken by another class: ValueError, reported below
        except Exception as exc:
            _report(f"entry point {ep.name} ({ep.value})", exc)


def _report(where: str, exc: BaseException) -> None:
    _load_errors[where] = f"{type(exc).__name__}: {exc}"
    warnings.warn(f"convlab: plugin {where} failed to load and is excluded: {exc!r}", RuntimeWarning,
                  stacklevel=3)


def load(*, reload: bool = False) -> None:
    """Import built-in and entry-point plugins (idempotent; ``reload`` re-scans entry points)."""
    global _loaded, _loading
    if (_loaded and not reload) or _loading:
        return
    _loaded, _loading = True, True
    try:
        _load_builtin()
        _load_entry_points()
    finally:
        _loading = False


def _set_aside() -> dict:
    """The current device's plugins set aside per problem: {problem key: {plugin name: error}}."""
    return context.current().store("set_aside")


def set_aside(name: str, problem: Problem, exc: BaseException) -> None:
    """Decline plugin ``name`` for ``problem`` from now on (its kernel raised ``exc`` under "auto"), with
    a warning naming it; other problems are not affected. ``convlab.reset()`` or :func:`clear_set_aside`
    give it another chance."""
    with context.current().lock:
        _set_aside().setdefault(problem.key(), {})[name] = f"{type(exc).__name__}: {exc}"[:500]
    bump_generation()
    warnings.warn(f"convlab: plugin {name!r} raised {exc!r} on {problem.describe()} and is set aside for "
                  f"that problem", RuntimeWarning, stacklevel=3)


def set_aside_for(problem: Problem) -> dict[str, str]:
    """The plugins set aside for ``problem``, with the error each raised."""
    return dict(_set_aside().get(problem.key(), {}))


def clear_set_aside(name: str | None = None) -> None:
    """Give plugins set aside (``name``'s, or all) another chance on every problem."""
    with context.current().lock:
        table = _set_aside()
        for key in list(table):
            if name is None:
                table.pop(key)
            else:
                table[key].pop(name, None)
    bump_generation()


def state() -> tuple:
    """A cheap snapshot of which plugins may run: their object ids and the lossy setting
    (:func:`convlab.runtime.settings.get_allow_lossy`). It changes whenever a plugin is registered or
    unregistered or lossy configs are allowed or forbidden (convlab.call.plan's plans and the
    autotuner's remembered decisions key on it)."""
    return tuple(map(id, _plugins.values())), get_allow_lossy()


def load_errors() -> dict[str, str]:
    """Plugins that failed to load, with the error each raised."""
    load()
    return dict(_load_errors)


def plugins(op: str | None = None) -> list[Algorithm]:
    """Registered plugins (for ``op`` only, if given), highest priority first."""
    load()
    found = [p for p in _plugins.values() if op is None or op in p.ops]
    return sorted(found, key=lambda p: (-p.priority, p.name))


def get(name: str) -> Algorithm:
    """The plugin called ``name``; ValueError listing the known names otherwise."""
    load()
    if not isinstance(name, str):
        raise TypeError(f"algorithm must be 'auto' or a plugin name, got {name!r}")
    try:
        return _plugins[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {sorted(_plugins)}") from None


def verdict(plugin: Algorithm, problem: Problem, config: Config | None = None,
            workspace_limit: int | None = None, target: Target | None = None) -> Verdict:
    """``plugin.applicable(...)`` on ``target`` (default: the current one), with an exception in the
    predicate turned into a declining verdict, and a plugin set aside for this problem (its kernel
    raised on it: :func:`set_aside`) declined with that error."""
    aside = _set_aside()
    if aside:
        error = aside.get(problem.key(), {}).get(plugin.name)
        if error is not None:
            return Verdict.no(f"set aside for this problem: its kernel raised {error}")
    try:
        result = plugin.applicable(problem, config, workspace_limit, target=target)
        if not isinstance(result, Verdict):
            return Verdict.no(f"predicate returned {result!r}, not a Verdict")
        return result
    except Exception as exc:
        return Verdict.no(f"predicate raised {type(exc).__name__}: {exc}")


def workspace(plugin: Algorithm, problem: Problem, config: Config, workspace_limit: int,
              target: Target | None = None) -> int:
    """``plugin.workspace_bytes(...)`` on ``target`` (default: the current one)."""
    return int(plugin.workspace_bytes(problem, config, workspace_limit, target=target))


def run(plugin: Algorithm, problem: Problem, config: Config, a: Any, b: Any, bias: Any, out: Any, *,
        workspace_limit: int, target: Target | None = None) -> None:
    """Run ``plugin`` with ``config`` as the ops do: only when its verdict accepts the problem (a plugin
    that routes through another, as widen, runs it this way); ValueError quoting the reason otherwise."""
    found = verdict(plugin, problem, config, workspace_limit, target)
    if not found:
        raise ValueError(f"{plugin.name}[{config.name}] cannot run {problem.describe()}: {found.reason}")
    plugin.run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)


def safe_configs(plugin: Algorithm, problem: Problem, target: Target | None = None) -> list[Config]:
    """``plugin.configs(problem, target)`` (default: the current target), empty when the plugin raises."""
    try:
        return list(plugin.configs(problem, target=current_target() if target is None else target))
    except Exception:
        return []


@dataclass(frozen=True)
class Candidate:
    """One (plugin, config) pair that may run a problem."""

    plugin: Algorithm
    config: Config

    @property
    def label(self) -> str:
        return f"{self.plugin.name}[{self.config.name}]"


def candidates(problem: Problem, workspace_limit: int | None = None, *,
               all_configs: bool = True, names: Iterable[str] | None = None,
               per_plugin: int | None = None, target: Target | None = None) -> list[Candidate]:
    """Every eligible (plugin, config) for ``problem`` on ``target`` (default: the current one),
    highest plugin priority first; only each plugin's first config with ``all_configs=False``, its
    first ``per_plugin`` ones when given."""
    allowed = None if names is None else set(names)
    target = current_target() if target is None else target
    out = []
    for plugin in plugins(problem.op):
        if allowed is not None and plugin.name not in allowed:
            continue
        configs = safe_configs(plugin, problem, target)
        for config in configs[:1 if not all_configs else per_plugin]:
            if verdict(plugin, problem, config, workspace_limit, target):
                out.append(Candidate(plugin, config))
    return out
