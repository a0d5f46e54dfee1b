"""``convlab compile``: every GPU kernel the plugins would launch, compiled for named targets without a GPU.

    spec = make_spec(["sm_80", "sm_90"], suites=["resnet50"])    # the corpus (convlab.compile.corpus)
    report = compile_corpus(spec, jobs=2)                          # PTX and ptxas on worker processes
    print(report.table()); report.ok(max_spill=0)                  # limits checked (convlab.compile.report)

The workers run in the compile-only runtime (convlab.runtime: no device, no simulator); kernels are
collected by running each case's host code (convlab.compile.collect), lowered once and assembled per
target (convlab.compile.assemble). Before any work, numba-cuda's CUDA compiler libraries are looked up
once (convlab.compile.toolchain): without them ``compile_corpus`` raises ``ToolchainError``, one line
naming the ``compile`` extra.
"""
from .corpus import Case, cases, sample_problems, suite_problems
from .driver import compile_corpus, make_spec
from .report import Report, compare_hashes
from .toolchain import ToolchainError

__all__ = ["Case", "cases", "sample_problems", "suite_problems", "compile_corpus", "make_spec", "Report",
           "compare_hashes", "ToolchainError"]
