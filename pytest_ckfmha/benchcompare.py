"""The end of a ``--ckfmha-bench`` run: the terminal stats table and ``--ckfmha-compare PREV.json`` /
``--ckfmha-compare-fail PCT`` (pytest-benchmark's ``--benchmark-compare`` / ``--benchmark-compare-fail`` as the
model; docs/plugin.md, "Benchmarks").

| when | what |
|---|---|
| options parsed (options.py) | PREV unreadable, ``--ckfmha-compare`` without ``--ckfmha-bench``, ``--ckfmha-compare-fail`` without ``--ckfmha-compare``: usage errors (exit 4) |
| session start (:func:`load_prev`, from the recorder) | PREV of another selection (its ``selection`` fingerprint; ``durations`` ignored in an unsharded run) or seed, PREV with no timed item, PREV's timings measured on an emulation: usage errors naming the reason |
| end of the session (:meth:`BenchCompare.finish`) | :func:`ckfmha.runreport.compare_reports` (PREV -> this run, threshold PCT); not like for like (:class:`ckfmha.runreport.Mismatch`: this run emulated, other devices, clocks apart): an ERROR line and exit 1, nothing compared (``ckfmha compare`` on the written reports takes the overrides); with ``--ckfmha-compare-fail`` a timing regression (median more than PCT slower *and* outside both runs' spread, as ``ckfmha compare`` counts it) is an ERROR line and exit 1 (the report's ``exit_status`` says the same) |
| terminal summary (:func:`bench_section`) | per timed item, slowest first: min / median / max, spread = (max - min) / median, rounds, and the change against PREV's median; :data:`TABLE_ROWS` rows unless ``-v`` (a note says how many are hidden); then the comparison |

The report keeps each item's median, fastest and slowest repetition and their number (``time_ms``,
``time_min_ms``, ``time_max_ms``, ``repeats``), not every repetition, so the table shows the range, not an IQR.

PREV's rows are read at session start and kept (only the fields compare reads), so PREV may be the file this
run's ``--ckfmha-report`` overwrites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ckfmha.runreport import Comparison, RunReport

#: timed items shown in the table without ``-v`` (the slowest)
TABLE_ROWS = 25
#: the row fields kept of PREV: what :func:`ckfmha.runreport.compare_reports` reads
KEPT_FIELDS = (
    "id",
    "verdict",
    "reason",
    "timed",
    "time_ms",
    "time_min_ms",
    "time_max_ms",
    "repeats",
    "backend",
    "device",
    "clocks",
    "seed",
)


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or v in (None, ""):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def timing(row: dict[str, Any]) -> tuple[float, float, float, int | None] | None:
    """(median, fastest, slowest ms, repetitions) of a passed, timed row; None otherwise."""
    if row.get("verdict") != "passed" or row.get("timed") is not True:
        return None
    med = _float(row.get("time_ms"))
    if med is None:
        return None
    lo, hi, n = _float(row.get("time_min_ms")), _float(row.get("time_max_ms")), _float(row.get("repeats"))
    return med, med if lo is None else lo, med if hi is None else hi, None if n is None else int(n)


def _refuse(path: str, why: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-compare: {path!r}: {why}")


def load_prev(settings: Any) -> RunReport:
    """PREV (``settings.compare``), checked against this run (module doc), its rows kept in memory."""
    from ckfmha.runreport import RunReport, load_report, timing_sources
    from pytest_ckfmha.reporting import selection, selection_difference

    path = str(settings.compare)
    rep = load_report(path)
    theirs = rep.meta.get("selection")
    if theirs is not None:
        ours = selection(settings)
        if ours.get("shard") is None and isinstance(theirs, dict):  # durations only weigh a shard split
            theirs = {**theirs, "durations": ours.get("durations")}
        diff = selection_difference(theirs, ours)
        if diff is not None:
            raise _refuse(path, f"{diff}: compare with a report of the same selection")
    if rep.meta.get("seed") is not None and rep.meta.get("seed") != settings.seed:
        raise _refuse(
            path, f"seed: {rep.meta.get('seed')!r} there, {settings.seed!r} here: the items ran on other inputs"
        )
    rows = [{k: r[k] for k in KEPT_FIELDS if k in r} for r in rep.rows]
    src = timing_sources(rows)
    if not src.rows:
        raise _refuse(path, "has no timed item that passed: compare with a run of --ckfmha-bench")
    if src.emulated:
        raise _refuse(path, f"{src.emulated_text('there')}; its timings cannot be compared")
    return RunReport(rep.path, dict(rep.meta), rows)


@dataclass
class BenchCompare:
    """``--ckfmha-compare``: PREV, the failure threshold (a fraction; None: show, do not fail) and, after
    :meth:`finish`, the comparison."""

    prev: RunReport
    fail: float | None
    comparison: Comparison | None = None
    refused: bool = False

    @classmethod
    def start(cls, settings: Any) -> BenchCompare:
        return cls(load_prev(settings), settings.compare_fail)

    @property
    def threshold(self) -> float:
        from ckfmha.runreport import DEFAULT_THRESHOLD

        return DEFAULT_THRESHOLD if self.fail is None else self.fail

    @property
    def pct(self) -> str:
        return f"{self.threshold * 100:g}%"

    @property
    def failing(self) -> list[dict[str, Any]]:
        """The regressions that fail the run (``--ckfmha-compare-fail`` given, the comparison not refused)."""
        if self.comparison is None or self.refused or self.fail is None:
            return []
        return self.comparison.slower

    def finish(self, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
        """Compare PREV with this run (``rows``, ``meta``); the problems that fail the session (module doc)."""
        from ckfmha.runreport import RunReport, compare_reports

        self.comparison = cmp = compare_reports(self.prev, RunReport("this run", meta, rows), self.threshold)
        refusals = cmp.refusals()
        self.refused = bool(refusals)
        problems = [
            f"--ckfmha-compare {self.prev.path}: refused, not like for like: {m.text} (nothing compared; "
            f"`ckfmha compare {self.prev.path} NEW.json {m.flag}` compares the written reports anyway)"
            for m in refusals
        ]
        if self.failing:
            problems.append(
                f"--ckfmha-compare-fail {self.threshold * 100:g}: {len(self.failing)} item(s) slower than in "
                f"{self.prev.path} by more than {self.pct} (listed in the ckfmha benchmark section)"
            )
        return problems

    def prev_medians(self) -> dict[str, float]:
        out = {}
        for r in self.prev.rows:
            t = timing(r)
            if t is not None and t[0] > 0:
                out[str(r["id"])] = t[0]
        return out


def _ms(x: float) -> str:
    return f"{x:.4g}"


def bench_section(tr: Any, rows: list[dict[str, Any]], bc: BenchCompare | None) -> None:
    """The ``ckfmha benchmark`` section of the terminal summary (module doc)."""
    timed = [(t, str(r.get("id") or r.get("nodeid"))) for r in rows if (t := timing(r)) is not None]
    timed.sort(key=lambda x: -x[0][0])
    tr.section("ckfmha benchmark")
    if not timed:
        tr.write_line("no item was timed (every item skipped, failed or not run)")
    else:
        _table(tr, timed, bc)
    if bc is not None and bc.comparison is not None:
        _comparison(tr, bc, bc.comparison)


def _table(tr: Any, timed: list[tuple[tuple[float, float, float, int | None], str]], bc: BenchCompare | None) -> None:
    compared = bc is not None and bc.comparison is not None and not bc.refused
    prev = bc.prev_medians() if bc is not None and compared else {}
    slower = (
        {d["id"] for d in bc.comparison.slower} if bc is not None and bc.comparison is not None and compared else set()
    )
    shown = timed if tr.config.getoption("verbose", 0) > 0 else timed[:TABLE_ROWS]
    tr.write_line(
        f"{len(timed)} timed item(s), slowest first (ms; spread = (max - min) / median: the report keeps the "
        "fastest, median and slowest repetition, no quartiles)"
    )
    head = f"{'min':>10} {'median':>10} {'max':>10} {'spread':>8} {'rounds':>7}"
    tr.write_line(head + (f" {'vs PREV':>9}" if compared else "") + "  item")
    for (med, lo, hi, n), rid in shown:
        spread = f"{(hi - lo) / med:.1%}" if med > 0 else "-"
        line = f"{_ms(lo):>10} {_ms(med):>10} {_ms(hi):>10} {spread:>8} {n if n is not None else '-':>7}"
        if compared:
            old = prev.get(rid)
            change = "new" if old is None else f"{med / old - 1:+.1%}"
            line += f" {change:>9}"
        tr.write_line(line + f"  {rid}" + ("  SLOWER" if rid in slower else ""), red=rid in slower)
    if len(shown) < len(timed):
        tr.write_line(f"... {len(timed) - len(shown)} faster timed item(s) not shown (-v shows all)")


def _comparison(tr: Any, bc: BenchCompare, cmp: Comparison) -> None:
    gate = (
        f"fails above {bc.pct} (--ckfmha-compare-fail)"
        if bc.fail is not None
        else f"threshold {bc.pct}, shown only (--ckfmha-compare-fail PCT fails the run)"
    )
    if bc.refused:
        tr.write_line(
            f"compared with {bc.prev.path}: refused: not like for like (the ERROR lines below say why); "
            "nothing compared",
            red=True,
        )
        tr.write_line(f"  PREV: {cmp.baseline_provenance}")
        return
    tr.write_line(f"compared with {bc.prev.path}: {cmp.timed} item(s) timed in both; {gate}")
    tr.write_line(f"  PREV: {cmp.baseline_provenance}")
    for title, entries in ((f"slower by more than {bc.pct}", cmp.slower), ("faster", cmp.faster)):
        tr.write_line(f"  {title} (outside both runs' spread): {len(entries)}")
        for d in entries:
            tr.write_line(f"    {d['id']}: {_ms(d['baseline_ms'])} ms -> {_ms(d['new_ms'])} ms ({d['change']:+.1%})")
    tr.write_line(
        f"  new failures {len(cmp.new_failures)}, fixed {len(cmp.fixed)}, in PREV but not run now "
        f"{len(cmp.missing)}, new items {len(cmp.added)}"
    )
    if bc.failing:
        tr.write_line(f"REGRESSED: {len(bc.failing)} item(s) slower by more than {bc.pct}: the session fails")
    elif cmp.slower:
        tr.write_line(f"{len(cmp.slower)} item(s) slower by more than {bc.pct} (not failing the run)")
    else:
        tr.write_line(f"no item slower by more than {bc.pct}")
