"""A built kernel library loaded with ctypes, and its calls.

:class:`KernelLibrary` loads ``lib<kernel>.so`` (``RTLD_LOCAL``: two kernels' CK symbols never meet), checks that
it speaks this ckfmha's ABI (``ckfmha_abi_version()`` and ``ckfmha_desc_size()`` equal :data:`codegen.abi.
ABI_VERSION` and ``sizeof(Descriptor)``, else :class:`LibraryError` naming both) and which kernel it holds
(``ckfmha_kernel_name()``). :meth:`KernelLibrary.call` runs ``ckfmha_run_<api>`` with a descriptor and a 4 KiB
message buffer; any status but ``OK`` is a :class:`KernelCallError` whose message is the status name and the
wrapper's own message (it becomes the item's failure reason).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ckfmha.backends.base import BackendError
from codegen.abi import ABI_VERSION, ENTRY_APIS, Descriptor, Status

MESSAGE_BYTES = 4096


class LibraryError(BackendError):
    """A library that cannot be loaded or does not speak this ABI."""


class KernelCallError(BackendError):
    """An entry point returned a status other than OK; ``status`` and ``detail`` are the wrapper's."""

    def __init__(self, entry: str, library: Path, status: int, detail: str) -> None:
        try:
            label = Status(status).name
        except ValueError:
            label = f"unknown status {status}"
        super().__init__(f"{entry} ({library.name}): {label}: {detail or '(no message)'}")
        self.status = status
        self.detail = detail


class KernelLibrary:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            self._lib = ctypes.CDLL(str(self.path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as e:
            raise LibraryError(f"{self.path}: cannot load the kernel library ({e})") from None
        for sym, res in (
            ("ckfmha_abi_version", ctypes.c_int32),
            ("ckfmha_desc_size", ctypes.c_uint64),
            ("ckfmha_kernel_name", ctypes.c_char_p),
        ):
            fn = self._symbol(sym)
            fn.argtypes, fn.restype = [], res
        version, size = self._lib.ckfmha_abi_version(), self._lib.ckfmha_desc_size()
        if version != ABI_VERSION or size != ctypes.sizeof(Descriptor):
            raise LibraryError(
                f"{self.path}: speaks ABI version {version} with a {size}-byte descriptor; this ckfmha speaks "
                f"version {ABI_VERSION} with {ctypes.sizeof(Descriptor)} bytes (rebuild the library)"
            )
        self.kernel = (self._lib.ckfmha_kernel_name() or b"").decode("utf-8", "replace")
        self.apis = tuple(a for a in ENTRY_APIS if hasattr(self._lib, f"ckfmha_run_{a}"))

    def _symbol(self, name: str):
        try:
            return getattr(self._lib, name)
        except AttributeError:
            raise LibraryError(f"{self.path}: exports no {name} (not a ckfmha kernel library)") from None

    def call(self, api: str, desc: Descriptor) -> float:
        """Run ``ckfmha_run_<api>``; returns the time CK reports (ms; 0 unless the descriptor asks for timing)."""
        entry = f"ckfmha_run_{api}"
        if api not in self.apis:
            raise LibraryError(
                f"{self.path}: exports no {entry} (it holds {self.kernel or '?'}, apis: {', '.join(self.apis) or 'none'})"
            )
        fn = getattr(self._lib, entry)
        fn.argtypes = [ctypes.POINTER(Descriptor), ctypes.POINTER(ctypes.c_float), ctypes.c_char_p, ctypes.c_uint64]
        fn.restype = ctypes.c_int32
        ms = ctypes.c_float(0.0)
        buf = ctypes.create_string_buffer(MESSAGE_BYTES)
        status = fn(ctypes.byref(desc), ctypes.byref(ms), buf, MESSAGE_BYTES)
        if status != Status.OK:
            raise KernelCallError(entry, self.path, status, buf.value.decode("utf-8", "replace"))
        return float(ms.value)
