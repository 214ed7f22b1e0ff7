"""Report rows (one per collected item), the JSON/CSV report and the terminal summary (docs/report_schema.md).

Items record every row value with ``record_property``-style ``user_properties`` (so JUnit XML carries them as
``<property>`` elements and xdist ships them to the controller); the controller turns the reports back into rows
(:class:`RowBook`) and writes the files (:class:`ReportWriter`).

| situation | the item's row |
|---|---|
| the item ran | its verdict: passed, failed, skipped, error, crashed (the kernel process died), timeout |
| setup failed / teardown failed | ``error`` (a teardown failure after a pass turns the row into ``error``) |
| an xdist worker died while running it (report ``when="???"``) | ``crashed``, with the worker's exit status |
| never ran (interrupted run, xdist gave up after crashed workers) | ``not_run``, with why |

Files: written atomically (a temporary file in the same directory, then ``os.replace``): a ``running`` report
right after collection (so an older file never outlives the start of this run), then by a background thread
every ``--ckfmha-report-every`` seconds (default ``CHECKPOINT_SECONDS``) while the run goes on -- also while one
item runs for a long time -- and at the end of the session, also after KeyboardInterrupt or SIGTERM; even a
SIGKILLed run leaves a readable report of this run.  A ``.json`` file is one JSON document in the report's line
layout (one row per line, the summary after the rows: ckfmha.runreport, docs/report_schema.md), written one row
at a time, so ``ckfmha merge`` / ``compare`` / ``report`` and ``--ckfmha-resume`` read it in bounded memory at any
size; ``--ckfmha-resume`` reads its report through :func:`ckfmha.runreport.load_report` (every row checked, the
rows streamed from the file at each pass: :meth:`pytest_ckfmha.state.State.resumed_rows`).

| header | rule |
|---|---|
| ``state`` | :data:`STATES`: ``running`` (a checkpoint), ``complete`` (every collected item has its result), ``interrupted`` (Ctrl-C, SIGTERM), ``stopped_early`` (``-x`` / ``--maxfail``), ``crashed_workers`` (xdist gave up after crashed workers), ``internal_error`` (pytest's INTERNALERROR, or a run that left items unrun with no other cause) |
| ``selection`` | :func:`selection`: the fingerprint of what decides which items are collected; ``ckfmha merge`` and ``--ckfmha-resume`` refuse a report of another selection, naming the key |
| ``environment`` | :func:`environment`: command, Python, package versions, devices, clocks, and the provenance: ``hostname``, ``ckfmha`` (version, git commit, dirty), ``ck`` (the CK checkout: root, git commit, dirty, codegen hash; null without one), ``gpus`` (the distinct GPU UUIDs of the rows) |
| invariants | :func:`check_invariants`, before every write: one row per collected item, ``completed <= collected``, ``complete`` only when no row is ``not_run`` |
"""

from __future__ import annotations

import csv
import datetime as _dt
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_ckfmha.ids import NodeId

#: the format ckfmha.runreport.write_report writes (the header's ``schema`` and ``version``)
REPORT_SCHEMA = "ckfmha.report"
REPORT_VERSION = 2
#: the report's ``state`` values (module doc; the same as ckfmha.runreport.STATES and the schema's enum -- not
#: imported from there: this module loads at every pytest start and imports no ckfmha module); a final report has
#: any but ``running``
STATES = ("running", "complete", "interrupted", "stopped_early", "crashed_workers", "internal_error")
#: seconds between checkpoint writes of a running session's report
CHECKPOINT_SECONDS = 30.0
_ROW_HEAD = ("id", "nodeid", "kind", "matrix", "entry", "category", "ck_normalizations", "ck_unannounced")
_ROW_TAIL = (
    "kernel_id",
    "plan_kernels",
    "backend",
    "device",
    "arch",
    "seed",
    "verdict",
    "reason",
    "max_abs_err",
    "max_rel_err",
    "mismatches",
    "tol_ratio",
    "elements",
    "unwritten",
    "time_ms",
    "time_min_ms",
    "time_max_ms",
    "repeats",
    "timed",
    "clocks",
    "tflops",
    "gbps",
    "flops",
    "bytes",
    "build_s",
    "build_cached",
    "ref_cached",
    "reference",
    "worker",
    "gpu",
    "duration_s",
    "started_s",
    "child_warmup_s",
    "parity",
    "parity_status",
    "compared",
    "upstream_verdict",
    "upstream_words",
    "ckfmha_verdict",
    "ckfmha_words",
    "parity_rule",
    "elementwise_passed",
    "noise_passed",
    "error_ratio",
)


@lru_cache(maxsize=1)
def problem_fields() -> tuple[str, ...]:
    """The Problem's fields, in its dataclass order: the report's problem columns (the one list of fields)."""
    import dataclasses

    from ckfmha.problem import Problem

    return tuple(f.name for f in dataclasses.fields(Problem))


@lru_cache(maxsize=1)
def row_fields() -> tuple[str, ...]:
    """Every column of a report row, in order (docs/report_schema.md)."""
    return (*_ROW_HEAD, *problem_fields(), *_ROW_TAIL)


def __getattr__(name: str) -> tuple[str, ...]:
    # PROBLEM_FIELDS / ROW_FIELDS are computed from the Problem dataclass on first use: importing this module (at
    # every pytest start, through the options) must not import ckfmha.problem and NumPy
    if name == "PROBLEM_FIELDS":
        return problem_fields()
    if name == "ROW_FIELDS":
        return row_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_ckfmha_item(nodeid: str) -> bool:
    """Whether ``nodeid`` is a ckfmha item's (:meth:`NodeId.parse`): only those get report rows."""
    return NodeId.parse(nodeid) is not None


def plain(v: Any) -> Any:
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


def problem_props(problem) -> dict[str, Any]:
    """The Problem's report fields (family as the matrix names it: ``bwd`` for the backward)."""
    from pytest_ckfmha.ids import family_token

    return {
        f: family_token(problem)
        if f == "family"
        else problem.mask.to_ck()
        if f == "mask"
        else plain(getattr(problem, f))
        for f in problem_fields()
    }


def ck_line_props(spec) -> dict[str, str]:
    """The columns of a CK command line (``--ckfmha-ck-smoke`` items, :class:`pytest_ckfmha.ck_smoke.SmokeSpec`):
    what CK's runner announces it changed (its words, ``; ``-joined, in its order) and what it changes without a
    word (ckfmha's words); empty for other items."""
    return {
        "ck_normalizations": "; ".join(getattr(spec, "normalizations", ())),
        "ck_unannounced": "; ".join(getattr(spec, "unannounced", ())),
    }


def base_props(node: NodeId, spec, kernel, settings) -> dict[str, Any]:
    """A kernel or plan item's report values before (or without) a run: ``node`` its node id, ``spec`` its shape
    (:class:`pytest_ckfmha.collect.ShapeSpec` or a CK smoke line's spec), ``kernel`` its pinned kernel (None: the
    plan item)."""
    shape = spec.shape
    props: dict[str, Any] = {
        "id": node.item_id,
        "kind": "plan" if kernel is None else "kernel",
        "matrix": shape.file,
        "entry": shape.entry,
        "category": shape.category,
        **ck_line_props(spec),
    }
    props.update(problem_props(shape.problem))
    props.update(
        {
            "kernel_id": kernel.kernel_id if kernel is not None else "",
            "plan_kernels": "",
            "backend": settings.backend,
            "arch": settings.arch,
            "seed": settings.seed,
            "reason": "",
        }
    )
    return props


def parity_base_props(item_id: str, problem, settings, spec=None) -> dict[str, Any]:
    """A parity item's report values before (or without) a comparison; a CK smoke line's item (one with a
    ``spec``) names its script, line and CK's normalizations."""
    props: dict[str, Any] = {
        "id": item_id,
        "kind": "parity",
        "matrix": spec.shape.file if spec is not None else "",
        "entry": spec.shape.entry if spec is not None else "",
        "category": spec.shape.category if spec is not None else settings.category or "",
        **ck_line_props(spec),
    }
    props.update(problem_props(problem))
    props.update(
        {
            "kernel_id": "",
            "plan_kernels": "",
            "backend": settings.backend,
            "arch": settings.arch,
            "seed": settings.seed,
            "reason": "",
            "parity": settings.parity,
        }
    )
    return props


def parity_props(item_id: str, problem, settings, row, spec=None) -> dict[str, Any]:
    """Report values of a parity item: the problem, both sides' verdicts and words, what was compared, and the
    output comparison under both rules (the rule that decided it, CK's elementwise verdict, the noise-floor verdict
    and the worst error ratio; empty when no outputs were compared)."""
    props = parity_base_props(item_id, problem, settings, spec)
    right_kernels = row.right.fields.get("kernels") or ()
    props.update(
        {
            "plan_kernels": " -> ".join(str(k) for k in right_kernels),
            "reason": "" if row.passed else " ".join(row.detail.split()),
            "parity_status": row.status.value,
            "compared": row.compared,
            "upstream_verdict": row.left.verdict.value,
            "upstream_words": " ".join(row.left.reason.split()),
            "ckfmha_verdict": row.right.verdict.value,
            "ckfmha_words": " ".join(row.right.reason.split()),
            "parity_rule": row.rule or "",
            "elementwise_passed": row.elementwise_passed,
            "noise_passed": row.noise_passed,
            "error_ratio": row.error_ratio,
        }
    )
    checks = list(row.output_checks.values()) if isinstance(row.output_checks, dict) else []
    if checks and all(isinstance(c, dict) for c in checks):
        props["max_abs_err"] = max(float(c.get("max_abs_err", 0.0)) for c in checks)
        props["mismatches"] = sum(int(c.get("mismatches", 0)) for c in checks)
    return {k: plain(v) for k, v in props.items()}


def _worst_limit_ratio(checks) -> float | str:
    """The largest ``limit_ratio`` of an item's checks (:class:`ckfmha.validator.CheckResult`: the pass rule's figure
    at the worst element, > 1 exactly where a check failed); "" when no check has one."""
    ratios = [c.limit_ratio for c in checks if not math.isnan(c.limit_ratio)]
    return max(ratios) if ratios else ""


def result_props(problem, outcome) -> dict[str, Any]:
    from ckfmha.work import bytes_moved, flops

    checks = list(outcome.checks.values())
    fl, by = flops(problem), bytes_moved(problem)
    ms = outcome.time_ms
    return {
        "max_abs_err": max((c.max_abs_err for c in checks), default=0.0),
        "max_rel_err": max((c.max_rel_err for c in checks), default=0.0),
        "mismatches": sum(c.mismatch_count for c in checks),
        "tol_ratio": _worst_limit_ratio(checks),
        "elements": sum(c.total for c in checks),
        "time_ms": round(ms, 6) if ms else "",
        "time_min_ms": round(outcome.time_min_ms, 6) if outcome.time_min_ms else "",
        "time_max_ms": round(outcome.time_max_ms, 6) if outcome.time_max_ms else "",
        "repeats": outcome.repeats or "",
        "timed": outcome.timed,
        "clocks": outcome.clocks,
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
        return msg[len("Skipped: ") :] if msg.startswith("Skipped: ") else msg
    text = getattr(report, "longreprtext", "") or ""
    return text.strip()[:2000]


def _row(props: dict, nodeid: str) -> dict[str, Any]:
    row = {k: props.get(k, "") for k in row_fields()}
    row["nodeid"] = nodeid
    return row


class RowBook:
    """One row per item, built from the item's reports (see the module doc).  ``describe(nodeid)`` gives the
    row values of an item that has no report values of its own (a crashed worker's item, an item never run)."""

    def __init__(self, describe: Callable[[str], dict[str, Any]]) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.collected: list[str] = []
        self._describe = describe
        self.origin = time.time()  # the run's start, as the rows' started_s count it (the controller's clock)
        self.on_collected: Callable[[], None] | None = None  # called once, when the collection is known

    def set_collected(self, nodeids: Sequence[str]) -> None:
        if not self.collected:
            self.collected = [n for n in nodeids if is_ckfmha_item(n)]
            if self.on_collected is not None:
                self.on_collected()

    def _base(self, nodeid: str) -> dict[str, Any]:
        try:
            props = self._describe(nodeid)
        except Exception:  # noqa: BLE001 - an unknown node id still gets its row
            props = {}
        return _row(props, nodeid)

    def add(self, report) -> dict[str, Any] | None:
        """Take one report; returns the item's row when the report changed it."""
        nodeid = report.nodeid
        if not is_ckfmha_item(nodeid):
            return None
        props = dict(report.user_properties)
        when = report.when
        if when == "call":
            row = _row(props, nodeid) if props else self._base(nodeid)
            row["verdict"] = props.get("verdict") or report.outcome
            if not report.passed:
                row["reason"] = props.get("reason") or _reason(report)
                if report.skipped:
                    row["reason"] = _reason(report) or row["reason"]
        elif when == "setup":
            if report.passed:
                return None
            row = self._base(nodeid)
            row["verdict"] = "skipped" if report.skipped else "error"
            row["reason"] = _reason(report)
        elif when == "teardown":
            if report.passed or report.skipped:
                return None
            row = self.rows.get(nodeid) or self._base(nodeid)
            row["verdict"] = "error"
            prior_reason = row.get("reason")
            row["reason"] = (prior_reason + " | " if prior_reason else "") + "teardown: " + _reason(report)
        else:  # xdist's report for the item a dead worker was running (when="???")
            row = self._base(nodeid)
            row["verdict"] = "crashed"
            row["reason"] = _reason(report)
        row["duration_s"] = round(float(getattr(report, "duration", 0.0) or 0.0), 6)
        start = getattr(report, "start", None)  # pytest's epoch seconds of the phase's start (xdist carries it)
        if isinstance(start, (int, float)) and start > 0:
            row["started_s"] = round(float(start) - self.origin, 3)
        self.rows[nodeid] = row
        return row

    def complete(self, why_not_run: str) -> list[dict[str, Any]]:
        """Every collected item's row (in collection order; items without a report get ``not_run``), then any
        row of an item not in the collection list."""
        out = []
        for nodeid in self.collected:
            row = self.rows.get(nodeid)
            if row is None:
                row = self._base(nodeid)
                row["verdict"], row["reason"] = "not_run", why_not_run
            out.append(row)
        known = set(self.collected)
        out += [r for n, r in self.rows.items() if n not in known]
        return out

    def completed(self) -> int:
        return sum(1 for r in self.rows.values() if r["verdict"] != "not_run")

    def covered(self) -> int:
        """The items the report covers (its ``collected``): this run's collected items and the rows carried from
        ``--ckfmha-resume``'s report."""
        return len(set(self.collected) | set(self.rows))


def write_reports(paths, rows: Sequence[dict], meta: dict) -> list[Path]:
    """Write every report file atomically (:func:`ckfmha.runreport.atomic_writer`), one row at a time (no copy of
    the rows as text): a ``.json`` path in the report's line layout (:func:`ckfmha.runreport.write_report`: one
    JSON document, one row per line, the summary after the rows), any other path as CSV; raises OSError naming the
    file when one cannot be written."""
    from ckfmha.runreport import atomic_writer, write_report

    written = []
    for p in paths:
        p = Path(p)
        if p.suffix.lower() == ".json":
            write_report(p, meta, rows, row_fields())
        else:
            with atomic_writer(p) as fh:
                w = csv.DictWriter(fh, fieldnames=list(row_fields()), extrasaction="ignore")
                w.writeheader()
                for r in rows:
                    w.writerow(r)
        written.append(p)
    return written


def check_writable(path: Path) -> str | None:
    """None when a report can be written at ``path`` (its directory is created), else why not."""
    path = Path(path)
    if path.is_dir():
        return "is a directory"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        return f"cannot be written ({e.strerror or e})"
    if path.exists() and not os.access(path, os.W_OK):
        return "exists and is not writable"
    return None


class ReportInvariantError(ValueError):
    """A report that breaks an invariant (module doc); the message names it."""


def check_invariants(rows: Sequence[dict], meta: dict) -> None:
    """The invariants every written report keeps (module doc); raises :class:`ReportInvariantError`."""
    state, collected, completed = meta.get("state"), meta.get("collected"), meta.get("completed")
    if state not in STATES:
        raise ReportInvariantError(f"state: {state!r} is not one of {', '.join(STATES)}")
    if isinstance(collected, int):
        ids = [r.get("nodeid") for r in rows]
        if len(rows) != collected or len(set(ids)) != len(ids):
            raise ReportInvariantError(
                f"rows: {len(rows)} rows ({len(set(ids))} items) for {collected} collected items"
            )
        if isinstance(completed, int) and completed > collected:
            raise ReportInvariantError(f"completed: {completed} > collected {collected}")
    not_run = sum(1 for r in rows if r.get("verdict") == "not_run")
    if state == "complete" and not_run:
        raise ReportInvariantError(f"state: complete, but {not_run} row(s) are not_run")


class ReportWriter:
    """Writes the report files: a ``running`` report when the collection is known, checkpoints from a background
    thread every ``checkpoint_s`` seconds while the session runs (:meth:`start`), the final report at its end.
    ``lock`` guards the rows the snapshots read: the recorder holds it while it changes them."""

    def __init__(self, paths: Sequence[Path], checkpoint_s: float = CHECKPOINT_SECONDS) -> None:
        self.paths = list(paths)
        self.checkpoint_s = checkpoint_s
        self.lock = threading.RLock()
        self.written: list[Path] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._finished = False

    def start(self, snapshot: Callable[[], tuple[list[dict], dict]]) -> None:
        """Start the checkpoint thread: it writes ``snapshot()`` = (rows, meta) every ``checkpoint_s`` seconds
        until :meth:`stop`."""
        if not self.paths or self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.checkpoint_s):
                self.checkpoint(snapshot)

        self._thread = threading.Thread(target=loop, name="ckfmha-report-checkpoints", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def checkpoint(self, snapshot: Callable[[], tuple[list[dict], dict]]) -> None:
        """Write ``snapshot()`` now (the final report, once written, is never overwritten by a checkpoint)."""
        with self.lock:
            if self._finished or not self.paths:
                return
            try:
                rows, meta = snapshot()
                check_invariants(rows, meta)
                write_reports(self.paths, rows, meta)
            except (OSError, ReportInvariantError) as e:  # the final write reports it
                self.error = f"checkpoint not written: {e}"

    def final(self, rows: list[dict], meta: dict) -> None:
        self.stop()
        with self.lock:
            self._finished = True
            try:
                check_invariants(rows, meta)
                self.written = write_reports(self.paths, rows, meta)
                self.error = None
            except (OSError, ReportInvariantError) as e:
                self.error = f"report not written: {e}"


def terminal_summary(tr, rows: list[dict], meta: dict, written: list[Path], problems: Sequence[str] = ()) -> None:
    tr.section("ckfmha summary")
    devices = (meta.get("environment") or {}).get("devices") or ["-"]
    tr.write_line(
        f"category {meta.get('category')}  arch {meta.get('arch')}  backends "
        f"{', '.join(meta.get('backends') or ['-'])}  device {', '.join(devices)}  seed {meta.get('seed')}  "
        f"items {len(rows)}"
    )
    from ckfmha.runreport import VERDICTS, summarize

    summ = summarize(rows)
    shown = [v for v in VERDICTS if v in ("passed", "failed", "skipped", "error") or any(s[v] for s in summ.values())]
    heads = {"passed": 8, "failed": 8, "skipped": 9, "error": 7, "crashed": 9, "timeout": 9, "not_run": 9}
    tr.write_line(
        f"{'family':<14}" + "".join(f"{v:>{heads[v]}}" for v in shown) + f"  {'worst abs err':>14}  {'best TFLOPS':>12}"
    )
    for fam, s in summ.items():
        worst = "-" if s["worst_abs_err"] is None else f"{s['worst_abs_err']:.3g}"
        best = "-" if s["best_tflops"] is None else f"{s['best_tflops']:.4g}"
        tr.write_line(f"{fam:<14}" + "".join(f"{s[v]:>{heads[v]}}" for v in shown) + f"  {worst:>14}  {best:>12}")
    for fam, s in summ.items():
        if s["worst_id"] and s["failed"]:
            tr.write_line(f"  worst {fam}: {s['worst_id']}")
    cold = build_times(rows)
    if cold:
        times = sorted(cold.values())
        slow_id, slow = max(cold.items(), key=lambda kv: kv[1])
        tr.write_line(
            f"cold builds: {len(times)} kernel(s), median {times[len(times) // 2]:.3g} s, "
            f"total {sum(times):.3g} s, slowest {slow:.3g} s ({slow_id})"
        )
    for p in written:
        tr.write_line(f"ckfmha report: {p}")
    for msg in problems:
        tr.write_line(f"ckfmha: ERROR: {msg}", red=True, bold=True)


def build_times(rows: list[dict]) -> dict[str, float]:
    """Kernel id -> cold build seconds (builds that did not come from the cache)."""
    out: dict[str, float] = {}
    for r in rows:
        b = r.get("build_s")
        if (
            r.get("kernel_id")
            and isinstance(b, (int, float))
            and not isinstance(b, bool)
            and r.get("build_cached") is False
        ):
            out[r["kernel_id"]] = max(out.get(r["kernel_id"], 0.0), float(b))
    return out


ENV_PACKAGES = ("ckfmha", "numpy", "pytest", "pytest-xdist", "torch", "triton")


def environment(command: Sequence[str], rows: list[dict], ck_root: str | os.PathLike | None = None) -> dict:
    """Where the run happened: the command, Python, the packages' versions (read from their metadata, nothing is
    imported), the devices the items ran on and the clocks the timed items saw (where the backend reads them), and
    the provenance (:func:`ckfmha.runreport.provenance`: hostname, ckfmha's version and git commit, the CK
    checkout's identity, the GPU UUIDs the rows name; git in subprocesses, no torch, no CUDA: the controller
    never touches a GPU, pytest_ckfmha/isolation.py)."""
    import platform
    import shlex
    from importlib import metadata

    from ckfmha.runreport import provenance

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "command": shlex.join(command),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {n: version(n) for n in ENV_PACKAGES},
        "devices": sorted({r["device"] for r in rows if r.get("device")}),
        "clocks": sorted({r["clocks"] for r in rows if r.get("clocks")}),
        **provenance(ck_root, rows),
    }


#: the keys of the ``selection`` header (:func:`selection`), in order
SELECTION_KEYS = (
    "category",
    "ck_smoke",
    "parity",
    "families",
    "arch",
    "backend",
    "receipt",
    "profile",
    "mask_mode",
    "filter",
    "filter_file",
    "sweep",
    "matrices",
    "max_kernels_per_shape",
    "ck_root",
    "durations",
    "shard",
)


def content_hash(paths: Sequence[str | Path] | None) -> str | None:
    """sha256 (first 16 hex) of the files' contents (a directory: its files, by relative path); None without
    paths. Contents, not paths: two machines with the same files in other places select the same items."""
    if not paths:
        return None
    import hashlib

    h = hashlib.sha256()
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            h.update(b"\0" + (str(f.relative_to(p)) if p.is_dir() else "").encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError as e:
                h.update(f"unreadable: {e}".encode())
    return h.hexdigest()[:16]


def _ck_root_identity(settings) -> str | None:
    """The checkout's identity: its codegen sources' hash (the kernel space), and with ``--ckfmha-ck-smoke`` the
    smoke scripts' record keys (the lines)."""
    if settings.ck_root is None:
        return None
    from ckfmha.cktree import CKTreeError, codegen_hash

    try:
        ident = "codegen:" + codegen_hash(settings.ck_root)[:16]
    except CKTreeError as e:
        ident = f"unreadable: {e}"
    if settings.ck_smoke is not None:
        from ckfmha.ck_smoke import CKSmokeError, record_key
        from pytest_ckfmha.smoke_lines import BINARIES

        for b in BINARIES[settings.ck_smoke]:
            try:
                ident += f" {b}:" + record_key(settings.ck_root, b, settings.arch)[:16]
            except CKSmokeError as e:
                ident += f" {b}: unreadable: {e}"
    return ident


def selection(settings) -> dict[str, Any]:
    """The selection fingerprint (:data:`SELECTION_KEYS`): every setting that decides which items are collected;
    files by their contents' hash (computed once per settings). Two reports of one sweep differ at most in
    ``shard.index``."""
    import copy

    return copy.deepcopy(_selection(settings))


@lru_cache(maxsize=8)
def _selection(settings) -> dict[str, Any]:
    s = settings
    return {
        "category": s.category,
        "ck_smoke": s.ck_smoke,
        "parity": s.parity,
        "families": list(s.families) if s.families else None,
        "arch": s.arch,
        "backend": s.backend,
        "receipt": s.receipt,
        "profile": s.profile,
        "mask_mode": s.mask_mode,
        "filter": s.filter,
        "filter_file": content_hash([s.filter_file] if s.filter_file else None),
        "sweep": content_hash([s.sweep] if s.sweep else None),
        "matrices": content_hash(s.matrices),
        "max_kernels_per_shape": s.max_kernels_per_shape,
        "ck_root": _ck_root_identity(s),
        # the timings that weigh the shard split (--ckfmha-durations, where the option exists)
        "durations": content_hash([s.durations] if getattr(s, "durations", None) else None),
        "shard": {"index": s.shard[0], "count": s.shard[1]} if s.shard else None,
    }


def selection_difference(theirs: Any, ours: dict[str, Any], ignore_shard_index: bool = False) -> str | None:
    """The first key of :data:`SELECTION_KEYS` in which two selection fingerprints differ (``shard.index`` left
    out when ``ignore_shard_index``), as ``key: X there, Y here``; None when they agree."""
    if not isinstance(theirs, dict):
        return f"selection: {theirs!r} there (no selection fingerprint), {ours!r} here"
    for key in SELECTION_KEYS:
        a, b = theirs.get(key), ours.get(key)
        if key == "shard" and ignore_shard_index:
            a = a.get("count") if isinstance(a, dict) else a
            b = b.get("count") if isinstance(b, dict) else b
            key = "shard count"
        if a != b:
            return f"{key}: {a!r} there, {b!r} here"
    return None


def meta_for(settings, rows: list[dict], collect_seconds, command: Sequence[str] = (), run: dict | None = None) -> dict:
    """The report's header. ``run``: ``state`` (:data:`STATES`), ``exit_status``, ``interrupted``, ``reason``,
    ``collected``, ``completed`` (see docs/report_schema.md); ``selection``: :func:`selection`."""
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **(run or {}),
        "category": settings.category,
        "arch": settings.arch,
        "arch_source": settings.arch_source,
        "backend_option": settings.backend,
        "backends": sorted({r["backend"] for r in rows if r.get("backend")}),
        "seed": settings.seed,
        "max_kernels_per_shape": settings.max_kernels_per_shape,
        "receipt": settings.receipt,
        "profile": settings.profile,
        "collect_seconds": collect_seconds,
        "shard": {"index": settings.shard[0], "count": settings.shard[1]} if settings.shard else None,
        "selection": selection(settings),
        "resumed_from": settings.resume,
        "bench_repeat": settings.bench_repeat if settings.bench else None,
        "heuristics": settings.heuristics,
        "environment": environment(command, rows, settings.ck_root),
    }
