"""Shared pieces of the autotuner tests (tests/autotune): throw-away plugins that compute on the host
(numpy reference) so they run fast, their fake timings, a timer that serves them, and tiny problems.

``conftest.py`` narrows the registry to ``direct`` plus these plugins for every test of the folder, so
the tests do not depend on which other plugins exist. Imported by the test modules as ``tuning_fakes``
(this folder is on ``sys.path`` under pytest's default import mode).
"""
from __future__ import annotations

from pathlib import Path

from convlab import Algorithm, Config, Verdict, make_problem, reference
from convlab.plugin import registry


REPO = Path(__file__).resolve().parents[2]
LIMIT = 1 << 20


def _host_solve(problem, a, b, bias, out, scale=1.0):
    """Write the float64 reference (times ``scale``) into the device array ``out``."""
    host = [None if v is None else v.copy_to_host() for v in (a, b, bias)]
    out.copy_to_device((reference.solve(problem, *host) * scale).astype(problem.dtype))


class HostExact(Algorithm):
    name, ops, priority = "tt_host", frozenset({"forward", "dgrad", "wgrad"}), 5

    def configs(self, problem):
        return [Config(v=1), Config(v=2)]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        _host_solve(problem, a, b, bias, out)


class Wrong(HostExact):
    """Off by 1 % everywhere: highest priority and fastest, so only the check keeps it out."""

    name, priority = "tt_wrong", 10

    def configs(self, problem):
        return [Config()]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        _host_solve(problem, a, b, bias, out, scale=1.01)


class Crashy(Wrong):
    name, priority = "tt_crash", 8

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise RuntimeError("launch failed on purpose")


class Picky(HostExact):
    """Only stride-1 problems with even C; its 'huge' config never fits the workspace limit."""

    name, priority = "tt_picky", 3

    def check(self, problem):
        if problem.stride != (1, 1) or problem.c % 2:
            return Verdict.no("needs stride 1 and even C")
        return Verdict.yes()

    def configs(self, problem):
        return [Config(huge=0), Config(huge=1)]

    def workspace_bytes(self, problem, config, workspace_limit):
        return (1 << 40) if config["huge"] else 0


class NonDet(HostExact):
    name, priority, deterministic = "tt_nondet", 1, False

    def configs(self, problem):
        return [Config()]


FAKE_MS = {"tt_wrong[default]": 0.01, "tt_crash[default]": 0.02, "tt_picky[huge=1]": 0.001,
           "tt_nondet[default]": 0.2, "tt_picky[huge=0]": 0.3, "tt_host[v=2]": 0.5, "tt_host[v=1]": 1.0,
           "direct[default]": 5.0}
CORRECT = {"tt_nondet[default]", "tt_picky[huge=0]", "tt_host[v=2]", "tt_host[v=1]", "direct[default]"}


class FakeTimer:
    """Fake milliseconds by label; asserts the tuner only times eligible, checked candidates."""

    def __init__(self, problem, ms=FAKE_MS):
        self.problem, self.ms, self.calls, self.bad = problem, ms, [], []

    def __call__(self, cand):  # the tuner swallows exceptions from here, so record, assert later
        if not registry.verdict(cand.plugin, self.problem, cand.config, LIMIT) or \
                cand.plugin.name in ("tt_wrong", "tt_crash"):
            self.bad.append(cand.label)
        self.calls.append(cand.label)
        return [self.ms[cand.label] * f for f in (1.0, 1.1, 0.9, 1.0, 1.05, 0.95)]


def tiny(op="forward", **kw):
    args = dict(n=1, c=2, h=4, w=4, k=2, r=3, s=3)
    args.update(kw)
    return make_problem(op, **args)


def expected_winner(problem, deterministic=False):
    labels = {c.label for c in registry.candidates(problem, LIMIT)} & CORRECT
    if deterministic:
        labels.discard("tt_nondet[default]")
    return min(labels, key=FAKE_MS.get)
