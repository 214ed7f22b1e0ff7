"""Containment: a kernel that segfaults, aborts, exits or hangs fails its item alone -- with and without -n --
and every other item still runs and reports."""

from __future__ import annotations

import json

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

CAUSAL_KERNEL = "fwd-fp16-batch-b1h2s16d64-causal::fwd.fp16.batch.d64x64.qr.b64x64x32x64x32x64"


def _rows(pytester) -> dict[str, dict]:
    doc = json.loads((pytester.path / "r.json").read_text())
    return {r["id"]: r for r in doc["rows"]}, doc


@pytest.mark.parametrize(
    "how, words",
    [
        ("segv", "killed by signal 11 (SIGSEGV)"),
        ("abort", "killed by signal 6 (SIGABRT)"),
        ("exit3", "exited with status 3"),
    ],
)
def test_a_dying_kernel_fails_its_items_alone(pytester, monkeypatch, tmp_path, how, words):
    base = make_project(pytester, monkeypatch, tmp_path, die=how)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(passed=2, failed=2, skipped=1)  # the causal kernel item and the causal plan
    out = res.stdout.str()
    assert f"crashed: the kernel process {words} while running shape fwd-fp16-batch-b1h2s16d64-causal, " in out
    assert "kernel fwd.fp16.batch.d64x64.qr.b64x64x32x64x32x64" in out and "the dispatcher's plan" in out
    assert "kernel says: about to " + how in out  # the child's last output is part of the reason
    rows, doc = _rows(pytester)
    assert len(rows) == doc["collected"] == doc["completed"] == 5
    crashed = [r for r in rows.values() if r["verdict"] == "crashed"]
    assert len(crashed) == 2 and all(words in r["reason"] for r in crashed)
    assert all(r["dtype"] == "fp16" and r["mask"] == "t" for r in crashed)  # the problem fields are there
    assert sum(r["verdict"] == "passed" for r in rows.values()) == 2


def test_a_segfault_dumps_the_python_stack_into_the_reason(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="segv")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    assert "Fatal Python error: Segmentation fault" in res.stdout.str()  # faulthandler, in the child's log


def test_a_hung_kernel_times_out_and_is_killed(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, die="hang")
    res = pytester.runpytest(
        *base, "--ckfmha-category", "smoke", "--ckfmha-timeout", "1.5", "--ckfmha-report", "r.json"
    )
    res.assert_outcomes(passed=2, failed=2, skipped=1)
    out = res.stdout.str()
    assert "timeout: still running after 1.5 s (--ckfmha-timeout) on shape fwd-fp16-batch-b1h2s16d64-causal" in out
    assert "the kernel process and its process group were killed" in out
    rows, _ = _rows(pytester)
    assert [r["verdict"] for r in rows.values()].count("timeout") == 2
    assert res.duration < 60


@pytest.mark.parametrize("how, words", [("segv", "SIGSEGV"), ("hang", "timeout")])
def test_containment_under_xdist(pytester, monkeypatch, tmp_path, how, words):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path, die=how)
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-category",
        "smoke",
        "-n",
        "2",
        "--ckfmha-timeout",
        "2",
        "--ckfmha-report",
        "r.json",
        timeout=120,
    )
    res.assert_outcomes(passed=2, failed=2, skipped=1)
    assert "replacing crashed worker" not in res.stdout.str()  # the workers themselves never died
    rows, doc = _rows(pytester)
    assert len(rows) == doc["collected"] == 5
    bad = [r for r in rows.values() if r["verdict"] in ("crashed", "timeout")]
    assert len(bad) == 2 and all(words in r["reason"] for r in bad)


def test_a_dying_xdist_worker_fails_its_item_without_rerunning_it(pytester, monkeypatch, tmp_path):
    """Inline isolation: the kernel kills the worker process itself. ckfmha's scheduler fails the item the
    worker was running (with the exit status), never re-runs it, replaces the worker and goes on."""
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path, die="segv")
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-category",
        "smoke",
        "-n",
        "2",
        "--ckfmha-isolation",
        "inline",
        "--ckfmha-report",
        "r.json",
        "-v",
        timeout=120,
    )
    out = res.stdout.str()
    assert "scheduling tests via BuildOnceScheduling" in out
    res.assert_outcomes(passed=2, failed=2, skipped=1)
    assert out.count("replacing crashed worker") == 2  # the kernel item, then the plan item of its group
    rows, doc = _rows(pytester)
    assert len(rows) == doc["collected"] == 5
    crashed = [r for r in rows.values() if r["verdict"] == "crashed"]
    assert len(crashed) == 2
    for r in crashed:
        assert "killed by signal 11 (SIGSEGV)" in r["reason"] and "the item is not re-run" in r["reason"]
        assert r["reason"].count("shape fwd-fp16-batch-b1h2s16d64-causal") == 1 and r["dtype"] == "fp16"


def test_xdist_load_scheduling_keeps_the_crashed_item_in_the_report(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path, die="exit3")
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-category",
        "smoke",
        "-n",
        "2",
        "--dist",
        "load",
        "--ckfmha-isolation",
        "inline",
        "--ckfmha-report",
        "r.json",
        "-v",
        timeout=120,
    )
    assert "scheduling tests via LoadScheduling" in res.stdout.str()
    rows, doc = _rows(pytester)
    crashed = [r for r in rows.values() if r["verdict"] == "crashed"]
    assert len(rows) == doc["collected"] == 5 and crashed
    assert all("exited with status 3" in r["reason"] for r in crashed)
    failed_by_pytest = res.parseoutcomes().get("failed", 0)
    assert doc["summary"]["fwd"]["crashed"] + doc["summary"]["fwd"]["failed"] == failed_by_pytest


def test_a_hook_backend_is_contained_too(pytester, monkeypatch, tmp_path):
    # the test backend comes from the pytest_ckfmha_backend hook of the conftest: it runs in the child as well
    base = make_project(pytester, monkeypatch, tmp_path, die="exit3", die_on="fwd.fp16")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    res.assert_outcomes(failed=4, skipped=1)
    assert res.stdout.str().count("exited with status 3") >= 4


def test_inline_isolation_refuses_a_timeout(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(
        *base, "--ckfmha-category", "smoke", "--ckfmha-isolation", "inline", "--ckfmha-timeout", "5"
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-timeout: '5' cannot be enforced with --ckfmha-isolation inline*"])


def test_inline_isolation_runs_in_process(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-isolation", "inline")
    res.assert_outcomes(passed=4, skipped=1)


def test_a_raising_stage_gets_the_next_item_a_fresh_process(pytester, monkeypatch, tmp_path):
    """A stage that raised may have left its device unusable (a CUDA error is sticky): the next item runs in a
    new kernel process."""
    base = make_project(pytester, monkeypatch, tmp_path, mode="raise_on")
    monkeypatch.setenv("CKT_DIE_ON", "p1111.o-1.gfx9.mask=any")
    monkeypatch.setenv("CKT_DEVICE_PID", "1")
    res = pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json")
    res.assert_outcomes(passed=4, failed=2, skipped=2)
    rows, _ = _rows(pytester)
    order = list(rows.values())  # collection order: shape 1 (3 items), causal shape (2, both raise), shape 3 (3)
    pids = [r["device"] for r in order]
    assert ["boom" in r["reason"] for r in order] == [False] * 3 + [True] * 2 + [False] * 3
    assert len(set(pids[:4])) == 1  # one process serves item after item...
    assert pids[4] != pids[3] and pids[5] != pids[4]  # ...until a stage raised: the next item gets a new one
    assert len(set(pids[5:])) == 1
