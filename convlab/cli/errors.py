"""How the command line reports bad input and missing optional dependencies (shared by the commands)."""
from __future__ import annotations

import sys


class UsageError(ValueError):
    """Bad command-line input: reported as ``convlab CMD: error: ...`` with exit status 2."""


def missing_extra(command: str, what: str, extra: str, exc: ImportError) -> int:
    """Tell how to install an optional dependency (no traceback); exit status 1."""
    print(f"convlab {command}: {what} is not installed ({exc.name or exc}); install it with:\n"
          f"    pip install \"convlab[{extra}]\"", file=sys.stderr)
    return 1
