"""Complete, atomic reports: one row per collected item, written atomically at the end (also after SIGTERM /
Ctrl-C) and as checkpoints while the run goes on; the report path is checked before anything runs."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ckfmha import reporting
from tests.test_plugin_fixtures import fail_report_writes, make_project

pytest_plugins = ["pytester"]


def _restore_sigint() -> None:
    """In the child before exec: SIGINT back to its default. A shell without job control starts background jobs
    with SIGINT ignored, and a Python started with it ignored never raises KeyboardInterrupt (a CI run launched with
    ``&`` failed the SIGINT case that way)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(pytester, args) -> subprocess.Popen:
    """pytest in a subprocess of its own (so it can be signalled), output to files."""
    out = open(pytester.path / "out.txt", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=pytester.path,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=os.environ.copy(),
        preexec_fn=_restore_sigint,
    )


def _wait_for(pred, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.1)
    return False


def _completed(path: Path) -> int:
    try:
        return json.loads(path.read_text())["completed"]
    except (OSError, ValueError, KeyError):
        return 0


def test_report_has_run_fields(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(passed=4, skipped=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert (doc["state"], doc["interrupted"], doc["exit_status"], doc["collected"], doc["completed"]) == (
        "complete",
        False,
        0,
        5,
        5,
    )
    assert doc["signal"] is None and doc["environment"]["command"].startswith("pytest ")
    assert not list(pytester.path.glob(".r.json.*"))  # no temporary file left behind
    # started_s: when each item began, after the run's start, in the order they ran (one process here)
    starts = [r["started_s"] for r in doc["rows"]]
    assert all(isinstance(t, float) and 0 <= t < 120 for t in starts), starts
    ran = sorted(doc["rows"], key=lambda r: r["started_s"])
    for a, b in zip(ran, ran[1:]):
        assert b["started_s"] >= a["started_s"] + a["duration_s"] - 0.01, (a, b)  # one after the other


@pytest.mark.parametrize("sig, name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "KeyboardInterrupt")])
def test_a_signalled_run_writes_its_report(pytester, monkeypatch, tmp_path, sig, name):
    base = make_project(pytester, monkeypatch, tmp_path, die="slow", die_on="fwd.fp16")
    monkeypatch.setenv("CKT_SLOW_S", "1.0")
    proc = _start(
        pytester,
        [
            *base,
            "--ckfmha-category",
            "full",
            "--ckfmha-report",
            "r.json",
            "--ckfmha-report",
            "r.csv",
            "--ckfmha-report-every",
            "0.05",
        ],
    )
    try:
        assert _wait_for(lambda: _completed(pytester.path / "r.json") >= 2), (pytester.path / "out.txt").read_text()
        proc.send_signal(sig)
        rc = proc.wait(60)
    finally:
        proc.kill()
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["state"] == "interrupted" and doc["interrupted"] is True and rc == doc["exit_status"] == 2
    assert doc["signal"] == ("SIGTERM" if name == "SIGTERM" else None)
    assert doc["collected"] == 8 and len(doc["rows"]) == 8 and 2 <= doc["completed"] < 8
    not_run = [r for r in doc["rows"] if r["verdict"] == "not_run"]
    assert len(not_run) == 8 - doc["completed"]
    assert all("interrupted" in r["reason"] and r["dtype"] == "fp16" for r in not_run)
    assert (pytester.path / "r.csv").read_text().count("\n") == 9


def test_a_killed_run_leaves_its_last_checkpoint(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="slow", die_on="fwd.fp16")
    monkeypatch.setenv("CKT_SLOW_S", "1.0")
    proc = _start(
        pytester, [*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json", "--ckfmha-report-every", "0.05"]
    )
    try:
        assert _wait_for(lambda: _completed(pytester.path / "r.json") >= 2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    doc = json.loads((pytester.path / "r.json").read_text())  # complete JSON: written atomically
    assert doc["state"] == "running" and doc["collected"] == 8 and len(doc["rows"]) == 8
    assert doc["completed"] >= 2 and sum(r["verdict"] == "not_run" for r in doc["rows"]) == 8 - doc["completed"]


def test_unwritable_report_path_is_a_usage_error_before_anything_runs(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="exit3")  # would crash, if anything ran
    (tmp_path / "a_file").write_text("x")
    bad = tmp_path / "a_file" / "r.json"  # its directory cannot exist (root can write anywhere else)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", str(bad))
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*--ckfmha-report: '{bad}' cannot be written (*)*checked before anything runs*"])
    assert "exited with status 3" not in res.stdout.str() and "collected" not in res.stdout.str()


def test_report_path_that_is_a_directory_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    (pytester.path / "d.json").mkdir()
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "d.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-report: 'd.json' is a directory*"])


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    reporting.write_reports([path], [{"id": "a", "verdict": "passed", "family": "fwd"}], {"state": "running"})
    before = path.read_text()

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reporting.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        reporting.write_reports([path], [], {"state": "complete"})
    assert path.read_text() == before and json.loads(before)["state"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # the temporary file is gone


def test_a_report_that_cannot_be_written_at_the_end_fails_the_run(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    fail_report_writes(pytester)
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR, res.stdout.str()
    res.stdout.fnmatch_lines(["*ckfmha: ERROR: report not written: *No space left on device*"])


def test_rowbook_covers_every_phase():
    from types import SimpleNamespace as NS

    described = lambda nid: {"id": nid.split("::", 1)[1], "family": "fwd"}  # noqa: E731
    book = reporting.RowBook(described)
    book.set_collected(["ckfmha::a::k", "ckfmha::b::k", "ckfmha::c::k", "ckfmha::d::k", "test_x.py::t"])

    def rep(nodeid, when, outcome, props=(), longrepr="boom"):
        return NS(
            nodeid=nodeid,
            when=when,
            outcome=outcome,
            passed=outcome == "passed",
            failed=outcome == "failed",
            skipped=outcome == "skipped",
            user_properties=list(props),
            longrepr=longrepr,
            longreprtext=longrepr,
            duration=0.5,
        )

    assert book.add(rep("test_x.py::t", "call", "passed")) is None  # not a ckfmha item
    book.add(rep("ckfmha::a::k", "call", "passed", [("id", "a::k"), ("verdict", "passed")]))
    book.add(rep("ckfmha::a::k", "teardown", "failed", longrepr="teardown broke"))
    book.add(rep("ckfmha::b::k", "setup", "failed", longrepr="setup broke"))
    book.add(rep("ckfmha::c::k", "???", "failed", longrepr="worker gw0 crashed"))
    rows = {r["nodeid"]: r for r in book.complete("interrupted")}
    assert list(rows) == ["ckfmha::a::k", "ckfmha::b::k", "ckfmha::c::k", "ckfmha::d::k"]
    assert rows["ckfmha::a::k"]["verdict"] == "error" and "teardown broke" in rows["ckfmha::a::k"]["reason"]
    assert rows["ckfmha::b::k"]["verdict"] == "error" and rows["ckfmha::b::k"]["family"] == "fwd"
    assert rows["ckfmha::c::k"]["verdict"] == "crashed" and "gw0" in rows["ckfmha::c::k"]["reason"]
    assert rows["ckfmha::d::k"]["verdict"] == "not_run" and rows["ckfmha::d::k"]["reason"] == "interrupted"
    assert book.completed() == 3


def test_a_group_sigterm_stops_an_xdist_run_that_inherited_sigterm_ignored(pytester, monkeypatch, tmp_path):
    # a CI time limit (timeout(1), a runner) signals the whole process group; a launcher that left SIGTERM ignored
    # (SIG_IGN is inherited through fork and exec) must not turn that into a run going on until the SIGKILL
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path, die="slow", die_on="fwd.fp16")
    monkeypatch.setenv("CKT_SLOW_S", "2.0")
    out = open(pytester.path / "out.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *base, "--ckfmha-category", "full", "-n", "2",
         "--ckfmha-report", "r.json", "--ckfmha-report-every", "0.1"],
        cwd=pytester.path, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )  # fmt: skip
    try:
        assert _wait_for(lambda: _completed(pytester.path / "r.json") >= 1), (pytester.path / "out.txt").read_text()
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["state"] == "interrupted" and doc["signal"] == "SIGTERM" and rc == 2, (
        pytester.path / "out.txt"
    ).read_text()
    assert doc["collected"] == len(doc["rows"]) == 8 and doc["completed"] < 8


def test_a_sigterm_while_the_session_finishes_still_leaves_the_final_report(pytester, monkeypatch, tmp_path):
    # on an H100 box a nightly shard's SIGTERM reached the controller only inside xdist's pytest_sessionfinish
    # (waiting for its workers): raised there, KeyboardInterrupt skipped the final report (left at a `running`
    # checkpoint).  Here a sessionfinish hook that runs first and waits stands in for xdist's.
    base = make_project(pytester, monkeypatch, tmp_path)
    marker = pytester.path / "finishing"
    pytester.makepyfile(
        slow_finish=f"""
        import time, pytest
        @pytest.hookimpl(tryfirst=True)
        def pytest_sessionfinish(session):
            open({str(marker)!r}, "w").close()
            time.sleep(3)
        """
    )
    proc = _start(pytester, [*base, "-p", "slow_finish", "--ckfmha-category", "smoke", "--ckfmha-report", "r.json"])
    try:
        assert _wait_for(marker.exists), (pytester.path / "out.txt").read_text()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    finally:
        proc.kill()
    out = (pytester.path / "out.txt").read_text()
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["state"] != "running" and doc["signal"] == "SIGTERM", out
    assert doc["collected"] == len(doc["rows"]) == doc["completed"] == 5, out  # every item has its verdict
    assert rc == doc["exit_status"] and "KeyboardInterrupt" not in out


def test_a_report_nothing_would_write_is_a_usage_error(pytester):
    """--ckfmha-report on a foreign suite without --ckfmha-flash-attn-compat (nor a category, parity or CK smoke run)
    would write nothing: refused at start, naming the option and what writes reports; the tests never run."""
    pytester.makepyfile(test_foreign="def test_one():\n    assert True\n")
    res = pytester.runpytest("--ckfmha-report", "r.json", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-report*r.json*nothing would be written*--ckfmha-category*"])
    assert not (pytester.path / "r.json").exists()
    assert "1 passed" not in res.stdout.str()
