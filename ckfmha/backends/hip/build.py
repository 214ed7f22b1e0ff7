"""Building one kernel library: emit (codegen), compile, link -- with the compiler's logs kept.

:func:`build_key` is the build cache's key: the kernel, the arch, the checkout (:func:`ckfmha.cktree.
checkout_hash`: its codegen sources and headers), the compiler (path and ``--version`` output), the flags and
the receipt / mask mode the generator runs under -- any change builds afresh.

:func:`build_into` runs in the build cache's temporary entry (:class:`ckfmha.backends.cache.BuildCache`: one
builder per key across processes, atomic publish): :func:`codegen.emit.emit_library` into ``src/``, then every
command of its ``compile_commands.json`` in order, each one's output in ``logs/<n>-<step>-<file>.log``. A failing
command is a :class:`BuildError` that names the step, the command's exit status, the last lines of its log and
where the whole build's logs are kept: they are copied to ``<cache>/hip/failed/<key>/`` before the temporary
entry goes (the next build of the key replaces them).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from ckfmha.backends.base import BackendError

LOG_TAIL_LINES = 25
COMMAND_TIMEOUT_S = 3 * 3600.0


class BuildError(BackendError):
    """A compile or link step failed; the message has the step, the status, the log's tail and the log's path."""

    def __init__(self, message: str, log_dir: Path | None = None) -> None:
        super().__init__(message)
        self.log_dir = log_dir


@lru_cache(maxsize=8)
def _compiler_version(compiler: str, mtime_ns: int) -> str:
    try:
        proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"compiler {compiler}: --version failed ({e})") from None
    if proc.returncode != 0:
        raise BuildError(f"compiler {compiler}: --version exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


def compiler_version(compiler: Path) -> str:
    """``<compiler> --version`` (cached per path and modification time)."""
    return _compiler_version(str(compiler), compiler.stat().st_mtime_ns if compiler.exists() else 0)


def forget_compiler_versions() -> None:
    """Forget the compiler versions read so far: each is read again on its next use (a compiler replaced in place
    without a new modification time, e.g. a test's fake one switched by an environment variable)."""
    _compiler_version.cache_clear()


def build_key(
    kernel: str, arch: str, checkout: str, compiler: Path, flags: list[str], receipt: int, mask_mode: str
) -> str:
    """The build cache key (see the module doc); flags are hashed."""
    digest = hashlib.sha256("\0".join(flags).encode()).hexdigest()[:16]
    cver = hashlib.sha256(f"{compiler}\0{compiler_version(compiler)}".encode()).hexdigest()[:16]
    return f"{kernel}|arch={arch}|ck={checkout[:24]}|compiler={cver}|flags={digest}|r{receipt}|{mask_mode}"


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def run_commands(commands: list[dict], log_dir: Path, on_step=None) -> list[dict]:
    """Run compile_commands.json's entries in order; returns per step (file, seconds). A failure raises
    :class:`BuildError` (the caller keeps the logs)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for i, c in enumerate(commands):
        Path(c["output"]).parent.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{i:02d}-{c['ckfmha_step']}-{Path(c['file']).name}.log"
        t0 = time.perf_counter()
        with open(log, "w", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(c["arguments"]) + "\n")
            fh.flush()
            try:
                proc = subprocess.run(
                    c["arguments"],
                    cwd=c["directory"],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    timeout=COMMAND_TIMEOUT_S,
                )
                status: int | str = proc.returncode
            except subprocess.TimeoutExpired:
                status = f"timeout after {COMMAND_TIMEOUT_S:g}s"
            except OSError as e:
                fh.write(f"cannot run: {e}\n")
                status = f"cannot run ({e.strerror or e})"
        secs = time.perf_counter() - t0
        if status != 0 or not Path(c["output"]).is_file():
            what = f"exit status {status}" if status != 0 else f"no output {Path(c['output']).name}"
            raise BuildError(
                f"{c['ckfmha_step']} of {Path(c['file']).name} failed ({what}); last lines of {log.name}:\n{_tail(log)}"
            )
        done.append({"file": Path(c["file"]).name, "step": c["ckfmha_step"], "seconds": round(secs, 3)})
        if on_step is not None:
            on_step(done[-1])
    return done


def build_into(tmp: Path, emit, failed_dir: Path) -> dict:
    """The build cache's builder: ``emit(src_dir)`` -> :class:`codegen.emit.EmittedLibrary`, then the commands (see
    the module doc). Returns the entry's metadata (``library`` relative to the entry)."""
    src = tmp / "src"
    lib = emit(src)
    commands = json.loads((src / "compile_commands.json").read_text(encoding="utf-8"))
    try:
        steps = run_commands(commands, tmp / "logs")
    except BuildError as e:
        if failed_dir.exists():
            shutil.rmtree(failed_dir)
        failed_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(tmp / "logs", failed_dir)
        shutil.copyfile(src / "compile_commands.json", failed_dir / "compile_commands.json")
        raise BuildError(
            f"{lib.kernel}: {e}\n(all logs and the commands are kept in {failed_dir})", failed_dir
        ) from None
    return {
        "kernel": lib.kernel,
        "api": lib.api,
        "arch": lib.arch,
        "compiler": str(lib.compiler),
        "library": str(lib.library.relative_to(tmp)),
        "steps": steps,
    }
