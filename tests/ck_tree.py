"""A real CK tree for the tests: the one the ``amd-aiter`` wheel on PyPI ships (built 2025-11-18).

:func:`ensure_ck_tree` downloads ``amd-aiter==0.1.7.post2.dev18`` once with pip (``pip download --no-deps``,
40 MB) and extracts only its ``aiter_meta/3rdparty/composable_kernel/`` part (66 MB) into
``<cache>/ck-trees/amd-aiter-0.1.7.post2.dev18/composable_kernel``, where ``<cache>`` is ckfmha's cache root
(``$CKFMHA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckfmha``, else ``~/.cache/ckfmha``; :func:`ckfmha.backends.cache.
cache_root`). The work runs under a file lock (``filelock``), into a temporary directory published with one
``os.replace``, so parallel test processes download once and never see half a tree; a ``complete`` marker says
the tree is whole. :func:`generator_names` lists one api for one arch with the tree's own generate.py (through
:func:`ckfmha.upstream.enum_parity.upstream_names`) and keeps the list next to the tree (the tree never changes).

The ``ck_tree`` fixture (session scope; import it into a test module) returns the CK root, or skips the test with
the reason when the registry cannot be reached (pip's own last lines).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from ckfmha.backends.cache import cache_root, file_lock

AITER_VERSION = "0.1.7.post2.dev18"
REQUIREMENT = f"amd-aiter=={AITER_VERSION}"
CK_PREFIX = "aiter_meta/3rdparty/composable_kernel/"
GENERATOR = Path("example") / "ck_tile" / "01_fmha" / "generate.py"
DOWNLOAD_TIMEOUT_S = 900
LOCK_TIMEOUT_S = 1800


class CKTreeUnavailable(RuntimeError):
    """The wheel could not be downloaded (the registry is unreachable or refuses): the reason is pip's."""


def tree_dir() -> Path:
    return cache_root() / "ck-trees" / f"amd-aiter-{AITER_VERSION}"


def _extract(wheel: Path, dest: Path) -> None:
    """Extract the composable_kernel part of the wheel into ``dest`` (prefix stripped; no path leaves dest)."""
    dest.mkdir(parents=True)
    base = dest.resolve()
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(CK_PREFIX) and not m.is_dir()]
        if not members:
            raise RuntimeError(f"{wheel.name}: no {CK_PREFIX} in the wheel")
        for m in members:
            target = (base / m.filename[len(CK_PREFIX) :]).resolve()
            if base not in target.parents:
                raise RuntimeError(f"{wheel.name}: member {m.filename!r} would leave the tree")
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def ensure_ck_tree() -> Path:
    """The CK root of the amd-aiter tree, downloaded and extracted on first use (see the module doc)."""
    d = tree_dir()
    root, marker = d / "composable_kernel", d / "complete"
    if marker.is_file() and (root / GENERATOR).is_file():
        return root
    d.mkdir(parents=True, exist_ok=True)
    with file_lock(d / ".lock").acquire(timeout=LOCK_TIMEOUT_S):
        if marker.is_file() and (root / GENERATOR).is_file():
            return root
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=d) as td:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "--timeout",
                "30",
                "--retries",
                "1",
                "-q",
                "-d",
                td,
                REQUIREMENT,
            ]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise CKTreeUnavailable(f"pip download {REQUIREMENT} took over {DOWNLOAD_TIMEOUT_S}s") from None
            wheels = sorted(Path(td).glob("amd_aiter-*.whl"))
            if proc.returncode != 0 or not wheels:
                tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
                raise CKTreeUnavailable(f"pip download {REQUIREMENT} failed (exit {proc.returncode}): {tail}")
            staged = Path(td) / "composable_kernel"
            _extract(wheels[0], staged)
            marker.unlink(missing_ok=True)
            if root.exists():
                shutil.rmtree(root)
            os.replace(staged, root)
        marker.write_text(f"{REQUIREMENT}\n")
    return root


def generator_names(root: Path, api: str, arch: str, receipt: int = 0) -> list[str]:
    """The instance names the tree's generator lists for one api and arch (cached next to the tree)."""
    from ckfmha.upstream.enum_parity import upstream_names

    cached = tree_dir() / "lists" / f"{api}_{arch}_r{receipt}.txt"
    if cached.is_file():
        return cached.read_text().split()
    names = upstream_names(root / GENERATOR, api, arch, receipt, "simplified")
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=cached.parent)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(names) + "\n")
    os.replace(tmp, cached)
    return names


@pytest.fixture(scope="session")
def ck_tree() -> Path:
    """The amd-aiter CK root; skips the test (with pip's reason) when the registry is unreachable."""
    try:
        return ensure_ck_tree()
    except CKTreeUnavailable as e:
        pytest.skip(f"no amd-aiter CK tree: {e}")
