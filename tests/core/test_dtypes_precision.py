"""float16 / bfloat16 in the API, their tolerances, and the float32 precision setting ("highest" / "high")."""
import math
import subprocess
import sys

import numpy as np
import pytest

import convlab
from convlab.ops import arguments
from convlab.call import plan
from convlab.runtime import settings
from convlab.autotune import tuner
from convlab.autotune.cache import tuning_key
from convlab.measure import random_operands, tolerance
from convlab.plugin import registry
from convlab.problem import make_problem, np_dtype, unit_roundoff

ml_dtypes = pytest.importorskip("ml_dtypes")  # a core dependency; bfloat16 arrays


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_array_spec_accepts_the_four_dtypes(dtype):
    shape, got = arguments.array_spec(np.zeros((1, 2, 3, 4), dtype), "x", 4)
    assert shape == (1, 2, 3, 4) and got == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.complex64, np.uint16, ml_dtypes.float8_e4m3fn, np.bool_])
def test_array_spec_rejects_other_dtypes_naming_the_argument(dtype):
    with pytest.raises(TypeError, match="grad_out must be one of float32, float64, float16, bfloat16"):
        arguments.array_spec(np.zeros((1, 2, 3, 4), dtype), "grad_out", 4)


def test_mixed_half_dtypes_are_rejected():
    x = np.zeros((1, 8, 4, 4), ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="weight has dtype float16 but x has bfloat16"):
        convlab.conv2d(x, np.zeros((8, 8, 3, 3), np.float16))


def test_problem_and_operands_in_bfloat16():
    problem = make_problem("forward", 1, 2, 5, 5, 3, 3, 3, dtype="bfloat16", bias=True)
    assert problem.itemsize == 2 and np_dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)
    a, b, bias = random_operands(problem, np.random.default_rng(0))
    assert a.dtype == b.dtype == bias.dtype == np.dtype(ml_dtypes.bfloat16) and np.all(np.isfinite(
        a.astype(np.float64)))
    with pytest.raises(TypeError, match="dtype must be one of"):
        make_problem("forward", 1, 2, 5, 5, 3, 3, 3, dtype="int8")


def test_half_tolerance_is_output_rounding_plus_accumulation():
    for dtype in ("float16", "bfloat16"):
        problem = make_problem("forward", 1, 4, 6, 6, 4, 3, 3, dtype=dtype)
        acc = 2.0**-23 * (8 * math.sqrt(36) + 16)
        assert tolerance(problem, 2.0**-23) == pytest.approx(unit_roundoff(dtype) / 2 + 2 * acc)
        ref = np.random.default_rng(0).standard_normal(problem.y_shape)  # the rounding, measured
        rounding = np.linalg.norm(ref.astype(np_dtype(dtype)) - ref) / np.linalg.norm(ref)
        assert rounding < unit_roundoff(dtype) / 2
        assert tolerance(problem, 2.0**-23, ref) == pytest.approx(rounding + 2 * acc)
    problem = make_problem("forward", 1, 4, 6, 6, 4, 3, 3, dtype="float32")
    assert tolerance(problem, 2.0**-23) == pytest.approx(2.0**-23 * (8 * 6 + 16))


def test_existing_plugins_decline_half_with_reason():
    problem = make_problem("forward", 1, 16, 6, 6, 16, 3, 3, dtype="float16")
    for name in ("direct", "im2col", "implicit_gemm"):
        verdict = registry.get(name).applicable(problem)
        assert not verdict and "supports dtypes" in verdict.reason and "float16" in verdict.reason


def test_float32_precision_setting_and_context_manager():
    assert convlab.get_float32_precision() == "highest"
    with convlab.float32_precision("high") as mode:
        assert mode == "high" and convlab.get_float32_precision() == "high"
    assert convlab.get_float32_precision() == "highest"
    assert convlab.set_float32_precision("high") == "highest"
    assert convlab.set_float32_precision("highest") == "high"
    with pytest.raises(ValueError, match="float32 precision must be one of"):
        convlab.set_float32_precision("medium")


def test_float32_precision_from_the_environment():
    code = "import convlab; print(convlab.get_float32_precision())"
    for value, want in (("high", "high"), ("HIGH", "high"), ("bogus", "highest")):
        env = {"CONVLAB_FLOAT32_PRECISION": value, "PATH": "/usr/bin:/bin", "NUMBA_ENABLE_CUDASIM": "1"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert done.stdout.strip() == want, done.stderr[-500:]


def test_mode_changes_tuning_key_memo_and_plan_state():
    f32 = make_problem("forward", 1, 4, 6, 6, 4, 3, 3, dtype="float32")
    f16 = f32.replace(dtype="float16")
    keys, memos, states = [], [], []
    for mode in ("highest", "high"):
        with convlab.float32_precision(mode):
            keys.append((tuning_key(f32), tuning_key(f16)))
            memos.append(tuner.memo_key(f32, 1))
            states.append(plan.host_state())
    assert keys[0][0] != keys[1][0] and "|float32|" in keys[0][0] and "|float32+high|" in keys[1][0]
    assert keys[0][1] == keys[1][1]  # half-precision keys do not depend on the float32 mode
    assert memos[0] != memos[1] and states[0] != states[1]
    with convlab.float32_precision("high"):
        assert "float32 precision: high" in str(convlab.explain(f32, algorithm="direct"))
    assert settings.get_float32_precision() == "highest"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_trusted_direct_output_of_a_half_problem_is_direct_on_widened_copies(dtype):
    """Above the host-reference size on a GPU, candidates are checked against ``direct``; for fp16 /
    bf16, which direct does not take, that is direct's kernel on float32 copies (``widen``, via direct)."""
    from convlab import measure, reference, runtime
    from convlab.problem import make_problem, np_dtype

    problem = make_problem("forward", 1, 3, 5, 4, 4, 3, 2, stride=2, padding=1, dtype=dtype, bias=True)
    cand = measure._direct(problem)
    assert (cand.plugin.name, dict(cand.config)) == ("widen", {"via": "direct"})
    assert measure._direct(problem.replace(dtype="float32")).plugin.name == "direct"
    host = measure.random_operands(problem, np.random.default_rng(2))
    out = runtime.full(problem.operand_shapes[2], np.nan, np_dtype(dtype))  # unwritten elements fail
    measure.run_candidate(cand, problem, *measure.to_device(*host), out, 2**30)
    got = np.asarray(runtime.to_host(out), np.float64)
    err = measure.rel_error(got, reference.solve(problem, *host))
    assert err <= measure.tolerance(problem, cand.plugin.compute_eps(dtype))


def test_widen_skips_the_float32_variant_of_a_native_half_plugin_only_where_the_native_one_runs(monkeypatch):
    """tf32x3 (tensor_core's float32 variant) is no widen route for a problem tensor_core takes in fp16
    itself (a forward, a strided dgrad: the column route); where tensor_core declines (here made to),
    it is one."""
    widen, native = registry.get("widen"), registry.get("tensor_core")
    forward = make_problem("forward", 1, 8, 6, 6, 8, 3, 3, padding=1, dtype="float16")
    strided = make_problem("dgrad", 1, 8, 6, 6, 8, 3, 3, stride=2, padding=1, dtype="float16")
    assert native.check(forward) and native.check(strided)
    assert not {"tf32x3"} & {c["via"] for p in (forward, strided) for c in widen.configs(p)}
    monkeypatch.setattr(native, "check", lambda problem, target=None: convlab.Verdict.no("declines (this test)"))
    assert "tf32x3" in {c["via"] for c in widen.configs(strided)}
