"""tests/autotune: every test gets a private cache folder, a registry of ``direct`` plus the throw-away
plugins of ``tuning_fakes``, and default autotuner settings but mode "tune" (these tests time candidates
with fake timers; the autouse fixture ``isolated``); ``real``
registers the built-in plugins again for a test that needs them (the cost model's tests)."""
from __future__ import annotations

import pytest

import convlab
from convlab import autotune
from convlab.autotune import costmodel
from convlab.plugin import registry

from tuning_fakes import Crashy, HostExact, NonDet, Picky, Wrong


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """A private cache folder, a registry of direct + the throw-away plugins, default settings."""
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    registry.load()
    monkeypatch.setattr(registry, "_plugins", {"direct": registry.get("direct")})
    for cls in (HostExact, Wrong, Crashy, Picky, NonDet):
        convlab.register(cls)
    policy, det = autotune.set_key_policy("exact"), autotune.set_deterministic(False)
    mode = autotune.set_mode("tune")
    autotune.clear_cache(memory=True, disk=False)
    autotune.reset_stats()
    yield tmp_path / "cache"
    for cls in (HostExact, Wrong, Crashy, Picky, NonDet):
        convlab.unregister(cls.name)
    autotune.set_key_policy(policy)
    autotune.set_deterministic(det)
    autotune.set_mode(mode)
    autotune.clear_cache(memory=True, disk=False)


@pytest.fixture
def real():
    """The built-in plugins registered again (``isolated`` restores its registry afterwards)."""
    import importlib

    for name in ("direct", "implicit_gemm.plugin", "explicit_gemm.im2col", "explicit_gemm.col2im",
                 "tensor_core.plugin", "tensor_core.tf32x3", "depthwise.plugin", "widen"):
        module = importlib.import_module(f"convlab.algorithms.{name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, convlab.Algorithm) and value.name \
                    and value.__module__ == module.__name__:
                convlab.register(value, replace=True)
    costmodel.forget()
    yield
    costmodel.forget()
