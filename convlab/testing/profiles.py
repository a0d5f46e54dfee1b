"""The conformance suite's hypothesis profiles, and the one its runs apply wherever they are called from.

    convlab-sim    CI and the simulator's default: few random draws (each check also runs its class
                   examples, convlab.testing.classes), derandomized: the same draws on every run of a
                   commit (a seed per plugin, op and check), no example database
    convlab-long   a longer random run on the simulator: more draws, a fresh seed each run
    convlab-gpu    a GPU's default: many draws, random

Every profile turns hypothesis's deadline off (a simulated kernel takes seconds) and the too-slow and
filter health checks (the draws are filtered to accepted problems). :func:`active` is the profile a run
uses: the one loaded when it is a convlab profile (pytest's conftest loads ``$CONVLAB_HYPOTHESIS_PROFILE``
or :data:`DEFAULT_PROFILE`), else ``$CONVLAB_HYPOTHESIS_PROFILE``, else :data:`DEFAULT_PROFILE`; so a
plain Python call of ``check_plugin`` runs as ``convlab check`` and pytest do, never under hypothesis's
200 ms default deadline.
"""
from __future__ import annotations

import os
import zlib

from hypothesis import HealthCheck, settings

from convlab import runtime

_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much]
#: random draws a check makes beside its class examples under convlab-sim: fixed per commit, they add
#: cases rather than chances (convlab-long explores); set against the CI budget (3 a check took the
#: conformance suite to 1.8x the CPU time of 6 draws without class examples)
SIM_EXAMPLES = 2
settings.register_profile("convlab-sim", max_examples=SIM_EXAMPLES, deadline=None, derandomize=True,
                          database=None, suppress_health_check=_QUIET)
settings.register_profile("convlab-long", max_examples=40, deadline=None, derandomize=False,
                          suppress_health_check=_QUIET)
settings.register_profile("convlab-gpu", max_examples=60, deadline=None, suppress_health_check=_QUIET)
PROFILES = ("convlab-sim", "convlab-long", "convlab-gpu")
DEFAULT_PROFILE = "convlab-gpu" if runtime.HAS_DEVICE else "convlab-sim"


def active_name() -> str:
    """The name of the profile conformance runs use now (the module docstring)."""
    loaded = settings.get_current_profile_name()
    if loaded in PROFILES:
        return loaded
    wanted = os.environ.get("CONVLAB_HYPOTHESIS_PROFILE", DEFAULT_PROFILE)
    return wanted if wanted in PROFILES else DEFAULT_PROFILE


def active() -> settings:
    """The settings of :func:`active_name`'s profile, deadline off whatever it says."""
    return settings(settings.get_profile(active_name()), deadline=None)


def case_seed(*parts: object) -> int | None:
    """The fixed seed of one (plugin, op, check) case under a derandomized profile (None otherwise):
    each case draws its own problems, the same on every run."""
    if not active().derandomize:
        return None
    return zlib.crc32("/".join(map(str, parts)).encode())
