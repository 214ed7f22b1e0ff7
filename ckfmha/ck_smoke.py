"""CK's own smoke suites, recorded: the command lines a checkout's smoke scripts give the tile_example binaries.

A CK checkout's ``example/ck_tile/01_fmha/script/smoke_test_fwd.sh`` (run with ``-s -a``: the split-KV, paged-KV
and append-KV cases too) and ``smoke_test_bwd.sh`` run ``tile_example_fmha_fwd`` / ``tile_example_fmha_bwd`` once
per case.  :func:`record_smoke_lines` runs a script itself -- ``bash <script> [options]`` with ``GPU_arch=<arch>``,
in a temporary build directory whose ``bin/`` holds a fake executable of the binary's name (a tiny ``/bin/sh``
script that appends its arguments to a file; the script finds it with ``find . -name <binary>`` as it finds the
real one) -- and returns the distinct command lines in the order the script first ran them.  No grid is copied
by hand: the scripts are the source, so a new CK version brings its new cases.

Arguments are kept as the shell passed them: the fake executable writes each argument NUL-terminated (an
invocation starts with an RS byte), so an argument that holds blanks, quotes or a newline (a quoted one, or one
continued with a backslash) stays one argument; the cache stores one invocation per line in shell quoting
(``shlex.join``; a newline inside an argument stays inside its quotes) and reads it back with ``shlex.split``
semantics.  A line's :attr:`SmokeLine.command` is its arguments joined by single spaces, which is how the scripts
write a failing line into their fails file (``"$EXE_NAME $*"``) and how the checkout's known-fails list spells it
(:func:`known_fails`, matched as ``grep -Fxq`` does: the whole line).

Trusted checkouts only: recording *runs* the checkout's smoke scripts (with bash, as the user running pytest),
as ``--ckfmha-filter-file`` runs a Python file.

Cache: ``<cache>/ck-smoke/<key>/<binary>_<arch>.txt`` (``<cache>``: :func:`ckfmha.backends.cache.cache_root`),
``key`` = sha256 of the recorder's layout, the binary, the script's name, its options, the arch and the script's
bytes, so an edited script records afresh and an unchanged one records once (the fwd script runs its 43,896
cases in about 40 s on two cores).  Writers hold a file lock and publish with one ``os.replace``.

Figures for the CK tree of the ``amd-aiter`` 0.1.7.post2.dev18 wheel (``GPU_arch=gfx942``): 43,752 distinct fwd
lines and 840 bwd lines, 44,592 in all; its known-fails lists are empty.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ckfmha.cktree import FMHA_EXAMPLE, resolve_ck_root

SCRIPT_DIR = FMHA_EXAMPLE / "script"
BINARIES = ("fwd", "bwd")
EXECUTABLES = {"fwd": "tile_example_fmha_fwd", "bwd": "tile_example_fmha_bwd"}
SMOKE_SCRIPTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fwd": ("smoke_test_fwd.sh", ("-s", "-a")),
    "bwd": ("smoke_test_bwd.sh", ()),
}
"""binary -> (the smoke script, its options): ``-s`` adds the split-KV / paged-KV cases, ``-a`` the append-KV ones."""
KNOWN_FAILS = "fmha_{binary}_known_fails_{arch}.txt"
"""The scripts' default ``KNOWN_FAILS_FILE`` (in the script directory)."""
SMOKE_CACHE = "ck-smoke"
RECORD_LAYOUT = "2"  # 2: arguments recorded NUL-separated, cached in shell quoting
RECORD_TIMEOUT_S = 900
_FAKE_EXE = "#!/bin/sh\n{ printf '\\036'; printf '%s\\000' \"$@\"; } >> \"$CKFMHA_SMOKE_RECORD\"\n"
"""The fake executable: an RS byte, then each argument NUL-terminated (no argument: one empty one)."""


class CKSmokeError(ValueError):
    """A smoke script that cannot be recorded (missing, failing, recording nothing); the message says why."""


@dataclass(frozen=True)
class SmokeLine:
    """One command line of a smoke script: the binary (``fwd`` / ``bwd``) and its arguments."""

    binary: str
    args: tuple[str, ...]

    @property
    def command(self) -> str:
        """The line as the scripts write it into their fails files: the executable's name and the arguments."""
        return " ".join((EXECUTABLES[self.binary], *self.args))


def _check_binary(binary: str) -> str:
    if binary not in BINARIES:
        raise CKSmokeError(f"binary: {binary!r} has no smoke script; allowed: {', '.join(BINARIES)}")
    return binary


def script_path(root: str | os.PathLike, binary: str) -> Path:
    """The checkout's smoke script of ``binary``."""
    return Path(root) / SCRIPT_DIR / SMOKE_SCRIPTS[_check_binary(binary)][0]


def record_key(root: str | os.PathLike, binary: str, arch: str) -> str:
    """The cache key of a recording: the script's bytes, name and options, the binary and the arch."""
    script = script_path(root, binary)
    try:
        body = script.read_bytes()
    except OSError as e:
        raise CKSmokeError(f"{script}: cannot read the smoke script ({e.strerror or e})") from None
    name, options = SMOKE_SCRIPTS[binary]
    h = hashlib.sha256("\0".join((RECORD_LAYOUT, binary, name, *options, arch)).encode() + b"\0" + body)
    return h.hexdigest()[:24]


def _run_script(script: Path, binary: str, arch: str, record: Path, workdir: Path) -> None:
    """Run ``script`` in ``workdir`` (whose ``bin/`` holds the fake executable) with ``GPU_arch=arch``."""
    bindir = workdir / "bin"
    bindir.mkdir()
    exe = bindir / EXECUTABLES[binary]
    exe.write_text(_FAKE_EXE)
    exe.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "GPU_arch": arch,
        "CKFMHA_SMOKE_RECORD": str(record),
    }
    cmd = ["bash", str(script), *SMOKE_SCRIPTS[binary][1]]
    log = workdir / "stderr.txt"
    try:
        with open(log, "wb") as err:
            proc = subprocess.run(
                cmd, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=err, timeout=RECORD_TIMEOUT_S
            )
    except FileNotFoundError:
        raise CKSmokeError(f"{script}: bash is needed to run CK's smoke scripts and was not found") from None
    except subprocess.TimeoutExpired:
        raise CKSmokeError(f"{script}: the smoke script ran past {RECORD_TIMEOUT_S}s with a fake executable") from None
    if proc.returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        raise CKSmokeError(f"{script}: the smoke script exited with status {proc.returncode}: {tail}")


def _distinct(invocations: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    return list(dict.fromkeys(args for args in invocations if args))


def _invocations(record: str) -> list[tuple[str, ...]]:
    """The fake executable's record (:data:`_FAKE_EXE`) -> each invocation's arguments."""
    out = []
    for chunk in record.split("\036")[1:]:
        args = tuple(chunk.split("\0")[:-1])
        out.append(() if args == ("",) else args)
    return out


def read_cached_lines(text: str) -> list[tuple[str, ...]]:
    """The cache file's invocations: one per line in shell quoting, split with ``shlex.split`` semantics; a line
    whose quote is still open continues on the next (an argument that holds a newline)."""
    import shlex

    out: list[tuple[str, ...]] = []
    pending = ""
    for line in text.splitlines():
        pending = pending + "\n" + line if pending else line
        try:
            args = tuple(shlex.split(pending))
        except ValueError:  # no closing quotation yet
            continue
        pending = ""
        if args:
            out.append(args)
    if pending:
        raise CKSmokeError(f"the cached smoke lines end inside a quoted argument: {pending[:200]!r}")
    return out


def record_smoke_lines(root: str | os.PathLike, binary: str, arch: str = "gfx942") -> list[SmokeLine]:
    """The distinct command lines ``binary``'s smoke script of the checkout at ``root`` runs for ``arch``, in the
    order the script first runs them (cached; see the module doc)."""
    from ckfmha.backends.cache import cache_root, file_lock

    base = resolve_ck_root(root)
    _check_binary(binary)
    d = cache_root() / SMOKE_CACHE / record_key(base, binary, arch)
    cached = d / f"{binary}_{arch}.txt"
    if not cached.is_file():
        with file_lock(d / ".lock"):
            if not cached.is_file():
                _record_into(base, binary, arch, d, cached)
    return [SmokeLine(binary, args) for args in read_cached_lines(cached.read_text(encoding="utf-8"))]


def _record_into(base: Path, binary: str, arch: str, d: Path, cached: Path) -> None:
    script = script_path(base, binary)
    with tempfile.TemporaryDirectory(prefix="ckfmha-smoke-") as td:
        work = Path(td)
        record = work / "record.txt"
        record.touch()
        _run_script(script, binary, arch, record, work)
        lines = _distinct(_invocations(record.read_text(encoding="utf-8", errors="replace")))
    if not lines:
        raise CKSmokeError(f"{script}: the smoke script ran no {EXECUTABLES[binary]} command")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(shlex.join(args) + "\n" for args in lines))
    os.replace(tmp, cached)


def smoke_lines(root: str | os.PathLike, binaries: Iterable[str] = BINARIES, arch: str = "gfx942") -> list[SmokeLine]:
    """:func:`record_smoke_lines` of each binary in turn."""
    return [line for b in binaries for line in record_smoke_lines(root, b, arch)]


def known_fails_path(root: str | os.PathLike, binary: str, arch: str) -> Path:
    return Path(root) / SCRIPT_DIR / KNOWN_FAILS.format(binary=_check_binary(binary), arch=arch)


def known_fails(root: str | os.PathLike, binary: str, arch: str) -> frozenset[str]:
    """The command lines the checkout's known-fails file lists for ``binary`` on ``arch`` (empty when the file is
    absent: the scripts then count every fail as new)."""
    path = known_fails_path(root, binary, arch)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return frozenset()
    except OSError as e:
        raise CKSmokeError(f"{path}: cannot read the known-fails file ({e.strerror or e})") from None
    return frozenset(line for line in text.splitlines() if line)
