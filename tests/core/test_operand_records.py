"""Each operand of a public op's call is adapted once (convlab.call.operands.adapt) and its record handed
down: the full path, a replay and the CPU-tensor path read the records, never adapting an operand again.
Counted on numpy arrays, Numba device arrays and torch CPU tensors, on the simulator (tiny shapes)."""
import numpy as np
import pytest

import convlab
from convlab import runtime
from convlab.call import operands, plan

torch = pytest.importorskip("torch")


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.fixture
def adapted(monkeypatch):
    """The objects ``operands.adapt`` was called on, in order."""
    seen = []
    real = operands.adapt
    monkeypatch.setattr(operands, "adapt", lambda obj: (seen.append(obj), real(obj))[1])
    return seen


KINDS = {"numpy": lambda a: a, "numba": runtime.to_device, "torch cpu": torch.from_numpy}


def calls(kind):
    """(op, operands, the op's other arguments) per call form: bias and out given, a gradient, 1D."""
    to = KINDS[kind]
    return [(convlab.conv2d, (to(rand(1, 4, 6, 6)), to(rand(4, 4, 3, 3))),
             {"bias": to(rand(4)), "padding": 1, "out": to(np.zeros((1, 4, 6, 6), np.float32))}),
            (convlab.conv2d_backward_weight, (to(rand(1, 4, 6, 6)), to(rand(1, 4, 4, 4)), (4, 4, 3, 3)), {}),
            (convlab.conv1d, (to(rand(1, 4, 8)), to(rand(4, 4, 3))), {})]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_operand_is_adapted_once_per_call(kind, adapted):
    plan.clear()
    for op, args, kw in calls(kind):
        arrays = [a for a in (*args[:2], kw.get("bias"), kw.get("out"))]
        for call in ("first", "again"):  # device operands: the full path, then a replay
            adapted.clear()
            op(*args, algorithm="direct", **kw)
            assert len(adapted) == 4, (op.__name__, call, [type(a).__name__ for a in adapted])
            if op is not convlab.conv1d:  # conv1d adapts the unit-height views of its operands
                assert all(got is want for got, want in zip(adapted, arrays)), (op.__name__, call)
    plan.clear()
