"""The disk cache of compiled kernels (convlab.runtime.kernel_cache): file format, damage, concurrent writers,
and the key. Payloads are fake bytes (no cubins on the simulator); the GPU path is exercised by
tests/core/test_replay_on_device.py (a second process loads every kernel from disk)."""
import multiprocessing
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from convlab import runtime
from convlab.runtime import kernel_cache


def test_entries_round_trip(tmp_path):
    path = kernel_cache.save("k1", "entry_name", b"\x7fELF" + bytes(range(256)), tmp_path)
    assert path.exists() and not list(tmp_path.glob("*.tmp"))
    assert kernel_cache.load("k1", tmp_path) == ("entry_name", b"\x7fELF" + bytes(range(256)))
    assert kernel_cache.load("absent", tmp_path) is None


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "garbage", "empty"])
def test_a_damaged_file_warns_is_removed_and_can_be_rewritten(tmp_path, damage):
    path = kernel_cache.save("k", "name", b"payload" * 100, tmp_path)
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:-10], "flipped byte": data[:-1] + bytes([data[-1] ^ 1]),
                      "garbage": b"not a cache file at all", "empty": b""}[damage])
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert kernel_cache.load("k", tmp_path) is None
    assert not path.exists()
    kernel_cache.save("k", "name", b"new", tmp_path)
    assert kernel_cache.load("k", tmp_path) == ("name", b"new")


def _writer(args):
    where, seed = args
    rng = np.random.default_rng(seed)
    for _ in range(40):
        size = int(rng.integers(1, 50_000))
        kernel_cache.save("shared", f"w{seed}", bytes([seed]) * size, where)


def test_concurrent_writers_leave_whole_files(tmp_path):
    """Three processes rewrite one key with different lengths while this one reads: every read is a
    whole entry of one writer (never a damaged file)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(3) as pool, warnings.catch_warnings():
        warnings.simplefilter("error")  # a damaged-file warning would fail the test
        pending = pool.map_async(_writer, [(tmp_path, s) for s in (1, 2, 3)])
        reads = 0
        while not pending.ready() or reads < 5:
            hit = kernel_cache.load("shared", tmp_path)
            if hit is not None:
                name, payload = hit
                assert payload == bytes([int(name[1:])]) * len(payload)
                reads += 1
        pending.get()
    assert not list(tmp_path.glob("*.tmp"))


def _factory(constant):
    @runtime.jit
    def kernel(a):
        i = runtime.cuda.grid(1)
        if i < a.size:
            a[i] = constant
    return kernel


KEY_SCRIPT = ("import sys; sys.path.insert(0, {path!r}); import {module} as t; "
              "from convlab.runtime import kernel_cache; "
              "print(kernel_cache.kernel_key(t._factory(3), ('float32[::1]',), (9, 0)))")


def test_the_key_is_stable_across_processes_and_sees_every_input():
    key = kernel_cache.kernel_key(_factory(3), ("float32[::1]",), (9, 0))
    assert key == kernel_cache.kernel_key(_factory(3), ("float32[::1]",), (9, 0))
    other = [kernel_cache.kernel_key(_factory(4), ("float32[::1]",), (9, 0)),
             kernel_cache.kernel_key(_factory(3.0), ("float32[::1]",), (9, 0)),
             kernel_cache.kernel_key(_factory(3), ("float64[::1]",), (9, 0)),
             kernel_cache.kernel_key(_factory(3), ("float32[::1]",), (8, 0)),
             kernel_cache.kernel_key(_factory(3), ("float32[::1]",), (9, 0), {"max_registers": 64})]
    assert len({key, *other}) == 6
    module = sys.modules[_factory.__module__]
    root = Path(module.__file__).parents[_factory.__module__.count(".")]
    script = KEY_SCRIPT.format(path=str(root), module=_factory.__module__)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert child.stdout.strip() == key


def _generated(body: str, scale):
    """A kernel compiled from generated source under ONE file name whatever its text or constants."""
    from convlab.kernels.source import compile_source

    source = f"def kernel(a):\n    i = cuda.grid(1)\n    if i < a.size:\n        a[i] = {body} * SCALE\n"
    return runtime.jit(compile_source(source, "<test generated>", {"cuda": runtime.cuda,
                                                                    "SCALE": scale})["kernel"])


def _intrinsic(n):
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def constant(typingctx):
        return types.int64(), lambda context, builder, signature, args: context.get_constant(types.int64, n)
    return constant


def _with_table(table):
    @runtime.jit
    def kernel(a):
        a[0] = table[0]
    return kernel


def test_the_key_sees_generated_source_its_namespace_and_array_constants():
    """Generated kernels share a file name across their variants (the name need not encode every
    parameter): the key hashes the text and the namespace values it names; array cells by bytes."""
    keys = {kernel_cache.kernel_key(k, ("float32[::1]",), (9, 0))
            for k in (_generated("1.0", 2), _generated("3.0", 2), _generated("1.0", 5))}
    assert len(keys) == 3
    same = kernel_cache.kernel_key(_generated("1.0", 2), ("float32[::1]",), (9, 0))
    assert same in keys
    intrinsics = {kernel_cache.kernel_key(_with_table(_intrinsic(n)), ("float32[::1]",), (9, 0))
                  for n in (1, 2)}
    assert len(intrinsics) == 2  # a factory's intrinsic: by its typing function's closure
    tables = [kernel_cache.kernel_key(_with_table(np.array(t, np.int32)), ("float32[::1]",), (9, 0))
              for t in ([1, 2], [1, 3], [1, 2])]
    assert tables[0] != tables[1] and tables[0] == tables[2]


def test_the_cache_is_off_on_the_simulator(monkeypatch):
    monkeypatch.setenv("CONVLAB_KERNEL_CACHE", "1")
    assert kernel_cache.enabled() is (not runtime.SIMULATOR)


class _ObjectCode:  # numba-cuda 0.30's get_cubin returns a cuda.core ObjectCode, not bytes
    def __init__(self, code):
        self.code = code


def test_the_cubin_bytes_come_from_an_object_code_or_bytes():
    assert kernel_cache.cubin_bytes(_ObjectCode(b"\x7fELFcubin")) == b"\x7fELFcubin"
    assert kernel_cache.cubin_bytes(b"\x7fELF") == b"\x7fELF"
    with pytest.raises(TypeError, match="cubin bytes"):
        kernel_cache.cubin_bytes(object())


def test_a_kernel_that_cannot_be_cached_is_not_retried_every_launch(monkeypatch, caplog):
    calls = []

    def failing(dispatcher, argtypes):
        calls.append(argtypes)
        raise RuntimeError("no cubin")

    class Dispatcher:
        py_func = staticmethod(_factory(1))

        @staticmethod
        def typeof_pyval(value):
            return type(value).__name__

    monkeypatch.setattr(kernel_cache, "_load_or_compile", failing)
    memo = {}
    monkeypatch.setattr(kernel_cache, "_memo", lambda: memo)  # the context's memo, fresh
    disp = Dispatcher()
    assert kernel_cache.compiled(disp, (1, 2.0)) is None
    assert kernel_cache.compiled(disp, (1, 2.0)) is None
    assert len(calls) == 1 and "not cached" in caplog.text


def test_a_new_kernel_at_a_freed_kernels_address_gets_its_own_code(monkeypatch):
    """The in-process memo is keyed by id(dispatcher): a kernel freed and a new one allocated at the
    same address (a test-local kernel per parameter, seen on the GPU) must not get the old code."""
    class Dispatcher:
        py_func = staticmethod(_factory(1))

        @staticmethod
        def typeof_pyval(value):
            return type(value).__name__

    made = []
    monkeypatch.setattr(kernel_cache, "_load_or_compile", lambda d, argtypes: made.append(d) or ("code", d))
    memo = {}
    monkeypatch.setattr(kernel_cache, "_memo", lambda: memo)  # the context's memo, fresh
    old, new = Dispatcher(), Dispatcher()
    assert kernel_cache.compiled(old, (1,)) == ("code", old)
    (entry,) = memo.values()
    memo.clear()
    memo[(id(new), ("int",))] = entry  # as if ``new`` took ``old``'s freed address
    assert kernel_cache.compiled(new, (1,)) == ("code", new) and made == [old, new]
    assert kernel_cache.compiled(new, (1,)) == ("code", new) and len(made) == 2  # then memoized


def test_every_plugin_kernel_has_a_key(monkeypatch):
    """Each kernel every built-in plugin launches (generated-source ones included: implicit GEMM's
    unrolled slices, depthwise, tensor-core, the tiled GEMM of im2col) gets a key without error:
    a key that raised left the kernel uncached and, with the cache on, its plans off the thin path."""
    import convlab
    from convlab.runtime import launch
    from convlab.plugin import registry

    launched = []
    real = launch.launch
    monkeypatch.setattr(launch, "launch", lambda kernel, *a, **k: (launched.append(kernel),
                                                                   real(kernel, *a, **k)))
    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal((1, 4, 5, 5)).astype(np.float32) for _ in range(2))
    cases = {"forward": lambda x, g, w, gr, alg: convlab.conv2d(x, w, padding=1, groups=gr, algorithm=alg),
             "dgrad": lambda x, g, w, gr, alg: convlab.conv2d_backward_data(g, w, x.shape, padding=1,
                                                                            groups=gr, algorithm=alg),
             "wgrad": lambda x, g, w, gr, alg: convlab.conv2d_backward_weight(x, g, w.shape, padding=1,
                                                                              groups=gr, algorithm=alg)}
    names = set()
    for plugin in dict.fromkeys(registry.plugins("forward") + registry.plugins("dgrad") + registry.plugins("wgrad")):
        groups = 4 if plugin.name == "depthwise" else 1
        for op, call in cases.items():
            if plugin not in registry.plugins(op):
                continue
            with convlab.float32_precision("high"):  # tensor_core: float32 as TF32
                # float32 where the plugin takes it for this op, else half (widen; tma_wgmma's wgrad)
                dtype = next((d for d in ("float32", "float16") if d in plugin.dtypes and registry.verdict(
                    plugin, convlab.make_problem(op, 1, 4, 5, 5, 4, 3, 3, padding=1, groups=groups,
                                                 dtype=d))), None)
                if dtype is None:  # declines this op's 3x3 problem in both (tma_wgmma below sm_90)
                    continue
                w = rng.standard_normal((4, 4 // groups, 3, 3)).astype(dtype)
                call(x.astype(dtype), g.astype(dtype), w, groups, plugin.name)
            names.add(plugin.name)
    assert {"depthwise", "tensor_core", "implicit_gemm", "im2col", "col2im", "direct", "widen"} <= names
    keys = {}
    for kernel in launched:
        dispatcher = getattr(kernel, "dispatcher", kernel)
        keys[id(dispatcher)] = kernel_cache.kernel_key(dispatcher, ("float32[::1]",), (9, 0))
    assert len(keys) >= 6 and len(set(keys.values())) == len(keys)


def test_the_saved_cubin_is_the_one_numba_linked_for_its_launch(monkeypatch):
    """get_cubin() without a cc: Numba's own arch (sm_90a on a 9.0 device), the one get_cufunc loaded;
    an explicit (9, 0) would link again for sm_90, which rejects wgmma."""
    asked, saved = [], []

    class Library:
        _setup_functions = _teardown_functions = ()

        def get_cufunc(self):
            return type("F", (), {"name": "entry", "handle": 7})()

        def get_cubin(self, *args, **kwargs):
            asked.append((args, kwargs))
            return b"\x7fELF"

    class Dispatcher:
        py_func = staticmethod(_factory(1))
        targetoptions: dict = {}
        overloads = {("int",): type("O", (), {"_codelibrary": Library(), "argument_types": ("int",)})()}

    monkeypatch.setenv("CONVLAB_KERNEL_CACHE", "1")
    monkeypatch.setattr(kernel_cache, "kernel_key", lambda *a: "k" * 16)
    monkeypatch.setattr(kernel_cache, "load", lambda key: None)
    monkeypatch.setattr(kernel_cache.kernel_store, "load", lambda key: None)
    monkeypatch.setattr(kernel_cache, "save", lambda key, name, payload: saved.append((key, name, payload)))
    monkeypatch.setattr(kernel_cache.runtime, "target", lambda: type("T", (), {"key": "sm_90"})())
    found = kernel_cache._load_or_compile(Dispatcher(), ("int",))
    assert asked == [((), {})] and saved == [("k" * 16, "entry", b"\x7fELF")] and found.handle == 7
