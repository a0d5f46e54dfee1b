"""Golden tests of generated kernel source: a few kernels' source, as the generators write it, compared
line by line with tests/kernels/golden/<name>.py.

A change to a generator that changes what a kernel executes shows here as a diff to read (and in
``convlab compile --compare`` as changed PTX); a refactoring of the generator keeps these files as they
are. After an intended change, regenerate them and review the diff:

    CONVLAB_UPDATE_GOLDEN=1 python -m pytest tests/kernels/test_golden_sources.py -p no:cacheprovider

``convlab source`` prints the same text for a plugin's kernels (checked at the end against the
generator, in the compile-only runtime it runs in).
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path

import pytest

from convlab.cli import main
from convlab.compile.sources import run_isolated
from convlab.problem import make_problem
from convlab.kernels.simt.gemm import GPU_TILES
from convlab.kernels.simt.gemm_source import kernel_source as simt_source
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.kernels.tensor_core.config import TcConfig

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("CONVLAB_UPDATE_GOLDEN") == "1"

#: golden file -> the generator call that writes it (GPU configs: the tiles the GPU runs)
KERNELS = {
    # mma.sync pipeline, the NHWC gather loader (GatherA), NCHW store with a bias
    "tc_conv_f16_gather_bias": lambda: tc_conv.kernel_source("f16", TcConfig(64, 64, 32, 32, 32, 4), bias=True),
    # the m-contiguous loader of a 1x1 NCHW read (NchwA: ldmatrix .trans), split-K fp32 partials
    "tc_conv_bf16_nchw_in_split": lambda: tc_conv.kernel_source("bf16", TcConfig(64, 64, 32, 32, 32, 3),
                                                                split=True, nchw_in=True),
    # the batched dense GEMM (BatchedA, BatchedStore), TF32 truncated by the mma
    "tc_gemm_tf32_batched": lambda: tc_gemm.kernel_source("tf32", TcConfig(64, 64, 16, 32, 32, 4), batched=True),
    # the wgmma warpgroup loop on the same gather, an NHWC store
    "tc_wgmma_conv_f16_nhwc": lambda: tc_conv.kernel_source("f16", TcConfig(128, 64, 64, 64, 64, 5, MMA="wgmma"),
                                                            nhwc_out=True),
    # the SIMT tiled GEMM, B transposed
    "simt_gemm_f32_nt": lambda: simt_source("float32", GPU_TILES[2], False, True),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_generated_source_matches_golden(name):
    source = KERNELS[name]()
    path = GOLDEN / f"{name}.py"
    if UPDATE:
        path.write_text(source)
        pytest.skip(f"rewrote {path} (CONVLAB_UPDATE_GOLDEN=1)")
    compile(source, str(path), "exec")  # the generated text is Python
    expected = path.read_text()
    if source != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), source.splitlines(True), str(path),
                                            "generated", n=2))
        pytest.fail(f"{name}: the generated source differs from {path} (CONVLAB_UPDATE_GOLDEN=1 rewrites it):\n"
                    + diff[:4000])


def test_every_golden_file_has_a_generator():
    assert sorted(p.stem for p in GOLDEN.glob("*.py")) == sorted(KERNELS)


def _sources(plugin: str, target: str, config: str | None = None, **shape) -> str:
    """``convlab source``'s text, from the compile-only child process it starts."""
    problem = dataclasses.asdict(make_problem(**shape))
    return run_isolated({"plugin": plugin, "target": target, "config": config, "problem": problem})


def test_convlab_source_prints_the_chosen_configs_generated_kernels():
    """sm_80, a float16 3x3 forward: the plugin's layout copies, then its conv kernel, whose text is the
    generator's for the config named in the header."""
    out = _sources("tensor_core", "sm_80", op="forward", n=2, c=16, h=8, w=8, k=16, r=3, s=3, padding=1,
                   dtype="float16")
    head, _, rest = out.partition("\n# ---- kernel ")
    assert head.startswith("# tensor_core on sm_80: forward f16 x(2, 16, 8, 8) w(16, 16, 3, 3)")
    name = head.splitlines()[1].removeprefix("# config ")
    fields = dict(item.split("=") for item in name.split(","))
    cfg = TcConfig(*(int(fields[k]) for k in ("BM", "BN", "BK", "WM", "WN", "STAGES")),
                   REGS=int(fields.get("REGS", 0)))
    conv = rest.split("\n# ---- kernel ")[-1]
    assert conv.partition("\n")[0].startswith("3 of 3: conv ")
    body = conv.split("\n", 2)[2]  # after the kernel's line and the generated file's name
    assert body == tc_conv.kernel_source("f16", cfg)


def test_convlab_source_shows_a_python_kernels_constants_and_the_named_config():
    out = _sources("implicit_gemm", "sm_80", "BK=8,BM=64,BN=128,TM=8,TN=8", op="wgrad", n=2, c=8, h=6, w=6, k=8,
                   r=3, s=3)
    assert "# config BK=8,BM=64,BN=128,TM=8,TN=8" in out
    assert "#   at = At(M=0, N=1, k_len=2," in out  # the parameter positions the kernel reads by name
    assert "def kernel(x4, dy4, prm, out, ws):" in out
    assert "# generated: <slice_fma 8x8x8" in out  # the unrolled device function it calls


def test_convlab_source_rejects_a_config_the_plugin_does_not_offer(capsys):
    assert main(["source", "implicit_gemm", "--x", "2,8,6,6", "--w", "8,8,3,3", "--config", "BK=3"]) == 2
    assert "config" in capsys.readouterr().err
