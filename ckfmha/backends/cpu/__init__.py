"""The cpu backend: a vectorized NumPy emulation of CK's FMHA kernels, tile by tile (docs/cpu_backend.md).

``make_backend()`` returns the backend (name ``cpu``, always available). It runs one plan stage at a time the way
the GPU kernel does -- bm0 x bn0 tiles with an online softmax, P rounded to the input type, the kernel's pads
enforced by the host checks a real launch performs (:class:`PreconditionError`) -- and writes the stage's outputs
into the caller's tensor dict under the keys the references use (:mod:`ckfmha.backends.cpu.stages`).
"""

from __future__ import annotations

from ckfmha.backends.cpu.backend import (  # noqa: F401  (public API)
    CPU_BACKEND_VERSION,
    CpuBackend,
    PreconditionError,
    check_preconditions,
    make_plan,
)
from ckfmha.backends.cpu.engine import split_key_ranges  # noqa: F401
from ckfmha.backends.cpu.errors import KernelInputError  # noqa: F401


def make_backend() -> CpuBackend:
    return CpuBackend()
