"""Targets: named GPU targets built without a device, the simulator's, the current one, and plugins'
configs for a GPU computed on the CPU."""
import dataclasses
import threading
import types

import numpy as np
import pytest

import convlab
from convlab.runtime import targets
from convlab.problem import make_problem


def test_named_targets_hold_their_limits():
    sm80, sm90 = targets.get("sm_80"), targets.get("sm_90")
    assert (sm80.cc, sm80.sm_count, sm80.smem_per_block_optin) == ((8, 0), 108, 163 * 1024)
    assert (sm90.cc, sm90.sm_count, sm90.smem_per_block_optin) == ((9, 0), 132, 227 * 1024)
    assert sm90.arch == "sm_90a" and sm80.arch == "sm_80"
    assert sm90.has("wgmma") and not sm80.has("wgmma") and sm80.has("mma.sync")
    assert not sm90.simulator and targets.get("simulator").simulator
    assert targets.get(sm90) is sm90


def test_unknown_target_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown target 'sm_75'; known targets: \['simulator', 'sm_80', 'sm_90'\]"):
        targets.get("sm_75")


def test_fits_says_which_limit():
    sm80 = targets.get("sm_80")
    assert sm80.fits(threads=256, shared=48 * 1024, registers=128) == ""
    assert "1025 threads" in sm80.fits(threads=1025)
    assert "163 KiB" in sm80.fits(threads=128, shared=200 * 1024)
    assert "over sm_80's 65536" in sm80.fits(threads=1024, registers=128)


def test_target_from_a_device_reads_its_attributes():
    device = types.SimpleNamespace(compute_capability=(9, 0), name=b"NVIDIA H200", MULTIPROCESSOR_COUNT=132,
                                   MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=232448, WARP_SIZE=32)
    t = targets.from_device(device)
    assert (t.name, t.device, t.sm_count, t.smem_per_block_optin) == ("sm_90", "NVIDIA H200", 132, 232448)
    assert t.has("wgmma") and t.tflops == targets.get("sm_90").tflops
    older = targets.from_device(types.SimpleNamespace(compute_capability=(8, 6), name="A10",
                                                      MULTIPROCESSOR_COUNT=72))
    assert older.name == "sm_86" and older.sm_count == 72 and not older.has("wgmma")


def test_current_target_is_the_processes_and_using_is_per_thread():
    here = targets.current()
    assert here.simulator == (convlab.runtime.MODE == "simulator")
    seen = []
    with targets.using("sm_80") as t:
        assert targets.current() is t and t.name == "sm_80"
        worker = threading.Thread(target=lambda: seen.append(targets.current()))
        worker.start()
        worker.join()
    assert targets.current() is here and seen == [here]


def test_tensor_core_configs_of_a_resnet50_layer_on_sm_90_computed_on_the_cpu():
    layer = make_problem("forward", 32, 256, 14, 14, 256, 3, 3, padding=1, dtype="float16")
    plugin = convlab.get_plugin("tensor_core")
    on_gpu = plugin.configs(layer, targets.get("sm_90"))
    warp = [(c["BM"], c["BN"], c["BK"], c["STAGES"]) for c in on_gpu if "MMA" not in c]
    warpgroup = [(c["BM"], c["BN"], c["BK"]) for c in on_gpu if c.get("MMA") == "wgmma"]
    assert set(warp) == {(128, 128, 32, 3), (128, 64, 32, 3), (64, 64, 32, 4)}
    assert set(warpgroup) == {(128, 64, 64), (128, 128, 64), (128, 256, 64)}
    assert "MMA" not in on_gpu[0] and on_gpu[-1].get("MMA") == "wgmma"  # mma.sync first, wgmma after
    assert all(c["BM"] * c["BN"] >= 64 * 64 for c in on_gpu)
    on_a100 = plugin.configs(layer, targets.get("sm_80"))
    assert [c for c in on_gpu if "MMA" not in c] == on_a100  # sm_80: mma.sync only
    assert convlab.get_plugin("tensor_core").applicable(layer, target=targets.get("sm_90"))
    # the simulator's configs are its tiny ones: a few Python threads a block
    sim = plugin.configs(layer, targets.get("simulator"))
    tiles = [convlab.algorithms.tensor_core.tc_config(c) for c in sim]
    assert all(t.threads <= 128 for t in tiles) and [t.MMA for t in tiles] == ["sync", "wgmma"]


def test_configs_that_do_not_fit_a_target_are_left_out_and_the_problem_declined():
    layer = make_problem("forward", 32, 256, 14, 14, 256, 3, 3, padding=1, dtype="float16")
    small = dataclasses.replace(targets.get("sm_80"), name="small", smem_per_block_optin=40 * 1024)
    plugin = convlab.get_plugin("tensor_core")
    assert len(plugin.configs(layer, small)) < len(plugin.configs(layer, targets.get("sm_80")))
    tiny = dataclasses.replace(small, name="tiny", smem_per_block_optin=8 * 1024)
    assert plugin.configs(layer, tiny) == []
    verdict = plugin.applicable(layer, target=tiny)
    assert not verdict and "no config of tensor_core fits tiny" in verdict.reason
    old = dataclasses.replace(targets.get("sm_80"), name="sm_75", cc=(7, 5), features=frozenset())
    assert "mma.sync" in plugin.applicable(layer, target=old).reason


def test_explain_for_a_named_target_times_nothing_and_says_so():
    x = np.zeros((32, 64, 56, 56), np.float16)
    w = np.zeros((64, 64, 3, 3), np.float16)
    with convlab.autotune.mode("heuristic"):
        text = str(convlab.explain(x, w, padding=1, target="sm_90"))
    assert "target: sm_90: compute capability 9.0, 132 SMs" in text and "nothing was timed" in text
    assert "picked: tensor_core[" in text and "(by the cost model, nothing timed)" in text
    with convlab.autotune.mode("tune"):  # a timing mode: by declared priority there
        text = str(convlab.explain(x, w, padding=1, target="sm_90"))
        assert "picked: tensor_core[BK=32,BM=128" in text and "nothing was timed" in text
        text = str(convlab.explain(x, w, padding=1, target="sm_80"))
        assert "picked: tensor_core[BK=32,BM=128" in text
    old = dataclasses.replace(targets.get("sm_80"), name="sm_70", cc=(7, 0), features=frozenset())
    with convlab.autotune.mode("tune"):
        text = str(convlab.explain(x, w, padding=1, target=old))
    assert "tensor_core" in text and "needs mma.sync" in text and "picked: widen" in text
    assert "pick: declared priority" in text
    with convlab.autotune.mode("heuristic"):  # the default: the cost model's pick, nothing timed
        text = str(convlab.explain(x, w, padding=1, target=old))
    assert "pick: the cost model's (mode 'heuristic': nothing timed)" in text and "picked: tensor_core" not in text


def test_split_k_follows_the_targets_sm_count():
    from convlab.algorithms.tensor_core import split_k, tc_config

    layer = make_problem("forward", 1, 512, 7, 7, 512, 3, 3, padding=1, dtype="float16")
    cfg = tc_config(convlab.get_plugin("tensor_core").configs(layer, targets.get("sm_90"))[0])
    few = dataclasses.replace(targets.get("sm_90"), sm_count=4)
    assert split_k(layer, cfg, targets.get("sm_90"))[0] > split_k(layer, cfg, few)[0] >= 1


def test_a_plugin_written_without_target_parameters_still_works():
    class Old(convlab.Algorithm):
        name, ops = "_test_old_contract", frozenset({"forward"})

        def check(self, problem):
            return convlab.Verdict.yes() if problem.c < 8 else convlab.Verdict.no("C >= 8")

        def configs(self, problem):
            return [convlab.Config(a=1)]

    old = Old()
    small, big = make_problem("forward", 1, 2, 4, 4, 2, 3, 3), make_problem("forward", 1, 9, 4, 4, 2, 3, 3)
    assert old.applicable(small, target=targets.get("sm_90")) and not old.applicable(big)
    assert old.configs(small, targets.get("sm_80")) == [convlab.Config(a=1)] == old.configs(small)
