"""The on-disk build cache shared by processes (pytest-xdist workers) and runs.

Layout: ``<root>/<backend>/<sha256(kernel id + backend version)[:24]>/`` holding ``artifact.*`` and
``meta.json``. Writers take an exclusive ``fcntl`` lock on ``<entry>.lock`` and publish with an atomic
``os.replace`` of a temporary directory, so a reader sees either nothing or a complete entry, and a kernel is
built once even when several workers ask for it at the same moment.

Root: ``$CKFMHA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckfmha``, else ``~/.cache/ckfmha``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]


def cache_root() -> Path:
    env = os.environ.get("CKFMHA_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ckfmha"


def entry_key(kernel_id: str, backend: str, version: str) -> str:
    return hashlib.sha256(f"{backend}\0{version}\0{kernel_id}".encode()).hexdigest()[:24]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class BuildCache:
    def __init__(self, backend: str, version: str, root: Path | None = None) -> None:
        self.backend = backend
        self.version = version
        self.root = (root or cache_root()) / backend

    def entry(self, kernel_id: str) -> Path:
        return self.root / entry_key(kernel_id, self.backend, self.version)

    def lookup(self, kernel_id: str) -> Path | None:
        e = self.entry(kernel_id)
        return e if (e / "meta.json").is_file() else None

    def get_or_build(self, kernel_id: str, build: Callable[[Path], dict]) -> tuple[Path, dict, bool]:
        """Return (entry dir, meta, was_cached). ``build(tmpdir)`` writes artifacts and returns meta."""
        e = self.entry(kernel_id)
        if (e / "meta.json").is_file():
            return e, json.loads((e / "meta.json").read_text()), True
        with file_lock(e.with_suffix(".lock")):
            if (e / "meta.json").is_file():  # built by another process while we waited
                return e, json.loads((e / "meta.json").read_text()), True
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=e.name + ".tmp", dir=self.root))
            try:
                t0 = time.perf_counter()
                meta = dict(build(tmp))
                meta.setdefault("kernel_id", kernel_id)
                meta.setdefault("build_seconds", time.perf_counter() - t0)
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
                if e.exists():  # a stale partial entry (no meta.json): replace it
                    shutil.rmtree(e)
                os.replace(tmp, e)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return e, meta, False
