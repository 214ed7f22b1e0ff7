"""Run reports as data: compare (regressions), merge (shards) and the HTML report; the CLI's exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckfmha.cli import main
from ckfmha.runreport import (
    ReportError,
    compare_reports,
    load_report,
    merge_reports,
    report_from_doc,
    write_report_doc,
)

pytest_plugins = ["pytester"]


def _row(
    rid: str,
    verdict: str = "passed",
    ms: float | None = None,
    lo: float | None = None,
    hi: float | None = None,
    **extra,
) -> dict:
    r = {
        "id": rid,
        "verdict": verdict,
        "family": "fwd",
        "kind": "kernel",
        "reason": "",
        "dtype": "fp16",
        "hdim_q": 64,
        "hdim_v": 64,
        "seqlen_q": 128,
        "seqlen_k": 128,
        "mask": "0",
        "backend": "cpu",
        "max_abs_err": 0.001,
        "tflops": 1.0 if verdict == "passed" else "",
        "kernel_id": rid.split("::")[-1],
    }
    if ms is not None:
        r.update(
            time_ms=ms, timed=True, time_min_ms=lo if lo is not None else ms, time_max_ms=hi if hi is not None else ms
        )
    r.update(extra)
    return r


def _doc(rows, **meta) -> dict:
    base = {
        "schema": "ckfmha.report",
        "version": 2,
        "state": "complete",
        "exit_status": 0,
        "category": "smoke",
        "arch": "gfx942",
        "seed": 0,
        "collected": len(rows),
        "completed": len(rows),
    }
    return {**base, **meta, "rows": rows}


def _rep(rows, path="r.json", **meta):
    return report_from_doc(_doc(rows, **meta), path)


def test_identical_runs_compare_clean() -> None:
    rows = [_row("a::k1", ms=1.0, lo=0.95, hi=1.05), _row("b::k2", "skipped"), _row("c::k3", "failed")]
    cmp = compare_reports(_rep(rows), _rep(rows))
    assert not cmp.regressed and cmp.compared == 3 and cmp.timed == 1
    assert "no regression" in cmp.text()


def test_new_and_fixed_failures_added_and_missing() -> None:
    base = [_row("a::k"), _row("b::k", "failed"), _row("c::k"), _row("d::k", "not_run")]
    new = [_row("a::k", "crashed", reason="killed by signal 11"), _row("b::k"), _row("e::k"), _row("f::k", "timeout")]
    cmp = compare_reports(_rep(base), _rep(new))
    assert [d["id"] for d in cmp.new_failures] == ["a::k", "f::k"]
    assert cmp.new_failures[0]["reason"] == "killed by signal 11"
    assert [d["id"] for d in cmp.fixed] == ["b::k"]
    assert cmp.missing == ["c::k"] and cmp.added == ["e::k", "f::k"] and cmp.regressed


@pytest.mark.parametrize(
    "new_ms, new_lo, new_hi, slower",
    [
        (1.30, 1.25, 1.35, True),  # 30% slower and outside both spreads
        (1.30, 1.05, 1.40, False),  # 30% slower but its fastest run is inside the baseline's spread
        (1.08, 1.07, 1.09, False),  # outside the spread but under the 10% threshold
    ],
)
def test_timing_regression_needs_threshold_and_spread(new_ms, new_lo, new_hi, slower) -> None:
    base = [_row("a::k", ms=1.0, lo=0.95, hi=1.10)]
    new = [_row("a::k", ms=new_ms, lo=new_lo, hi=new_hi)]
    cmp = compare_reports(_rep(base), _rep(new))
    assert bool(cmp.slower) is slower and cmp.regressed is slower
    if slower:
        assert cmp.slower[0]["change"] == pytest.approx(0.30)


def test_faster_is_reported_not_a_regression() -> None:
    cmp = compare_reports(_rep([_row("a::k", ms=2.0, lo=1.9, hi=2.1)]), _rep([_row("a::k", ms=1.0)]))
    assert cmp.faster and not cmp.regressed


def test_untimed_rows_are_not_compared_for_speed() -> None:
    cmp = compare_reports(
        _rep([_row("a::k", time_ms=1.0, timed=False)]), _rep([_row("a::k", time_ms=9.0, timed=False)])
    )
    assert cmp.timed == 0 and not cmp.slower


def test_report_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ReportError) as ei:
        load_report(p)
    assert str(ei.value) == (
        f"{p}: schema: expected 'ckfmha.report', found 'other' (rule: the report format's name: a file without it "
        "is not a ckfmha report)"
    )
    p.write_text(json.dumps(_doc([_row("a::k"), _row("b::k"), _row("a::k")])))
    with pytest.raises(ReportError) as ei:
        load_report(p)
    assert str(ei.value) == f"{p}: rows[2].id: 'a::k' appears twice (first at rows[0]); a row id is unique"
    p.write_text('{"schema": "ckfmha.report", "version": 2, "rows": [], "rows": []}')
    with pytest.raises(ReportError, match=r"x.json: top level: duplicate key 'rows'"):
        load_report(p)
    with pytest.raises(ReportError, match="threshold"):
        compare_reports(_rep([]), _rep([]), -1)


@pytest.mark.parametrize(
    "doc, words",
    [
        ([], "r.json: top level: expected an object (a mapping), found []"),
        ({"variant": "fwd"}, "r.json: top level: missing key(s) 'schema'"),
        (
            {"schema": "ckfmha.report", "version": 2},
            "r.json: top level: missing key(s) 'rows' (rule: a ckfmha report has a version and rows)",
        ),
        (
            _doc([], version=3),
            "r.json: version: expected one of 1, 2, found 3 (rule: the report format versions this ckfmha reads)",
        ),
        (
            _doc([], state="done"),
            "r.json: state: expected one of 'running', 'complete', 'interrupted', 'stopped_early', 'crashed_workers', "
            "'internal_error', found 'done'",
        ),
        (_doc([], collected=-1), "r.json: collected: expected a value >= 0, found -1 (rule: a count of items"),
        (_doc([], exit_status="0"), "r.json: exit_status: expected an integer or null, found '0'"),
        (
            _doc([], shard={"index": 0, "count": 2}),
            "r.json: shard.index: expected a value >= 1, found 0 (rule: K of K/N: this shard, 1 ... N)",
        ),
        ({**_doc([]), "rows": {}}, "r.json: rows: expected a list, found {} (rule: one row per collected item)"),
        (_doc([{"verdict": "passed"}]), "r.json: rows[0]: missing key(s) 'id' (rule: one row per collected item"),
        (_doc([{"id": "a::k"}]), "r.json: rows[0]: missing key(s) 'verdict'"),
        (_doc([{"id": "", "verdict": "passed"}]), "r.json: rows[0].id: expected at least this many characters: 1"),
        (
            _doc([_row("a::k", "ok")]),
            "r.json: rows[0].verdict: expected one of 'passed', 'failed', 'skipped', 'error', 'crashed', 'timeout', "
            "'not_run', found 'ok' (rule: the item's verdict)",
        ),
        (_doc([_row("a::k", timed="yes")]), "r.json: rows[0].timed: expected one of True, False, '', found 'yes'"),
        (
            _doc([_row("a::k", ms=-1.0)]),
            "r.json: rows[0].time_ms: expected a value >= 0, found -1.0 (rule: milliseconds, a number >= 0)",
        ),
        (
            _doc([_row("a::k", time_ms="fast")]),
            "r.json: rows[0].time_ms: 'fast' is not valid under any of the given schemas (rule: milliseconds (a "
            'number >= 0), or "" when not measured)',
        ),
        (
            _doc([_row("a::k", max_abs_err=float("nan"))]),
            "r.json: rows[0].max_abs_err: expected a finite number, found nan",
        ),
    ],
)
def test_schema_errors_name_the_key_path_the_value_and_the_rule(doc, words: str) -> None:
    with pytest.raises(ReportError) as ei:
        report_from_doc(doc, "r.json")
    assert words in str(ei.value)


def test_rows_may_carry_any_further_field_and_reports_any_further_key() -> None:
    # row fields come from pytest_ckfmha.reporting.row_fields() (the Problem's fields): the schema does not list them
    rep = _rep([_row("a::k", seqlens_q="64_128", new_field=1)], tool="benchmarks/bench_dispatch.py", within=0.05)
    assert rep.rows[0]["new_field"] == 1 and rep.meta["tool"] == "benchmarks/bench_dispatch.py"


RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
COMMITTED = sorted(p for p in RESULTS.glob("*.json") if '"schema": "ckfmha.report"' in p.read_text()[:200])


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_committed_gpu_reports_follow_the_schema(path: Path) -> None:
    # written by the plugin's writer (versions 1 and 2) and by benchmarks/bench_dispatch.py on GPU machines
    assert len(COMMITTED) >= 4
    assert len(load_report(path).rows) == len(json.loads(path.read_text())["rows"]) > 0


def test_a_report_the_plugin_writes_follows_the_schema(pytester, monkeypatch, tmp_path: Path) -> None:
    from tests.test_plugin_fixtures import make_project

    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-bench", "--ckfmha-report", "r.json")
    rep = load_report(pytester.path / "r.json")
    verdicts = {r["verdict"] for r in rep.rows}
    assert {"passed", "skipped"} <= verdicts and any(r["timed"] is True for r in rep.rows)
    assert rep.meta["state"] == "complete"


def test_the_schemas_lists_are_the_codes() -> None:
    from ckfmha.datafile import schema_validator
    from ckfmha.runreport import READABLE_VERSIONS, VERDICTS

    schema = schema_validator("run_report").schema
    assert tuple(schema["properties"]["version"]["enum"]) == READABLE_VERSIONS
    assert tuple(schema["$defs"]["row"]["properties"]["verdict"]["enum"]) == VERDICTS


def _shard(k: int, n: int, rows, **meta):
    return _rep(rows, path=f"s{k}.json", shard={"index": k, "count": n}, **meta)


def test_merge_joins_shards_and_rejects_gaps_duplicates_and_mixtures(tmp_path: Path) -> None:
    s1, s2 = _shard(1, 2, [_row("a::k")]), _shard(2, 2, [_row("b::k"), _row("c::k", "failed")])
    doc = merge_reports([s2, s1])
    assert [r["id"] for r in doc["rows"]] == ["a::k", "b::k", "c::k"] and doc["collected"] == 3
    out = write_report_doc(doc, tmp_path / "all.json")
    merged = load_report(out)
    assert len(merged.rows) == 3 and json.loads(out.read_text())["summary"]["fwd"]["failed"] == 1
    with pytest.raises(ReportError, match=r"shard\(s\) 2/2 missing"):
        merge_reports([s1])
    with pytest.raises(ReportError, match="item 'a::k' is in s1.json and s2.json"):
        merge_reports([s1, _shard(2, 2, [_row("a::k")])])
    with pytest.raises(ReportError, match="given twice"):
        merge_reports([s1, s1])
    with pytest.raises(ReportError, match="did not complete"):
        merge_reports([s1, _shard(2, 2, [], state="interrupted")])
    with pytest.raises(ReportError, match="arch: 'gfx950' differs"):
        merge_reports([s1, _shard(2, 2, [], arch="gfx950")])
    with pytest.raises(ReportError, match="is not a shard"):
        merge_reports([_rep([])])


def _write(path: Path, rows, **meta) -> str:
    path.write_text(json.dumps(_doc(rows, **meta)))
    return str(path)


def test_cli_compare_exit_codes_and_json(tmp_path: Path, capsys) -> None:
    gpu = {"backend": "triton", "device": "NVIDIA H100 80GB HBM3"}  # cpu timings are refused (emulation)
    a = _write(tmp_path / "a.json", [_row("x::k", ms=1.0, **gpu)])
    b = _write(tmp_path / "b.json", [_row("x::k", ms=2.0, **gpu)])
    assert main(["compare", a, a]) == 0
    assert main(["compare", a, b]) == 1
    assert "slower: 1" in capsys.readouterr().out
    assert main(["compare", a, b, "--threshold", "2.0", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressed"] is False
    assert main(["compare", a, str(tmp_path / "none.json")]) == 2


def test_cli_merge(tmp_path: Path) -> None:
    s1 = _write(tmp_path / "s1.json", [_row("a::k")], shard={"index": 1, "count": 2})
    s2 = _write(tmp_path / "s2.json", [_row("b::k")], shard={"index": 2, "count": 2})
    assert main(["merge", s1, s2, "-o", str(tmp_path / "all.json")]) == 0
    assert len(load_report(tmp_path / "all.json").rows) == 2
    assert main(["merge", s1, "-o", str(tmp_path / "x.json")]) == 2


def test_cli_html_report_is_self_contained(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [
        _row("fwd-a::k1", ms=1.0, tflops=3.0),
        _row("fwd-a::k2", ms=2.0, tflops=1.5),
        _row("fwd-a::plan", kind="plan", kernel_id="k2", tflops=1.5, ms=2.0),
        _row("fwd-b::k1", "failed", reason="o: FAIL mismatches=3/4096"),
        _row("fwd-c::k1", "skipped", reason="fwd-c: backend cpu cannot realize this kernel"),
    ]
    new = _write(tmp_path / "new.json", rows)
    old = _write(tmp_path / "old.json", [_row("fwd-b::k1"), _row("fwd-a::k1", ms=0.5, tflops=6.0)])
    out = tmp_path / "r.html"
    assert main(["report", new, "--baseline", old, "-o", str(out)]) == 0
    page = out.read_text()
    for words in (
        "<h2>Families</h2>",
        "Against the baseline",
        "New failures",
        "o: FAIL mismatches=3/4096",
        "<h2>Speed",
        "Kernel ranking",
        "Errors against the tolerance",
        "Skips (1)",
        "backend cpu cannot realize this kernel",
    ):
        assert words in page, words
    # nothing outside the file: the speed plot a PNG data URI, the tolerance plot inline SVG
    assert page.count("data:image/png;base64,") == 1 and '<svg class="tolerance"' in page and "src='http" not in page
    assert "50%" in page  # the plan's kernel reaches half the best kernel's TFLOPS


def test_html_report_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch, capsys) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    run = _write(tmp_path / "r.json", [_row("a::k")])
    assert main(["report", run, "-o", str(tmp_path / "r.html")]) == 2
    assert "pip install 'ckfmha[report]'" in capsys.readouterr().err


def test_non_finite_measures_round_trip(tmp_path: Path, capsys) -> None:
    """A failing item whose output holds inf where the reference is finite has max_abs_err = inf: the plugin's
    writer and write_report_doc write it as a word (JSON has no infinity; json.dumps would write ``Infinity``,
    which the strict loader rejects), the loader reads it back as the float, and compare / merge work on it."""
    import math

    from pytest_ckfmha.reporting import write_reports

    rows = [
        _row("s1::k", "failed", max_abs_err=float("inf")),
        _row("s2::k", "failed", max_abs_err=float("nan"), max_rel_err=float("inf"), tflops=float("-inf")),
        _row("s3::k", "passed"),
    ]
    plugin_path = tmp_path / "plugin.json"
    write_reports([plugin_path], rows, {"state": "complete", "exit_status": 1, "collected": 3, "completed": 3})
    text = plugin_path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert '"max_abs_err": "inf"' in text and '"tflops": "-inf"' in text
    rep = load_report(plugin_path)
    got = rep.by_id
    assert got["s1::k"]["max_abs_err"] == math.inf
    assert math.isnan(got["s2::k"]["max_abs_err"]) and got["s2::k"]["tflops"] == -math.inf
    assert got["s2::k"]["max_rel_err"] == math.inf
    assert got["s3::k"]["max_abs_err"] == 0.001
    again = write_report_doc(_doc(rep.rows), tmp_path / "again.json")
    assert load_report(again).by_id["s1::k"]["max_abs_err"] == math.inf
    cmp = compare_reports(rep, load_report(again))
    assert not cmp.regressed
    # a word outside a measure field stays text; an unknown word in a measure field is a schema error
    bad = _doc([_row("s1::k", max_abs_err="Infinity")])
    with pytest.raises(ReportError, match=r"rows\[0\]\.max_abs_err"):
        report_from_doc(bad, "bad.json")


# ------------------------------------------------------------------------- findings of the adversarial run
def test_merge_reads_rows_not_only_the_header() -> None:
    """A shard stopped by -x, by xdist giving up on crashed workers or by an internal error can say
    ``state: complete`` in its header while rows were never run: merge refuses it, naming the rows."""
    s1 = _shard(1, 2, [_row("a::k")])
    stopped = _shard(2, 2, [_row("b::k"), _row("c::k", "not_run"), _row("d::k", "not_run")])
    with pytest.raises(ReportError, match=r"2 item\(s\) of shard 2/2 never ran \(first 'c::k'\)"):
        merge_reports([s1, stopped])
    short = _shard(2, 2, [_row("b::k")], collected=5)
    with pytest.raises(ReportError, match="1 rows for 5 collected items"):
        merge_reports([s1, short])


@pytest.mark.parametrize("shards", [[(4, 3)], [(1, 3), (2, 3), (3, 3), (4, 3)]])
def test_merge_refuses_shards_outside_1_to_n(shards) -> None:
    reps = [_shard(k, n, [_row(f"{k}::k")]) for k, n in shards]
    with pytest.raises(ReportError, match=r"shard: 4/3: K of K/N must be 1 \.\.\. N"):
        merge_reports(reps)


def test_compare_does_not_divide_by_a_zero_median() -> None:
    """A median of 0 ms (below the clock) has no ratio: the row is not compared for speed (no crash)."""
    old = _rep([_row("x::k", ms=0.0), _row("y::k", ms=1.0)])
    new = _rep([_row("x::k", ms=1.0), _row("y::k", ms=0.0)])
    cmp = compare_reports(old, new)
    assert cmp.timed == 0 and not cmp.regressed


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask_and_keep_an_existing_mode(tmp_path: Path, umask, expected) -> None:
    import os

    old = os.umask(umask)
    try:
        new = write_report_doc(_doc([_row("a::k")]), tmp_path / "r.json")
        assert new.stat().st_mode & 0o777 == expected
        new.chmod(0o640)
        write_report_doc(_doc([_row("a::k")]), new)  # overwriting keeps the published file's mode
        assert new.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_html_report_survives_hand_edited_schema_valid_rows(tmp_path: Path) -> None:
    """Rows the schema allows but the plugin never writes: a kernel row without kernel_id, a list where a head
    dim goes, a family that is matplotlib mathtext."""
    pytest.importorskip("matplotlib")
    rows = [
        _row("fwd-a::k1", ms=1.0, tflops=3.0),
        {k: v for k, v in _row("fwd-a::k2", ms=2.0, tflops=1.5).items() if k != "kernel_id"},
        _row("fwd-a::plan", kind="plan", kernel_id="k2", tflops=1.5, ms=2.0),
        _row("fwd-b::k1", hdim_q=[64], hdim_v={"x": 1}, tflops=2.0),
        _row("fwd-c::k1", family="$\\frac{1}{", tflops=1.0),
    ]
    rep = _write(tmp_path / "odd.json", rows)
    out = tmp_path / "odd.html"
    assert main(["report", rep, "-o", str(out)]) == 0
    assert "Kernel ranking" in out.read_text()
