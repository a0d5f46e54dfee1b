"""Test configuration: the hypothesis profile follows the device (small and derandomized on the
simulator: convlab.testing.profiles).

Override with CONVLAB_HYPOTHESIS_PROFILE=convlab-gpu, convlab-long (more random draws on the simulator)
or convlab-sim. With CONVLAB_FAILURE_LOG=PATH
each failure's report is appended to PATH as it happens (a GPU run cut by a time limit still keeps
the tracebacks that pytest would only print at the end).
"""
import os

import pytest
from hypothesis import settings

import convlab.testing  # registers the profiles
from convlab import runtime

settings.load_profile(os.environ.get("CONVLAB_HYPOTHESIS_PROFILE", convlab.testing.DEFAULT_PROFILE))


def pytest_report_header(config):
    return (f"convlab device: {runtime.device_name()} (simulator={runtime.SIMULATOR}); "
            f"hypothesis profile: {settings._current_profile}")


gpu_only = pytest.mark.skipif(runtime.SIMULATOR, reason="needs a real CUDA GPU")


def pytest_runtest_logreport(report):
    path = os.environ.get("CONVLAB_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as fh:
            fh.write(f"=== {report.when} FAILED {report.nodeid}\n{report.longreprtext}\n\n")
