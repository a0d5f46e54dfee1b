"""The README's Python examples run as written: each ```python block in a fresh namespace, on this
machine's runtime (the simulator in CI; the PyTorch one needs the torch extra, CI's CPU build)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)


def test_the_readme_shows_numpy_and_pytorch_examples():
    assert len(BLOCKS) >= 2 and any("import torch" in b and "ct.revert(" in b for b in BLOCKS)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_a_readme_example_runs_as_written(code, capsys):
    if re.search(r"^import torch|^import convlab.torch", code, flags=re.M):
        pytest.importorskip("torch")
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(code, "README.md", "exec"), namespace)
    if "ct.revert(" in code:  # back on PyTorch's modules, after convlab's backward filled the gradients
        import torch

        model = namespace["model"]
        convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        assert convs and all(type(m) is torch.nn.Conv2d and m.weight.grad is not None for m in convs)
