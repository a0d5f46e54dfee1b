"""The values of the plugin contract (convlab.plugin.contract): a :class:`Verdict` (accepted, or why
not), a :class:`Config` (a plugin's tunable variant, hashable, named ``"BK=4,BM=8"``) and
:func:`config_from` (a user's config resolved against a plugin's choices)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping


@dataclass(frozen=True)
class Verdict:
    """Whether a plugin accepts a problem; ``reason`` says why not (and is empty when it does)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def yes(cls) -> "Verdict":
        return cls(True, "")

    @classmethod
    def no(cls, reason: str) -> "Verdict":
        if not reason:
            raise ValueError("a declining verdict must give its reason")
        return cls(False, reason)


class Config(Mapping[str, Any]):
    """An immutable, hashable, JSON-friendly set of tunables, e.g. ``Config(BM=64, BN=64, BK=8)``."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(items or {}, **kwargs)
        object.__setattr__(self, "_items", tuple(sorted(merged.items())))

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __iter__(self):
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    @property
    def name(self) -> str:
        """Stable text form, e.g. ``BK=8,BM=64,BN=64`` (``default`` when empty)."""
        return ",".join(f"{k}={v}" for k, v in self._items) or "default"

    def __repr__(self) -> str:
        return f"Config({self.name})"


def _config_text(text: str) -> str:
    """A config string in the form of :attr:`Config.name`: ``" BM = 8, BK=4 "`` -> ``"BK=4,BM=8"``."""
    parts = [p.split("=", 1) for p in text.split(",") if p.strip()]
    if not parts or any(len(p) != 2 for p in parts):
        return text.strip()
    return ",".join(f"{k.strip()}={v.strip()}" for k, v in sorted((k.strip(), v) for k, v in parts))


def config_from(value: Config | Mapping[str, Any] | str | None, choices: Iterable[Config]) -> Config | None:
    """Resolve a user's config (a Config, a dict, or a ``name`` string such as ``"BK=4,BM=8"``; spaces
    and the order of the entries do not matter) against ``choices``."""
    if value is None:
        return None
    choices = list(choices)
    text = _config_text(value) if isinstance(value, str) else None
    for choice in choices:
        if (text is not None and choice.name == text) or (
                isinstance(value, Mapping) and choice == value):
            return choice
    raise ValueError(f"unknown config {value!r}; choices are {[c.name for c in choices]}")
