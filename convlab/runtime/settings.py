"""Process-wide settings, the one place that reads ``CONVLAB_*`` environment variables.

| setting | environment variable (initial value) | setter |
| --- | --- | --- |
| workspace limit: scratch bytes a plugin may use per call | ``CONVLAB_WORKSPACE_LIMIT`` (256M) | :func:`set_workspace_limit` |
| tuning key policy: ``"exact"`` or ``"pow2"`` | ``CONVLAB_KEY_POLICY`` (exact) | :func:`set_key_policy` |
| deterministic mode: exclude plugins declaring ``deterministic = False`` | ``CONVLAB_DETERMINISTIC`` (0) | :func:`set_deterministic` |
| simulator thread budget: simulated threads per launch above which convlab warns | ``CONVLAB_SIM_THREAD_BUDGET`` (10000) | the variable |
| float32 precision: ``"highest"`` (fp32-class: fp32 FMA, or the ``tf32x3`` plugin's 3xTF32) or ``"high"`` (TF32 tensor cores allowed for float32) | ``CONVLAB_FLOAT32_PRECISION`` (highest) | :func:`set_float32_precision`, :func:`float32_precision` |
| lossy algorithms: allow configs declaring an error growth above plain accumulation's (Winograd, FFT) | ``CONVLAB_ALLOW_LOSSY`` (1) | :func:`set_allow_lossy`, :func:`allow_lossy` |
| cache directory: tuning results (and compiled kernels) | ``CONVLAB_CACHE_DIR`` (user cache dir) | the variable |
| tuning depth: configs per plugin the autotuner considers in every mode (its preferred first; all by default) | ``CONVLAB_TUNE_CONFIGS`` (all) | :func:`set_tune_configs` |
| tuning mode of ``algorithm="auto"``: ``"heuristic"`` (the cost model's pick, nothing timed), ``"tune"`` (the model's top candidates timed), ``"exhaustive"`` (every candidate timed) | ``CONVLAB_TUNE_MODE`` (heuristic) | :func:`set_tune_mode` (``convlab.autotune.set_mode``) |
| tuning budget: seconds of checking and timing per shape in mode ``"tune"`` (``none``: no limit) | ``CONVLAB_TUNE_BUDGET`` (20) | :func:`set_tune_budget` |
| the thin launch path of recorded plans on a GPU | ``CONVLAB_THIN_LAUNCH`` (1) | the variable |

Sizes in bytes are given as an int or a string such as ``"256M"``, ``"1.5GiB"``, ``"4096"`` (K, M, G, T are
powers of 1024, with or without ``B``/``iB``), here, in the variable and on the command line alike.
A malformed environment value warns and falls back to the default.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")
KEY_POLICIES = ("exact", "pow2")
TUNE_MODES = ("heuristic", "tune", "exhaustive")
FLOAT32_PRECISIONS = ("highest", "high")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_lock = threading.Lock()


def parse_bytes(value: Any, name: str = "workspace_limit") -> int:
    """A non-negative byte count from an int or a size string (``"256M"``, ``"1GiB"``); ValueError
    naming ``name`` otherwise."""
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"{name} must be a number of bytes like 268435456, '256M' or '1GiB', "
                             f"got {value!r}")
        return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int of bytes or a size string like '256M', "
                         f"got {value!r}")
    return int(value)


def _from_env(variable: str, parse: Any, default: Any) -> Any:
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        warnings.warn(f"{variable}: {exc}; using {default!r}", RuntimeWarning)
        return default


def _one_of(value: Any, choices: tuple[str, ...], name: str) -> str:
    """``value`` if it is one of ``choices``; ValueError naming ``name`` and the choices otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _a_bool(flag: Any) -> bool:
    """``flag`` if it is a bool; TypeError otherwise (the setters' argument; the variables parse text)."""
    if not isinstance(flag, bool):
        raise TypeError(f"flag must be a bool, got {flag!r}")
    return flag


def _parse_flag(value: Any, name: str = "deterministic") -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be a bool (or 1/0, true/false, on/off), got {value!r}")


#: Default scratch-memory limit per call: 256 MiB, or ``CONVLAB_WORKSPACE_LIMIT`` if set.
DEFAULT_WORKSPACE_LIMIT = _from_env("CONVLAB_WORKSPACE_LIMIT", parse_bytes, 256 * 2**20)


def _parse_tune_configs(value: str) -> int | None:
    if value.strip().lower() in ("", "all"):
        return None
    count = int(value)
    if count < 1:
        raise ValueError(f"CONVLAB_TUNE_CONFIGS must be 'all' or a count >= 1, got {value!r}")
    return count


def _parse_tune_mode(value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if not isinstance(text, str) or text not in TUNE_MODES:
        raise ValueError(f"tune mode must be one of {TUNE_MODES}, got {value!r}")
    return text


def _parse_budget(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() in ("none", "inf", ""):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"tuning budget must be a number of seconds >= 0 or 'none', got {value!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"tuning budget must be a number of seconds >= 0 or 'none', got {value!r}")
    return seconds


#: the tuning mode of a fresh process: "heuristic", the cost model's pick run at once (one kernel compiled a
#: layer-op, nothing timed). ResNet-50's 69 layer-ops on sm_90 compile 20 kernels and time 0 candidates in
#: "heuristic" against 59 / 481 in "tune" and 75 / 908 exhaustively (results/autotune_cold_start/sm90/ba18b2d);
#: the model's pick is within 1.3 % of the tuned one (geometric mean held out, worst 79 %:
#: results/autotune_model/sm90/66078f8). Tuning is asked for: convlab.tune, convlab.torch.tune, `convlab tune`
DEFAULT_TUNE_MODE = "heuristic"

#: seconds of checking and timing per shape in mode "tune": results/autotune/h200/9003f63/autotune.json (every candidate
#: timed, kernels compiled cold) took a median 0.69 s, 42 of 45 shapes under 11 s, the 16x512x512 seed
#: 28-35 s (its compiles); 20 s cuts only such outliers, after their leading candidates
DEFAULT_TUNE_BUDGET_S = 20.0

_state: dict[str, Any] = {
    "workspace_limit": DEFAULT_WORKSPACE_LIMIT,
    "key_policy": _from_env("CONVLAB_KEY_POLICY", lambda v: _one_of(v, KEY_POLICIES, "key policy"), "exact"),
    "deterministic": _from_env("CONVLAB_DETERMINISTIC", _parse_flag, False),
    "float32_precision": _from_env("CONVLAB_FLOAT32_PRECISION",
                                   lambda v: _one_of(v.lower(), FLOAT32_PRECISIONS, "float32 precision"), "highest"),
    "allow_lossy": _from_env("CONVLAB_ALLOW_LOSSY", lambda v: _parse_flag(v, "CONVLAB_ALLOW_LOSSY"), True),
    "tune_configs": _from_env("CONVLAB_TUNE_CONFIGS", _parse_tune_configs, None),
    "tune_mode": _from_env("CONVLAB_TUNE_MODE", _parse_tune_mode, DEFAULT_TUNE_MODE),
    "tune_budget": _from_env("CONVLAB_TUNE_BUDGET", _parse_budget, DEFAULT_TUNE_BUDGET_S),
}


_generation = [0]


def generation() -> int:
    """A counter bumped by every change of host state that a launch plan depends on (these settings,
    the plugin registry, the autotuner's remembered decisions): convlab.call.plan re-checks a plan only
    when it moved."""
    return _generation[0]


def bump_generation() -> None:
    """Invalidate the quick validity check of every launch plan (see :func:`generation`)."""
    _generation[0] += 1


def _swap(key: str, value: Any) -> Any:
    with _lock:
        previous, _state[key] = _state[key], value
        _generation[0] += 1
    return previous


def get_workspace_limit() -> int:
    """The current module-level workspace limit in bytes."""
    return _state["workspace_limit"]


def set_workspace_limit(nbytes: int | str | None) -> int:
    """Set the module-level workspace limit (bytes, or a size string; None: the default, 256 MiB or
    ``CONVLAB_WORKSPACE_LIMIT``); returns the previous value."""
    return _swap("workspace_limit", DEFAULT_WORKSPACE_LIMIT if nbytes is None else parse_bytes(nbytes))


def check_workspace_limit(value: int | str | None) -> int:
    """Validate a per-call ``workspace_limit=`` argument (None means the module-level setting)."""
    return get_workspace_limit() if value is None else parse_bytes(value)


def get_key_policy() -> str:
    return _state["key_policy"]


def set_key_policy(policy: str) -> str:
    """How shapes map to tuning keys: ``"exact"``, or ``"pow2"`` (batch and spatial sizes rounded up
    to powers of two so that neighbouring shapes share a tuning). Returns the previous policy."""
    return _swap("key_policy", _one_of(policy, KEY_POLICIES, "policy"))


def get_tune_configs() -> int | None:
    """Configs per plugin the autotuner compiles and times (None: all of them)."""
    return _state["tune_configs"]


def set_tune_configs(count: int | None) -> int | None:
    """Let the autotuner consider only each plugin's first ``count`` configs (its preferred ones;
    None: all), in every tuning mode: they are the only candidates ranked, timed or picked (mode
    "tune" then times at most its top k of them a plugin). A cold first call of a new shape compiles
    every candidate it times: 1 or 2 cut that cost several-fold, at the price of picks among fewer
    tiles. Entries tuned under another depth are re-tuned (their candidate lists differ). Returns
    the previous value."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be None (all configs) or an int >= 1, got {count!r}")
    return _swap("tune_configs", count)


def get_tune_mode() -> str:
    """How ``algorithm="auto"`` decides: "heuristic", "tune" or "exhaustive" (convlab.autotune.modes)."""
    return _state["tune_mode"]


def set_tune_mode(mode: str) -> str:
    """Set the tuning mode (one of TUNE_MODES); ValueError listing them otherwise. Returns the previous."""
    return _swap("tune_mode", _one_of(mode, TUNE_MODES, "mode"))


def get_tune_budget() -> float | None:
    """Seconds of checking and timing per shape in mode "tune" (None: no limit)."""
    return _state["tune_budget"]


def set_tune_budget(seconds: float | None) -> float | None:
    """Set the per-shape tuning budget in seconds (None: no limit); returns the previous value."""
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not 0 <= seconds < float("inf")):
        raise ValueError(f"seconds must be None (no limit) or a finite number >= 0, got {seconds!r}")
    return _swap("tune_budget", None if seconds is None else float(seconds))


def get_deterministic() -> bool:
    return _state["deterministic"]


def set_deterministic(flag: bool) -> bool:
    """Exclude (True) or allow (False) plugins declaring ``deterministic = False``; returns the previous
    setting. Deterministic choices are tuned and cached under their own keys."""
    return _swap("deterministic", _a_bool(flag))


def thin_launch() -> bool:
    """Whether recorded launches may take the thin path (``cuLaunchKernel`` on packed parameters):
    ``CONVLAB_THIN_LAUNCH`` (1 by default; 0 keeps Numba's launch). Read at each call."""
    return _from_env("CONVLAB_THIN_LAUNCH", _parse_flag, True)


def sim_thread_budget() -> int:
    """Threads of one simulated launch above which ``convlab.SimulatorCostWarning`` is issued:
    ``$CONVLAB_SIM_THREAD_BUDGET`` (read at each call), else 10000 (a few seconds of simulation)."""
    return _from_env("CONVLAB_SIM_THREAD_BUDGET", int, 10_000)

def get_float32_precision() -> str:
    """``"highest"``: float32 inputs are computed in fp32; ``"high"``: plugins may use TF32 tensor cores
    (10-bit mantissa products, fp32 accumulation) for float32 inputs."""
    return _state["float32_precision"]


def set_float32_precision(precision: str) -> str:
    """Set the float32 math mode (``"highest"`` or ``"high"``, as torch's
    ``set_float32_matmul_precision``); returns the previous mode. Plugins read it in their predicate,
    so tuning keys, plans and ``explain`` follow it."""
    return _swap("float32_precision", _one_of(precision, FLOAT32_PRECISIONS, "float32 precision"))


@contextlib.contextmanager
def set_within(setter: Callable[[T], T], value: T) -> Iterator[T]:
    """``setter(value)`` for the ``with`` block, the previous value (``setter``'s return) set again after;
    a ``setter`` that rejects ``value`` raises before the block runs."""
    previous = setter(value)
    try:
        yield value
    finally:
        setter(previous)


def float32_precision(precision: str) -> contextlib.AbstractContextManager[str]:
    """``with convlab.float32_precision("high"): ...``: the mode inside the block, restored after."""
    return set_within(set_float32_precision, precision)


def get_allow_lossy() -> bool:
    """Whether configs declaring an error growth above 1 (``Algorithm.error_growth``: transform algorithms
    such as Winograd and FFT, whose rounding error exceeds plain accumulation's) may run."""
    return _state["allow_lossy"]


def set_allow_lossy(flag: bool) -> bool:
    """Allow (True, the default) or forbid (False) lossy configs, as torch's
    ``torch.backends.cudnn.allow_tf32`` governs TF32: forbidden, they decline with that reason (a forced
    one raises ValueError), so "auto" never picks them. Returns the previous setting."""
    return _swap("allow_lossy", _a_bool(flag))


def allow_lossy(flag: bool) -> contextlib.AbstractContextManager[bool]:
    """``with convlab.allow_lossy(False): ...``: the setting inside the block, restored after."""
    return set_within(set_allow_lossy, flag)


def cache_dir() -> Path:
    """``$CONVLAB_CACHE_DIR``, else the user cache directory of convlab (read at each call)."""
    env = os.environ.get("CONVLAB_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("convlab", appauthor=False))
    except ImportError:  # pragma: no cover - platformdirs is a dependency, but stay usable without it
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "convlab"
