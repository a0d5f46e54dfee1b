"""Operands of the public ops, each adapted once at the API edge into an :class:`Operand` record: its
signature (what a launch plan keys on), device pointer, the value the call path uses and its kind; then
streams and outputs, read from the records.

    adapt(obj) -> Operand   (signature, pointer, value, kind): one read of the operand's attributes
    rec.signature           (kind, shape, strides, dtype, device, aligned) for a device operand
                            ("torch": a CUDA tensor, element strides; "numba": a Numba device array, byte
                            strides); False for a host operand (numpy, a CPU tensor) or one that is not
                            planned (another __cuda_array_interface__ object); None when absent
    rec.pointer, rec.nbytes the device address and size of its data (0 for host or absent operands)
    rec.value               the operand as the caller passed it
    rec.kind                NUMPY, HOST_TENSOR (a CPU tensor), TORCH (a CUDA tensor), NUMBA (a Numba device
                            array), ARRAY (anything else: a ``__cuda_array_interface__`` object, or what
                            the op refuses), None when absent

A call makes its four records once (a, b, bias, out) and hands them down: the replay of a plan, the
full path's checks and device views, the stream and the output all read the records, not the operands.

PyTorch tensors are read through their own attributes (``shape``, ``stride()``, ``dtype``,
``data_ptr()``, ``is_cuda``) instead of ``__cuda_array_interface__`` (~12 us through
``cuda.as_cuda_array``); a tensor is recognised by its class's module, so torch is never imported
here: it is imported lazily, and only once a torch tensor was seen. Tensors that require grad are
detached (convlab computes no autograd graph), not refused. CPU tensors are host operands: the ops
read them as numpy arrays (:func:`host_record`, :func:`host_view`; bfloat16 through its int16 bits and
``ml_dtypes``) and hand back a CPU tensor of the result's dtype (:func:`from_host`), like numpy in ->
numpy out.

Synchronisation rules (the stream a call's kernels run on), first match wins:
1. ``stream=`` given to the op: a Numba stream, a ``torch.cuda.Stream`` (or anything with an int
   ``cuda_stream``), or an int CUstream handle (0: the default stream);
2. a torch CUDA tensor among the operands: PyTorch's current stream on that tensor's device;
3. a Numba device array created on a stream (its ``stream``), or a ``__cuda_array_interface__``
   ``stream`` field (1: the legacy default stream, 2: per-thread default stream, else a handle);
4. the default stream (0).
All of a call's kernels run in order on that one stream, so consuming the result on the same stream
needs no synchronisation; on another stream the caller synchronises (event or stream sync), as with
any CUDA library. Numpy operands are copied synchronously and the result is copied back, so numpy in
-> numpy out is always complete on return. Outputs allocated for torch operands come from torch's
caching allocator on the call's stream (``torch.empty``), so PyTorch's stream-ordered reuse applies.
On the simulator every stream runs synchronously; a raw int handle stands for the default stream.
"""
from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.data.layouts import channels_last_view, is_channels_last, is_torch  # noqa: F401
from convlab.runtime import context


#: the kinds of operand (Operand.kind)
NUMPY, HOST_TENSOR, TORCH, NUMBA, ARRAY = "numpy", "host tensor", "torch", "numba", "array"


class Operand(tuple):
    """One operand of a call: ``(signature, pointer, value, kind)`` (see the module docstring). A tuple,
    made once per operand per call: the call path reads it and nothing else."""

    __slots__ = ()
    signature = property(operator.itemgetter(0))
    pointer = property(operator.itemgetter(1))
    value = property(operator.itemgetter(2))
    kind = property(operator.itemgetter(3))

    @property
    def host(self) -> bool:
        """A host operand (numpy, a CPU tensor) or one read through a copy: no launch plan."""
        return self[0] is False

    @property
    def nbytes(self) -> int:
        value = self[2]
        if value is None:
            return 0
        if is_torch(value):
            return value.numel() * value.element_size()
        return int(value.size) * np.dtype(value.dtype).itemsize


ABSENT = Operand((None, 0, None, None))


def adapt(obj: Any) -> Operand:
    """The :class:`Operand` record of ``obj`` (None: :data:`ABSENT`)."""
    if obj is None:
        return ABSENT
    if type(obj).__module__.startswith("torch"):
        if not obj.is_cuda:
            return Operand((False, 0, obj, HOST_TENSOR))
        ptr = obj.data_ptr()
        return Operand((("torch", obj.shape, obj.stride(), obj.dtype, obj.get_device(), ptr % 16 == 0), ptr, obj,
                        TORCH))
    if runtime.is_device_array(obj):
        ptr = runtime.device_pointer(obj)
        return Operand((("numba", tuple(obj.shape), runtime.strides_of(obj), obj.dtype.str, ptr % 16 == 0),
                        ptr, obj, NUMBA))
    return Operand((False, 0, obj, NUMPY if isinstance(obj, np.ndarray) else ARRAY))


def host_record(rec: Operand, *, writable: bool = False) -> Operand:
    """The record of a CPU tensor's numpy view (:func:`host_view`); any other record as it is."""
    if rec[3] != HOST_TENSOR:
        return rec
    return Operand((False, 0, host_view(rec[2], writable=writable), NUMPY))


def _external() -> dict:
    """The current device's Numba wrappers of external stream handles (a context store)."""
    return context.current().store("external_streams")


def is_host_tensor(obj: Any) -> bool:
    """True for a torch tensor in host memory (a CPU tensor)."""
    return is_torch(obj) and not obj.is_cuda


def host_view(tensor: Any, *, writable: bool = False) -> np.ndarray:
    """A numpy array of a CPU tensor's values, detached from autograd: a view of its memory (strides
    kept) when ``writable`` (for ``out=``), else of a contiguous copy where the tensor is not
    contiguous. bfloat16, which numpy has no dtype for, is viewed through its int16 bits as
    ``ml_dtypes.bfloat16``."""
    tensor = tensor.detach()
    if not writable:
        tensor = tensor.contiguous()
    torch = sys.modules["torch"]
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def from_host(array: np.ndarray) -> Any:
    """A CPU tensor sharing ``array``'s memory (bfloat16 through its int16 bits)."""
    torch = sys.modules["torch"]
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def signature(obj: Any) -> tuple | None:
    """What the checks of an op read from an array operand (kind, shape, strides, dtype, device, and
    whether its data is 16-byte aligned: kernels choose 16-byte loads and stores by it, and a plan's
    replay must not reuse that choice for a misaligned view), as a hashable key; None for an absent
    operand; False when the operand is not a device array (numpy or unknown: no launch plan)."""
    if obj is None:
        return None
    if type(obj).__module__.startswith("torch"):
        if not obj.is_cuda:
            return False
        return ("torch", obj.shape, obj.stride(), obj.dtype, obj.get_device(), obj.data_ptr() % 16 == 0)
    if runtime.is_device_array(obj):
        return ("numba", tuple(obj.shape), runtime.strides_of(obj), obj.dtype.str,
                runtime.is_aligned(obj))
    return False


def pointer(obj: Any) -> tuple[int, int]:
    """(device pointer, bytes) of a device operand (torch tensor or Numba device array)."""
    if is_torch(obj):
        return obj.data_ptr(), obj.numel() * obj.element_size()
    return runtime.device_pointer(obj), int(obj.size) * obj.dtype.itemsize


def data_pointer(obj: Any) -> int:
    """Device pointer of a device operand (torch tensor or Numba device array)."""
    if type(obj).__module__.startswith("torch"):
        return obj.data_ptr()
    return runtime.device_pointer(obj)


def raw_stream_getter() -> Any:
    """``f(device_index) -> int``: the CUstream handle of PyTorch's current stream on that device;
    ``torch._C._cuda_getCurrentRawStream`` where present (a fraction of ``current_stream()``'s cost)."""
    torch = sys.modules["torch"]
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: int(torch.cuda.current_stream(index).cuda_stream)


def as_device(obj: Any) -> Any:
    """A Numba device-array view of a device operand (torch tensors are detached first)."""
    if is_torch(obj):
        obj = obj.detach()
    return runtime.as_device_array(obj)


def _numba_stream(handle: int) -> Any:
    if handle == 0 or not runtime.HAS_DEVICE:
        return 0
    streams = _external()
    stream = streams.get(handle)
    if stream is None:
        stream = streams[handle] = runtime.cuda.external_stream(handle)
    return stream


def resolve_stream(stream: Any, recs: tuple) -> Any:
    """The stream the call's kernels run on (a Numba stream or 0), from ``stream=`` or the operand
    records ``recs`` (see the module docstring)."""
    if stream is not None:
        if isinstance(stream, bool):
            raise TypeError(f"stream must be a CUDA stream or an int handle, got {stream!r}")
        if isinstance(stream, (int, np.integer)):
            return _numba_stream(int(stream))
        if hasattr(stream, "cuda_stream"):
            return _numba_stream(int(stream.cuda_stream))
        if runtime.is_stream(stream):
            return stream
        raise TypeError(f"stream must be a Numba stream, a torch.cuda.Stream or an int handle, "
                        f"got {type(stream).__name__}")
    for _, _, obj, kind in recs:
        if kind == TORCH:
            torch = sys.modules["torch"]
            return _numba_stream(int(torch.cuda.current_stream(obj.device).cuda_stream))
        if kind != NUMBA and kind != ARRAY:
            continue
        own = getattr(obj, "stream", 0)
        if own and runtime.is_stream(own):
            return own
        cai = getattr(obj, "__cuda_array_interface__", None) if kind == ARRAY else None
        if cai is not None and cai.get("stream"):
            return _numba_stream(0 if cai["stream"] == 1 else int(cai["stream"]))
    return 0


def empty_like_kind(like: Operand, shape: tuple, dtype: str, stream: Any = 0, *,
                    channels_last: bool = False) -> Any:
    """An uninitialised output in the kind of the operand record ``like``: a torch tensor on a CUDA
    tensor's device (torch's caching allocator), else a Numba device array from
    convlab.runtime.scratch's output pool for ``stream``.
    ``channels_last`` (4-D ``shape`` (N, C, H, W)): NHWC memory viewed as NCHW (torch's
    ``memory_format=torch.channels_last``; a Numba array allocated outside the pool); 5-D: NDHWC
    (``torch.channels_last_3d``)."""
    if like[3] == TORCH:
        torch = sys.modules["torch"]
        device = like[2].device
        if channels_last:
            return torch.empty(shape, dtype=getattr(torch, dtype), device=device,
                               memory_format=torch.channels_last_3d if len(shape) == 5 else
                               torch.channels_last)
        return torch.empty(shape, dtype=getattr(torch, dtype), device=device)
    if channels_last:
        return channels_last_view(runtime.empty((max(int(np.prod(shape)), 1),), dtype), shape, dtype)
    from convlab.runtime.thin import stream_handle
    from convlab.runtime.scratch import output

    return output(shape, dtype, stream_handle(stream))
