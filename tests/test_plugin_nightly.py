"""The nightly workflow through the plugin: timed runs with spreads, shards that partition the sweep by kernel and
merge back, resuming an interrupted run, compare / report on real reports, and heuristics tuned from timings."""

from __future__ import annotations

import json

import pytest

from ckfmha.cli import main
from ckfmha.heuristics import load_heuristics, shape_class
from ckfmha.runreport import load_report
from pytest_ckfmha.scheduling import kernel_groups
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def _rows(pytester, name="r.json"):
    return json.loads((pytester.path / name).read_text())


def test_bench_records_median_spread_and_repeats(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode=None)
    res = pytester.runpytest(
        *base,
        "--ckfmha-category",
        "smoke",
        "--ckfmha-backend",
        "cpu",
        "--ckfmha-bench",
        "--ckfmha-bench-repeat",
        "4",
        "--ckfmha-report",
        "r.json",
    )
    res.assert_outcomes(passed=5)
    doc = _rows(pytester)
    assert doc["bench_repeat"] == 4
    timed = [r for r in doc["rows"] if r["verdict"] == "passed"]
    assert timed and all(r["timed"] is True and r["repeats"] == 4 for r in timed)
    assert all(r["time_min_ms"] <= r["time_ms"] <= r["time_max_ms"] for r in timed)


@pytest.mark.parametrize(
    "value, words", [("0/2", "needs 1 <= K <= N"), ("3/2", "needs 1 <= K <= N"), ("a/b", "is not K/N")]
)
def test_bad_shard_values(pytester, monkeypatch, tmp_path, value, words):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-shard", value)
    assert res.ret == pytest.ExitCode.USAGE_ERROR and words in res.stderr.str()


def test_shards_partition_the_sweep_by_kernel_and_merge_back(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    full = pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "all.json")
    full.assert_outcomes(passed=6, skipped=2)
    shards = []
    for k in (1, 2, 3):
        pytester.runpytest(
            *base,
            "--ckfmha-category",
            "full",
            "--ckfmha-shard",
            f"{k}/3",
            "--ckfmha-report",
            f"s{k}.json",
            "--ckfmha-allow-empty",
        )
        shards.append(_rows(pytester, f"s{k}.json"))
        assert shards[-1]["shard"] == {"index": k, "count": 3}
    ids = [{r["nodeid"] for r in s["rows"]} for s in shards]
    assert set.union(*ids) == {r["nodeid"] for r in _rows(pytester, "all.json")["rows"]}
    assert sum(len(i) for i in ids) == 8  # disjoint
    groups = kernel_groups(sorted(set.union(*ids)))
    for i in ids:  # each kernel's items in one shard
        assert all(groups[a] != groups[b] or b in i for a in i for b in set.union(*ids) - i)
    # the same split again: deterministic
    pytester.runpytest(
        *base,
        "--ckfmha-category",
        "full",
        "--ckfmha-shard",
        "2/3",
        "--ckfmha-report",
        "again.json",
        "--ckfmha-allow-empty",
    )
    assert {r["nodeid"] for r in _rows(pytester, "again.json")["rows"]} == ids[1]
    assert main(["merge", "s1.json", "s2.json", "s3.json", "-o", str(pytester.path / "merged.json")]) == 0
    merged = load_report(pytester.path / "merged.json")
    assert (
        len(merged.rows) == 8
        and main(["compare", str(pytester.path / "all.json"), str(pytester.path / "merged.json")]) == 0
    )


def test_resume_runs_only_what_the_interrupted_run_did_not_complete(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "first.json")
    doc = _rows(pytester, "first.json")
    # pretend the run was interrupted after its first three items
    for r in doc["rows"][3:]:
        r["verdict"], r["reason"] = "not_run", "the session was interrupted (SIGTERM) before it ran"
    doc["state"], doc["interrupted"], doc["completed"] = "interrupted", True, 3
    (pytester.path / "first.json").write_text(json.dumps(doc))
    res = pytester.runpytest(
        *base, "--ckfmha-category", "full", "--ckfmha-resume", "first.json", "--ckfmha-report", "second.json", "-v"
    )
    res.assert_outcomes(passed=4, skipped=1, deselected=3)  # the three completed items are not run again
    second = _rows(pytester, "second.json")
    assert len(second["rows"]) == 8 and second["resumed_from"] == "first.json"
    assert not [r for r in second["rows"] if r["verdict"] == "not_run"]
    by_id = {r["nodeid"]: r for r in second["rows"]}
    assert all(by_id[r["nodeid"]] == r for r in doc["rows"][:3])  # carried over as they were


def test_resume_from_another_run_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "first.json")
    res = pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-seed", "7", "--ckfmha-resume", "first.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "seed is 0 there and 7 here: resume the same run" in res.stderr.str()


def test_back_to_back_runs_compare_clean_and_render(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    for name in ("a.json", "b.json"):
        pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", name)
    assert main(["compare", str(pytester.path / "a.json"), str(pytester.path / "b.json")]) == 0
    pytest.importorskip("matplotlib")
    assert (
        main(
            [
                "report",
                str(pytester.path / "b.json"),
                "--baseline",
                str(pytester.path / "a.json"),
                "-o",
                str(pytester.path / "r.html"),
            ]
        )
        == 0
    )
    assert "Against the baseline" in (pytester.path / "r.html").read_text()


def test_tune_writes_a_table_that_the_dispatcher_follows(pytester, monkeypatch, tmp_path):
    """A timed run -> ckfmha tune -> --ckfmha-heuristics: the plan items take the measured fastest kernel."""
    base = make_project(pytester, monkeypatch, tmp_path, mode=None)
    res = pytester.runpytest(
        *base,
        "--ckfmha-category",
        "full",
        "--ckfmha-backend",
        "cpu",
        "--ckfmha-bench",
        "--ckfmha-bench-repeat",
        "3",
        "--ckfmha-max-kernels-per-shape",
        "0",
        "--ckfmha-report",
        "timed.json",
    )
    assert res.ret == 0, res.stdout.str()
    out = pytester.path / "tuned.yaml"
    # cpu timings are an emulation: tune refuses them unless told (ckfmha.cli_reports)
    assert main(["tune", str(pytester.path / "timed.json"), "-o", str(out)]) == 2
    assert main(["tune", str(pytester.path / "timed.json"), "-o", str(out), "--allow-emulated"]) == 0
    table = load_heuristics(out)
    assert table.tuned and all(arch == "gfx942" for arch, _ in table.tuned)
    # force a choice the dispatcher would not make by itself: the slowest measured kernel of one class
    doc = _rows(pytester, "timed.json")
    kernel_rows = [r for r in doc["rows"] if r["kind"] == "kernel" and r["timed"] is True]
    import yaml

    tuned = yaml.safe_load(out.read_text())
    entry = tuned["tuned"][0]
    cls = entry["class"]
    same = [
        r
        for r in kernel_rows
        if r["dtype"] == cls["dtype"]
        and int(r["hdim_q"]) == cls["hdim_q"]
        and (r["mask"] == "0") == (cls["mask"] == "none")
    ]
    slowest = max(same, key=lambda r: r["time_ms"])["kernel_id"]
    entry["kernel_id"] = slowest
    out.write_text(yaml.safe_dump(tuned, sort_keys=False))
    res = pytester.runpytest(
        *base,
        "--ckfmha-category",
        "full",
        "--ckfmha-backend",
        "cpu",
        "--ckfmha-heuristics",
        str(out),
        "--ckfmha-report",
        "again.json",
        "-k",
        "plan",
    )
    plans = [r for r in _rows(pytester, "again.json")["rows"] if r["kind"] == "plan" and r["verdict"] == "passed"]
    assert any(r["kernel_id"] == slowest for r in plans)
    assert _rows(pytester, "again.json")["heuristics"] == str(out)


def test_tune_without_timings_says_so(tmp_path, capsys):
    doc = {"schema": "ckfmha.report", "version": 2, "arch": "gfx942", "rows": [{"id": "a::k", "verdict": "passed"}]}
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert main(["tune", str(tmp_path / "r.json"), "-o", str(tmp_path / "h.yaml")]) == 1
    assert "no timed kernel items" in capsys.readouterr().err


def test_shape_class_buckets():
    from ckfmha.problem import Problem

    a = shape_class(Problem(seqlen_q=1024, seqlen_k=1500, hdim_q=64, mask="b"))
    b = shape_class(Problem(seqlen_q=2047, seqlen_k=1024, hdim_q=64, mask="t"))
    assert a == b == ("fwd", "fp16", "batch", 64, 64, "causal", 1024, 1024)
    assert shape_class(Problem(seqlen_q=2048, hdim_q=64))[-2:] == (2048, 2048)
    assert shape_class(Problem(seqlen_q=64, hdim_q=64, mask="t:8,0"))[5] == "window"
