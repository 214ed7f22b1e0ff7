"""The tile_example runner's bounds (ckfmha.upstream.tile_runner.run_process): the per-stream output cap, the EOF
grace period after the binary exits, and the timeout -- every wait has a deadline.  Each test writes a small FAKE
``tile_example_fmha_fwd`` shell script into tmp_path (not CK) that misbehaves in one way."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from ckfmha.problem import Problem
from ckfmha.upstream.result import Verdict
from ckfmha.upstream.tile_runner import EOF_GRACE_S, MAX_STREAM_BYTES, TileExampleSide, run_process

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

# a real line (ROCm/composable_kernel example/ck_tile/01_fmha/script/res_sink.log) and the problem it echoes
LINE = (
    "[fp16|batch|bhsd] b:4, h:1/1, s:512/1024, d:16/128, scale_s:0.25, bias:alibi, p_drop:0, lse:0, squant:0, "
    "mask:b(1:0), v:c, fmha_fwd_d128_fp16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16_"
    "qr_async_vc_psddv_alibi_mask_nlse_ndropout_nsquant, 0.998 ms, 0.61 TFlops, 1.77 GB/s, valid:y"
)
PROBLEM = Problem.from_ck_args(
    ["-b=4", "-h=1", "-s=512", "-s_k=1024", "-d=16", "-d_v=128", "-bias=a", "-mask=b:1,0", "-vlayout=c"]
)
ESCAPE = f"{sys.executable} -c 'import os, time; os.setsid(); time.sleep(60)'"  # leaves the process group


def fake_binary(tmp_path: Path, body: str) -> Path:
    """Write ``tmp_path/bin/tile_example_fmha_fwd`` (a /bin/sh script) and return the directory."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    exe = d / "tile_example_fmha_fwd"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its reaper is dead too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def reap(tmp_path):
    """Pid files of processes a test leaves behind on purpose (escaped the group); killed at teardown."""
    files: list[Path] = []
    yield files
    for f in files:
        if f.exists() and f.read_text().strip():
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_constants_are_documented_values():
    assert MAX_STREAM_BYTES == 4 * 1024 * 1024 and EOF_GRACE_S == 2.0


def test_yes_is_capped_and_killed(tmp_path):
    d = fake_binary(tmp_path, "exec yes")
    t0 = time.monotonic()
    r = TileExampleSide(d, timeout_s=60).run(PROBLEM)
    took = time.monotonic() - t0
    assert took < 20, took
    assert r.verdict is Verdict.ERROR
    assert r.reason.startswith(f"printed more than {MAX_STREAM_BYTES} bytes on stdout (output capped")
    assert len(r.raw) <= MAX_STREAM_BYTES and r.raw.startswith("y\ny\n")
    assert r.fields["capped"] == "stdout" and r.fields["returncode"] is None
    assert f"stdout truncated to its first {MAX_STREAM_BYTES} bytes" in r.notes


def test_cap_keeps_the_head_exactly(tmp_path):
    d = fake_binary(tmp_path, "echo first; exec yes")
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=30, max_stream_bytes=65536)
    assert raw.capped == "stdout" and raw.returncode is None and not raw.timed_out
    assert len(raw.stdout) == 65536 and raw.stdout.startswith("first\ny\n")
    assert raw.seconds < 10


def test_stderr_is_capped_too(tmp_path, reap):
    pid_file = tmp_path / "child.pid"
    d = fake_binary(tmp_path, f"sleep 60 & echo $! > {pid_file}; exec yes >&2")
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=30, max_stream_bytes=1 << 20)
    assert raw.capped == "stderr" and len(raw.stderr) == 1 << 20 and raw.stdout == ""
    assert gone_within(int(pid_file.read_text()), 5), "the process group survived the cap"


def test_grandchild_holding_stdout_does_not_block(tmp_path, reap):
    pid_file = tmp_path / "child.pid"
    reap.append(pid_file)
    d = fake_binary(tmp_path, f"echo '{LINE}'\nsleep 60 &\necho $! > {pid_file}\nexit 0")
    t0 = time.monotonic()
    r = TileExampleSide(d, timeout_s=60).run(PROBLEM)
    took = time.monotonic() - t0
    assert took < EOF_GRACE_S + 5, took
    assert r.verdict is Verdict.RAN_VALID, r.reason  # the binary itself exited 0 with valid:y
    assert r.fields["held_open"] is True and r.fields["returncode"] == 0
    assert any("kept the binary's output open 2s" in n for n in r.notes), r.notes
    assert gone_within(int(pid_file.read_text()), 5), "the grandchild holding stdout survived"


def test_escaped_grandchild_holding_stdout_does_not_block(tmp_path, reap):
    pid_file = tmp_path / "child.pid"
    reap.append(pid_file)
    d = fake_binary(tmp_path, f"echo '{LINE}'\n{ESCAPE} &\necho $! > {pid_file}\nexit 0")
    t0 = time.monotonic()
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=60, eof_grace_s=0.5)
    assert time.monotonic() - t0 < 5
    assert raw.held_open and raw.returncode == 0 and raw.stdout.strip() == LINE


def test_timeout_kills_the_group_holding_stdout(tmp_path, reap):
    pid_file = tmp_path / "child.pid"
    reap.append(pid_file)
    d = fake_binary(tmp_path, f"echo '{LINE}'\nsleep 60 &\necho $! > {pid_file}\nsleep 60")
    t0 = time.monotonic()
    r = TileExampleSide(d, timeout_s=1.0).run(PROBLEM)
    assert time.monotonic() - t0 < 10
    assert r.verdict is Verdict.ERROR and r.reason.startswith("timed out after")
    assert "process group killed" in r.reason and "last output: [fp16|batch|bhsd]" in r.reason
    assert gone_within(int(pid_file.read_text()), 5), "the grandchild survived the timeout"


def test_timeout_with_escaped_grandchild_is_bounded(tmp_path, reap):
    pid_file = tmp_path / "child.pid"
    reap.append(pid_file)
    d = fake_binary(tmp_path, f"{ESCAPE} &\necho $! > {pid_file}\nsleep 60")
    t0 = time.monotonic()
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=1.0)
    assert time.monotonic() - t0 < 8
    assert raw.timed_out and raw.returncode is None


def test_closed_streams_still_time_out(tmp_path):
    d = fake_binary(tmp_path, "exec >&- 2>&-\nsleep 60")
    t0 = time.monotonic()
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=1.0)
    assert 0.9 < time.monotonic() - t0 < 8
    assert raw.timed_out and raw.returncode is None and raw.stdout == ""


def test_ordinary_run_is_unchanged(tmp_path):
    d = fake_binary(tmp_path, f"echo '{LINE}'\necho 'warn' >&2\nexit 0")
    raw = run_process([str(d / "tile_example_fmha_fwd")], timeout_s=30)
    assert (raw.returncode, raw.timed_out, raw.capped, raw.held_open) == (0, False, None, False)
    assert raw.stdout == LINE + "\n" and raw.stderr == "warn\n" and raw.seconds < 5


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_stream_bytes": 0}, "max_stream_bytes"),
        ({"eof_grace_s": -1}, "eof_grace_s"),
    ],
)
def test_bad_limits_name_the_field(kw, field):
    args = {"timeout_s": 1.0, **kw}
    with pytest.raises(ValueError, match=rf"^{field}: .* must be"):
        run_process(["true"], **args)
