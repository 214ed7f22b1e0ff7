"""Scoped BLAS threading for the tile loops.

The emulation issues many small GEMMs (one per tile); OpenBLAS parallelizes each one, which on a busy or small
machine costs far more than it gains (a 4x128x128x128 batched GEMM: ~2 ms single-threaded, 100+ ms with
oversubscribed threads). :func:`blas_threads` sets OpenBLAS's *thread-local* thread count for the duration of a
stage and restores it afterwards (``openblas_set_num_threads_local``, OpenBLAS >= 0.3.27, as bundled with NumPy
wheels). ``CKFMHA_CPU_BLAS_THREADS`` picks the count (default 1; 0 leaves BLAS alone). Without a bundled
OpenBLAS this is a no-op.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator
from functools import lru_cache


@lru_cache(maxsize=1)
def _set_local():
    try:
        import numpy

        libdir = os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs")
        for path in sorted(glob.glob(os.path.join(libdir, "*openblas*"))):
            fn = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn.restype = ctypes.c_int
                return fn
    except OSError:  # pragma: no cover - unusual installs
        return None
    return None


@contextlib.contextmanager
def blas_threads(n: int | None = None) -> Iterator[None]:
    if n is None:
        try:
            n = int(os.environ.get("CKFMHA_CPU_BLAS_THREADS", "1"))
        except ValueError:
            n = 1
    fn = _set_local() if n > 0 else None
    if fn is None:
        yield
        return
    prev = fn(n)
    try:
        yield
    finally:
        fn(prev if prev > 0 else 0)
