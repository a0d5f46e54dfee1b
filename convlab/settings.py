"""Process-wide settings: the workspace limit (bytes of scratch device memory a plugin may allocate)."""
from __future__ import annotations

import os

#: Default scratch-memory limit per call: 256 MiB, or ``CONVLAB_WORKSPACE_LIMIT`` (bytes) if set.
DEFAULT_WORKSPACE_LIMIT = int(os.environ.get("CONVLAB_WORKSPACE_LIMIT", 256 * 2**20))

_workspace_limit = DEFAULT_WORKSPACE_LIMIT


def get_workspace_limit() -> int:
    """The current module-level workspace limit in bytes."""
    return _workspace_limit


def set_workspace_limit(nbytes: int) -> int:
    """Set the module-level workspace limit; returns the previous value."""
    global _workspace_limit
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"workspace_limit must be a non-negative int of bytes, got {nbytes!r}")
    previous, _workspace_limit = _workspace_limit, nbytes
    return previous


def check_workspace_limit(value: int | None) -> int:
    """Validate a per-call ``workspace_limit=`` argument (None means the module-level setting)."""
    if value is None:
        return _workspace_limit
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"workspace_limit must be a non-negative int of bytes, got {value!r}")
    return value
