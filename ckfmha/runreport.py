"""Run reports (the plugin's ``--ckfmha-report r.json``, docs/report_schema.md) as data: load, compare, merge.

| function | what |
|---|---|
| :func:`load_report` | a report JSON file -> :class:`RunReport` (strict loading: ckfmha.datafile; the schema \
``data/schemas/run_report.schema.yaml``; row ids unique: :func:`report_from_doc`) |
| :func:`compare_reports` | baseline vs new: new failures, fixed failures, items added / missing, timing regressions |
| :func:`merge_reports` | shard reports (``--ckfmha-shard K/N``) -> one report; duplicates, gaps, shards out of \
1..N, shards in a state other than ``complete`` (interrupted, stopped_early, crashed_workers, internal_error, \
running), shards whose rows hold items never run (whatever their header says) and shards of another selection \
(the ``selection`` fingerprint differs in more than ``shard.index``; the message names the key) are errors |

Comparison rules (:func:`compare_reports`):

* an item *fails* when its verdict is ``failed``, ``error``, ``crashed`` or ``timeout``; a new failure fails in
  the new run and did not in the baseline (or is new and fails); a fixed failure failed in the baseline and passes
  now;
* an item is *missing* when the baseline has it and the new run does not (or did not run it: ``not_run``);
  *added* the other way round;
* a timing regression: both runs passed it with timed figures (``--ckfmha-bench``, medians above zero: a median of
  0 ms was below the clock's resolution and has no ratio), the new median is more than
  ``threshold`` (default :data:`DEFAULT_THRESHOLD`, 10%) slower, *and* the new run's fastest repetition is slower
  than the baseline's slowest (outside both runs' spread: ``time_min_ms`` / ``time_max_ms``; a report without
  them counts its median as its spread);
* a report whose ``state`` is not ``complete`` (:data:`STATES`) is compared all the same; the text names its state
  (its items never run are missing);
* the comparison *regressed* when it has new failures, missing items or timing regressions (``ckfmha compare``
  exits 1 then).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPORT_SCHEMA = "ckfmha.report"
#: the report versions this ckfmha reads (the run_report schema's ``version`` enum); it writes the last one
READABLE_VERSIONS = (1, 2)
#: row verdicts, in summary order (docs/report_schema.md; the run_report schema's ``verdict`` enum)
VERDICTS = ("passed", "failed", "skipped", "error", "crashed", "timeout", "not_run")
FAILING = ("failed", "error", "crashed", "timeout")
DEFAULT_THRESHOLD = 0.10
#: a report's ``state`` values (the run_report schema's ``state`` enum; pytest_ckfmha.reporting.STATES); merge takes
#: shards in state ``complete`` only
STATES = ("running", "complete", "interrupted", "stopped_early", "crashed_workers", "internal_error")
#: run fields that must agree between shard reports of one sweep
SWEEP_KEYS = ("category", "arch", "seed", "receipt", "profile", "max_kernels_per_shape", "backend_option")


class ReportError(ValueError):
    """A report that cannot be used; the message names the file and the rule."""


@dataclass
class RunReport:
    path: str
    meta: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.rows}


def load_report(path: str | Path) -> RunReport:
    """A report JSON file, checked (:func:`report_from_doc`); strict loading: :func:`ckfmha.datafile.load_json`
    (duplicate keys, not UTF-8, too deep, too large, ``NaN``)."""
    from ckfmha.datafile import DataFileError, load_json

    try:
        doc = load_json(path)
    except DataFileError as e:
        raise ReportError(str(e)) from None
    return report_from_doc(doc, str(path))


def report_from_doc(doc: Any, source: str) -> RunReport:
    """A report document, checked: the schema ``data/schemas/run_report.schema.yaml`` (the ``ckfmha.report``
    format, a readable version, rows with an id and a verdict, the types of the fields compare / merge / summarize
    read), then what a schema cannot see: each row id appears once."""
    from ckfmha.datafile import DataFileError, check_schema

    try:
        check_schema(doc, "run_report", source)
    except DataFileError as e:
        raise ReportError(str(e)) from None
    rows = [_read_measures(r) for r in doc["rows"]]
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        if r["id"] in first:
            where = f"{source}: rows[{i}].id: {r['id']!r}"
            raise ReportError(f"{where} appears twice (first at rows[{first[r['id']]}]); a row id is unique")
        first[r["id"]] = i
    meta = {k: v for k, v in doc.items() if k not in ("rows", "summary")}
    return RunReport(source, meta, rows)


#: the row fields that hold a measure (the schema's ``measure``): a word of NONFINITE_WORDS there is read as its float
MEASURE_FIELDS = ("max_abs_err", "max_rel_err", "tflops")


def _read_measures(row: dict[str, Any]) -> dict[str, Any]:
    if not any(isinstance(row.get(k), str) and row[k] in NONFINITE_WORDS for k in MEASURE_FIELDS):
        return row
    return {
        k: NONFINITE_WORDS[v] if k in MEASURE_FIELDS and isinstance(v, str) and v in NONFINITE_WORDS else v
        for k, v in row.items()
    }


# ------------------------------------------------------------------------------------------------ compare
def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v in ("", None):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _timing(row: dict[str, Any]) -> tuple[float, float, float] | None:
    """(median, fastest, slowest) ms of a timed, passed row; None otherwise."""
    if row.get("verdict") != "passed" or row.get("timed") is not True:
        return None
    med = _num(row.get("time_ms"))
    if med is None:
        return None
    lo, hi = _num(row.get("time_min_ms")), _num(row.get("time_max_ms"))
    return med, (lo if lo is not None else med), (hi if hi is not None else med)


@dataclass
class Comparison:
    baseline: str
    new: str
    threshold: float
    new_failures: list[dict[str, Any]] = field(default_factory=list)
    fixed: list[dict[str, Any]] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    slower: list[dict[str, Any]] = field(default_factory=list)
    faster: list[dict[str, Any]] = field(default_factory=list)
    compared: int = 0
    timed: int = 0
    baseline_state: str | None = None
    new_state: str | None = None

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.missing or self.slower)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "new": self.new,
            "threshold": self.threshold,
            "regressed": self.regressed,
            "compared": self.compared,
            "timed": self.timed,
            "baseline_state": self.baseline_state,
            "new_state": self.new_state,
            "new_failures": self.new_failures,
            "fixed": self.fixed,
            "added": self.added,
            "missing": self.missing,
            "slower": self.slower,
            "faster": self.faster,
        }

    def text(self) -> str:
        lines = [
            f"compare {self.baseline} -> {self.new}: {self.compared} items in both, {self.timed} timed in "
            f"both, threshold {self.threshold:.0%}"
        ]
        for which, state in (("baseline", self.baseline_state), ("new", self.new_state)):
            if state not in (None, "complete"):
                lines.append(f"note: the {which} report's state is {state!r}: its items never run count as missing")
        sections = (
            (
                "new failures",
                [f"{d['id']}: {d['baseline_verdict']} -> {d['verdict']}: {d['reason']}" for d in self.new_failures],
            ),
            ("fixed", [f"{d['id']}: {d['baseline_verdict']} -> {d['verdict']}" for d in self.fixed]),
            ("missing (in the baseline, not run now)", self.missing),
            ("added", self.added),
            (
                "slower",
                [
                    f"{d['id']}: {d['baseline_ms']:.4g} ms -> {d['new_ms']:.4g} ms "
                    f"({d['change']:+.1%}; spreads {d['baseline_spread']} vs {d['new_spread']})"
                    for d in self.slower
                ],
            ),
            (
                "faster",
                [
                    f"{d['id']}: {d['baseline_ms']:.4g} ms -> {d['new_ms']:.4g} ms ({d['change']:+.1%})"
                    for d in self.faster
                ],
            ),
        )
        for title, items in sections:
            lines.append(f"{title}: {len(items)}")
            lines += [f"  {x}" for x in items]
        lines.append("REGRESSED" if self.regressed else "no regression")
        return "\n".join(lines)


def compare_reports(baseline: RunReport, new: RunReport, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """See the module doc."""
    if not threshold >= 0:
        raise ReportError(f"threshold: {threshold!r} must be >= 0 (a fraction: 0.1 = 10% slower)")
    cmp = Comparison(baseline.path, new.path, threshold)
    cmp.baseline_state, cmp.new_state = baseline.meta.get("state"), new.meta.get("state")
    old_rows, new_rows = baseline.by_id, new.by_id
    for rid, old in old_rows.items():
        cur = new_rows.get(rid)
        if cur is None or cur.get("verdict") == "not_run":
            if old.get("verdict") != "not_run":
                cmp.missing.append(rid)
            continue
        cmp.compared += 1
        was_failing, failing = old.get("verdict") in FAILING, cur.get("verdict") in FAILING
        if failing and not was_failing:
            cmp.new_failures.append(
                {
                    "id": rid,
                    "baseline_verdict": old.get("verdict"),
                    "verdict": cur["verdict"],
                    "reason": str(cur.get("reason", ""))[:300],
                }
            )
        elif was_failing and cur.get("verdict") == "passed":
            cmp.fixed.append({"id": rid, "baseline_verdict": old["verdict"], "verdict": "passed"})
        a, b = _timing(old), _timing(cur)
        if a is None or b is None or a[0] <= 0 or b[0] <= 0:  # a zero median (below the clock) has no ratio
            continue
        cmp.timed += 1
        change = b[0] / a[0] - 1.0
        entry = {
            "id": rid,
            "baseline_ms": a[0],
            "new_ms": b[0],
            "change": change,
            "baseline_spread": [a[1], a[2]],
            "new_spread": [b[1], b[2]],
        }
        if change > threshold and b[1] > a[2]:
            cmp.slower.append(entry)
        elif change < -threshold and b[2] < a[1]:
            cmp.faster.append(entry)
    for rid, cur in new_rows.items():
        if rid not in old_rows and cur.get("verdict") != "not_run":
            cmp.added.append(rid)
            if cur.get("verdict") in FAILING:
                cmp.new_failures.append(
                    {
                        "id": rid,
                        "baseline_verdict": "(absent)",
                        "verdict": cur["verdict"],
                        "reason": str(cur.get("reason", ""))[:300],
                    }
                )
    cmp.slower.sort(key=lambda d: -d["change"])
    cmp.faster.sort(key=lambda d: d["change"])
    return cmp


# ------------------------------------------------------------------------------------------------ merge
def merge_reports(reports: Sequence[RunReport]) -> dict[str, Any]:
    """One report document from the shard reports of one sweep (see the module doc): every shard 1..N exactly
    once, each complete, the same sweep settings, no item in two shards."""
    shards, count = _checked_shards(reports)
    rows: list[dict[str, Any]] = []
    owner: dict[str, str] = {}
    for k in sorted(shards):
        for r in shards[k].rows:
            if r["id"] in owner:
                raise ReportError(f"merge: item {r['id']!r} is in {owner[r['id']]} and {shards[k].path}")
            owner[r["id"]] = shards[k].path
            rows.append(r)
    first = shards[1].meta
    meta = {k: v for k, v in first.items() if k not in ("shard",)}
    if isinstance(meta.get("selection"), dict):  # the merged report covers every shard
        meta["selection"] = {**meta["selection"], "shard": None}
    meta.update(
        {
            "state": "complete",
            "reason": "",
            "interrupted": False,
            "exit_status": max(int(s.meta.get("exit_status") or 0) for s in shards.values()),
            "collected": sum(int(s.meta.get("collected") or 0) for s in shards.values()),
            "completed": sum(int(s.meta.get("completed") or 0) for s in shards.values()),
            "merged_from": [shards[k].path for k in sorted(shards)],
        }
    )
    return {**meta, "rows": rows}


def _checked_shards(reports: Sequence[RunReport]) -> tuple[dict[int, RunReport], int]:
    """Index -> shard report and N, every shard checked (merge_reports' rules but the duplicates)."""
    if not reports:
        raise ReportError("merge: no reports given")
    shards: dict[int, RunReport] = {}
    count = None
    for rep in reports:
        sh = rep.meta.get("shard")
        if not isinstance(sh, dict) or not isinstance(sh.get("index"), int) or not isinstance(sh.get("count"), int):
            raise ReportError(f"{rep.path}: shard: this report is not a shard (run with --ckfmha-shard K/N)")
        if not 1 <= sh["index"] <= sh["count"]:
            raise ReportError(f"{rep.path}: shard: {sh['index']}/{sh['count']}: K of K/N must be 1 ... N")
        if count is None:
            count = sh["count"]
        elif sh["count"] != count:
            raise ReportError(
                f"{rep.path}: shard: {sh['index']}/{sh['count']} belongs to another sweep than "
                f"{reports[0].path} (N = {count})"
            )
        if sh["index"] in shards:
            raise ReportError(f"{rep.path}: shard {sh['index']}/{count} given twice (also {shards[sh['index']].path})")
        _check_complete_shard(rep, f"shard {sh['index']}/{count}")
        _check_same_selection(rep, reports[0])
        for key in SWEEP_KEYS:
            if rep.meta.get(key) != reports[0].meta.get(key):
                raise ReportError(
                    f"{rep.path}: {key}: {rep.meta.get(key)!r} differs from {reports[0].path}'s "
                    f"{reports[0].meta.get(key)!r}: not one sweep"
                )
        shards[sh["index"]] = rep
    assert count is not None
    gaps = [k for k in range(1, count + 1) if k not in shards]
    if gaps:
        raise ReportError(
            f"merge: shard(s) {', '.join(f'{k}/{count}' for k in gaps)} missing: the merged report would have a gap"
        )
    if len(reports) > count:  # pragma: no cover - every index is 1..N and none twice
        raise ReportError(f"merge: {len(reports)} reports for {count} shards")
    return shards, count


def _check_same_selection(rep: RunReport, first: RunReport) -> None:
    """Shards of one sweep have the same ``selection`` fingerprint (docs/report_schema.md) but for
    ``shard.index``; the first key that differs is named (two reports without one: the sweep keys decide)."""
    a, b = rep.meta.get("selection"), first.meta.get("selection")
    if a is None and b is None:
        return
    if not isinstance(a, dict) or not isinstance(b, dict):
        which = rep.path if not isinstance(a, dict) else first.path
        raise ReportError(f"{which}: selection: the report has no selection fingerprint: not one sweep")
    for key in dict.fromkeys([*b, *a]):
        x, y = a.get(key), b.get(key)
        if key == "shard":
            x, y = (v.get("count") if isinstance(v, dict) else v for v in (x, y))
            key = "selection.shard.count"
        else:
            key = f"selection.{key}"
        if x != y:
            raise ReportError(f"{rep.path}: {key}: {x!r} differs from {first.path}'s {y!r}: not one sweep")


def _check_complete_shard(rep: RunReport, what: str) -> None:
    """A shard to merge must have completed, and its rows must say so (the header alone can be wrong: a run
    stopped by ``-x``, by xdist giving up on crashed workers or by an internal error has items never run)."""
    state = rep.meta.get("state")
    if state != "complete":
        raise ReportError(
            f"{rep.path}: state: {state!r}: {what} did not complete (resume it with --ckfmha-resume, then merge)"
        )
    not_run = [r["id"] for r in rep.rows if r.get("verdict") == "not_run"]
    if not_run:
        raise ReportError(
            f"{rep.path}: rows: {len(not_run)} item(s) of {what} never ran (first {not_run[0]!r}) although its "
            "state says complete: resume it with --ckfmha-resume, then merge"
        )
    collected, completed = rep.meta.get("collected"), rep.meta.get("completed")
    if isinstance(collected, int) and len(rep.rows) != collected:
        raise ReportError(f"{rep.path}: rows: {len(rep.rows)} rows for {collected} collected items ({what})")
    if isinstance(collected, int) and isinstance(completed, int) and completed > collected:
        raise ReportError(f"{rep.path}: completed: {completed} > collected {collected} ({what})")


def _new_file_mode(path: Path) -> int:
    """The mode a written file gets: an existing file's, else what ``open()`` gives under the process umask."""
    import os

    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` through a temporary file in the same directory and rename it over ``path``: a reader sees
    the old file or the new one, never a truncated one (a full disk leaves the old file and raises OSError).  The
    file keeps the mode of the one it replaces, or gets the umask's (a published page stays readable)."""
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: a count per verdict, the worst error (largest max_abs_err) and the best TFLOPS."""
    verdicts = ("passed", "failed", "skipped", "error", "crashed", "timeout", "not_run")
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = out.setdefault(
            r.get("family") or "?",
            {**{v: 0 for v in verdicts}, "worst_abs_err": None, "worst_id": "", "best_tflops": None, "best_id": ""},
        )
        s[r["verdict"]] = s.get(r["verdict"], 0) + 1
        e = _num(r.get("max_abs_err"))
        if (
            e is not None
            and r["verdict"] in ("passed", "failed")
            and (s["worst_abs_err"] is None or e > s["worst_abs_err"])
        ):
            s["worst_abs_err"], s["worst_id"] = e, r["id"]
        t = _num(r.get("tflops"))
        if t is not None and r["verdict"] == "passed" and (s["best_tflops"] is None or t > s["best_tflops"]):
            s["best_tflops"], s["best_id"] = t, r["id"]
    return out


def write_report_doc(doc: dict[str, Any], path: str | Path) -> Path:
    """Write a report document (schema, version, summary and field order recomputed) atomically as JSON."""
    rows = doc["rows"]
    fields = list(doc.get("fields") or (rows[0].keys() if rows else ()))
    meta = {k: v for k, v in doc.items() if k not in ("rows", "summary", "fields", "schema", "version")}
    out = {
        "schema": REPORT_SCHEMA,
        "version": max(READABLE_VERSIONS),
        **meta,
        "summary": summarize(rows),
        "fields": fields,
        "rows": rows,
    }
    return atomic_write_text(path, dumps(out) + "\n")


def rows_of(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    return [r for p in paths for r in load_report(p).rows]


#: how a report writes a measure that is not a finite number (JSON has no infinity or NaN: ``json.dumps`` would
#: write ``Infinity``, which the strict loader rejects): the words here, read back as the floats
NONFINITE_WORDS: dict[str, float] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its word in :data:`NONFINITE_WORDS`."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """JSON text of a report or part of one: non-finite numbers as the words of :data:`NONFINITE_WORDS`; values
    JSON cannot hold (paths, enums) as their ``str``."""
    return json.dumps(_finite_json(obj), indent=1, default=lambda v: _finite_json(float(v)) if _is_real(v) else str(v))


def _is_real(v: Any) -> bool:
    """A number type JSON does not know (numpy's float32, ...), written as the float it is."""
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, (str, bytes))
