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
    with pytest.raises(ReportError, match=r"x.json: schema: expected 'ckfmha.report', found 'other'"):
        load_report(p)
    p.write_text(json.dumps(_doc([_row("a::k"), _row("a::k")])))
    with pytest.raises(ReportError, match=r"rows\[1\]: id 'a::k' appears twice"):
        load_report(p)
    with pytest.raises(ReportError, match="threshold"):
        compare_reports(_rep([]), _rep([]), -1)


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
    a = _write(tmp_path / "a.json", [_row("x::k", ms=1.0)])
    b = _write(tmp_path / "b.json", [_row("x::k", ms=2.0)])
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
        "<h2>Summary</h2>",
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
    assert page.count("data:image/png;base64,") == 2 and "src='http" not in page  # nothing outside the file
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
