"""The on-disk build cache shared by processes (pytest-xdist workers) and runs.

Layout: ``<root>/<backend>/<sha256(kernel id + backend version)[:24]>/`` holding the artifacts and ``meta.json``
(the build's metadata plus ``files``: the sha256 of every artifact).  Writers hold ``<entry>.lock`` (``filelock``)
and publish with an atomic ``os.replace`` of a temporary directory, so a reader sees either nothing or a complete
entry, and a kernel is built once even when several workers ask for it at the same moment.

Entries heal: an entry whose ``meta.json`` cannot be read, lacks checksums or whose files do not match them
(a truncated artifact, a disk error, an interrupted copy) is removed with one :class:`CacheWarning` naming the
entry and rebuilt.  :func:`check_cache_dir` tells up front whether a root can be used at all.

Root: ``$CKFMHA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckfmha``, else ``~/.cache/ckfmha``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

META = "meta.json"
#: layout of an entry (part of its key: entries of another layout are never read)
LAYOUT = "2"


class CacheWarning(UserWarning):
    """A cache entry was unreadable or corrupt; it is removed and rebuilt."""


def cache_root() -> Path:
    env = os.environ.get("CKFMHA_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ckfmha"


def check_cache_dir(root: Path) -> str | None:
    """None when ``root`` can hold the cache (it is created if needed), else why not (in words)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"is not usable as a cache directory ({e.strerror or e})"
    return None


def entry_key(kernel_id: str, backend: str, version: str) -> str:
    return hashlib.sha256(f"{LAYOUT}\0{backend}\0{version}\0{kernel_id}".encode()).hexdigest()[:24]


def file_lock(path: Path) -> FileLock:
    """An exclusive inter-process lock on ``path`` (its directory is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def warn_corrupt(what: str, path: Path, why: str) -> None:
    warnings.warn(CacheWarning(f"ckfmha: corrupt {what} {path} ({why}); it is removed and rebuilt"), stacklevel=3)


class BuildCache:
    def __init__(self, backend: str, version: str, root: Path | None = None) -> None:
        self.backend = backend
        self.version = version
        self.root = (root or cache_root()) / backend

    def entry(self, kernel_id: str) -> Path:
        return self.root / entry_key(kernel_id, self.backend, self.version)

    def _check(self, e: Path) -> tuple[dict | None, str]:
        """(meta, "") for a sound entry; (None, why) for a corrupt one; (None, "") when there is none."""
        meta_path = e / META
        if not meta_path.is_file():
            return None, ("no meta.json (an unfinished entry)" if e.exists() else "")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            files = meta["files"]
            if not isinstance(files, dict):
                raise TypeError("'files' is not a mapping")
            for name, digest in files.items():
                if file_digest(e / name) != digest:
                    return None, f"{name} does not match its checksum"
        except (OSError, ValueError, KeyError, TypeError) as err:
            return None, f"meta.json unreadable: {type(err).__name__}: {err}"
        return meta, ""

    def lookup(self, kernel_id: str) -> Path | None:
        e = self.entry(kernel_id)
        return e if self._check(e)[0] is not None else None

    def get_or_build(self, kernel_id: str, build: Callable[[Path], dict]) -> tuple[Path, dict, bool]:
        """Return (entry dir, meta, was_cached). ``build(tmpdir)`` writes artifacts and returns meta."""
        e = self.entry(kernel_id)
        meta, _ = self._check(e)
        if meta is not None:
            return e, meta, True
        with file_lock(e.with_suffix(".lock")):
            meta, why = self._check(e)
            if meta is not None:  # built by another process while we waited
                return e, meta, True
            if why and "unfinished" not in why:
                warn_corrupt("build cache entry", e, why)
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=e.name + ".tmp", dir=self.root))
            try:
                t0 = time.perf_counter()
                meta = dict(build(tmp))
                meta.setdefault("kernel_id", kernel_id)
                meta.setdefault("build_seconds", time.perf_counter() - t0)
                meta["files"] = {
                    str(p.relative_to(tmp)): file_digest(p)
                    for p in sorted(tmp.rglob("*"))
                    if p.is_file() and p.name != META
                }
                (tmp / META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")
                if e.exists():  # a corrupt or unfinished entry: replace it
                    shutil.rmtree(e)
                os.replace(tmp, e)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return e, meta, False
