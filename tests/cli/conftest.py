"""tests/cli: every test runs with a private tuning-cache folder (the autouse ``private_tuning_cache``)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_tuning_cache(tmp_path, monkeypatch):
    """On a GPU, "auto" tunes and stores its picks: keep them out of the user's cache folder."""
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "tuning-cache"))
