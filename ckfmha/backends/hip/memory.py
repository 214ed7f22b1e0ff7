"""Where a stage's buffers live while CK's api runs, and how its time is measured.

* :class:`TorchMemory` -- the hip backend's own: device memory and timing through PyTorch's ROCm build (a
  ``torch.uint8`` tensor on the GPU per buffer, filled with the NumPy array's bytes, so every dtype -- bf16, the
  fp8 formats -- travels unchanged; the stream is torch's current stream; time from ``torch.cuda.Event`` pairs).
  **Never run here** (no AMD GPU on the machines this was written on); see docs/hip_backend.md.
* :class:`HostMemory` -- host memory (the NumPy arrays themselves, made C-contiguous) and wall-clock time, for
  running a host-built library: the tests' fake CK library (tests/test_hip_backend.py) goes through exactly the
  descriptor, call and download path the GPU runs use.

Both give :class:`~ckfmha.backends.hip.descriptor.DeviceArray` s whose strides are in elements, computed from the
NumPy array's (C-contiguous) layout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ckfmha.backends.hip.descriptor import DeviceArray


def _elements(a: np.ndarray) -> tuple[int, ...]:
    return tuple(int(s) // a.itemsize for s in a.strides)


class HostMemory:
    """Buffers in host memory; ``stream`` is null and time is wall-clock (see the module doc)."""

    name = "host"
    stream: int | None = None

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def put(self, name: str, array: np.ndarray) -> DeviceArray:
        a = np.array(array, order="C", copy=True)
        self._arrays[name] = a
        return DeviceArray(int(a.ctypes.data), tuple(a.shape), _elements(a))

    def get(self, name: str) -> np.ndarray:
        return self._arrays[name]

    @contextmanager
    def timer(self) -> Iterator[dict[str, float]]:
        box: dict[str, float] = {}
        t0 = time.perf_counter()
        yield box
        box["ms"] = (time.perf_counter() - t0) * 1e3

    def release(self) -> None:
        self._arrays.clear()


class TorchMemory:
    """Buffers on the ROCm GPU through torch (see the module doc; not run on AMD hardware yet)."""

    name = "torch"

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._device = torch.device("cuda")
        self._buffers: dict[str, tuple[Any, np.dtype, tuple[int, ...]]] = {}

    @property
    def stream(self) -> int | None:
        return int(self._torch.cuda.current_stream().cuda_stream) or None

    def put(self, name: str, array: np.ndarray) -> DeviceArray:
        a = np.ascontiguousarray(array)
        raw = self._torch.from_numpy(a.view(np.uint8).reshape(-1).copy()).to(self._device)
        self._buffers[name] = (raw, a.dtype, tuple(a.shape))
        return DeviceArray(int(raw.data_ptr()), tuple(a.shape), _elements(a))

    def get(self, name: str) -> np.ndarray:
        raw, dtype, shape = self._buffers[name]
        return raw.cpu().numpy().view(dtype).reshape(shape)

    @contextmanager
    def timer(self) -> Iterator[dict[str, float]]:
        torch = self._torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        box: dict[str, float] = {}
        start.record()
        yield box
        end.record()
        end.synchronize()
        box["ms"] = float(start.elapsed_time(end))

    def release(self) -> None:
        self._buffers.clear()
