"""The kernel set on disk: enumerating an arch's kernel space takes about a second (sm90: 28,280 kernels), and
every pytest process of a run needs it -- the controller for its selection check, each xdist worker before it
forks its kernel child (warmup.py) -- so the first process stores the list and the others load it (about 0.2 s).

| what | rule |
|---|---|
| cached | the list ``pytest_ckfmha.collect.kernel_set`` enumerates (arch, receipt, profile, mask mode, sweep, filter expression applied); not with ``--ckfmha-filter-file`` (Python that may read other files, which no key sees), nor the kernels a ``pytest_ckfmha_kernels`` hook gives, nor a CK checkout's (``--ckfmha-ck-root``): those are computed every time |
| where | ``<--ckfmha-cache-dir>/kernel-sets/<key>.pickle`` (settings without a cache directory: nothing is cached) |
| key | sha256 of the settings above (the filter and sweep files by their contents) and of every file of the installed ckfmha package (the enumeration's code and its data: a change to any of them is another key), Python's version and ckfmha's |
| written | atomically (a temporary file, then a rename; readable by all, like the rest of the cache): concurrent processes each write a whole file; files of older keys stay (about 1.4 MB each: remove ``kernel-sets/`` to reclaim them) |
| a file that cannot be read or unpickled, or holds no list or an empty one | enumerated again and written again |
| an empty set | never stored (whether it is an error depends on ``--ckfmha-allow-empty``, which is not in the key) |
| the cache directory cannot be written | the list is used without being stored |
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

SUBDIR = "kernel-sets"


@lru_cache(maxsize=1)
def package_fingerprint() -> str:
    """sha256 (first 16 hex) of every file of the installed ckfmha package (its code and data), by relative path."""
    import ckfmha

    root = Path(ckfmha.__file__).resolve().parent
    files = sorted(f for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    h = hashlib.sha256()
    for f in files:
        h.update(f"\0{f.relative_to(root)}\0".encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cache_key(settings) -> str:
    import ckfmha
    from pytest_ckfmha.reporting import content_hash

    s = settings
    what = {
        "arch": s.arch,
        "receipt": s.receipt,
        "profile": s.profile,
        "mask_mode": s.mask_mode,
        "filter": s.filter,
        "sweep": content_hash([s.sweep] if s.sweep else None),
        "package": package_fingerprint(),
        "python": sys.version,
        "ckfmha": getattr(ckfmha, "__version__", None),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cached_kernel_set(settings, enumerate_set: Callable[[], list[Any]]) -> list[Any]:
    """The kernel set of ``settings`` from the cache (module doc), else ``enumerate_set()``, stored."""
    cache_dir = getattr(settings, "cache_dir", None)
    if cache_dir is None or getattr(settings, "filter_file", None):  # module doc: not cached
        return enumerate_set()
    path = Path(cache_dir) / SUBDIR / f"{cache_key(settings)}.pickle"
    try:
        with open(path, "rb") as fh:
            kernels = pickle.load(fh)
        if isinstance(kernels, list) and kernels:
            return kernels
    except Exception:  # noqa: BLE001 - missing, unreadable or not a pickle: enumerate again
        pass
    kernels = enumerate_set()
    if kernels:  # an empty set is never stored: whether it is an error depends on --ckfmha-allow-empty
        _store(path, kernels)
    return kernels


def _store(path: Path, kernels: list[Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    except OSError:  # the cache directory cannot be written: the list is used without being stored
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(kernels, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - not stored (a full disk, an unpicklable kernel): no temporary file left
        try:
            os.unlink(tmp)
        except OSError:
            pass
