"""The report's timeline (pytest_ckfmha/timeline.py): every process's marks in the order it passed them, the kernel
child's warm-up steps as the child measured them, and the seconds stopping the child took; a worker's record
reaches the controller's report.  The test backend's first ``available()`` sleeps ``CKT_WARM_SLEEP`` seconds (a
slow first load), so the warm-up's ``available`` step has a known lower bound."""

from __future__ import annotations

import json

import pytest

from tests.test_plugin_prestart import _project

pytest_plugins = ["pytester"]

#: the marks of a process that ran items (timeline.py's table)
ITEM_PROCESS_MARKS = {"configured", "child_forked", "collected", "child_warm", "finish_begins", "child_closed"}
#: the order they must come in: the child is forked before the collection (warmup.py) and its warm-up ends
#: before the items end (child_warm, the collection: either first)
BEFORE = [
    ("configured", "child_forked"), ("child_forked", "collected"), ("child_forked", "child_warm"),
    ("collected", "finish_begins"), ("child_warm", "finish_begins"), ("finish_begins", "child_closed"),
]  # fmt: skip
SLEEP_S = 0.6


def _processes(pytester) -> list[dict]:
    return json.loads((pytester.path / "r.json").read_text())["processes"]


def _check_item_process(p: dict, run_end: float) -> None:
    marks = p["marks"]
    assert ITEM_PROCESS_MARKS <= set(marks), marks
    assert all(marks[a] <= marks[b] for a, b in BEFORE), marks
    assert 0 <= marks["configured"] and marks["child_closed"] <= run_end, marks
    assert marks["started"] <= marks["configured"] + 0.05, marks  # the process's creation (/proc, 10 ms ticks)
    warm = p["warm_up"]
    assert warm["phases"]["available"] >= SLEEP_S - 0.05  # the backend's slow first load, measured in the child
    assert SLEEP_S - 0.05 <= warm["seconds"] < 60 and warm["seconds"] >= sum(warm["phases"].values()) - 0.05
    assert marks["child_warm"] - marks["child_forked"] >= SLEEP_S - 0.05  # the same warm-up on the parent's clock
    assert 0 <= p["close_child_s"] < 5


def test_the_only_process_records_its_timeline(pytester, monkeypatch, tmp_path):
    base, _ = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_WARM_SLEEP", str(SLEEP_S))
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json", timeout=120)
    res.assert_outcomes(passed=4, skipped=1)
    (main,) = _processes(pytester)
    assert main["worker"] == "main" and main["pid"] > 0
    _check_item_process(main, run_end=120)


def test_each_worker_sends_its_timeline_to_the_controller(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base, _ = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_WARM_SLEEP", str(SLEEP_S))
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-category", "smoke", "-n", "2", "--ckfmha-report", "r.json", timeout=120
    )
    res.assert_outcomes(passed=4, skipped=1)
    procs = _processes(pytester)
    assert [p["worker"] for p in procs] == ["controller", "gw0", "gw1"]
    controller, workers = procs[0], procs[1:]
    assert controller["warm_up"] is None and controller["close_child_s"] is None  # it runs no item
    end = controller["marks"]["finish_begins"]
    for w in workers:
        _check_item_process(w, run_end=end)
        assert w["marks"]["child_closed"] <= w["marks"]["down"] <= end  # the controller heard it before its end
    assert len({p["pid"] for p in procs}) == 3
