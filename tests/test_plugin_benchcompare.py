"""``--ckfmha-bench``'s terminal table and ``--ckfmha-compare PREV`` / ``--ckfmha-compare-fail PCT``
(pytest_ckfmha/benchcompare.py), on the test backend (``testref``: every stage 0.5 ms, not an emulation)."""

import json

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def _prev(pytester, base, median_ms=None):
    """A timed run's report (prev.json); ``median_ms``: every timed row's figures rewritten to that."""
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-bench", "--ckfmha-report", "prev.json")
    assert res.ret == 0, res.stdout.str()
    path = pytester.path / "prev.json"
    if median_ms is not None:
        doc = json.loads(path.read_text())
        for r in doc["rows"]:
            if r.get("timed"):
                r["time_ms"] = r["time_min_ms"] = r["time_max_ms"] = median_ms
        path.write_text(json.dumps(doc))
    return path


def _compare(pytester, base, *more):
    return pytester.runpytest(
        *base, "--ckfmha-category", "smoke", "--ckfmha-bench", "--ckfmha-compare", "prev.json", *more
    )


def test_a_bench_run_prints_the_stats_table(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-bench", "--ckfmha-bench-repeat", "3")
    assert res.ret == 0, res.stdout.str()
    out = res.stdout.str()
    assert "ckfmha benchmark" in out and "timed item(s), slowest first" in out
    res.stdout.fnmatch_lines(["*min*median*max*spread*rounds*item", "*0.5*0.5*0.5*0.0%*3  fwd-fp16-*::plan"])
    assert "vs PREV" not in out


def test_a_regression_over_pct_fails_the_run(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base, median_ms=0.25)  # this run (0.5 ms) is 100% slower
    res = _compare(pytester, base, "--ckfmha-compare-fail", "5", "--ckfmha-report", "new.json")
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(
        [
            "*vs PREV*",
            "*+100.0%*SLOWER*",
            "*REGRESSED:*slower by more than 5%: the session fails*",
            "ckfmha: ERROR: --ckfmha-compare-fail 5:*slower than in*prev.json by more than 5%*",
        ]
    )
    assert json.loads((pytester.path / "new.json").read_text())["exit_status"] == 1


def test_within_pct_passes_and_without_fail_it_only_shows(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base, median_ms=0.48)  # 4% slower now
    res = _compare(pytester, base, "--ckfmha-compare-fail", "10%")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*+4.2%*", "*no item slower by more than 10%*"])
    _prev(pytester, base, median_ms=0.25)
    res = _compare(pytester, base)  # no --ckfmha-compare-fail: shown, not failing
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*slower by more than 10% (not failing the run)*"])


def test_a_same_run_compares_clean_also_into_its_own_report(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base)
    res = _compare(pytester, base, "--ckfmha-compare-fail", "0", "--ckfmha-report", "prev.json")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*+0.0%*", "compared with *prev.json:*timed in both*"])


def test_a_bad_prev_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    (pytester.path / "prev.json").write_text("{not json")
    res = _compare(pytester, base)
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare: 'prev.json' is not a report to compare with*"])


def test_prev_of_another_selection_or_untimed_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base)
    res = _compare(pytester, base, "--ckfmha-max-kernels-per-shape", "1")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare: *prev.json*max_kernels_per_shape: 2 there, 1 here*"])
    res = _compare(pytester, base, "--ckfmha-seed", "3")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare: *prev.json*seed: 0 there, 3 here*"])
    assert pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "prev.json").ret == 0
    res = _compare(pytester, base)
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*has no timed item that passed: compare with a run of --ckfmha-bench*"])


def test_compare_without_bench_and_fail_without_compare_are_usage_errors(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-compare", "prev.json")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare: 'prev.json' needs --ckfmha-bench*"])
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-bench", "--ckfmha-compare-fail", "5")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare-fail: '5' needs --ckfmha-compare PREV.json*"])
    res = _compare(pytester, base, "--ckfmha-compare-fail", "lots")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*--ckfmha-compare-fail: 'lots' is not a percentage*"])


def test_timings_not_like_for_like_fail_at_the_end(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base)
    monkeypatch.setenv("CKT_DEVICE_PID", "1")  # the test backend names another device
    res = _compare(pytester, base, "--ckfmha-compare-fail", "5")
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(
        [
            "compared with *prev.json: refused: not like for like*nothing compared",
            "ckfmha: ERROR: --ckfmha-compare *prev.json: refused, not like for like: devices:*--force*",
        ]
    )


def test_the_controller_compares_under_xdist(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _prev(pytester, base, median_ms=0.25)
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-category",
        "smoke",
        "-n",
        "2",
        "--ckfmha-bench",
        "--ckfmha-compare",
        "prev.json",
        "--ckfmha-compare-fail",
        "5",
        "--ckfmha-report",
        "new.json",
    )
    assert res.ret == 1, res.stdout.str()
    res.stdout.fnmatch_lines(["*REGRESSED: 4 item(s) slower by more than 5%*"])
    assert json.loads((pytester.path / "new.json").read_text())["exit_status"] == 1
