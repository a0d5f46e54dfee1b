"""The conformance suite, reusable by plugin authors (like scikit-learn's ``check_estimator``).

    from convlab.testing import check_plugin
    check_plugin("my_plugin")            # every check_* on every op the plugin declares

    # or in a test module, one pytest case per (plugin, op, check), ids like "my_plugin-forward-matches_reference":
    from convlab.testing import parametrize_with_checks

    @parametrize_with_checks(["my_plugin"])
    def test_conformance(plugin, op, check):
        check(plugin, op)

The checks (checks.py) run on each plugin's class examples (classes.py: fixed problems that reach
every option class the plugin accepts, in every run) and on hypothesis-drawn valid problems
(strategies.py: random ones with every option, GEMM-aligned, ragged and long-reduction ones, and the
plugin's own ``sample_problems``); suite.py runs them. The number of draws follows the active hypothesis
profile (profiles.py, applied by the suite itself): ``convlab-sim`` (few, derandomized: the default
without a GPU and CI's), ``convlab-long`` (more, random) or ``convlab-gpu``. mutants.py and
kernel_mutants.py hold the planted bugs the suite must catch, mutation.py hunts them (``convlab check
--mutants PLUGIN``).
"""
from .checks import CHECKS, call_op  # noqa: F401
from .classes import CLASSES, class_examples, missing_classes  # noqa: F401
from .strategies import aligned_problems, any_problems, long_problems, problems  # noqa: F401
from .profiles import DEFAULT_PROFILE  # noqa: F401
from .suite import (applicable_checks, check_plugin, examples_for, parametrize_with_checks,  # noqa: F401
                    run_check)

__all__ = ["CHECKS", "check_plugin", "run_check", "examples_for", "parametrize_with_checks", "applicable_checks",
           "problems", "aligned_problems", "any_problems", "long_problems", "call_op", "DEFAULT_PROFILE",
           "CLASSES", "class_examples", "missing_classes"]
