"""The array operations the validator's elementwise rule runs through: NumPy on the host, or torch on a device.

One rule, written once (:mod:`ckfmha.validator`), evaluated by either array library; the operations it needs are
the same IEEE float64 element operations in both (a subtraction, an absolute value, a product and a sum, a
division, comparisons), each rounded on its own, so a verdict and its figures do not depend on where they were
computed (tests/test_validator_device.py checks them equal).  Large outputs are compared in chunks of the
flattened arrays (:meth:`chunk`), so no float64 copy of a whole output is ever made:

==========  ============================  ======================================================================
ops         made by                       where the chunks are compared
==========  ============================  ======================================================================
``numpy``   :data:`NUMPY`                 on the host, ``HOST_CHUNK`` elements at a time (they stay in cache)
``torch``   :func:`torch_ops` (device)    on the torch device: each chunk is copied there in its stored dtype
                                          (2 bytes an element for fp16/bf16) and widened there;
                                          ``DEVICE_CHUNK`` elements at a time
==========  ============================  ======================================================================

torch is imported here (and by the reference's torch twin, which takes :func:`import_torch`,
:func:`resolve_device` and :func:`torch_dtype` from here) only when torch ops are asked for: the core never
imports it.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Protocol

import numpy as np

#: the array libraries a caller may name (``array_backend``: :func:`ckfmha.reference.reference`,
#: :func:`ckfmha.validator.validate`)
ARRAY_BACKENDS = ("numpy", "torch")

#: float64 elements a host chunk holds (512 KiB: a chunk's temporaries stay in the caches; on the 2-core dev box
#: 65,536 elements compared at ~12 ns an element, 2**20 at ~33, whole 8M-element arrays at ~35)
HOST_CHUNK = 1 << 16
#: float64 elements a device chunk holds (128 MiB of float64; the rule keeps ~8 temporaries of a chunk: ~1 GiB per
#: worker, 16 workers sharing one GPU)
DEVICE_CHUNK = 1 << 24


class ArrayOps(Protocol):
    """What the validator's rule needs of an array library (NumPy's names; torch's where they differ)."""

    name: str
    chunk: int

    def float64(self, a: np.ndarray) -> Any:
        """A host NumPy array (any float dtype, ml_dtypes' included) as float64 where this library computes."""

    def isfinite(self, a: Any) -> Any:
        """Elementwise: not inf, not NaN."""

    def where(self, cond: Any, x: Any, y: Any) -> Any:
        """``x`` where ``cond`` holds, else ``y`` (either may be a Python float)."""

    def errstate(self) -> contextlib.AbstractContextManager:
        """A context in which invalid / overflow / division results raise no warning."""

    def first_true(self, mask: Any) -> int:
        """The flat index of the first True element of ``mask`` (which has one)."""


class _NumpyOps:
    name = "numpy"
    chunk = HOST_CHUNK

    def float64(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a, dtype=np.float64)  # no copy of what is float64 already (the truth)

    def isfinite(self, a: np.ndarray) -> np.ndarray:
        return np.isfinite(a)

    def where(self, cond: np.ndarray, x: Any, y: Any) -> np.ndarray:
        return np.where(cond, x, y)

    def errstate(self) -> contextlib.AbstractContextManager:
        return np.errstate(invalid="ignore", over="ignore", divide="ignore")

    def first_true(self, mask: np.ndarray) -> int:
        return int(np.argmax(mask.reshape(-1)))


#: the host's ops (NumPy)
NUMPY: ArrayOps = _NumpyOps()


def import_torch() -> Any:
    """The torch module, or an ImportError naming the option that needs it."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised in an environment without torch
        raise ImportError(
            "array_backend: 'torch' needs PyTorch, which is not installed (pip install torch, or use "
            "array_backend='numpy')"
        ) from e
    return torch


def resolve_device(device) -> Any:
    """``device`` as a ``torch.device``: None -> 'cuda' when available, else 'cpu'; a ValueError naming the value
    for a device torch does not know or cannot use."""
    torch = import_torch()
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: {device!r} is not a torch device ({e})") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asks for CUDA, which this torch build or machine does not have")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {device!r} must be a 'cpu' or 'cuda' device")
    return dev


#: NumPy (ml_dtypes) dtype name -> (torch dtype attribute, the unsigned integer view that carries its bits)
_TORCH_DTYPES = {
    "float64": ("float64", None),
    "float32": ("float32", None),
    "float16": ("float16", None),
    "bfloat16": ("bfloat16", np.uint16),
    "float8_e4m3fn": ("float8_e4m3fn", np.uint8),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", np.uint8),
}


def torch_dtype(torch: Any, dtype) -> Any:
    """The torch dtype of a NumPy (or ml_dtypes) dtype."""
    name = np.dtype(dtype).name
    if name not in _TORCH_DTYPES:
        raise ValueError(f"dtype: {name} has no torch counterpart in the twin")
    return getattr(torch, _TORCH_DTYPES[name][0])


class _TorchOps:
    name = "torch"
    chunk = DEVICE_CHUNK

    def __init__(self, device) -> None:
        self.torch = import_torch()
        self.device = resolve_device(device)
        if self.device.type == "cpu":
            self.chunk = HOST_CHUNK

    def float64(self, a: np.ndarray) -> Any:
        torch = self.torch
        a = np.ascontiguousarray(a)
        name = a.dtype.name
        if name not in _TORCH_DTYPES:  # integers, float types torch lacks: widened on the host
            a, name = a.astype(np.float64), "float64"
        dt, bits = _TORCH_DTYPES[name]
        with warnings.catch_warnings():  # a read-only array: torch warns, though it only reads it here
            warnings.simplefilter("ignore", UserWarning)
            host = torch.from_numpy(a.view(bits) if bits is not None else a)
        if bits is not None:
            host = host.view(getattr(torch, dt))
        on_device = host.to(self.device)
        if bits is np.uint8:  # fp8: widened through float32 (exact), the conversion every torch build has
            on_device = on_device.to(torch.float32)
        return on_device.to(torch.float64)

    def isfinite(self, a: Any) -> Any:
        return self.torch.isfinite(a)

    def where(self, cond: Any, x: Any, y: Any) -> Any:
        return self.torch.where(cond, x, y)

    def errstate(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # torch's element operations do not warn

    def first_true(self, mask: Any) -> int:
        return int(self.torch.argmax(mask.reshape(-1).to(self.torch.uint8)))


def check_array_backend(array_backend: str, device) -> None:
    """A ValueError naming the value for an ``array_backend`` not in :data:`ARRAY_BACKENDS`, or a ``device`` given
    with NumPy (only torch runs on a device)."""
    if array_backend not in ARRAY_BACKENDS:
        raise ValueError(f"array_backend: {array_backend!r} must be one of {', '.join(map(repr, ARRAY_BACKENDS))}")
    if array_backend == "numpy" and device is not None:
        raise ValueError(f"device: {device!r} is only for array_backend='torch' (array_backend is 'numpy')")


def ops_for(array_backend: str = "numpy", device=None) -> ArrayOps:
    """The ops of ``array_backend`` (``numpy``; ``torch`` on ``device``), checked by :func:`check_array_backend`."""
    check_array_backend(array_backend, device)
    return NUMPY if array_backend == "numpy" else torch_ops(device)


def torch_ops(device=None) -> ArrayOps:
    """The ops on a torch ``device`` (None: 'cuda' when available, else 'cpu'; errors: :func:`resolve_device`)."""
    return _TorchOps(device)
