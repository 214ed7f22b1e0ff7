"""The reference, computed once per (shape, seed, reference) and shared by every kernel item and xdist worker.

``<cache>/references/<key>.npz`` where ``key = sha256(problem, seed, fp8 format, reference code version
[, reference])``; the reference code version (:func:`reference_version`) is a digest of the source files that
decide the reference's values (``ckfmha/reference/``, ``rng.py``, ``inputs.py``, ``masking.py``, ``problem.py``),
so a change to the reference never reuses an old result.  ``reference`` is what computes it
(``--ckfmha-reference``, :func:`compute`): ``numpy`` adds nothing (the key of earlier caches), ``torch:cuda`` /
``torch:cpu`` add their name -- the torch twin agrees with NumPy only within a bound, so one shared entry would
make an item near its tolerance pass or fail by which run filled the cache first, and the row's ``reference``
would not name what computed the values the item was judged on.  The writer holds ``<key>.lock`` and publishes
with an atomic ``os.replace``.  Arrays of ml_dtypes types (bf16, fp8) are stored as float32 (lossless) with their
dtype names in ``__meta__``, next to a sha256 of every array; a file that cannot be read or whose arrays do not
match the checksums is removed with one :class:`~ckfmha.backends.cache.CacheWarning` naming it and recomputed.  A
small in-process memo (:func:`keep_within`) avoids re-reading the file for the next kernel of the same shape.

A reference the torch twin computes on a GPU (``torch:cuda``, :data:`MEMORY_ONLY`) is kept in the memo only, never
written: on an H100 the twin computes the nightly's biggest reference (2.1 GB) in seconds, about what reading it
back with its checksums takes, and the nightly category's references hold ~96 GB -- more than a GPU box's disk
(the 64 GiB of a one-H100 machine: a nightly filled it, and the items after that failed to store theirs).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

REF_FORMAT = "2"
_MEMO: "OrderedDict[str, dict]" = OrderedDict()
#: a process keeps the data (inputs: pytest_ckfmha.execute; references: here) of the shapes it used last, for their
#: next items (the scheduler's shape affinity, pytest_ckfmha.scheduling) ...
SHAPES_KEPT = 2
#: ... and keeps an older shape's only while the older shapes' arrays stay within this many bytes (the memory
#: budget counts one item's arrays, not a memo: the nightly's biggest shape holds 3.2 GB of inputs)
OLDER_SHAPES_BYTES = 2 << 30


def keep_within(memo: "OrderedDict[Any, dict]", newcomer: bool = False) -> None:
    """Forget the oldest entries of a per-shape memo (dict of arrays per entry, newest last) until at most
    :data:`SHAPES_KEPT` remain and the older ones -- all but the newest, or all of them when ``newcomer`` (a new
    shape's entry comes next) -- hold at most :data:`OLDER_SHAPES_BYTES`."""

    def nbytes(entry: dict) -> int:
        return sum(int(getattr(a, "nbytes", 0)) for a in entry.values())

    while memo:
        older = list(memo.values()) if newcomer else list(memo.values())[:-1]
        if len(memo) + newcomer <= SHAPES_KEPT and sum(map(nbytes, older)) <= OLDER_SHAPES_BYTES:
            return
        memo.popitem(last=False)


REFERENCE_SOURCES = ("reference", "rng.py", "inputs.py", "masking.py", "problem.py")


def clear_memo() -> None:
    """Forget the references kept in memory (the next lookup reads the cache directory)."""
    _MEMO.clear()


@lru_cache(maxsize=1)
def reference_version() -> str:
    """A digest of the source files that decide the reference's values."""
    import ckfmha

    root = Path(ckfmha.__file__).parent
    h = hashlib.sha256()
    for name in REFERENCE_SOURCES:
        p = root / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def ref_key(problem, seed: int, fp8_format: str, reference: str = "numpy") -> str:
    text = f"{REF_FORMAT}\0{reference_version()}\0{fp8_format}\0{seed}\0{problem!r}"
    if reference != "numpy":
        text += f"\0{reference}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _dtype_by_name(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def _digest(a: np.ndarray) -> str:
    """sha256 of the dtype, the shape and the bytes of ``a``, hashed in place (no copy of a large reference)."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def _save(path: Path, arrays: dict) -> None:
    dtypes, digests, plain = {}, {}, {}
    for k, a in arrays.items():
        a = np.asarray(a)
        dtypes[k] = a.dtype.name
        plain[k] = a if a.dtype.kind in "fiub" and a.dtype.name in np.sctypeDict else a.astype(np.float32)
        digests[k] = _digest(plain[k])
    plain["__meta__"] = np.array(json.dumps({"dtypes": dtypes, "sha256": digests}))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp.npz", dir=path.parent)
    os.close(fd)
    try:
        # numpy's stub matches **plain against savez's allow_pickle: bool too; the keys here are array names
        np.savez(tmp, **plain)  # type: ignore[arg-type]
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path) -> dict:
    """The arrays of a cache file; ValueError (with the cause) when it is unreadable or corrupt."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["__meta__"]))
            out = {}
            for k, dt in meta["dtypes"].items():
                a = z[k]
                if _digest(a) != meta["sha256"][k]:
                    raise ValueError(f"array {k!r} does not match its checksum")
                out[k] = a.astype(_dtype_by_name(dt)) if a.dtype.name != dt else a
            return out
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile, OSError, KeyError, EOFError ...: all mean "unreadable"
        raise ValueError(f"unreadable: {type(e).__name__}: {e}") from None


#: the ``--ckfmha-reference`` choices whose references are recomputed rather than stored (module doc)
MEMORY_ONLY = ("torch:cuda",)


def array_backend_of(reference: str) -> dict:
    """The ``array_backend`` / ``device`` arguments (of :func:`ckfmha.reference.reference` and
    :func:`ckfmha.validator.validate`) that a ``--ckfmha-reference`` choice names: ``numpy`` -> {},
    ``torch:<device>`` -> torch on that device; a ValueError naming the value otherwise."""
    if reference == "numpy":
        return {}
    backend, _, device = reference.partition(":")
    if backend != "torch" or not device:
        raise ValueError(f"reference {reference!r} is not numpy, torch:cuda or torch:cpu")
    return {"array_backend": "torch", "device": device}


def compute(problem, inputs: dict, reference: str = "numpy") -> dict:
    """The reference outputs computed by ``reference``: ``numpy``, or ``torch:<device>`` (the torch twin)."""
    from ckfmha.reference import reference as ref_fn

    return ref_fn(problem, inputs, **array_backend_of(reference))


def get_reference(
    problem, inputs: dict, seed: int, cache_dir: Path | None, fp8_format: str = "ocp", reference: str = "numpy"
) -> tuple[dict, bool]:
    """(reference outputs computed by ``reference`` (:func:`compute`), was_cached): from the memo, else from
    ``cache_dir`` (None: no files), else computed -- and stored there unless ``reference`` is :data:`MEMORY_ONLY`."""
    key = ref_key(problem, seed, fp8_format, reference)
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key], True
    ref: dict | None  # None until read from the cache file or computed
    if cache_dir is None or reference in MEMORY_ONLY:
        ref = compute(problem, inputs, reference)
        cached = False
    else:
        from ckfmha.backends.cache import file_lock, warn_corrupt

        path = Path(cache_dir) / "references" / f"{key}.npz"
        ref = None
        if path.is_file():
            try:
                ref, cached = _load(path), True
            except ValueError:
                ref = None
        if ref is None:
            with file_lock(path.with_suffix(".lock")):
                if path.is_file():  # written by another process meanwhile, or the corrupt file
                    try:
                        ref, cached = _load(path), True
                    except ValueError as e:
                        warn_corrupt("reference cache file", path, str(e))
                        path.unlink(missing_ok=True)
                if ref is None:
                    ref, cached = compute(problem, inputs, reference), False
                    _save(path, ref)
    _MEMO[key] = ref
    keep_within(_MEMO)
    return ref, cached
