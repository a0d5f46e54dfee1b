"""Targets: what a plugin may assume about the machine its kernels run on.

A :class:`Target` holds the limits that decide which kernel configs can run (compute capability, SMs,
shared memory and registers per block and per SM, threads, warp size), the features the kernels use
(``mma.sync``, ``cp.async``, ``wgmma``, ``tma``: the Tensor Memory Accelerator's tensor copies and their
mbarriers, ``setmaxnreg``: warpgroup register reallocation), and the ceilings a cost model divides by (FLOP/s per unit,
memory bandwidth). Plugins are handed a target in ``check`` / ``configs`` / ``workspace_bytes``
(:mod:`convlab.plugin.contract`), so their configs for any GPU can be computed on a machine without
one; their kernels run on :func:`current`.

    get("sm_90")        a named target, built without a device (ValueError listing the names)
    from_device()       the current GPU's limits, read from the driver (ceilings from its named class)
    current()           the target of this thread: set by ``using``, else the process's own (the GPU,
                        the simulator, or compile-only's ``CONVLAB_TARGET``, default sm_90)
    using(target)       ``with using("sm_80"): ...``: the current target inside the block

Named targets, each a class of GPU (limits from the CUDA programming guide's compute-capability
tables; ceilings: sm_90's measured on an H200, ``../shared/gpu/README.md``; sm_80's the A100 SXM4
datasheet's):

    name       cc     SMs  shared/block (opt-in)  shared/SM  features
    sm_80      8.0    108  163 KiB                164 KiB    mma.sync, cp.async
    sm_90      9.0    132  227 KiB                228 KiB    mma.sync, cp.async, wgmma, tma, setmaxnreg
    simulator  -      2    227 KiB                228 KiB    the stand-ins of every feature (tiny tiles)

The simulator's 2 "SMs" make small test problems split their reductions, as large ones do on a GPU.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

KIB = 1024


@dataclass(frozen=True)
class Target:
    """Limits, features and ceilings of one kind of device (see the module docstring)."""

    name: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_block: int  # static shared memory per block, and dynamic without the opt-in attribute
    smem_per_block_optin: int  # dynamic shared memory per block with the opt-in attribute
    smem_per_sm: int
    regs_per_thread: int
    regs_per_block: int
    regs_per_sm: int
    threads_per_block: int
    threads_per_sm: int
    features: frozenset[str]
    memory_bytes: int  # device memory an op's operands must fit in
    #: ceilings (TFLOP/s by arithmetic: fp32 / fp64 FMA, tf32 / f16 tensor cores; bytes/s of DRAM)
    tflops: Mapping[str, float] = dataclasses.field(default_factory=dict, compare=False, hash=False)
    dram_bytes_per_s: float = 0.0
    warp_size: int = 32
    simulator: bool = False
    device: str = ""  # the device's own name, for a target read from a GPU

    @property
    def arch(self) -> str:
        """ptxas's ``-arch`` for this target: ``sm_90a`` for 9.0 (wgmma and setmaxnreg need the
        arch-specific target, which numba-cuda emits for 9.0), else ``sm_<major><minor>``."""
        if self.simulator:
            return "simulator"
        return f"sm_{self.cc[0]}{self.cc[1]}" + ("a" if self.cc >= (9, 0) else "")

    @property
    def key(self) -> str:
        """What compiled code depends on: the arch (caches key by it)."""
        return self.arch

    def has(self, feature: str) -> bool:
        """Whether kernels may use ``feature`` ("mma.sync", "cp.async", "ldmatrix", "wgmma", "tma",
        "setmaxnreg")."""
        return feature in self.features

    def fits(self, *, threads: int, shared: int = 0, registers: int = 0) -> str:
        """'' when a block of ``threads`` threads using ``shared`` bytes of shared memory (static plus
        dynamic) and ``registers`` registers per thread can launch here, else why not (one line)."""
        if threads > self.threads_per_block:
            return f"{threads} threads a block, over {self.name}'s {self.threads_per_block}"
        if shared > self.smem_per_block_optin:
            return (f"{shared / KIB:.4g} KiB of shared memory a block, over {self.name}'s "
                    f"{self.smem_per_block_optin / KIB:.4g} KiB")
        if registers > self.regs_per_thread:
            return f"{registers} registers a thread, over {self.name}'s {self.regs_per_thread}"
        if registers * threads > self.regs_per_block:
            return (f"{registers} registers x {threads} threads = {registers * threads} a block, over "
                    f"{self.name}'s {self.regs_per_block}")
        return ""

    def describe(self) -> str:
        """One line: name, device, compute capability, SMs."""
        if self.simulator:
            return "simulator (Numba's CUDA simulator: tiny tiles, stand-ins for the GPU intrinsics)"
        device = f" ({self.device})" if self.device else ""
        return f"{self.name}{device}: compute capability {self.cc[0]}.{self.cc[1]}, {self.sm_count} SMs"


_COMMON = dict(smem_per_block=48 * KIB, regs_per_thread=255, regs_per_block=65536, regs_per_sm=65536,
               threads_per_block=1024, threads_per_sm=2048)

TARGETS: dict[str, Target] = {
    "sm_80": Target("sm_80", (8, 0), 108, smem_per_block_optin=163 * KIB, smem_per_sm=164 * KIB,
                    features=frozenset({"mma.sync", "cp.async", "ldmatrix"}), memory_bytes=80 * 10**9,
                    tflops={"fp32": 19.5, "fp64": 9.7, "tf32": 156.0, "f16": 312.0},
                    dram_bytes_per_s=2.04e12, **_COMMON),
    "sm_90": Target("sm_90", (9, 0), 132, smem_per_block_optin=227 * KIB, smem_per_sm=228 * KIB,
                    features=frozenset({"mma.sync", "cp.async", "ldmatrix", "wgmma", "tma", "setmaxnreg"}),
                    memory_bytes=141 * 10**9,
                    tflops={"fp32": 50.7, "fp64": 33.5, "tf32": 370.0, "f16": 790.0},
                    dram_bytes_per_s=4.24e12, **_COMMON),
    "simulator": Target("simulator", (0, 0), 2, smem_per_block_optin=227 * KIB, smem_per_sm=228 * KIB,
                        features=frozenset({"mma.sync", "cp.async", "ldmatrix", "wgmma", "tma", "setmaxnreg"}),
                        memory_bytes=2 * 2**30, simulator=True, **_COMMON),
}
#: the named targets a GPU kernel can be compiled for (the simulator runs Python, not PTX)
GPU_TARGETS = tuple(name for name, t in TARGETS.items() if not t.simulator)
SIMULATOR = TARGETS["simulator"]


def get(name: str | Target) -> Target:
    """The named target (a Target is returned as is); ValueError listing the names otherwise."""
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown target {name!r}; known targets: {sorted(TARGETS)}") from None


def nearest(cc: tuple[int, int]) -> Target:
    """The named GPU target of the highest compute capability not above ``cc`` (sm_80 below 9.0)."""
    below = [t for t in TARGETS.values() if not t.simulator and t.cc <= tuple(cc)]
    return max(below, key=lambda t: t.cc) if below else TARGETS["sm_80"]


def from_device(device: object) -> Target:
    """The target of a Numba device object (``cuda.get_current_device()``): its limits read from the
    driver, its features and ceilings those of :func:`nearest` named class (an sm_90 device plans as the
    named ``sm_90``: results/wgmma/h200/9f7b5c1/target_vs_sm90_*.json compares them field by field)."""
    cc = tuple(int(v) for v in device.compute_capability)  # type: ignore[attr-defined]
    base = nearest(cc)
    get_attr = lambda name, default: int(getattr(device, name, default) or default)  # noqa: E731
    name = getattr(device, "name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name)
    features = set(base.features)
    if cc < (9, 0):
        features -= {"wgmma", "tma", "setmaxnreg"}
    if cc < (8, 0):
        features -= {"mma.sync", "cp.async", "ldmatrix"}
    return dataclasses.replace(
        base, name=f"sm_{cc[0]}{cc[1]}", cc=cc, device=name, features=frozenset(features),
        sm_count=get_attr("MULTIPROCESSOR_COUNT", base.sm_count),
        smem_per_block=get_attr("MAX_SHARED_MEMORY_PER_BLOCK", base.smem_per_block),
        smem_per_block_optin=get_attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", base.smem_per_block_optin),
        smem_per_sm=get_attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", base.smem_per_sm),
        regs_per_block=get_attr("MAX_REGISTERS_PER_BLOCK", base.regs_per_block),
        regs_per_sm=get_attr("MAX_REGISTERS_PER_MULTIPROCESSOR", base.regs_per_sm),
        threads_per_block=get_attr("MAX_THREADS_PER_BLOCK", base.threads_per_block),
        threads_per_sm=get_attr("MAX_THREADS_PER_MULTI_PROCESSOR", base.threads_per_sm),
        warp_size=get_attr("WARP_SIZE", base.warp_size))


_current: contextvars.ContextVar[Target | None] = contextvars.ContextVar("convlab_target", default=None)
_process: list[Callable[[], Target]] = []  # set by convlab.runtime when it is imported


def set_process_target(find: Callable[[], Target]) -> None:
    """Name the function that finds this process's own target (convlab.runtime does, at import: the
    GPU's, the simulator's, or compile-only's); it is called once, when first needed."""
    _process[:] = [find]
    process_target.cache_clear()


@functools.cache
def process_target() -> Target:
    """The process's own target (:func:`set_process_target`; sm_90 when no runtime named one)."""
    return _process[0]() if _process else TARGETS["sm_90"]


def current() -> Target:
    """The target kernels run on in this thread (see the module docstring)."""
    return _current.get() or process_target()


@contextlib.contextmanager
def using(target: str | Target) -> Iterator[Target]:
    """``with using("sm_80") as t:``: :func:`current` is ``t`` inside the block (this thread)."""
    token = _current.set(get(target))
    try:
        yield _current.get()  # type: ignore[misc]
    finally:
        _current.reset(token)
