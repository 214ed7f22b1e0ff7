"""``--ckfmha-flash-attn-compat`` with ``--ckfmha-report``: a run ended early keeps the kernel log of the tests that
finished.  The log is rewritten after each test that made calls (a SIGKILL loses only the test in flight), and a
SIGTERM stops the run as Ctrl-C does (sessionfinish writes the logs, the summary says so), as for ckfmha's own runs;
with xdist, a SIGTERM to the whole process group ends the workers at once and their finished tests' calls are on
disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

pytest_plugins = ["pytester"]

FOREIGN = """
import glob
import json
import os
import signal
import time

import pytest
import torch
import flash_attn_2_cuda as flash_attn_gpu

KILL = {kill!r}
LOGS = {logs!r}


def _fwd(sq):
    torch.manual_seed(0)
    q = torch.randn(1, sq, 2, 32, dtype=torch.float16)
    k = torch.randn(1, 16, 2, 32, dtype=torch.float16)
    flash_attn_gpu.fwd(q, k, k, None, None, 0.0, 32 ** -0.5, False, -1, -1, 0.0, False, None)


@pytest.mark.parametrize("sq", [8, 24])
def test_a_calls(sq):
    _fwd(sq)


def _logged():
    n = 0
    for p in glob.glob(LOGS):
        try:
            n += len(json.load(open(p))["calls"])
        except (OSError, ValueError):
            pass
    return n


def test_b_killed():
    _fwd(16)  # in flight when the signal comes
    if KILL == "group":  # xdist: the other worker may still be running test_a_*: wait for their calls on disk
        deadline = time.monotonic() + 20
        while _logged() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(0, signal.SIGTERM)
    else:
        os.kill(os.getpid(), getattr(signal, KILL))
    time.sleep(60)


def test_c_after():
    _fwd(40)
"""

A_IDS = {"test_fa.py::test_a_calls[8]", "test_fa.py::test_a_calls[24]"}


def _run(pytester, tmp_path, kill: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The foreign suite in its own process group (a group-wide SIGTERM reaches no one else); the calls of every
    kernel log beside the report."""
    logs = str(tmp_path / "fa.flash_attn_calls*.json")
    pytester.makepyfile(test_fa=FOREIGN.format(kill=kill, logs=logs))
    env = {**os.environ, "CKFMHA_NO_DETECT": "1", "CKFMHA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [
        sys.executable, "-m", "pytest", "test_fa.py", "-p", "no:cacheprovider", "-o", "addopts=",
        "--ckfmha-flash-attn-compat", "--ckfmha-backend", "cpu", "--ckfmha-report", str(tmp_path / "fa.json"), *extra,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=180, start_new_session=True
    )
    calls = []
    for p in sorted(tmp_path.glob("fa.flash_attn_calls*.json")):
        calls += json.loads(p.read_text())["calls"]
    return proc, calls


def test_sigterm_stops_the_run_and_writes_the_log(pytester, tmp_path):
    proc, calls = _run(pytester, tmp_path, "SIGTERM")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out  # as after Ctrl-C, not killed (-15)
    assert "ckfmha: the run was interrupted by SIGTERM" in out, out
    assert "ckfmha: flash-attn compat kernel log written to" in out, out
    nodeids = [c["nodeid"] for c in calls]
    # the finished tests' calls, and the call of the test SIGTERM stopped (sessionfinish ran after it)
    assert sorted(nodeids) == sorted([*A_IDS, "test_fa.py::test_b_killed"]), out
    assert (tmp_path / "fa.flash_attn_calls.json").exists()


def test_sigkill_keeps_the_finished_tests_calls(pytester, tmp_path):
    """No sessionfinish at all: what is on disk was written after each test."""
    proc, calls = _run(pytester, tmp_path, "SIGKILL")
    assert proc.returncode == -9, proc.stdout + proc.stderr
    assert {c["nodeid"] for c in calls} == A_IDS and len(calls) == 2


def test_group_sigterm_with_xdist_keeps_every_workers_log(pytester, tmp_path):
    pytest.importorskip("xdist")
    proc, calls = _run(pytester, tmp_path, "group", "-p", "xdist", "-n", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "ckfmha: the run was interrupted by SIGTERM" in out, out
    assert list(tmp_path.glob("fa.flash_attn_calls.gw*.json")), out  # the workers' logs
    assert A_IDS <= {c["nodeid"] for c in calls}, out
