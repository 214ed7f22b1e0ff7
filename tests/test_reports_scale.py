"""Reports at scale (issue 26, finding 1): a report larger than the 16 MiB a data file may have round-trips through
``ckfmha merge``, ``compare``, ``report`` and ``--ckfmha-resume``, because reports are written in the line layout
(one JSON document, one row per line: ckfmha.runreport) and read one line at a time; every guarantee of the whole-
document reader holds row by row, each tested here with an injected fault it must catch."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tests.test_plugin_fixtures  # noqa: F401  (imports what pytester's in-process runs must not import twice)
from ckfmha import datafile
from ckfmha.cli import main
from ckfmha.runreport import (
    ReportError,
    ReportRows,
    compare_reports,
    load_report,
    merge_reports,
    write_report,
    write_report_doc,
)
from pytest_ckfmha.sharding import completed_nodeids
from pytest_ckfmha.state import State
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_reports", ROOT / "benchmarks" / "bench_reports.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

#: rows of the large reports: ~2.2 KB each (bench_reports' plugin-like rows), so the file passes 16 MiB
ROWS = 8_000


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """base.json (ROWS rows), new.json (the same items, ~1% changed) and its three shards s1..s3.json."""
    where = tmp_path_factory.mktemp("big")
    write_report(where / "base.json", bench.header(ROWS), bench.synthetic_rows(0, ROWS))
    write_report(where / "new.json", bench.header(ROWS), bench.synthetic_rows(0, ROWS, variant=1))
    cuts = [0, ROWS // 3, 2 * ROWS // 3, ROWS]
    for k in range(3):
        lo, hi = cuts[k], cuts[k + 1]
        write_report(where / f"s{k + 1}.json", bench.header(hi - lo, (k + 1, 3)), bench.synthetic_rows(lo, hi))
    return where


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines))
    return path


# ------------------------------------------------------------------------------------ the round trip at scale
@pytest.mark.slow  # reports past 16 MiB: ~8,000 rows read several times
def test_a_report_larger_than_16_mib_merges_compares_renders(big: Path, capsys) -> None:
    assert (big / "base.json").stat().st_size > datafile.MAX_FILE_BYTES  # the old reader refused it
    rep = load_report(big / "base.json")
    assert isinstance(rep.rows, ReportRows) and len(rep.rows) == ROWS and rep.meta["collected"] == ROWS
    # the line layout is one JSON document: any JSON reader still reads it whole
    doc = json.loads((big / "base.json").read_text())
    passed = sum(1 for r in doc["rows"] if r["verdict"] == "passed")
    assert len(doc["rows"]) == ROWS and doc["summary"]["fwd"]["passed"] == passed  # the summary after the rows
    assert rep.rows[ROWS - 1] == doc["rows"][-1] and rep.rows[0] == doc["rows"][0]

    assert main(["merge", *(str(big / f"s{k}.json") for k in (1, 2, 3)), "-o", str(big / "merged.json")]) == 0
    merged = load_report(big / "merged.json")
    assert (big / "merged.json").stat().st_size > datafile.MAX_FILE_BYTES
    assert merged.meta["collected"] == merged.meta["completed"] == len(merged.rows) == ROWS
    assert merged.meta["selection"]["shard"] is None and merged.meta["state"] == "complete"
    assert [r["id"] for r in merged.rows] == [r["id"] for r in rep.rows]
    capsys.readouterr()

    assert main(["compare", str(big / "base.json"), str(big / "merged.json")]) == 0  # the same rows
    assert "no regression" in capsys.readouterr().out
    assert main(["compare", str(big / "base.json"), str(big / "new.json"), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["regressed"] is True
    cmp = compare_reports(rep, load_report(big / "new.json"))
    flips = [i for i in range(ROWS) if i % 97 == 0]
    became_failed = [i for i in flips if bench.VERDICT_CYCLE[i % 100] == "passed"]
    assert len(cmp.new_failures) == len(became_failed) and cmp.compared == ROWS and not cmp.missing
    assert cmp.slower  # the slower timings of the "new" run

    pytest.importorskip("matplotlib")
    page = big / "r.html"
    assert main(["report", str(big / "new.json"), "--baseline", str(big / "base.json"), "-o", str(page)]) == 0
    text = page.read_text()
    assert "ckfmha run report" in text and "Against the baseline" in text and "New failures" in text


@pytest.mark.slow  # reports past 16 MiB: ~8,000 rows read several times
def test_resume_reads_a_large_report_and_writes_it_back(pytester, monkeypatch, tmp_path) -> None:
    """--ckfmha-resume of a report past 16 MiB: its completed rows are carried (ROWS of them here), the items it
    did not complete run, and the new report (past 16 MiB too) loads with every row."""
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "first.json")
    first = load_report(pytester.path / "first.json")
    rows = list(first.rows)
    for r in rows[3:]:
        r["verdict"], r["reason"] = "not_run", "the session was interrupted (SIGTERM) before it ran"
    # rows of other items, carried: node ids of this version's form (the kernel's token as the last part)
    token = str(rows[0]["nodeid"]).rsplit("::", 1)[1]
    carried = [
        {**r, "nodeid": f"ckfmha::{r['id'].split('::')[0]}::{token}{i}"}
        for i, r in enumerate(bench.synthetic_rows(0, ROWS))
    ]
    meta = {**first.meta, "state": "interrupted", "interrupted": True}
    meta.update(collected=len(rows) + ROWS, completed=3 + ROWS)
    write_report(pytester.path / "first.json", meta, [*rows, *carried])
    assert (pytester.path / "first.json").stat().st_size > datafile.MAX_FILE_BYTES

    st = State(None, type("S", (), {"resume": str(pytester.path / "first.json")})())
    assert len(st.resumed_rows()) == len(rows) + ROWS
    assert completed_nodeids(st.resumed_rows()) == {r["nodeid"] for r in [*rows[:3], *carried]}

    res = pytester.runpytest(
        *base, "--ckfmha-category", "full", "--ckfmha-resume", "first.json", "--ckfmha-report", "second.json"
    )
    res.assert_outcomes(passed=4, skipped=1, deselected=3)
    second = load_report(pytester.path / "second.json")
    assert len(second.rows) == second.meta["collected"] == len(rows) + ROWS
    assert second.meta["state"] == "complete" and second.meta["completed"] == len(rows) + ROWS
    by_id = {r["id"]: r for r in second.rows if r["id"] in {c["id"] for c in carried[:50]}}
    assert all(by_id[c["id"]] == c for c in carried[:50])  # carried as they were


# ------------------------------------------------------------------ every guarantee, with a fault it must catch
@pytest.mark.slow  # reports past 16 MiB: ~8,000 rows read several times
def test_a_malformed_row_deep_in_a_large_report_is_named_precisely(big: Path, tmp_path: Path) -> None:
    """Row 7,000 of 8,000 broken three ways: malformed JSON, a value against the schema, a verdict that is no
    verdict; each error names the file, the line, the row, the field, the value and the rule."""
    lines = _lines(big / "base.json")
    i = 7_000
    line = i + 2  # line 1 is the header
    row = json.loads(lines[line - 1].rstrip(","))
    cases = [
        (lines[line - 1][:-10] + ",", rf"bad.json: line {line} \(rows\[{i}\]\): malformed JSON at column \d+"),
        (
            json.dumps({**row, "time_ms": -1.5}) + ",",
            rf"bad.json: line {line}: rows\[{i}\]\.time_ms: expected a value >= 0, found -1.5 \(rule: milliseconds",
        ),
        (
            json.dumps({**row, "verdict": "pased"}) + ",",
            rf"bad.json: line {line}: rows\[{i}\]\.verdict: expected one of 'passed', .* found 'pased' "
            r"\(rule: the item's verdict\)",
        ),
        (
            json.dumps({**row, "max_abs_err": 1e999}).replace("Infinity", "1e999") + ",",
            rf"bad.json: line {line}: rows\[{i}\]\.max_abs_err: expected a finite number, found inf",
        ),
    ]
    for text, message in cases:
        bad = _write_lines(tmp_path / "bad.json", [*lines[: line - 1], text, *lines[line:]])
        with pytest.raises(ReportError, match=message):
            load_report(bad)
        assert main(["compare", str(big / "base.json"), str(bad)]) == 2  # bad input, not "regressed"


def _small(tmp_path: Path, name: str = "r.json", rows: int = 6, **meta) -> Path:
    header = {**bench.header(rows), **meta}
    return write_report(tmp_path / name, header, bench.synthetic_rows(0, rows))[0]


# the small report of _small: line 1 the header, lines 2-7 rows[0] .. rows[5], line 8 the end of the rows
@pytest.mark.parametrize(
    "fault, message",
    [
        # strict JSON, row by row
        (
            lambda ls: ls.__setitem__(3, ls[3].replace('"kind": "kernel"', '"kind": "kernel", "kind": "plan"')),
            r"r.json: line 4 \(rows\[2\]\): top level: duplicate key 'kind'",
        ),
        (
            lambda ls: ls.__setitem__(3, ls[3].replace('"scale": 0.0', '"scale": NaN')),
            r"r.json: line 4 \(rows\[2\]\): NaN is not JSON",
        ),
        # ids unique
        (
            lambda ls: ls.__setitem__(
                5, ls[5].replace(json.loads(ls[5].rstrip(","))["id"], json.loads(ls[2].rstrip(","))["id"])
            ),
            r"r.json: line 6: rows\[4\]\.id: '.*' appears twice \(first at rows\[1\], line 3\); a row id is unique",
        ),
        # the layout: commas, the end, nothing after it
        (
            lambda ls: ls.__setitem__(3, ls[3].rstrip(",")),
            r"r.json: line 5 \(rows\[3\]\): no comma after the row before it \(line 4\)",
        ),
        (lambda ls: ls.__setitem__(6, ls[6] + ","), r"r.json: line 7 \(rows\[5\]\): a comma after the last row"),
        (
            lambda ls: ls.__setitem__(slice(5, None), [ls[5][:50]]),
            r"r.json: line 6 \(rows\[4\]\): malformed JSON at column \d+",
        ),
        (
            lambda ls: ls.__setitem__(slice(5, None), [""]),
            r"r.json: ends without the line that closes the rows .* after 4 rows: cut short",
        ),
        (
            lambda ls: ls.__setitem__(slice(7, 8), [ls[7], '{"more": 1}']),
            r"r.json: line 9: text after the line that ends the report \(line 8\)",
        ),
        # the header and the keys after the rows, against the schema and without a key twice
        (
            lambda ls: ls.__setitem__(0, ls[0].replace('"state": "complete"', '"state": "finished"')),
            r"r.json: line 1 \(the header\): state: expected one of 'running', 'complete'.*found 'finished'",
        ),
        (
            lambda ls: ls.__setitem__(0, ls[0].replace('"schema": "ckfmha.report"', '"schema": "ckfmha.sweep"')),
            r"r.json: line 1 \(the header\): schema: expected 'ckfmha.report', found 'ckfmha.sweep'",
        ),
        (
            lambda ls: ls.__setitem__(7, '], "summary": {}, "state": "running"}'),
            r"r.json: line 8 \(after the rows\): top level: duplicate key 'state'",
        ),
        (
            lambda ls: ls.__setitem__(7, '], "summary": []}'),
            r"r.json \(header and the keys after the rows\): summary: ",
        ),
        (
            lambda ls: ls.__setitem__(7, ']] "summary": {}}'),
            r"r.json: line 8: '\]\] \"summary\": \{\}\}' after the rows: expected",
        ),
    ],
)
def test_each_rule_of_the_line_layout_catches_its_fault(tmp_path: Path, fault, message) -> None:
    path = _small(tmp_path)
    lines = _lines(path)
    assert len(lines) == 9 and lines[7].startswith("]") and lines[-1] == ""  # header, 6 rows, the end, newline
    fault(lines)
    _write_lines(path, lines)
    with pytest.raises(ReportError, match=message):
        load_report(path)


def test_bytes_and_line_lengths_are_bounded_and_checked(tmp_path: Path) -> None:
    path = _small(tmp_path)
    data = path.read_bytes()
    row3 = data.index(b'"id"', data.index(b"\n", data.index(b"\n") + 1))
    path.write_bytes(data[:row3] + b"\xff" + data[row3 + 1 :])
    with pytest.raises(ReportError, match=r"r.json: not UTF-8: byte 0xff at byte offset \d+ \(line 3\)"):
        load_report(path)
    huge = {**next(bench.synthetic_rows(0, 1)), "reason": "x" * (datafile.MAX_LINE_BYTES + 10)}
    write_report(path, bench.header(1), [huge])
    with pytest.raises(ReportError, match=r"r.json: line 2: longer than MAX_LINE_BYTES = 1048576 bytes"):
        load_report(path)


def test_rows_are_read_again_at_each_pass_and_a_changed_file_is_an_error(tmp_path: Path) -> None:
    path = _small(tmp_path)
    rep = load_report(path)
    assert [r["id"] for r in rep.rows] == [r["id"] for r in rep.rows]  # two passes, the same rows
    write_report(path, bench.header(6), bench.synthetic_rows(1, 7))
    with pytest.raises(ReportError, match=r"r.json: changed since it was loaded"):
        list(rep.rows)


def test_merge_of_streamed_shards_keeps_every_rule(tmp_path: Path) -> None:
    """Merge reads rows, not only the header, and compares fingerprints, on shards read one line at a time."""

    def shard(k: int, rows, name: str | None = None, **meta) -> Path:
        rows = list(rows)
        header = {**bench.header(len(rows), (k, 2)), **meta}
        return write_report(tmp_path / (name or f"s{k}.json"), header, rows)[0]

    s1 = shard(1, bench.synthetic_rows(0, 5))
    s2 = shard(2, bench.synthetic_rows(5, 10))
    merged = merge_reports([load_report(s2), load_report(s1)])
    out = write_report_doc(merged, tmp_path / "all.json")
    assert [r["id"] for r in load_report(out).rows] == [r["id"] for r in bench.synthetic_rows(0, 10)]

    not_run = [{**r, "verdict": "not_run"} if i == 2 else r for i, r in enumerate(bench.synthetic_rows(5, 10))]
    with pytest.raises(ReportError, match=r"1 item\(s\) of shard 2/2 never ran \(first '.*'\) although"):
        merge_reports([load_report(s1), load_report(shard(2, not_run, "x.json"))])
    with pytest.raises(ReportError, match=r"rows: 5 rows for 7 collected items"):
        merge_reports([load_report(s1), load_report(shard(2, bench.synthetic_rows(5, 10), "x.json", collected=7))])
    with pytest.raises(ReportError, match=r"completed: 9 > collected 5 \(shard 2/2\)"):
        merge_reports([load_report(s1), load_report(shard(2, bench.synthetic_rows(5, 10), "x.json", completed=9))])
    with pytest.raises(ReportError, match=r"merge: item '.*' is in .*s1.json and .*x.json"):
        merge_reports([load_report(s1), load_report(shard(2, bench.synthetic_rows(4, 9), "x.json"))])
    other = {**bench.SELECTION, "families": ["bwd"], "shard": {"index": 2, "count": 2}}
    with pytest.raises(ReportError, match=r"x.json: selection.families: \['bwd'\] differs from .*s1.json's None"):
        merge_reports([load_report(s1), load_report(shard(2, bench.synthetic_rows(5, 10), "x.json", selection=other))])
    with pytest.raises(ReportError, match=r"state: 'interrupted': shard 2/2 did not complete"):
        merge_reports(
            [load_report(s1), load_report(shard(2, bench.synthetic_rows(5, 10), "x.json", state="interrupted"))]
        )


def test_a_failed_write_leaves_the_old_report_and_no_temporary_file(tmp_path: Path) -> None:
    path = _small(tmp_path)
    before = path.read_bytes()

    def rows():
        yield from bench.synthetic_rows(0, 3)
        raise OSError("disk full (injected)")

    with pytest.raises(OSError, match="injected"):
        write_report(path, bench.header(3), rows())
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600)])
def test_streamed_writes_honour_the_umask_and_keep_an_existing_mode(tmp_path: Path, umask, expected) -> None:
    old = os.umask(umask)
    try:
        path = _small(tmp_path)
        assert path.stat().st_mode & 0o777 == expected
        path.chmod(0o640)
        _small(tmp_path)
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)


def test_reports_written_before_the_line_layout_still_load_or_say_how_to_convert(tmp_path: Path, monkeypatch) -> None:
    rows = list(bench.synthetic_rows(0, 20))
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "ckfmha.report", "version": 2, **bench.header(20), "rows": rows}, indent=1))
    rep = load_report(old)
    assert isinstance(rep.rows, list) and rep.rows == rows  # read whole, as before
    monkeypatch.setattr(datafile, "MAX_FILE_BYTES", 1000)
    with pytest.raises(
        ReportError,
        match=r"old.json: larger than MAX_FILE_BYTES = 1000 bytes and not in the "
        r"report's line layout .*python -m ckfmha.runreport convert OLD.json NEW.json",
    ):
        load_report(old)
    done = subprocess.run(
        [sys.executable, "-m", "ckfmha.runreport", "convert", str(old), str(tmp_path / "new.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "20 rows" in done.stdout, done.stderr
    new = load_report(tmp_path / "new.json")
    assert isinstance(new.rows, ReportRows) and list(new.rows) == rows
