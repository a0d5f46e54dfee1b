"""The compile run the tests of this folder share (one lowering of the direct plugin's kernels)."""
import pytest

from convlab.compile import compile_corpus, make_spec


@pytest.fixture(scope="session")
def direct_store(tmp_path_factory):
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="session")
def direct_report(direct_store):
    """The direct plugin's float32 kernels for both targets, their cubins written into ``direct_store``."""
    return compile_corpus(make_spec(["sm_80", "sm_90"], plugins=["direct"], dtypes=["float32"],
                                    store=str(direct_store)), jobs=2)
