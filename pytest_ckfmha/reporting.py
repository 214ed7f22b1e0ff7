"""Report rows (one per item), the JSON/CSV report and the terminal summary (schema: docs/report_schema.md).

Items record every row value with ``record_property``-style ``user_properties`` (so JUnit XML carries them as
``<property>`` elements and xdist ships them to the controller); the controller turns the reports back into rows
in ``pytest_runtest_logreport`` and writes the files at the end of the session.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any, Sequence

REPORT_SCHEMA = "ckfmha.report"
REPORT_VERSION = 1
PROBLEM_FIELDS = ("family", "dtype", "mode", "batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "seqlens_q",
                  "seqlens_k", "s_kpad", "hdim_q", "hdim_v", "mask", "bias", "bias_rank", "lse", "p_drop",
                  "logits_soft_cap", "sink", "qscale", "input_layout", "output_layout", "vlayout", "scale",
                  "page_block_size", "kv_lookup", "kv_layout", "cache_batch_idx", "seqlen_knew", "rotary_dim", "rope",
                  "num_splits", "min_seqlen_q", "deterministic", "dbias")
ROW_FIELDS = ("id", "nodeid", "kind", "matrix", "entry", "category", *PROBLEM_FIELDS, "kernel_id", "plan_kernels",
              "backend", "device", "arch", "seed", "verdict", "reason", "max_abs_err", "max_rel_err", "mismatches",
              "elements", "unwritten", "time_ms", "timed", "tflops", "gbps", "flops", "bytes", "build_s",
              "build_cached", "ref_cached", "duration_s", "parity", "parity_status", "compared", "upstream_verdict",
              "upstream_words", "ckfmha_verdict", "ckfmha_words")
NODE_PREFIXES = ("ckfmha::", "ckfmha-parity::")


def _plain(v: Any) -> Any:
    """A JSON/execnet-safe scalar (str/int/float/bool) for a report value."""
    import enum

    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, bool) or v is None:
        return "" if v is None else v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if hasattr(v, "item") and not isinstance(v, (str, tuple)):  # numpy scalars
        return v.item()
    if isinstance(v, tuple):
        return "_".join(str(x) for x in v)
    if v is None:
        return ""
    return v


def base_props(item, settings) -> dict[str, Any]:
    p = item.spec.shape.problem
    shape = item.spec.shape
    props: dict[str, Any] = {"id": item.item_id, "kind": "plan" if item.kernel is None else "kernel",
                             "matrix": shape.file, "entry": shape.entry, "category": shape.category}
    for f in PROBLEM_FIELDS:
        if f == "family":
            props[f] = shape.family
        elif f == "mask":
            props[f] = p.mask.to_ck()
        else:
            props[f] = _plain(getattr(p, f))
    props.update({"kernel_id": item.kernel.kernel_id if item.kernel is not None else "", "plan_kernels": "",
                  "backend": settings.backend, "arch": settings.arch, "seed": settings.seed, "reason": ""})
    return props


def parity_props(item, settings, row) -> dict[str, Any]:
    """Report values of a parity item: the problem, both sides' verdicts and words, what was compared."""
    p = row.problem
    props: dict[str, Any] = {"id": f"{settings.parity}::{item.label}", "kind": "parity", "matrix": "", "entry": "",
                             "category": settings.category or ""}
    for f in PROBLEM_FIELDS:
        props[f] = p.mask.to_ck() if f == "mask" else _plain(getattr(p, f))
    right_kernels = row.right.fields.get("kernels") or ()
    props.update({"kernel_id": "", "plan_kernels": " -> ".join(str(k) for k in right_kernels),
                  "backend": settings.backend, "arch": settings.arch, "seed": settings.seed,
                  "reason": "" if row.passed else " ".join(row.detail.split()),
                  "parity": settings.parity, "parity_status": row.status.value, "compared": row.compared,
                  "upstream_verdict": row.left.verdict.value, "upstream_words": " ".join(row.left.reason.split()),
                  "ckfmha_verdict": row.right.verdict.value, "ckfmha_words": " ".join(row.right.reason.split())})
    checks = list(row.output_checks.values()) if isinstance(row.output_checks, dict) else []
    if checks and all(isinstance(c, dict) for c in checks):
        props["max_abs_err"] = max(float(c.get("max_abs_err", 0.0)) for c in checks)
        props["mismatches"] = sum(int(c.get("mismatch_count", 0)) for c in checks)
    return {k: _plain(v) for k, v in props.items()}


def result_props(problem, outcome) -> dict[str, Any]:
    from ckfmha.work import bytes_moved, flops

    checks = list(outcome.checks.values())
    fl, by = flops(problem), bytes_moved(problem)
    ms = outcome.time_ms
    return {
        "max_abs_err": max((c.max_abs_err for c in checks), default=0.0),
        "max_rel_err": max((c.max_rel_err for c in checks), default=0.0),
        "mismatches": sum(c.mismatch_count for c in checks),
        "elements": sum(c.total for c in checks),
        "time_ms": round(ms, 6) if ms else "",
        "timed": outcome.timed,
        "tflops": round(fl / 1e9 / ms, 6) if ms else "",
        "gbps": round(by / 1e6 / ms, 6) if ms else "",
        "flops": fl,
        "bytes": by,
        "build_s": round(outcome.build_s, 6),
        "build_cached": outcome.build_cached,
        "ref_cached": outcome.ref_cached,
    }


def _reason(report) -> str:
    lr = report.longrepr
    if report.skipped and isinstance(lr, tuple) and len(lr) == 3:
        msg = str(lr[2])
        return msg[len("Skipped: "):] if msg.startswith("Skipped: ") else msg
    text = getattr(report, "longreprtext", "") or ""
    return text.strip()[:2000]


def row_from_report(report) -> dict[str, Any] | None:
    """A row for a ckfmha item's call report (or a failed/skipped setup report), else None."""
    if not report.nodeid.startswith(NODE_PREFIXES):
        return None
    if report.when == "call" or (report.when == "setup" and not report.passed):
        props = dict(report.user_properties)
        row = {k: props.get(k, "") for k in ROW_FIELDS}
        row["nodeid"] = report.nodeid
        if report.when == "setup" and report.failed:
            row["verdict"] = "error"
        else:
            row["verdict"] = report.outcome
        if not report.passed:
            row["reason"] = props.get("reason") or _reason(report)
            if report.skipped:
                row["reason"] = _reason(report) or row["reason"]
        row["duration_s"] = round(float(report.duration), 6)
        return row
    return None


def write_reports(paths, rows: list[dict], meta: dict) -> list[Path]:
    written = []
    for p in paths:
        p = Path(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix.lower() == ".json":
            doc = {"schema": REPORT_SCHEMA, "version": REPORT_VERSION, **meta, "summary": summarize(rows),
                   "fields": list(ROW_FIELDS), "rows": rows}
            p.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
        else:
            with open(p, "w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=list(ROW_FIELDS), extrasaction="ignore")
                w.writeheader()
                for r in rows:
                    w.writerow(r)
        written.append(p)
    return written


def _num(v) -> float | None:
    if v in ("", None) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if not math.isnan(f) else None


def summarize(rows: list[dict]) -> dict[str, dict]:
    """Per family: passed/failed/skipped/error, worst error (largest max_abs_err) and best TFLOPS."""
    out: dict[str, dict] = {}
    for r in rows:
        fam = r.get("family") or "?"
        s = out.setdefault(fam, {"passed": 0, "failed": 0, "skipped": 0, "error": 0, "worst_abs_err": None,
                                 "worst_id": "", "best_tflops": None, "best_id": ""})
        s[r["verdict"]] = s.get(r["verdict"], 0) + 1
        e = _num(r.get("max_abs_err"))
        if e is not None and r["verdict"] in ("passed", "failed") and (s["worst_abs_err"] is None or e > s["worst_abs_err"]):
            s["worst_abs_err"], s["worst_id"] = e, r["id"]
        t = _num(r.get("tflops"))
        if t is not None and r["verdict"] == "passed" and (s["best_tflops"] is None or t > s["best_tflops"]):
            s["best_tflops"], s["best_id"] = t, r["id"]
    return out


def terminal_summary(tr, rows: list[dict], meta: dict, written: list[Path]) -> None:
    tr.section("ckfmha summary")
    devices = (meta.get("environment") or {}).get("devices") or ["-"]
    tr.write_line(f"category {meta.get('category')}  arch {meta.get('arch')}  backends "
                  f"{', '.join(meta.get('backends') or ['-'])}  device {', '.join(devices)}  seed {meta.get('seed')}  "
                  f"items {len(rows)}")
    summ = summarize(rows)
    hdr = f"{'family':<14}{'passed':>8}{'failed':>8}{'skipped':>9}{'error':>7}  {'worst abs err':>14}  {'best TFLOPS':>12}"
    tr.write_line(hdr)
    for fam, s in summ.items():
        worst = "-" if s["worst_abs_err"] is None else f"{s['worst_abs_err']:.3g}"
        best = "-" if s["best_tflops"] is None else f"{s['best_tflops']:.4g}"
        tr.write_line(f"{fam:<14}{s['passed']:>8}{s['failed']:>8}{s['skipped']:>9}{s['error']:>7}  {worst:>14}  "
                      f"{best:>12}")
    for fam, s in summ.items():
        if s["worst_id"] and s["failed"]:
            tr.write_line(f"  worst {fam}: {s['worst_id']}")
    cold = build_times(rows)
    if cold:
        times = sorted(cold.values())
        slow_id, slow = max(cold.items(), key=lambda kv: kv[1])
        tr.write_line(f"cold builds: {len(times)} kernel(s), median {times[len(times) // 2]:.3g} s, "
                      f"total {sum(times):.3g} s, slowest {slow:.3g} s ({slow_id})")
    for p in written:
        tr.write_line(f"ckfmha report: {p}")


def build_times(rows: list[dict]) -> dict[str, float]:
    """Kernel id -> cold build seconds (builds that did not come from the cache)."""
    out: dict[str, float] = {}
    for r in rows:
        b = r.get("build_s")
        if r.get("kernel_id") and isinstance(b, (int, float)) and not isinstance(b, bool) and r.get("build_cached") is False:
            out[r["kernel_id"]] = max(out.get(r["kernel_id"], 0.0), float(b))
    return out


ENV_PACKAGES = ("ckfmha", "numpy", "pytest", "pytest-xdist", "torch", "triton")


def environment(command: Sequence[str], rows: list[dict]) -> dict:
    """Where the run happened: the command, Python, the packages' versions (read from their metadata, nothing is
    imported) and the devices the items ran on."""
    import platform
    import shlex
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"command": shlex.join(command), "python": platform.python_version(), "platform": platform.platform(),
            "packages": {n: version(n) for n in ENV_PACKAGES},
            "devices": sorted({r["device"] for r in rows if r.get("device")})}


def meta_for(settings, rows: list[dict], collect_seconds, command: Sequence[str] = ()) -> dict:
    return {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "category": settings.category, "arch": settings.arch, "arch_source": settings.arch_source,
            "backend_option": settings.backend, "backends": sorted({r["backend"] for r in rows if r.get("backend")}),
            "seed": settings.seed, "max_kernels_per_shape": settings.max_kernels_per_shape,
            "receipt": settings.receipt, "profile": settings.profile, "collect_seconds": collect_seconds,
            "environment": environment(command, rows)}
