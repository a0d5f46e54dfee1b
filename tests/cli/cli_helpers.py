"""Shared pieces of the command-line tests (tests/cli): run ``convlab`` in-process, the options of a tiny
bench run, what "auto" picks, and a plugin whose launches fail. Imported by the test modules as
``cli_helpers`` (this folder is on ``sys.path`` under pytest's default import mode); the autouse fixture
that keeps tuning results out of the user's cache folder is in ``conftest.py``.
"""
from __future__ import annotations

import convlab
from convlab import Algorithm, autotune
from convlab.cli import parser as cli

TINY_RUN = ["--plugins", "direct", "--quiet"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def auto_label(problem) -> str:
    """What "auto" runs for ``problem`` now: this process's last tuning result (by priority on the
    simulator, the tuned or cached winner on a GPU)."""
    return autotune.choose(problem, convlab.get_workspace_limit()).label


class Broken(Algorithm):
    """A plugin whose every launch fails."""

    name = "test_broken"
    ops = frozenset({"forward"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise RuntimeError("launch failed on purpose")
