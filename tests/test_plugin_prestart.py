"""Pre-start (pytest_ckfmha/warmup.py, isolation.py): the kernel child is forked right after collection and warms
up (loads the backend, ``available()``, ``device()``) before the first item's work; a warm-up that fails or dies
changes no verdict; inline isolation and runs that run no item start nothing.

The test backend logs every ``available()`` call (and every call of the backend hook) to ``CKT_AVAIL_LOG``: the
process, its parent, the xdist worker, and whether the call came from an item's work (a frame of
``CkfmhaItem.work``) or from the warm-up."""

from __future__ import annotations

import json
import os

import pytest

from tests.test_plugin_fixtures import CONFTEST, make_project

pytest_plugins = ["pytester"]

LOGGED = '''

import json as _json
import sys as _sys
import time as _time

_FIRST = []


def _record(what):
    """One line of CKT_AVAIL_LOG: who called, and whether from an item's work."""
    log = os.environ.get("CKT_AVAIL_LOG")
    if not log:
        return
    f, in_item = _sys._getframe(), False
    while f is not None:
        code = f.f_code
        if code.co_name in ("work", "matrix_item_work") and code.co_filename.endswith(os.path.join("pytest_ckfmha", "items.py")):
            in_item = True
        f = f.f_back
    line = {"what": what, "pid": os.getpid(), "ppid": os.getppid(), "t": _time.monotonic(),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "in_item": in_item}
    with open(log, "a") as fh:
        fh.write(_json.dumps(line) + "\\n")


class LoggedBackend(TestBackend):
    def available(self):
        _record("available")
        once = os.environ.get("CKT_WARM_DIE_ONCE")  # a marker file: the first call of the run exits
        if once and not os.path.exists(once):
            open(once, "w").close()
            print("backend says: about to exit 7", flush=True)
            os._exit(7)
        if not _FIRST:
            _FIRST.append(1)
            _time.sleep(float(os.environ.get("CKT_WARM_SLEEP", "0")))  # a slow first load (torch, a context)
        return super().available()

    def device(self):
        if os.environ.get("CKT_DEVICE_RAISES"):
            raise RuntimeError("the device is gone")
        return super().device()


def pytest_ckfmha_backend(config, name):
    _record("hook")
    if os.environ.get("CKT_LOAD_RAISES"):
        raise RuntimeError("this backend cannot be loaded here")
    mode = os.environ.get("CKT_MODE")
    return LoggedBackend(mode) if mode else None
'''


def _project(pytester, monkeypatch, tmp_path) -> tuple[list[str], object]:
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeconftest(CONFTEST + LOGGED)
    log = tmp_path / "avail.jsonl"
    monkeypatch.setenv("CKT_AVAIL_LOG", str(log))
    monkeypatch.setenv("CKT_DEVICE_PID", "1")  # device(): "test device pid <the process that ran the item>"
    return base, log


def _records(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _rows(pytester) -> list[dict]:
    return json.loads((pytester.path / "r.json").read_text())["rows"]


def _warmed(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["child_warmup_s"] != ""]


def test_the_child_is_forked_and_warmed_before_the_first_item(pytester, monkeypatch, tmp_path):
    base, log = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_WARM_SLEEP", "0.4")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(passed=4, skipped=1)
    recs = [r for r in _records(log) if r["what"] == "available"]
    first = recs[0]
    # the first available() ran in a child of this (the pytest) process, outside any item's work: the warm-up
    assert (first["in_item"], first["ppid"]) == (False, os.getpid()) and first["pid"] != os.getpid()
    items = [r for r in recs if r["in_item"]]
    assert len(items) == 5 and len(recs) == 6  # every item asked again (the backend caches nothing here)
    assert {r["pid"] for r in items} == {first["pid"]} and items[0]["t"] > first["t"]  # the same, warm child
    rows = _rows(pytester)
    assert {r["device"] for r in rows if r["device"]} == {f"test device pid {first['pid']}"}
    warmed = _warmed(rows)
    assert warmed == [rows[0]]  # the first item run (collection order, one process) carries the warm-up's time
    assert 0.4 <= warmed[0]["child_warmup_s"] < 60


def test_a_backend_that_cannot_be_loaded_skips_the_items_as_inline(pytester, monkeypatch, tmp_path):
    base, log = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_LOAD_RAISES", "1")
    reasons = {}
    for isolation in ("process", "inline"):
        log.unlink(missing_ok=True)
        res = pytester.runpytest(
            *base, "--ckfmha-category", "smoke", "--ckfmha-isolation", isolation, "--ckfmha-report", "r.json"
        )
        res.assert_outcomes(skipped=5)
        rows = _rows(pytester)
        assert {r["verdict"] for r in rows} == {"skipped"}
        assert _warmed(rows) == ([rows[0]] if isolation == "process" else [])  # the warm-up ran, and failed
        reasons[isolation] = [r["reason"] for r in rows]
        hooks = [r for r in _records(log) if r["what"] == "hook"]
        assert len(hooks) == 1  # the runtime keeps the failure: the items reuse it
        if isolation == "process":  # loaded (and failed) by the warm-up, in the child, before any item
            assert (hooks[0]["in_item"], hooks[0]["ppid"]) == (False, os.getpid())
        else:
            assert (hooks[0]["in_item"], hooks[0]["pid"]) == (True, os.getpid())
    assert reasons["process"] == reasons["inline"]
    assert all("cannot be loaded: RuntimeError: this backend cannot be loaded here" in r for r in reasons["process"])


def test_a_raising_warm_up_is_forgotten(pytester, monkeypatch, tmp_path):
    """device() raises: in the warm-up it is ignored (a line in the first item's output); every item then meets
    it in its own work, with the verdict and reason it gets inline (no warm-up)."""
    base, _ = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_DEVICE_RAISES", "1")
    seen = {}
    for isolation in ("process", "inline"):
        res = pytester.runpytest(
            *base, "--ckfmha-category", "smoke", "--ckfmha-isolation", isolation, "--ckfmha-report", "r.json"
        )
        res.assert_outcomes(failed=5)
        seen[isolation] = [(r["verdict"], r["reason"]) for r in _rows(pytester)]
        warm_line = "ckfmha: the kernel process's warm-up raised RuntimeError: the device is gone (ignored)"
        assert (warm_line in res.stdout.str()) == (isolation == "process")
    assert seen["process"] == seen["inline"]
    assert {v for v, _ in seen["process"]} == {"error"}
    assert all("RuntimeError: the device is gone" in r for _, r in seen["process"])


def test_a_child_dying_in_its_warm_up_is_replaced_without_blaming_the_item(pytester, monkeypatch, tmp_path):
    base, log = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_WARM_DIE_ONCE", str(tmp_path / "died-once"))
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json", "-rP")
    res.assert_outcomes(passed=4, skipped=1)  # as without a warm-up: nothing crashed
    out = res.stdout.str()
    assert "ckfmha: the pre-started kernel process exited with status 7 during its warm-up" in out
    assert "backend says: about to exit 7" in out  # the warm-up's last output, in the first item's output
    recs = [r for r in _records(log) if r["what"] == "available"]
    assert recs[0]["in_item"] is False
    assert all(r["in_item"] and r["pid"] != recs[0]["pid"] for r in recs[1:]) and len(recs) == 6
    rows = _rows(pytester)
    assert {r["verdict"] for r in rows} == {"passed", "skipped"} and not _warmed(rows)


def test_inline_isolation_starts_no_child(pytester, monkeypatch, tmp_path):
    base, log = _project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(
        *base, "--ckfmha-category", "smoke", "--ckfmha-isolation", "inline", "--ckfmha-report", "r.json"
    )
    res.assert_outcomes(passed=4, skipped=1)
    recs = _records(log)
    assert recs and all(r["pid"] == os.getpid() and r["in_item"] for r in recs)  # no warm-up, no fork
    assert not _warmed(_rows(pytester))


@pytest.mark.parametrize("args", [["--collect-only"], ["--setup-plan"], ["--ckfmha-isolation", "inline"]], ids=str)
def test_no_child_when_no_item_runs(pytester, monkeypatch, tmp_path, args):
    base, log = _project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", *args, "-k", "no_such_item")
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    assert _records(log) == []  # nothing loaded the backend: no child was forked


@pytest.mark.parametrize("args", [["-k", "no_such_item"], ["-p", "no:xdist", "-k", "no_such_item"]], ids=str)
def test_a_child_forked_before_a_collection_that_selects_nothing_is_stopped(pytester, monkeypatch, tmp_path, args):
    """The child is forked before the collection, when -k's outcome is unknown: its warm-up may begin, and it is
    stopped when the collection ends with nothing to run -- no item runs in it."""
    base, log = _project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_WARM_SLEEP", "30")  # a warm-up that would outlast the run if it were waited for
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", *args)
    assert res.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    recs = _records(log)
    assert all(not r["in_item"] and r["pid"] != os.getpid() for r in recs)  # the warm-up's only, in a child
    assert res.duration < 20  # stopped, not waited for


def test_each_xdist_worker_prestarts_its_own_child(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base, log = _project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-category", "smoke", "-n", "2", "--ckfmha-report", "r.json", timeout=120
    )
    res.assert_outcomes(passed=4, skipped=1)
    rows = _rows(pytester)
    workers = {r["worker"] for r in rows if r["worker"]}
    assert workers <= {"gw0", "gw1"} and workers
    recs = [r for r in _records(log) if r["what"] == "available"]
    for w in workers:
        mine = [r for r in recs if r["worker"] == w]
        warm = mine[0]  # each worker's child warmed up before that worker's first item
        assert warm["in_item"] is False and warm["pid"] != warm["ppid"]
        assert all(r["in_item"] and r["pid"] == warm["pid"] for r in mine[1:]) and len(mine) > 1
        assert {r["device"] for r in rows if r["worker"] == w} == {f"test device pid {warm['pid']}"}
    assert len({r["ppid"] for r in recs}) == len({r["pid"] for r in recs})  # one child per worker
    warmed = _warmed(rows)
    assert sorted(r["worker"] for r in warmed) == sorted(workers)  # one row per worker carries its warm-up time


def test_a_kernel_set_that_cannot_be_built_is_the_selection_checks_usage_error(pytester, monkeypatch, tmp_path):
    """The workers' early fork builds the kernel set first; an empty selection there must not end the workers
    with an internal error: the controller's selection check reports it (exit 4), as without an early child."""
    pytest.importorskip("xdist")
    base, _ = _project(pytester, monkeypatch, tmp_path)
    pytester.makeconftest("")  # no kernels hook: the workers enumerate the arch's kernel space themselves
    args = ["--ckfmha-category", "smoke", "--ckfmha-backend", "cpu", "--ckfmha-filter", "c.hdim_q == 99999"]
    res = pytester.runpytest_subprocess(*base, *args, "-n", "2", timeout=120)
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in out, out
    assert "no kernel matches the selection" in out
