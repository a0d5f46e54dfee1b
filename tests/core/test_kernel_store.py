"""The kernel store (convlab.runtime.kernel_store): read-only lookup before the disk cache and a compile,
damaged and foreign files, stale keys, concurrent builders, and where each kernel came from
(convlab.runtime.origin). Payloads are fake cubin bytes (the simulator has no cubins); ptxas's real ones
and the runtime's keys are checked in tests/compile/test_compile_store.py."""
import multiprocessing
import warnings

import numpy as np
import pytest

from convlab.runtime import kernel_cache, kernel_store, origin
from test_kernel_cache import _factory  # tests/core: the one-constant kernel factory both files key

CUBIN = b"\x7fELF" + bytes(range(200))


def test_a_store_file_round_trips_and_another_key_misses(tmp_path):
    key = kernel_cache.kernel_key(_factory(3), ("float32[::1]",), "sm_90a")
    kernel_store.write(key, "entry", CUBIN, tmp_path)
    assert kernel_store.load(key, tmp_path) == ("entry", CUBIN)
    stale = [kernel_cache.kernel_key(_factory(4), ("float32[::1]",), "sm_90a"),  # another constant
             kernel_cache.kernel_key(_factory(3), ("float32[::1]",), "sm_80")]  # another arch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stale key is a plain miss, no warning
        assert all(kernel_store.load(k, tmp_path) is None for k in stale)


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "garbage", "empty", "foreign"])
def test_a_damaged_or_foreign_store_file_warns_once_and_is_left_alone(tmp_path, damage):
    path = kernel_store.write("k", "entry", CUBIN, tmp_path)
    data = path.read_bytes()
    if damage == "foreign":  # a whole file, written for another key, under this key's name
        data = kernel_store.encode("other", "entry", CUBIN)
    bad = {"truncated": data[:-10], "flipped byte": data[:-1] + bytes([data[-1] ^ 1]),
           "garbage": b"not a store file", "empty": b"", "foreign": data}[damage]
    path.write_bytes(bad)
    with pytest.warns(RuntimeWarning, match="foreign" if damage == "foreign" else "damaged"):
        assert kernel_store.load("k", tmp_path) is None
    assert path.read_bytes() == bad  # read-only: not removed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel_store.load("k", tmp_path) is None  # warned once a file


def _builder(args):
    where, seed = args
    rng = np.random.default_rng(seed)
    for i in range(30):
        key = f"k{i % 3}"
        kernel_store.write(key, f"w{seed}", bytes([seed]) * int(rng.integers(1, 40_000)), where)


def test_two_builders_of_one_store_leave_whole_files(tmp_path):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        pool.map(_builder, [(tmp_path, 1), (tmp_path, 2)])
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for key in ("k0", "k1", "k2"):
            name, payload = kernel_store.load(key, tmp_path)
            assert payload == bytes([int(name[1:])]) * len(payload)


def test_the_store_directory_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CONVLAB_KERNEL_STORE", str(tmp_path / "mine"))
    assert kernel_store.directory() == tmp_path / "mine"
    for off in ("none", "", "off"):
        monkeypatch.setenv("CONVLAB_KERNEL_STORE", off)
        assert kernel_store.directory() is None
    monkeypatch.delenv("CONVLAB_KERNEL_STORE")
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "a"))
    assert kernel_store.directory() is None  # the default, <cache dir>/store, only when it exists
    (tmp_path / "b" / "store").mkdir(parents=True)
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "b"))
    assert kernel_store.directory() == tmp_path / "b" / "store"


class _Library:
    _setup_functions = _teardown_functions = ()

    def get_cufunc(self):
        return type("F", (), {"name": "entry", "handle": 7})()

    def get_cubin(self):
        return CUBIN


def _body(a):
    a[0] = 1


class _Dispatcher:
    """Numba's dispatcher as _load_or_compile sees it: no overload until compile() is called."""
    py_func = staticmethod(_body)
    targetoptions: dict = {}

    def __init__(self):
        self.overloads, self.compiled = {}, 0

    def compile(self, argtypes):
        self.compiled += 1
        self.overloads[argtypes] = type("O", (), {"_codelibrary": _Library(), "argument_types": argtypes})()
        return self.overloads[argtypes]


@pytest.fixture
def gpu_like(monkeypatch, tmp_path):
    """_load_or_compile on a stand-in 9.0 GPU: loading a cubin gives a marker; a store and a disk cache."""
    monkeypatch.setattr(kernel_cache.runtime, "target", lambda: type("T", (), {"key": "sm_90a"})())
    monkeypatch.setattr(kernel_cache, "_loaded", lambda hit, argtypes, where: kernel_cache.CompiledKernel(
        ("loaded", hit), argtypes, None, where))
    monkeypatch.setattr(kernel_cache, "directory", lambda: tmp_path / "disk")
    monkeypatch.setenv("CONVLAB_KERNEL_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("CONVLAB_KERNEL_CACHE", "1")
    return tmp_path


def test_the_store_is_read_before_the_disk_cache_and_a_compile(gpu_like):
    disp, argtypes = _Dispatcher(), ("int",)
    key = kernel_cache.launch_key(disp, argtypes, "sm_90a")
    kernel_store.write(key, "from_store", CUBIN, gpu_like / "store")
    kernel_cache.save(key, "from_disk", CUBIN, gpu_like / "disk")
    before = dict(origin.counts)
    found = kernel_cache._load_or_compile(disp, argtypes)
    assert found.handle == ("loaded", ("from_store", CUBIN)) and found.origin == "store" and disp.compiled == 0
    assert origin.counts["store"] == before["store"] + 1
    (gpu_like / "store" / f"{key}.cubin").unlink()  # absent from the store: the disk cache's
    found = kernel_cache._load_or_compile(disp, argtypes)
    assert found.handle == ("loaded", ("from_disk", CUBIN)) and found.origin == "disk"
    assert origin.counts["disk"] == before["disk"] + 1


def test_a_miss_or_a_damaged_store_file_compiles_and_fills_the_disk_cache(gpu_like):
    disp, argtypes = _Dispatcher(), ("int",)
    key = kernel_cache.launch_key(disp, argtypes, "sm_90a")
    stale = kernel_cache.launch_key(disp, argtypes, "sm_80")
    kernel_store.write(stale, "other_arch", CUBIN, gpu_like / "store")
    (gpu_like / "store" / f"{key}.cubin").write_bytes(b"truncated")
    before = origin.counts["compiled"]
    with pytest.warns(RuntimeWarning, match="damaged"):
        found = kernel_cache._load_or_compile(disp, argtypes)
    assert found.handle == 7 and found.origin == "compiled" and disp.compiled == 1
    assert origin.counts["compiled"] == before + 1
    assert kernel_cache.load(key, gpu_like / "disk") == ("entry", CUBIN)  # the user's disk cache
    assert (gpu_like / "store" / f"{key}.cubin").read_bytes() == b"truncated"  # the store is not written


def test_each_launch_of_a_candidate_records_where_its_kernels_came_from():
    problem, label = ("a problem",), "plugin[config]"
    assert origin.describe(problem, label) == "not yet launched in this process"
    with origin.running(problem, label):
        origin.launched(_factory(1), "store")
        origin.launched(_factory(2).dispatcher, "compiled")
    origin.launched(_factory(3), "disk")  # outside a candidate: not recorded
    assert sorted(where for _, where in origin.of(problem, label)) == ["compiled", "store"]
    assert origin.describe(problem, label) == "2 kernels: 1 from the kernel store, 1 compiled in this process"


def test_explain_says_where_the_picks_kernels_came_from():
    import convlab

    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((2, 2, 3, 3), np.float32)
    other = convlab.explain(x, w, padding=1, algorithm="direct", target="sm_80")
    assert "kernels of the pick: not launched here (target sm_80)" in str(other)
    convlab.conv2d(x, w, padding=1, algorithm="direct")
    here = convlab.explain(x, w, padding=1, algorithm="direct")
    assert "simulated (no binary)" in here.kernels and "kernels of the pick:" in str(here)
