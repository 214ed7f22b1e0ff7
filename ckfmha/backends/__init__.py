"""Backends: what turns a KernelConfig into something that runs.

Every backend implements :class:`ckfmha.backends.base.Backend`; they are looked up by name with
:func:`get_backend`. Only ``cpu`` is imported eagerly-on-demand here; ``triton`` and ``hip`` live in their
own sub-packages and import their heavy dependencies (torch, triton, hipcc) only when used, so the core never
imports torch or triton. :func:`auto_backend_name` (``--backend auto``) picks hip where it is available (a ROCm
GPU, a HIP compiler and a CK checkout), else triton (a GPU), else cpu.
"""

from __future__ import annotations

import importlib

from ckfmha.backends.base import (  # noqa: F401  (public API)
    Availability,
    Backend,
    BackendError,
    BuiltKernel,
    PreconditionError,
    RunContext,
    StageResult,
    UnsupportedConfig,
)

BACKEND_MODULES = {
    "cpu": "ckfmha.backends.cpu",
    "triton": "ckfmha.backends.triton",
    "hip": "ckfmha.backends.hip",
}

_instances: dict[str, Backend] = {}


def backend_names() -> tuple[str, ...]:
    return tuple(BACKEND_MODULES)


def instances() -> dict[str, Backend]:
    """The process's backend objects by name, as :func:`get_backend` made them: the dict itself, so an entry set in it
    (a test's ``monkeypatch.setitem(instances(), "cpu", fake)``) is what :func:`get_backend` returns for that name."""
    return _instances


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (an error naming the known backends otherwise)."""
    if name not in BACKEND_MODULES:
        raise BackendError(f"backend: unknown backend {name!r}; known: {', '.join(BACKEND_MODULES)}")
    if name not in _instances:
        try:
            module = importlib.import_module(BACKEND_MODULES[name])
        except ModuleNotFoundError as e:
            if e.name == BACKEND_MODULES[name]:
                raise BackendError(
                    f"backend {name!r} is not part of this ckfmha version yet (no module "
                    f"{BACKEND_MODULES[name]}); known: {', '.join(BACKEND_MODULES)}"
                ) from None
            raise BackendError(f"backend {name!r}: its module {BACKEND_MODULES[name]} failed to import ({e})") from None
        _instances[name] = module.make_backend()
    return _instances[name]


def configure_backend(name: str, **settings) -> Backend:
    """Configure the process's backend called ``name`` (:meth:`Backend.configure`; hip: ``ck_root``, ``arch``,
    ``receipt``, ``mask_mode``) and return it: the one way the CLI, the runner and the plugin set a backend up."""
    return get_backend(name).configure(**settings)


#: ``auto``'s order: the first available one wins, cpu always is
AUTO_ORDER = ("hip", "triton")


def auto_backend_name() -> str:
    """hip on ROCm with a HIP compiler and a CK checkout (CK's own kernels), else triton with a GPU, else cpu."""
    for name in AUTO_ORDER:
        try:
            if get_backend(name).available():
                return name
        except BackendError:
            continue
    return "cpu"
