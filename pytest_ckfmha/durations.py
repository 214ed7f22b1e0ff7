"""Measured seconds from a report (``--ckfmha-durations PREV.json``; costs.py's table says how they become
costs).  No other plugin module imported, so options.py (the option's converter) and costs.py both use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or v in (None, ""):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x >= 0 else None


def row_seconds(row: Mapping[str, Any]) -> float | None:
    """A report row's measured seconds (module doc), None when it has none (skipped, never run)."""
    if row.get("verdict") in ("not_run", "skipped"):
        return None
    d = _number(row.get("duration_s"))
    if d is not None and d > 0:
        return d
    ms = _number(row.get("time_ms"))
    if ms is None:
        return None
    return ms / 1000.0 + (_number(row.get("build_s")) or 0.0)


def durations_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Node id (without ``@group``) and item id -> measured seconds, for every row that has a time."""
    out: dict[str, float] = {}
    for r in rows:
        s = row_seconds(r)
        if s is None:
            continue
        nid = str(r.get("nodeid") or "").split("@", 1)[0]
        if nid:
            out[nid] = s
        if r.get("id"):
            out.setdefault("id:" + str(r["id"]), s)
    return out


def load_durations(path: str) -> dict[str, float]:
    """:func:`durations_of` a report file (ckfmha.runreport.ReportError when it is not one)."""
    from ckfmha.runreport import load_report

    return durations_of(load_report(path).rows)
