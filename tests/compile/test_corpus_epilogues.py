"""The compile corpus's epilogue cases (convlab.compile.corpus.with_epilogues): every config of a plugin
that fuses epilogues compiled fused with the heaviest epilogue, each activation once, the epilogue pass
once per dtype and output layout; cover keeps each of them. Planning only: nothing is compiled here."""
from __future__ import annotations

from convlab.compile import corpus
from convlab.epilogue import ACTIVATIONS
from convlab.plugin import registry
from convlab.runtime.targets import get


def _cases(plugins: list[str]) -> list[corpus.Case]:
    return corpus.cases(corpus.sample_problems(plugins), get("sm_90"), plugins=plugins, dtypes=["float32"])


def test_every_fused_config_and_each_activation_is_a_case():
    found = _cases(["implicit_gemm"])
    plain = [c for c in found if c.epilogue is None]
    fused = [c for c in found if c.epilogue is not None]
    forward_configs = {c.config.name for c in plain if c.problem.op == "forward"}
    heavy = {c.config.name for c in fused if c.epilogue == corpus.FUSED_EPILOGUE}
    assert forward_configs and heavy == forward_configs
    assert all(c.problem.op == "forward" for c in fused)  # implicit_gemm fuses its forward only
    activations = {c.epilogue.activation for c in fused}
    assert activations == set(ACTIVATIONS)
    assert len({c.id for c in found}) == len(found)  # the epilogue is part of a case's id
    kept = corpus.cover(found)
    assert {c.config.name for c in kept if c.epilogue is not None} == forward_configs
    assert {c.epilogue for c in kept if c.epilogue is not None} == \
        {corpus.FUSED_EPILOGUE, *corpus.OTHER_EPILOGUES}


def test_a_plugin_that_does_not_fuse_compiles_the_pass_once_per_dtype_and_layout():
    found = _cases(["im2col"])
    assert registry.get("im2col").fuses(found[0].problem, corpus.FUSED_EPILOGUE) != ""
    passes = [c for c in found if c.epilogue is not None]
    assert passes and {(c.problem.dtype, c.layouts[2]) for c in passes} == {("float32", "nchw"), ("float32", "nhwc")}
    assert len(passes) == 2
