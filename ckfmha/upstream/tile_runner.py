"""Run CK's ``tile_example_fmha_fwd`` / ``tile_example_fmha_bwd`` on a Problem and judge the run.

* Arguments: :func:`tile_example_args` = ``Problem.to_ck_args()`` plus the runner options ``-v=1 -kname=1
  -warmup=0 -repeat=1`` and, with a JSON path, ``-json=1 -jsonfile=PATH``; or, for a CK command line given as it is
  (a smoke script's line: :meth:`TileExampleSide.run_line`), the line's arguments followed by those options.
* Binaries: ``find_binary('fwd'|'bwd', bin_dir)`` looks in ``bin_dir`` (or ``$CK_TILE_EXAMPLE_DIR``) and its
  ``bin/``.  A missing binary is a ``skipped`` result with the reason -- never a pass.
* Running (:func:`run_process`, POSIX): a subprocess in its own session (so its own process group); stdout and
  stderr are read incrementally (``selectors``) and every wait has a deadline:

  - output cap: at most :data:`MAX_STREAM_BYTES` (4 MiB) are kept per stream.  A stream that goes past it gets
    the whole process group killed at once; the run keeps the head of the output and is an ``error``
    ("printed more than N bytes on stdout (output capped)");
  - timeout: past ``timeout_s`` the whole process group is killed (``timed_out``, an ``error``);
  - EOF grace: once the binary itself has exited, a process that still holds its stdout/stderr open (a
    grandchild) gets :data:`EOF_GRACE_S` (2 s) to close them; then the process group is killed and reading
    stops (a note says so; the binary's own exit status and output are judged as usual);
  - after a kill, the runner reaps the binary for at most :data:`KILL_WAIT_S` and drains what is already in the
    pipes for at most :data:`DRAIN_S`; a process that escaped the group (its own session) is not waited for.
* Judging (:func:`interpret`): the exit status *and* the parsed stdout.  CK returns -1 (255) for argument
  errors and -2 (254) for a failed validation, for no instance and for invalid argument combinations alike,
  so 254 is decided by the line: ``not supported yet`` -> unsupported, ``valid:n`` -> ran_invalid, neither
  -> error.  0 needs ``valid:y``.  A result line that is not one of the binary's real formats
  (:func:`ckfmha.upstream.tile_output.format_problems`: no problem echo, no kernel name although ``-kname=1`` was
  passed, fields outside the grammar) -> ``unparseable``, with what is missing and the line quoted.  The echoed
  problem must be the problem we asked for (else error: the binary ran something else, e.g. it dropped dropout
  or switched the mode).
"""

from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from ckfmha.kernel import Bias, Family, Mode
from ckfmha.masking import MaskError, MaskSpec
from ckfmha.problem import Problem, ProblemError
from ckfmha.upstream.result import SideResult, Verdict
from ckfmha.upstream.tile_output import TileOutput, TileOutputError, format_problems, json_verification, parse_stdout

ENV_DIR = "CK_TILE_EXAMPLE_DIR"
DEFAULT_TIMEOUT_S = 120.0
RUNNER_OPTIONS = ("-v=1", "-kname=1", "-warmup=0", "-repeat=1")
MAX_STREAM_BYTES = 4 * 1024 * 1024  # kept per stream; more kills the run (a real result is a few hundred bytes)
EOF_GRACE_S = 2.0  # how long a stream may stay open after the binary itself exited
KILL_WAIT_S = 5.0  # how long to wait for the binary to be reaped after SIGKILL
DRAIN_S = 0.5  # how long to read what is already in the pipes after a kill
_READ_CHUNK = 64 * 1024
_POLL_S = 0.05  # select() timeout while the binary runs, to notice its exit


def binary_name(binary: str) -> str:
    if binary not in ("fwd", "bwd"):
        raise ValueError(f"binary: {binary!r} must be 'fwd' or 'bwd'")
    return f"tile_example_fmha_{binary}"


def find_binary(binary: str, bin_dir: str | Path | None = None) -> tuple[Path | None, str]:
    """``(path, "")`` or ``(None, reason)``.  Looks in ``bin_dir`` (else ``$CK_TILE_EXAMPLE_DIR``) and its
    ``bin/`` sub-directory."""
    name = binary_name(binary)
    root = bin_dir if bin_dir is not None else os.environ.get(ENV_DIR)
    if not root:
        return None, f"{name}: no binary directory given (pass a directory or set {ENV_DIR})"
    d = Path(root)
    if not d.is_dir():
        return None, f"{name}: binary directory {d} does not exist"
    for cand in (d / name, d / "bin" / name):
        if cand.is_file():
            return cand, ""
    return None, f"{name}: not found in {d} (nor {d / 'bin'})"


def tile_example_args(problem: Problem, json_file: str | Path | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The argument list (without the program) for the problem's binary."""
    args = problem.to_ck_args() + list(RUNNER_OPTIONS)
    if json_file is not None:
        args += ["-json=1", f"-jsonfile={json_file}"]
    return args + list(extra)


@dataclass
class RawRun:
    argv: list[str]
    returncode: int | None  # None when killed on timeout or over the output cap
    stdout: str  # at most MAX_STREAM_BYTES bytes of it (the head) when capped
    stderr: str
    timed_out: bool
    seconds: float
    capped: str | None = None  # "stdout" / "stderr": that stream went past the cap and the group was killed
    cap_bytes: int = MAX_STREAM_BYTES
    held_open: bool = False  # a stream stayed open eof_grace_s after the binary exited; the group was killed
    eof_grace_s: float = EOF_GRACE_S


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass


class _PipeReader:
    """Non-blocking reads of a process's stdout and stderr (``selectors``) into buffers of at most
    ``max_stream_bytes`` each; :attr:`capped` names the first stream that went past the cap."""

    def __init__(self, pipes: tuple[IO[bytes], IO[bytes]], max_stream_bytes: int) -> None:
        self.streams = {pipes[0].fileno(): "stdout", pipes[1].fileno(): "stderr"}
        self.bufs = {name: bytearray() for name in self.streams.values()}
        self.max_stream_bytes = max_stream_bytes
        self.capped: str | None = None
        self.sel = selectors.DefaultSelector()
        for fd in self.streams:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)

    def open(self) -> bool:
        """True while some stream has not reached EOF."""
        return bool(self.sel.get_map())

    def read_ready(self, timeout: float) -> bool:
        """Read what select reports within ``timeout``; False once a stream went past the cap."""
        for key, _ in self.sel.select(timeout):
            fd = key.fd
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                continue
            if not data:  # EOF
                self.sel.unregister(fd)
                continue
            buf = self.bufs[self.streams[fd]]
            room = self.max_stream_bytes - len(buf)
            buf += data[:room]
            if len(data) > room:
                self.capped = self.streams[fd]
                return False
        return True

    def drain(self, seconds: float) -> None:
        """Read what is already in the pipes, for at most ``seconds`` (and up to the cap)."""
        drain_end = time.monotonic() + seconds
        while self.sel.get_map() and time.monotonic() < drain_end and self.sel.select(0.0):
            if not self.read_ready(0.0):
                break

    def text(self, stream: str) -> str:
        """What was kept of ``stream`` (``stdout`` / ``stderr``), decoded (undecodable bytes replaced)."""
        return self.bufs[stream].decode("utf-8", "replace")

    def close(self) -> None:
        self.sel.close()


def _read_until_done(
    proc: subprocess.Popen, reader: _PipeReader, deadline: float, eof_grace_s: float
) -> tuple[bool, bool]:
    """Read until both streams close, one goes past the cap, the deadline passes (``timed_out``) or a stream stays
    open ``eof_grace_s`` after the binary exited (``held_open``); returns ``(timed_out, held_open)``."""
    exited_at: float | None = None
    while reader.open():
        now = time.monotonic()
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now >= min(exited_at + eof_grace_s, deadline):
            return False, True  # the binary finished in time; something else holds its output
        if now >= deadline:
            return True, False
        limit = deadline if exited_at is None else min(deadline, exited_at + eof_grace_s)
        if not reader.read_ready(max(0.0, min(limit - now, _POLL_S))):
            break
    return False, False


def _reap(proc: subprocess.Popen, deadline: float, killed: bool) -> bool:
    """Wait for the binary: until the deadline, or :data:`KILL_WAIT_S` after its group was ``killed``.  True when
    it was still running past the deadline (its group is then killed)."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()) if not killed else KILL_WAIT_S)
    except subprocess.TimeoutExpired:  # every stream closed but the binary still runs: past the timeout
        _kill_group(proc.pid)
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state); give up waiting
            pass
        return True
    return False


def run_process(
    argv: Sequence[str],
    timeout_s: float,
    cwd: str | Path | None = None,
    env: dict | None = None,
    max_stream_bytes: int = MAX_STREAM_BYTES,
    eof_grace_s: float = EOF_GRACE_S,
) -> RawRun:
    """Run ``argv`` in a new session, reading stdout/stderr incrementally with bounded buffers; every wait has a
    deadline (see the module doc: output cap, timeout, EOF grace, kill wait, drain).  POSIX only."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s: {timeout_s!r} must be > 0")
    if max_stream_bytes <= 0:
        raise ValueError(f"max_stream_bytes: {max_stream_bytes!r} must be > 0")
    if eof_grace_s < 0:
        raise ValueError(f"eof_grace_s: {eof_grace_s!r} must be >= 0")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    # stdout/stderr=PIPE: Popen made both pipes (typeshed types the attributes Optional)
    pipes = (cast(IO[bytes], proc.stdout), cast(IO[bytes], proc.stderr))
    reader = _PipeReader(pipes, max_stream_bytes)
    deadline = t0 + timeout_s
    try:
        timed_out, held_open = _read_until_done(proc, reader, deadline, eof_grace_s)
        killed = bool(reader.capped or timed_out or held_open)
        if killed:
            _kill_group(proc.pid)
            if not reader.capped:  # what the killed processes left in the pipes, bounded in time and bytes
                reader.drain(DRAIN_S)
        if _reap(proc, deadline, killed):
            timed_out = True
    finally:
        reader.close()
        for f in pipes:
            f.close()
    rc = None if (timed_out or reader.capped) else proc.returncode
    return RawRun(
        list(argv),
        rc,
        reader.text("stdout"),
        reader.text("stderr"),
        timed_out,
        time.monotonic() - t0,
        reader.capped,
        max_stream_bytes,
        held_open,
        eof_grace_s,
    )


# ------------------------------------------------------------------------------------------ echo check
def _bias_printed(p: Problem) -> str:
    if p.bias is Bias.NONE:
        return "n"
    tok = "e" if p.bias is Bias.ELEMENTWISE else "alibi"
    return tok if p.bias_rank == 0 else f"{tok}[{p.bias_rank}]"


def _layout_printed(p: Problem) -> str:
    i, o = p.input_layout.value, p.output_layout.value
    return i if i == o else f"{i}-{o}"


def parse_printed_mask(text: str) -> MaskSpec:
    """CK's printed mask (``n``, ``t(l:r)``, ``b(l:r)``, ``g(y:x)``) as a MaskSpec."""
    import re

    if text == "n":
        return MaskSpec()
    m = re.fullmatch(r"([tbg])\((-?\d+):(-?\d+)\)", text)
    if not m:
        raise MaskError(f"mask: cannot read printed mask {text!r}")
    a, b = int(m.group(2)), int(m.group(3))
    if m.group(1) == "g":
        return MaskSpec.generic(a, b)
    return MaskSpec.window(a, b, bottom_right=m.group(1) == "b")


def echo_mismatches(problem: Problem, out: TileOutput) -> list[str]:
    """Fields where the binary's echo differs from the problem we asked for (empty = same problem)."""
    p = problem
    bad: list[str] = []
    try:
        ev = out.echo_values()
    except TileOutputError as e:
        return [str(e)]

    def want(name: str, got, exp) -> None:
        if got != exp:
            bad.append(f"{name}: printed {got!r}, asked {exp!r}")

    want("prec", out.prec, p.dtype.value)
    want("mode", out.mode, "group" if p.mode is Mode.GROUP else "batch")
    want("layout", out.layout, _layout_printed(p))
    if "b" in ev:
        want("b", ev["b"], p.batch)
    if "h" in ev:
        want("h", ev["h"], (p.nhead_q, p.nhead_k))
    if "d" in ev:
        want("d", ev["d"], (p.hdim_q, p.hdim_v))
    if "s" in ev:
        sq, sk, kpad = ev["s"]
        want("s", (sq, sk), (p.seqlens_q_list[0], p.seqlens_k_list[0]))
        if p.s_kpad is not None:
            want("s_kpad", kpad, p.s_kpad[0])
    key = "scale" if p.is_backward else "scale_s"
    if key in ev and isinstance(ev[key], float):
        if not math.isclose(ev[key], p.softmax_scale, rel_tol=1e-5, abs_tol=1e-9):
            bad.append(f"{key}: printed {ev[key]!r}, asked {p.softmax_scale!r}")
    if "bias" in ev:
        want("bias", out.echo["bias"], _bias_printed(p))
    if "p_drop" in ev:
        if not math.isclose(float(ev["p_drop"]), p.p_drop, rel_tol=1e-6, abs_tol=1e-9):
            bad.append(f"p_drop: printed {ev['p_drop']!r}, asked {p.p_drop!r}")
    if "lse" in ev and not p.is_backward:
        want("lse", bool(ev["lse"]), p.lse)
    if "dbias" in ev:
        want("dbias", bool(ev["dbias"]), p.dbias)
    if "deterministic" in ev:
        want("deterministic", bool(ev["deterministic"]), p.deterministic)
    if "mask" in ev:
        try:
            m = parse_printed_mask(out.echo["mask"])
            if m != p.mask:
                bad.append(f"mask: printed {out.echo['mask']!r}, asked {p.mask.ck_printed()!r}")
        except MaskError as e:
            bad.append(str(e))
    if "v" in ev:
        want("v", out.echo["v"], "r" if p.vlayout.value in ("r", "row") else "c")
    if "num_splits" in ev or p.num_splits > 1:
        want("num_splits", ev.get("num_splits", 1), p.num_splits)
    if "page_block_size" in ev or p.page_block_size:
        want("page_block_size", ev.get("page_block_size", 0), p.page_block_size)
    if "rotary_dim" in ev or p.rotary_dim:
        rd = ev.get("rotary_dim", (0, None))
        want("rotary_dim", rd[0], p.rotary_dim)
    return bad


# ------------------------------------------------------------------------------------------ verdict
def interpret(problem: Problem, raw: RawRun, out: TileOutput, side: str = "tile_example") -> SideResult:
    """Decide the verdict from the exit status together with the parsed output (see the module doc).

    Long because the verdict is one ordered chain of rules (capped, timed out, signal, exit 255, other exits, no
    result line, unparseable line, contradictory line, echo mismatch, unsupported, then exit 0 / 254 with the
    validation), where each rule applies only when none before it did and the notes gather along the chain;
    split into functions, the order that decides the verdict would no longer be readable in one place."""
    text = raw.stdout + (("\n--- stderr ---\n" + raw.stderr) if raw.stderr.strip() else "")
    fields = {
        "argv": raw.argv,
        "returncode": raw.returncode,
        "seconds": raw.seconds,
        "capped": raw.capped,
        "held_open": raw.held_open,
        **out.to_dict(),
    }
    err_words = " | ".join(line.strip() for line in (raw.stderr.strip().splitlines()[-3:] or []))
    notes: list[str] = []
    if raw.capped:
        notes.append(f"{raw.capped} truncated to its first {raw.cap_bytes} bytes")
    if raw.held_open:
        notes.append(
            f"a process kept the binary's output open {raw.eof_grace_s:g}s after the binary exited; "
            "its process group was killed and reading stopped"
        )

    def res(verdict: Verdict, reason: str) -> SideResult:
        return SideResult(side, verdict, reason, None, {}, fields, text, list(notes))

    if raw.capped:
        return res(
            Verdict.ERROR,
            f"printed more than {raw.cap_bytes} bytes on {raw.capped} (output capped; process group killed)",
        )
    if raw.timed_out:
        return res(
            Verdict.ERROR,
            f"timed out after {raw.seconds:.1f}s (process group killed)"
            + (f"; last output: {out.result_line}" if out.result_line else ""),
        )
    rc = raw.returncode
    line = out.result_line or ""
    if rc is not None and rc < 0:
        return res(Verdict.ERROR, f"killed by signal {-rc}" + (f"; output: {line}" if line else ""))
    jv = json_verification(out)
    if jv is not None and out.valid is not None and jv != out.valid:
        verification = "pass" if jv else "fail"  # the JSON file's value that json_verification read
        notes.append(f"JSON verification={verification!r} disagrees with valid:{'y' if out.valid else 'n'}")
    if rc == 255:
        words = err_words or " | ".join(out.other_lines[-3:]) or "(no message)"
        return res(Verdict.ERROR, f"exit 255 (argument error): {words}")
    if rc not in (0, 254):
        return res(Verdict.ERROR, f"exit {rc} (not a tile_example status)" + (f"; {err_words}" if err_words else ""))
    if not out.has_result_line:
        words = err_words or " | ".join(out.other_lines[-3:]) or "(no output)"
        kind = "no result line (invalid arguments or an exception)" if rc == 254 else "no result line"
        return res(Verdict.ERROR, f"exit {rc}, {kind}: {words}")
    problems = format_problems(out, problem.ck_binary)
    if problems:
        return res(
            Verdict.UNPARSEABLE,
            f"not a tile_example_fmha_{problem.ck_binary} result line: " + "; ".join(problems) + f" (line: {line!r})",
        )
    if out.not_supported and out.valid is not None:
        return res(Verdict.ERROR, f"exit {rc}: the line says both 'not supported yet' and valid: {line}")
    mism = echo_mismatches(problem, out)
    if mism and not out.not_supported:
        return res(Verdict.ERROR, "the binary ran a different problem: " + "; ".join(mism) + f" (line: {line})")
    if mism:
        notes.append("echo differs: " + "; ".join(mism))
    if out.not_supported:
        if rc == 0:
            notes.append("exit 0 with 'not supported yet'")
        return res(Verdict.UNSUPPORTED, f"not supported yet ({line})")
    if rc == 0:
        if out.valid is True:
            if jv is False:
                return res(Verdict.ERROR, f"valid:y but the JSON file says verification=fail: {line}")
            return res(Verdict.RAN_VALID, f"valid:y ({line})")
        if out.valid is False:
            return res(Verdict.ERROR, f"exit 0 but valid:n: {line}")
        return res(Verdict.ERROR, f"exit 0 without a validation verdict: {line}")
    # rc == 254
    if out.valid is False:
        return res(Verdict.RAN_INVALID, f"valid:n ({line})" + (f"; stderr: {err_words}" if err_words else ""))
    if out.valid is True:
        return res(Verdict.ERROR, f"exit 254 but valid:y: {line}")
    return res(
        Verdict.ERROR,
        f"exit 254 without valid:n or 'not supported yet' (invalid arguments or an "
        f"exception): {line}" + (f"; stderr: {err_words}" if err_words else ""),
    )


class TileExampleSide:
    """``tile_example`` as a parity side: ``run(problem, seed) -> SideResult``.  ``seed`` is passed as CK's
    ``-seed`` (inputs are CK's own; the binary validates against its own CPU reference)."""

    def __init__(
        self,
        bin_dir: str | Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        extra_args: Sequence[str] = (),
        name: str = "tile_example",
    ) -> None:
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s
        self.extra_args = tuple(extra_args)
        self.name = name

    def run(self, problem: Problem, seed: int = 0) -> SideResult:
        """The problem's own command line (:func:`tile_example_args`), ``seed`` as ``-seed``."""
        extra = list(self.extra_args) + ([f"-seed={seed}"] if seed else [])
        return self._run(problem, lambda jf: tile_example_args(problem, jf, extra))

    def run_line(self, problem: Problem, line_args: Sequence[str]) -> SideResult:
        """Run a CK command line as it was given (a smoke script's line, without the program): its arguments, then
        :data:`RUNNER_OPTIONS` and the JSON file (CK's ArgParser keeps the last value of a repeated argument), then
        this side's ``extra_args``.  ``problem`` is what CK's runner effectively runs for the line
        (:func:`ckfmha.ck_args.ck_run_from_args`): the binary's echo must match it.  No ``-seed`` is added: the
        line's own (or CK's default) draws CK's random lengths, as the problem was read."""
        return self._run(
            problem, lambda jf: [*line_args, *RUNNER_OPTIONS, "-json=1", f"-jsonfile={jf}", *self.extra_args]
        )

    def _run(self, problem: Problem, make_args) -> SideResult:
        """Find the problem's binary, run it with ``make_args(json_file)`` and judge the run (:func:`interpret`)."""
        if problem.family is Family.BATCH_PREFILL:
            return SideResult(self.name, Verdict.SKIPPED, "batch_prefill has no tile_example binary")
        path, why = find_binary(problem.ck_binary, self.bin_dir)
        if path is None:
            return SideResult(self.name, Verdict.SKIPPED, why)
        if not os.access(path, os.X_OK):
            return SideResult(self.name, Verdict.ERROR, f"{path} is not executable")
        try:
            with tempfile.TemporaryDirectory(prefix="ckfmha_tile_") as td:
                jf = Path(td) / f"fmha_{problem.ck_binary}.json"
                argv = [str(path)] + list(make_args(jf))
                raw = run_process(argv, self.timeout_s, cwd=td)
                # capped output is an error whatever it says; do not spend seconds parsing megabytes of it
                out = TileOutput() if raw.capped else parse_stdout(raw.stdout, jf)
        except ProblemError as e:
            return SideResult(self.name, Verdict.SKIPPED, f"no tile_example command line: {e}")
        except OSError as e:
            return SideResult(self.name, Verdict.ERROR, f"cannot run {path}: {e}")
        return interpret(problem, raw, out, self.name)
