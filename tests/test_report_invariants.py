"""Reports you can build on: every report carries its selection fingerprint (merge and resume refuse another
selection), checkpoints come from a timer (also while one item runs for long) starting with a ``running`` report
of this run, the invariants hold where reports are written (one row per collected item, ``completed <=
collected``, a ``state`` that says what happened), the labels and exit codes say what happened, ``--dist`` modes
that cannot keep the report are refused, and a CK smoke line that cannot be read fails alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.test_plugin_fixtures  # noqa: F401  (imports what pytester's in-process runs must not import twice)
from ckfmha.runreport import ReportError, merge_reports, report_from_doc
from pytest_ckfmha import reporting
from tests.ck_smoke_fake import make_fake_checkout
from tests.test_plugin_fixtures import fail_report_writes, make_project

pytest_plugins = ["pytester"]


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def _start(pytester, args) -> subprocess.Popen:
    out = open(pytester.path / "out.txt", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *args],
        cwd=pytester.path,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=os.environ.copy(),
    )


def _wait_for(pred, timeout=60.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------------- 1. the selection fingerprint
def test_every_report_carries_the_selection_fingerprint(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-family", "fwd", "--ckfmha-report", "r.json")
    sel = _doc(pytester.path / "r.json")["selection"]
    assert tuple(sel) == reporting.SELECTION_KEYS
    assert (sel["category"], sel["families"], sel["arch"], sel["shard"]) == ("smoke", ["fwd"], "gfx942", None)
    assert sel["matrices"] and sel["mask_mode"] == "simplified"  # the matrix file by its contents


def _shard(k: int, families: list[str]) -> dict:
    row = {"id": f"item{k}", "nodeid": f"ckfmha::item{k}", "verdict": "passed", "family": "fwd"}
    selection: dict[str, object] = dict.fromkeys(reporting.SELECTION_KEYS)
    selection.update(category="full", families=families, arch="gfx942", shard={"index": k, "count": 2})
    return {
        "schema": "ckfmha.report",
        "version": 2,
        "state": "complete",
        "collected": 1,
        "completed": 1,
        "category": "full",
        "arch": "gfx942",
        "shard": {"index": k, "count": 2},
        "selection": selection,
        "rows": [row],
    }


def test_merge_refuses_shards_of_another_selection():
    fwd, bwd = report_from_doc(_shard(1, ["fwd"]), "s1.json"), report_from_doc(_shard(2, ["bwd"]), "s2.json")
    with pytest.raises(ReportError, match=r"s2.json: selection.families: \['bwd'\] differs from s1.json's \['fwd'\]"):
        merge_reports([fwd, bwd])
    # shards of one selection differ in shard.index only: they merge
    merged = merge_reports([fwd, report_from_doc(_shard(2, ["fwd"]), "s2.json")])
    assert merged["state"] == "complete" and len(merged["rows"]) == 2 and merged["selection"]["shard"] is None


def test_resume_refuses_a_report_of_another_selection(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-family", "fwd", "--ckfmha-report", "first.json")
    res = pytester.runpytest(
        *base, "--ckfmha-category", "full", "--ckfmha-family", "fwd_splitkv", "--ckfmha-resume", "first.json"
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ckfmha-resume: 'first.json': families: ['fwd'] there, ['fwd_splitkv'] here" in res.stderr.str()


# ---------------------------------------------------------------------- 2. checkpoints on a timer
def test_checkpoints_come_from_a_timer_while_an_item_hangs(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="slow", die_on="fwd.fp16")
    monkeypatch.setenv("CKT_SLOW_S", "60")  # every kernel item runs for a minute
    report = pytester.path / "r.json"
    report.write_text(json.dumps({"state": "complete", "created": "last week", "rows": []}))  # an older report
    proc = _start(
        pytester, [*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json", "--ckfmha-report-every", "0.5"]
    )
    try:
        assert _wait_for(lambda: _read(report).get("state") == "running", 30), (pytester.path / "out.txt").read_text()
        first = report.stat().st_mtime_ns
        assert _wait_for(lambda: report.stat().st_mtime_ns != first, 10)  # rewritten while the first item hangs
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    doc = _doc(report)
    assert doc["state"] == "running" and doc["created"] != "last week" and doc["collected"] == len(doc["rows"]) == 8
    running = [r for r in doc["rows"] if r["reason"] == "running when this checkpoint was written"]
    assert len(running) == 1 and doc["completed"] < 8


# ---------------------------------------------------------------------- 3. invariants where reports are written
def test_one_list_of_states():
    import yaml

    from ckfmha import runreport

    schema = yaml.safe_load(Path(runreport.__file__).parent.joinpath("data/schemas/run_report.schema.yaml").read_text())
    assert reporting.STATES == runreport.STATES == tuple(schema["properties"]["state"]["enum"])


@pytest.mark.parametrize(
    "rows, meta, words",
    [
        ([{"nodeid": "a"}], {"state": "done"}, "state: 'done' is not one of"),
        ([{"nodeid": "a"}], {"state": "complete", "collected": 2}, "1 rows (1 items) for 2 collected"),
        ([{"nodeid": "a"}, {"nodeid": "a"}], {"state": "running", "collected": 2}, "2 rows (1 items)"),
        ([{"nodeid": "a"}], {"state": "running", "collected": 1, "completed": 2}, "completed: 2 > collected 1"),
        ([{"nodeid": "a", "verdict": "not_run"}], {"state": "complete", "collected": 1}, "1 row(s) are not_run"),
    ],
)
def test_invariants_are_checked_before_a_report_is_written(tmp_path, rows, meta, words):
    with pytest.raises(reporting.ReportInvariantError) as ei:
        reporting.check_invariants(rows, meta)
    assert words in str(ei.value)
    writer = reporting.ReportWriter([tmp_path / "r.json"])
    writer.final(rows, meta)
    assert words in (writer.error or "") and not (tmp_path / "r.json").exists()


def test_a_run_stopped_by_x_is_stopped_early(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    res = pytester.runpytest(*base, "--ckfmha-category", "full", "-x", "--ckfmha-report", "r.json")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    doc = _doc(pytester.path / "r.json")
    assert doc["state"] == "stopped_early" and doc["interrupted"] is False and "-x / --maxfail" in doc["reason"]
    assert doc["collected"] == len(doc["rows"]) == 8 and doc["completed"] < doc["collected"]
    assert all("-x / --maxfail" in r["reason"] for r in doc["rows"] if r["verdict"] == "not_run")
    with pytest.raises(ReportError, match="state: 'stopped_early'"):  # merge takes complete shards only
        merge_reports([report_from_doc({**doc, "shard": {"index": 1, "count": 1}}, "r.json")])


def test_an_internal_error_is_its_own_state(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + """

def pytest_runtest_logfinish(nodeid, location):
    if "-causal::qr-" in nodeid:  # the causal shape's kernel item (its kernel: mask=any)
        raise RuntimeError("a conftest bug")
"""
    )
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR
    doc = _doc(pytester.path / "r.json")
    assert doc["state"] == "internal_error" and doc["collected"] == len(doc["rows"]) == 8
    assert doc["completed"] < 8 and all(
        "internal error" in r["reason"] for r in doc["rows"] if r["verdict"] == "not_run"
    )


# ---------------------------------------------------------------------- 4. labels and exit codes
def test_x_with_xdist_is_stopped_early_not_interrupted(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    pytester.runpytest_subprocess(
        *base, "--ckfmha-category", "full", "-x", "-n", "2", "--ckfmha-report", "r.json", timeout=120
    )
    doc = _doc(pytester.path / "r.json")
    assert doc["state"] == "stopped_early" and doc["interrupted"] is False, doc["reason"]
    assert "-x / --maxfail" in doc["reason"] and "KeyboardInterrupt" not in doc["reason"]
    assert doc["collected"] == len(doc["rows"]) == 8


def test_sigterm_labels_the_running_item_as_interrupted_while_running(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="slow", die_on="fwd.fp16")
    monkeypatch.setenv("CKT_SLOW_S", "3")
    report = pytester.path / "r.json"
    proc = _start(
        pytester, [*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json", "--ckfmha-report-every", "0.1"]
    )
    try:
        assert _wait_for(lambda: _read(report).get("completed", 0) >= 1, 60), (pytester.path / "out.txt").read_text()
        time.sleep(0.5)  # the next item is running
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        proc.kill()
    doc = _doc(report)
    assert doc["state"] == "interrupted" and doc["signal"] == "SIGTERM"
    reasons = [r["reason"] for r in doc["rows"] if r["verdict"] == "not_run"]
    assert reasons.count("the session was interrupted (SIGTERM) while it was running") == 1
    assert reasons.count("the session was interrupted (SIGTERM) before it ran") == len(reasons) - 1


def test_a_report_that_cannot_be_written_is_exit_3_also_when_tests_failed(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    fail_report_writes(pytester)
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    assert res.ret == pytest.ExitCode.INTERNAL_ERROR, res.stdout.str()
    res.stdout.fnmatch_lines(["*ckfmha: ERROR: report not written: *No space left on device*"])


# ---------------------------------------------------------------------- 5. --dist modes
@pytest.mark.parametrize("mode", ["loadgroup", "loadscope", "loadfile", "worksteal", "each"])
def test_dist_modes_that_cannot_keep_the_report_are_refused(pytester, monkeypatch, tmp_path, mode):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "smoke", "-n", "2", "--dist", mode)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--dist {mode}: not supported by ckfmha runs" in res.stderr.str()


# ---------------------------------------------------------------------- 6. CK smoke lines
SHELL_FWD = r"""#!/bin/bash
EXE="$(find . -name tile_example_fmha_fwd -type f | head -n 1)"
"$EXE" -prec=fp16 '-kname=a b' "-v=1\
2" $'-x=a\nb'
$EXE -prec=fp16 -mode=0 -b=1 -h=2 -d=64 -s=16 -mask=garbage -kname=1
$EXE -prec=fp16 -mode=0 -b=1 -h=2 -d=64 -s=16 -kname=1
"""


def test_smoke_arguments_are_split_as_the_shell_passes_them(tmp_path, monkeypatch):
    from ckfmha.ck_smoke import record_smoke_lines

    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    root = make_fake_checkout(tmp_path / "ck", fwd=SHELL_FWD)
    for _ in range(2):  # recorded, then read from the cache
        lines = record_smoke_lines(root, "fwd")
        assert lines[0].args == ("-prec=fp16", "-kname=a b", "-v=12", "-x=a\nb")
        assert len(lines) == 3 and lines[2].args[-1] == "-kname=1"


def test_an_unreadable_smoke_line_is_one_failed_item(pytester, monkeypatch, tmp_path):
    pytester.makeconftest(
        "def pytest_ckfmha_kernels(config, arch):\n"
        "    from ckfmha.registry import Registry\n\n"
        "    return list(Registry.from_enumeration(arch))\n"
    )
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    monkeypatch.delenv("CK_ROOT", raising=False)
    fwd = SHELL_FWD.replace("\"$EXE\" -prec=fp16 '-kname=a b' \"-v=1\\\n2\" $'-x=a\\nb'\n", "")
    root = make_fake_checkout(tmp_path / "ck", fwd=fwd)
    res = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--ckfmha-backend",
        "cpu",
        "--ckfmha-arch",
        "gfx942",
        "--ckfmha-ck-smoke",
        "fwd",
        "--ckfmha-ck-root",
        str(root),
        "--ckfmha-report",
        "r.json",
    )
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*smoke_test_fwd.sh: the line *-mask=garbage* cannot be read: -mask: *garbage*"])
    rows = {r["verdict"]: r for r in _doc(pytester.path / "r.json")["rows"]}
    assert "-mask=garbage" in rows["failed"]["reason"] and len(rows) == 2
