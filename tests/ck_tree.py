"""A real CK tree for the tests: the one the ``amd-aiter`` wheel on PyPI ships (built 2025-11-18).

:func:`ensure_ck_tree` downloads ``amd-aiter==0.1.7.post2.dev18`` once with pip (``pip download --no-deps``,
40 MB, pip checking the pinned sha256; checked again here, with the size, before anything is extracted) and
extracts only its ``aiter_meta/3rdparty/composable_kernel/`` part (66 MB) into
``<cache>/ck-trees/amd-aiter-0.1.7.post2.dev18/composable_kernel``, where ``<cache>`` is ckfmha's cache root
(``$CKFMHA_CACHE_DIR``, else ``$XDG_CACHE_HOME/ckfmha``, else ``~/.cache/ckfmha``; :func:`ckfmha.backends.cache.
cache_root`). The work runs under a file lock (``filelock``), into a temporary directory published with one
``os.replace``, so parallel test processes download once and never see half a tree. The ``complete`` marker
records the wheel's sha256 and the tree's file count and bytes: a later run reuses the tree (no network) when the
marker names the pinned wheel and the tree still has that many files and bytes, and fetches it again otherwise.
:func:`generator_names` lists one api for one arch with the tree's own generate.py (through
:func:`ckfmha.upstream.enum_parity.upstream_names`) and keeps the list next to the tree (the tree never changes).

The ``ck_tree`` fixture (session scope; import it into a test module) returns the CK root, or skips the test with
the reason when the registry cannot be reached (pip's own last lines). tests/conftest.py marks every test that
uses it ``network``, ``slow`` and ``integration``: ``-m "not network"`` never downloads.
"""

from __future__ import annotations

import hashlib
import json
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
#: the wheel PyPI serves for REQUIREMENT (amd_aiter-0.1.7.post2.dev18-py3-none-any.whl)
WHEEL_SHA256 = "fe139d74438217c35e87e3b961166bac8db2d381eadccb371da2e63615f05a31"
WHEEL_BYTES = 40_189_929
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


def tree_census(root: Path) -> dict[str, int]:
    """The number of files under ``root`` and their total size (a cheap check that the tree is whole)."""
    files = [f for f in root.rglob("*") if f.is_file()]
    return {"files": len(files), "bytes": sum(f.stat().st_size for f in files)}


def _marker(wheel_sha256: str, census: dict[str, int]) -> str:
    return json.dumps({"requirement": REQUIREMENT, "wheel_sha256": wheel_sha256, **census}, sort_keys=True) + "\n"


def cached_tree() -> Path | None:
    """The cached CK root when its marker names the pinned wheel and the tree matches the recorded census."""
    d = tree_dir()
    root, marker = d / "composable_kernel", d / "complete"
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if recorded.get("wheel_sha256") != WHEEL_SHA256 or not (root / GENERATOR).is_file():
        return None
    census = tree_census(root)
    return root if all(recorded.get(k) == v for k, v in census.items()) else None


def check_wheel(wheel: Path) -> None:
    """Raise unless ``wheel`` is the pinned one (size first, then sha256)."""
    size = wheel.stat().st_size
    if size != WHEEL_BYTES:
        raise CKTreeUnavailable(f"{wheel.name}: {size} bytes, the pinned wheel has {WHEEL_BYTES}")
    digest = hashlib.sha256()
    with open(wheel, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != WHEEL_SHA256:
        raise CKTreeUnavailable(f"{wheel.name}: sha256 {digest.hexdigest()}, the pinned wheel has {WHEEL_SHA256}")


def _download(td: str) -> Path:
    """``pip download`` of the pinned wheel into ``td`` (pip checks the hash), checked again; its path."""
    requirements = Path(td) / "requirements.txt"
    requirements.write_text(f"{REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n")
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
        "-r",
        str(requirements),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CKTreeUnavailable(f"pip download {REQUIREMENT} took over {DOWNLOAD_TIMEOUT_S}s") from None
    wheels = sorted(Path(td).glob("amd_aiter-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise CKTreeUnavailable(f"pip download {REQUIREMENT} failed (exit {proc.returncode}): {tail}")
    check_wheel(wheels[0])
    return wheels[0]


def ensure_ck_tree() -> Path:
    """The CK root of the amd-aiter tree, downloaded and extracted on first use (see the module doc)."""
    if (root := cached_tree()) is not None:
        return root
    d = tree_dir()
    root, marker = d / "composable_kernel", d / "complete"
    d.mkdir(parents=True, exist_ok=True)
    with file_lock(d / ".lock").acquire(timeout=LOCK_TIMEOUT_S):
        if cached_tree() is not None:
            return root
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=d) as td:
            wheel = _download(td)
            staged = Path(td) / "composable_kernel"
            _extract(wheel, staged)
            census = tree_census(staged)
            marker.unlink(missing_ok=True)
            if root.exists():
                shutil.rmtree(root)
            os.replace(staged, root)
        marker.write_text(_marker(WHEEL_SHA256, census))
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


def assert_parity_enum_skipped_gfx1100(stdout: str) -> None:
    """What ``ckfmha parity-enum --arch all --api fwd_appendkv`` prints for a CK generator that refuses gfx1100 for
    that api: the skip line naming the generator's words, and a total for each of the other archs."""
    assert (
        "skipped gfx1100/fwd_appendkv: this CK's generator does not support arch gfx1100 (api fwd_appendkv: "
        "'Unsupported device target gfx1100')"
    ) in stdout
    totals = [ln.split()[0] for ln in stdout.splitlines() if "(total)" in ln]
    assert totals == ["gfx90a", "gfx942", "gfx950", "gfx1201"]
