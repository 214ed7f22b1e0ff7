"""Run reports (the plugin's ``--ckfmha-report r.json``, docs/report_schema.md) as data: load, compare, merge.

| function | what |
|---|---|
| :func:`load_report` | a report JSON file -> :class:`RunReport` (strict loading: ckfmha.datafile; the schema \
``data/schemas/run_report.schema.yaml``; row ids unique); a file in the line layout (below) is read one line at a \
time, any other layout whole (at most ``MAX_FILE_BYTES``, 16 MiB) |
| :func:`write_report` | rows (any iterable: a list, a generator, another report's rows) -> a report file in the \
line layout, atomically (:func:`atomic_writer`), in bounded memory: one row at a time, the summary counted on \
the way |
| :func:`compare_reports` | baseline vs new: new failures, fixed failures, items added / missing, timing regressions; \
what is not like for like (:class:`Mismatch`: other seeds; emulated timings, other devices, clocks apart) |
| :func:`timing_sources`, :func:`timing_mismatches`, :func:`tune_mismatches` | what measured a report's timed rows \
(:class:`TimingSources`: backends, devices, clocks, seeds) and why two reports' (or one report's) timings are not \
like for like |
| :func:`provenance` | a report's provenance (its ``environment``'s ``hostname``, ``ckfmha``: version + git \
commit, ``ck``: the CK checkout's path, commit and codegen hash, ``gpus``); :func:`provenance_line` one line of it; \
:func:`merge_environments` a merged report's |
| :func:`merge_reports` | shard reports (``--ckfmha-shard K/N``) -> one report; duplicates, gaps, shards out of \
1..N, shards in a state other than ``complete`` (interrupted, stopped_early, crashed_workers, internal_error, \
running), shards whose rows hold items never run (whatever their header says) and shards of another selection \
(the ``selection`` fingerprint differs in more than ``shard.index``; the message names the key) are errors |
| :func:`convert_report` | a report in another layout (one written before the line layout, of any size) -> the \
line layout (``python -m ckfmha.runreport convert OLD.json NEW.json``; reads the old file whole, once) |

The line layout (docs/report_schema.md, "Reports at scale") is one JSON document -- every JSON reader reads it as
before -- with one row per line, so that a report of any number of rows is read and written in bounded memory:

| line | text | what the reader checks |
|---|---|---|
| 1 | ``{"schema": "ckfmha.report", "version": 2, <header keys>, "fields": [...], "rows": [`` | the header \
against the schema (the rows as ``[]``); a line 1 that ends in ``"rows": [`` is what marks the layout |
| 2 ... N+1 | one row, a JSON object on one line, ``,`` after each but the last | each row strictly parsed \
(duplicate keys, ``NaN``) and checked against the schema's ``$defs/row``; the error names the file, the line, \
``rows[i]``, the field, the value and the rule; a row id seen before (naming the first); a missing or extra comma |
| N+2 | ``], "summary": {...}}`` | the end of the rows; the keys after them (no key of the header again), the \
whole header + trailer against the schema; nothing follows this line; a file that ends before it was cut short |

Every line is at most ``ckfmha.datafile.MAX_LINE_BYTES`` (1 MiB) and strictly UTF-8.  The first pass (at load)
checks every row and keeps only counts; :attr:`RunReport.rows` of such a file is a :class:`ReportRows`, which reads
the file again at each pass (a file changed since the load is an error, not other rows).  What stays in memory per
row is the index a command needs: the row ids at load (uniqueness), the new report's id, verdict, timing and a
failing row's reason in compare, each item id and its shard in merge; no command holds the rows themselves
(measured: docs/results/2026-11-27-cpu-reports-at-scale.md, ``benchmarks/bench_reports.py``).

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
  exits 1 then);
* not like for like (:attr:`Comparison.mismatches`, listed, never raised here: ``ckfmha compare`` refuses them
  unless overridden, the HTML page flags them): the runs' ``seed`` differs; with timings compared, timed items
  measured on an emulation (:data:`EMULATED_BACKENDS`, Triton's interpreter), timed items on other devices (the
  models; GPU UUIDs do not count), median clocks more than :data:`CLOCK_TOLERANCE` apart;
* no item timed in both: :attr:`Comparison.speed_note` says so (and points at ``--ckfmha-bench``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any, overload

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
    """A loaded report: ``meta`` its header (without ``rows`` and ``summary``), ``rows`` a list (a document in
    memory, :func:`report_from_doc`) or a :class:`ReportRows` (a file in the line layout, read at each pass)."""

    path: str
    meta: dict[str, Any]
    rows: Sequence[dict[str, Any]]

    @property
    def by_id(self) -> dict[str, dict[str, Any]]:
        """Every row by id -- every row in memory: for small reports (tests, tools); the commands stream."""
        return {r["id"]: r for r in self.rows}


@dataclass(frozen=True)
class RowStats:
    """What a pass over a report's rows counted: rows, rows never run (``not_run``) and the first of them."""

    count: int
    not_run: int
    first_not_run: str | None


def row_stats(rows: Iterable[dict[str, Any]]) -> RowStats:
    """The :class:`RowStats` of rows (a :class:`ReportRows` gives the ones counted at load, without a pass)."""
    if isinstance(rows, ReportRows):
        return rows.stats
    count = not_run = 0
    first = None
    for r in rows:
        count += 1
        if r.get("verdict") == "not_run":
            not_run += 1
            first = r["id"] if first is None else first
    return RowStats(count, not_run, first)


class StreamedRows(Sequence[dict[str, Any]]):
    """Rows read as a stream at each iteration: subclasses give ``__len__`` and ``__iter__``; indexing reads up to
    the row (for tests and tools, not for loops)."""

    what = "the report"

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return list(self)[i]
        j = i + len(self) if i < 0 else i
        if not 0 <= j < len(self):
            raise IndexError(f"rows[{i}]: {self.what} has {len(self)} rows")
        return next(islice(iter(self), j, None))


class ReportRows(StreamedRows):
    """The rows of a report file in the line layout: each iteration reads the file again, one row at a time
    (rows as :func:`load_report` checked them at load; a file that changed since is a :class:`ReportError`).
    ``len()`` is known; indexing reads up to the row (for tests and tools, not for loops)."""

    def __init__(self, path: Path, stats: RowStats, identity: tuple[int, int, int]) -> None:
        self.path = path
        self.stats = stats
        self._identity = identity

    def __len__(self) -> int:
        return self.stats.count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as fh:
            if _identity(os.fstat(fh.fileno())) != self._identity:
                raise ReportError(
                    f"{self.path}: changed since it was loaded (size, time or inode differ): load it again"
                )
            fh.readline()  # the header, checked at load
            for line in fh:
                if line.startswith(b"]"):
                    return
                yield _read_measures(json.loads(line.rstrip(b"\r\n").rstrip(b",")))


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


#: the end of line 1 of the line layout (module doc): what marks it
ROWS_OPEN = '"rows": ['


def _in_line_layout(path: Path) -> bool:
    """Whether line 1 of the file ends the header with ``"rows": [`` (module doc); False when it cannot tell
    (the whole-document reader then words the problem)."""
    from ckfmha.datafile import MAX_LINE_BYTES

    try:
        with open(path, "rb") as fh:
            head = fh.readline(MAX_LINE_BYTES + 2)
    except OSError:
        return False
    return head.startswith(b"{") and head.rstrip(b"\r\n").endswith(ROWS_OPEN.encode())


def load_report(path: str | Path) -> RunReport:
    """A report file, checked (module doc): in the line layout one line at a time (:func:`load_streamed`), else
    the whole document (:func:`report_from_doc`; strict loading: :func:`ckfmha.datafile.load_json`: duplicate keys,
    not UTF-8, too deep, larger than 16 MiB, ``NaN``)."""
    from ckfmha.datafile import MAX_FILE_BYTES, DataFileError, load_json

    p = Path(path)
    if _in_line_layout(p):
        return load_streamed(p)
    try:
        doc = load_json(p)
    except DataFileError as e:
        if "larger than MAX_FILE_BYTES" in str(e):
            raise ReportError(
                f"{p}: larger than MAX_FILE_BYTES = {MAX_FILE_BYTES} bytes and not in the report's line layout "
                "(one row per line, docs/report_schema.md; reports written before it have one field per line): "
                "convert it once with `python -m ckfmha.runreport convert OLD.json NEW.json`, or merge its shards "
                "again"
            ) from None
        raise ReportError(str(e)) from None
    return report_from_doc(doc, str(p))


def _line_json(text: str, where: str) -> Any:
    """One line's JSON, strictly (:func:`ckfmha.datafile.parse_json`), its errors placed at ``where``."""
    from ckfmha.datafile import DataFileError, parse_json

    try:
        return parse_json(text, where)
    except DataFileError as e:
        raise ReportError(str(e).replace("malformed JSON at line 1 column", "malformed JSON at column")) from None


def _schema(doc: Any, source: str, definition: str | None = None, at: tuple[str | int, ...] = ()) -> None:
    from ckfmha.datafile import DataFileError, check_schema

    try:
        check_schema(doc, "run_report", source, definition, at)
    except DataFileError as e:
        raise ReportError(str(e)) from None


def load_streamed(path: str | Path) -> RunReport:
    """A report file in the line layout (module doc), checked in one pass that keeps the row ids (uniqueness) and
    counts, never the rows.  Long because every line's checks share the pass's state (the row before, the ids
    seen, the header)."""
    from ckfmha.datafile import DataFileError, read_lines

    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise ReportError(f"{p}: cannot be read ({e.strerror or e})") from None
    lines = read_lines(p)
    first: dict[str, int] = {}
    count = not_run = 0
    first_not_run: str | None = None
    trailer: dict[str, Any] | None = None
    header: dict[str, Any] = {}
    last_comma: tuple[int, bool] | None = None  # (line, ends with a comma) of the row before
    try:
        for number, text in lines:
            if number == 1:
                if not text.endswith(ROWS_OPEN):
                    raise ReportError(f"{p}: line 1 (the header): does not end with {ROWS_OPEN!r} (changed while read)")
                body = text[: -len(ROWS_OPEN)].rstrip()
                body = body[:-1] if body.endswith(",") else body
                header = _line_json(body + "}", f"{p}: line 1 (the header)")
                for key in ("rows", "summary"):
                    if key in header:
                        raise ReportError(f"{p}: line 1 (the header): top level: duplicate key {key!r}")
                _schema({**header, "rows": []}, f"{p}: line 1 (the header)")
                continue
            if trailer is not None:
                if text.strip():
                    raise ReportError(
                        f"{p}: line {number}: text after the line that ends the report (line {number - 1})"
                    )
                continue
            if text.startswith("]"):
                if last_comma is not None and last_comma[1]:
                    raise ReportError(
                        f"{p}: line {last_comma[0]} (rows[{count - 1}]): a comma after the last row (the line "
                        "layout: a comma after each row but the last)"
                    )
                rest = text[1:].strip()
                if rest == "}":
                    trailer = {}
                elif rest.startswith(","):
                    trailer = _line_json("{" + rest[1:], f"{p}: line {number} (after the rows)")
                else:
                    raise ReportError(
                        f"{p}: line {number}: {_short(text)} after the rows: expected '], \"summary\": {{...}}}}' "
                        "(the line layout, docs/report_schema.md)"
                    )
                for key in trailer:
                    if key in header or key == "rows":
                        raise ReportError(f"{p}: line {number} (after the rows): top level: duplicate key {key!r}")
                continue
            i = count
            where = f"{p}: line {number}"
            if last_comma is not None and not last_comma[1]:
                raise ReportError(
                    f"{where} (rows[{i}]): no comma after the row before it (line {last_comma[0]}): the line layout "
                    "has one row per line, a comma after each but the last"
                )
            comma = text.endswith(",")
            row = _line_json(text[:-1] if comma else text, f"{where} (rows[{i}])")
            _schema(row, where, "row", ("rows", i))
            rid = row["id"]
            if rid in first:
                raise ReportError(
                    f"{where}: rows[{i}].id: {rid!r} appears twice (first at rows[{first[rid]}], line "
                    f"{first[rid] + 2}); a row id is unique"
                )
            first[rid] = i
            count += 1
            if row["verdict"] == "not_run":
                not_run += 1
                first_not_run = rid if first_not_run is None else first_not_run
            last_comma = (number, comma)
    except DataFileError as e:
        raise ReportError(str(e)) from None
    if trailer is None:
        raise ReportError(
            f"{p}: ends without the line that closes the rows ('], \"summary\": {{...}}}}') after {count} rows: "
            "cut short"
        )
    _schema({**header, **trailer, "rows": []}, f"{p} (header and the keys after the rows)")
    meta = {k: v for k, v in header.items() if k not in ("rows", "summary")}
    return RunReport(str(p), meta, ReportRows(p, RowStats(count, not_run, first_not_run), _identity(st)))


def report_from_doc(doc: Any, source: str) -> RunReport:
    """A report document, checked: the schema ``data/schemas/run_report.schema.yaml`` (the ``ckfmha.report``
    format, a readable version, rows with an id and a verdict, the types of the fields compare / merge / summarize
    read), then what a schema cannot see: each row id appears once."""
    _schema(doc, source)
    rows = [_read_measures(r) for r in doc["rows"]]
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        if r["id"] in first:
            where = f"{source}: rows[{i}].id: {r['id']!r}"
            raise ReportError(f"{where} appears twice (first at rows[{first[r['id']]}]); a row id is unique")
        first[r["id"]] = i
    meta = {k: v for k, v in doc.items() if k not in ("rows", "summary")}
    return RunReport(source, meta, rows)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: the row fields that hold a measure (the schema's ``measure``): a word of NONFINITE_WORDS there is read as its float
MEASURE_FIELDS = ("max_abs_err", "max_rel_err", "tflops")


def _read_measures(row: dict[str, Any]) -> dict[str, Any]:
    if not any(isinstance(row.get(k), str) and row[k] in NONFINITE_WORDS for k in MEASURE_FIELDS):
        return row
    return {
        k: NONFINITE_WORDS[v] if k in MEASURE_FIELDS and isinstance(v, str) and v in NONFINITE_WORDS else v
        for k, v in row.items()
    }


# --------------------------------------------------------------------------------------------- provenance
#: seconds one ``git`` call may take before the commit is given as unknown (null)
GIT_TIMEOUT_S = 10.0
#: ``environment`` keys that hold lists: a merged report's ``environment`` has their union (:func:`merge_environments`)
ENV_LIST_KEYS = ("devices", "clocks", "gpus")


def git_identity(directory: str | os.PathLike, tracked: str) -> dict[str, Any] | None:
    """``{"commit": <git rev-parse HEAD>, "dirty": <tracked files changed>}`` of the git checkout that holds
    ``directory`` and tracks ``tracked`` (a path relative to ``directory``: a package installed inside another
    project's checkout is not that project); None when it is not one, git is missing, or a call fails or takes
    longer than :data:`GIT_TIMEOUT_S`."""
    import subprocess

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(directory), *args],
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "--", tracked) is None:
        return None
    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    if head is None:
        return None
    return {"commit": head.strip(), "dirty": None if status is None else bool(status.strip())}


@functools.lru_cache(maxsize=1)
def ckfmha_identity() -> dict[str, Any]:
    """``{"version", "commit", "dirty"}`` of this ckfmha: its version, and the git commit (and whether tracked
    files differ from it) of the checkout it runs from; commit and dirty null when it is not a git checkout.
    Once per process."""
    import ckfmha

    package = Path(ckfmha.__file__).resolve().parent
    git = git_identity(package, "__init__.py") or {"commit": None, "dirty": None}
    return {"version": ckfmha.__version__, **git}


@functools.lru_cache(maxsize=8)
def ck_identity(root: str | None) -> dict[str, Any] | None:
    """``{"root", "commit", "dirty", "codegen"}`` of the CK checkout at ``root`` (None without one): its path,
    its git commit and dirty flag (null when it is not a git checkout) and the sha256 (16 hex) of its codegen
    sources (:func:`ckfmha.cktree.codegen_hash`; null when unreadable).  Once per checkout and process."""
    if root is None:
        return None
    from ckfmha.cktree import GENERATOR, CKTreeError, codegen_hash

    try:
        codegen: str | None = codegen_hash(root)[:16]
    except CKTreeError:
        codegen = None
    git = git_identity(root, str(GENERATOR)) or {"commit": None, "dirty": None}
    return {"root": str(root), **git, "codegen": codegen}


def gpu_uuids(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct GPU UUIDs the rows ran on (their ``gpu``: ``<index>:<uuid>``; the index is the worker's own)."""
    return sorted({str(r["gpu"]).split(":", 1)[-1] for r in rows if r.get("gpu")})


def provenance(ck_root: str | os.PathLike | None, rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What identifies where a report's results come from (its ``environment``'s provenance keys): ``hostname``,
    ``ckfmha`` (:func:`ckfmha_identity`), ``ck`` (:func:`ck_identity`) and ``gpus`` (:func:`gpu_uuids`).  Git
    runs in subprocesses; nothing here imports torch or touches a GPU."""
    import socket

    return {
        "hostname": socket.gethostname(),
        "ckfmha": ckfmha_identity(),
        "ck": ck_identity(None if ck_root is None else str(ck_root)),
        "gpus": gpu_uuids(rows),
    }


def merge_environments(envs: Sequence[Any]) -> dict[str, Any]:
    """A merged report's ``environment`` from its shards' (in shard order): the union of the list keys
    (:data:`ENV_LIST_KEYS`), any other key's value where every shard has the same, else null and the key named in
    ``differs_by_shard`` (the shards' own are in the merged report's ``shard_environments``)."""
    dicts = [e if isinstance(e, dict) else {} for e in envs]
    out: dict[str, Any] = {}
    differs: list[str] = []
    for key in dict.fromkeys(k for e in dicts for k in e if k != "differs_by_shard"):
        values = [e.get(key) for e in dicts]
        lists = [v for v in values if isinstance(v, list)]
        if key in ENV_LIST_KEYS and len(lists) == len(values):
            out[key] = sorted({str(x) for v in lists for x in v})
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        else:
            out[key] = None
            differs.append(key)
    out["differs_by_shard"] = differs
    return out


def provenance_line(meta: Mapping[str, Any]) -> str:
    """One line naming where a report's results come from: ckfmha version and commit, host, CK checkout, GPUs,
    devices and seed ("?" for what the report does not record)."""
    env = meta.get("environment") if isinstance(meta.get("environment"), dict) else {}
    assert isinstance(env, dict)
    ck = env.get("ckfmha") if isinstance(env.get("ckfmha"), dict) else {}
    assert isinstance(ck, dict)
    commit = ck.get("commit")
    where = f"{commit[:12]}{' dirty' if ck.get('dirty') else ''}" if commit else "no git commit"
    if "ckfmha" not in env:
        where = "no provenance recorded: a report of an older ckfmha"
    parts = [f"ckfmha {ck.get('version') or '?'} ({where})", f"host {env.get('hostname') or '?'}"]
    tree = env.get("ck")
    if isinstance(tree, dict):
        rev = tree.get("commit")
        rev_text = f"{rev[:12]}{' dirty' if tree.get('dirty') else ''}" if rev else f"codegen {tree.get('codegen')}"
        parts.append(f"CK {tree.get('root')} ({rev_text})")
    else:
        parts.append("CK none" if "ck" in env else "CK ?")
    if env.get("differs_by_shard"):
        parts.append(f"differs by shard: {', '.join(env['differs_by_shard'])}")
    gpus = env.get("gpus")
    parts.append(f"GPUs {', '.join(gpus)}" if gpus else ("GPUs none" if gpus == [] else "GPUs ?"))
    parts.append(f"devices {', '.join(env.get('devices') or []) or '?'}")
    parts.append(f"seed {meta.get('seed', '?')}")
    return "; ".join(parts)


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


# ------------------------------------------------------------------------------------- what measured timings
#: backends whose timings measure an emulation, not a kernel on a device: compare and tune refuse them unless
#: ``--allow-emulated``; a row whose ``device`` names an interpreter (Triton's) is emulated too
EMULATED_BACKENDS = ("cpu",)
#: how far apart (a fraction) two runs' median clocks may lie before ``compare`` refuses their timings
CLOCK_TOLERANCE = 0.05
#: the override flag of each kind of mismatch (:class:`Mismatch`)
OVERRIDES = {"emulated": "--allow-emulated", "seed": "--force", "devices": "--force", "clocks": "--force"}


@dataclass(frozen=True)
class Mismatch:
    """Why timings (or two runs) are not like for like: ``key`` (a key of :data:`OVERRIDES`), ``text`` (the
    reason, naming the values) and ``flag``, the option that accepts it all the same."""

    key: str
    text: str

    @property
    def flag(self) -> str:
        return OVERRIDES[self.key]

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "text": self.text, "flag": self.flag}


def _mhz(clocks: str) -> list[float]:
    """The MHz figures of a ``clocks`` reading, in order (``sm, mem: 1980 MHz, 2619 MHz`` -> [1980, 2619])."""
    import re

    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s*MHz", clocks)]


@dataclass
class TimingSources:
    """What measured a report's timed rows (passed, ``timed`` true): how many, and per backend, device, clocks
    reading and seed how many rows (distinct values: a few per report, whatever its size)."""

    rows: int = 0
    emulated: int = 0
    backends: dict[str, int] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    clocks: dict[str, int] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)

    def add(self, row: dict[str, Any]) -> None:
        if _timing(row) is None:
            return
        self.rows += 1
        backend, device = str(row.get("backend") or ""), str(row.get("device") or "")
        self.emulated += backend in EMULATED_BACKENDS or "interpreter" in device.lower()
        for counts, value in (
            (self.backends, backend),
            (self.devices, device),
            (self.clocks, str(row.get("clocks") or "")),
            (self.seeds, str(row.get("seed", ""))),
        ):
            if value:
                counts[value] = counts.get(value, 0) + 1

    def median_mhz(self) -> list[float]:
        """Per figure of the clocks readings (SM, memory, ...), the median over the timed rows that have one."""
        per: list[list[tuple[float, int]]] = []
        for text, n in self.clocks.items():
            for i, mhz in enumerate(_mhz(text)):
                per += [[] for _ in range(i + 1 - len(per))]
                per[i].append((mhz, n))
        out = []
        for pairs in per:
            pairs.sort()
            half, seen = sum(n for _, n in pairs) / 2, 0
            for mhz, n in pairs:
                seen += n
                if seen >= half:
                    out.append(mhz)
                    break
        return out

    def emulated_text(self, name: str) -> str:
        return (
            f"{name}: {self.emulated} of {self.rows} timed items ran on an emulation (backend "
            f"{', '.join(sorted(self.backends))}; devices {', '.join(sorted(self.devices)) or '?'}): their times "
            "measure NumPy or an interpreter, not a kernel on a GPU"
        )


def timing_sources(rows: Iterable[dict[str, Any]]) -> TimingSources:
    """The :class:`TimingSources` of rows (one pass)."""
    out = TimingSources()
    for r in rows:
        out.add(r)
    return out


def timing_mismatches(a: TimingSources, b: TimingSources, names: tuple[str, str]) -> list[Mismatch]:
    """Why the timings of two reports (``names``: how to call them) are not like for like: either measured on an
    emulation; the devices of their timed items differ (the model: a card's UUID does not matter); their median
    clocks differ by more than :data:`CLOCK_TOLERANCE`.  Empty when either has no timed item."""
    if not a.rows or not b.rows:
        return []
    out = [Mismatch("emulated", s.emulated_text(n)) for s, n in zip((a, b), names) if s.emulated]
    if set(a.devices) != set(b.devices):
        out.append(
            Mismatch(
                "devices",
                f"devices: the timed items ran on {', '.join(sorted(a.devices)) or '?'} in {names[0]} and on "
                f"{', '.join(sorted(b.devices)) or '?'} in {names[1]}: times of different devices",
            )
        )
    ma, mb = a.median_mhz(), b.median_mhz()
    for i, (x, y) in enumerate(zip(ma, mb)):
        if max(x, y) > 0 and abs(x - y) / max(x, y) > CLOCK_TOLERANCE:
            out.append(
                Mismatch(
                    "clocks",
                    f"clocks: median clock #{i + 1} of the timed items is {x:g} MHz in {names[0]} and {y:g} MHz in "
                    f"{names[1]} (more than {CLOCK_TOLERANCE:.0%} apart; readings {sorted(a.clocks)} vs "
                    f"{sorted(b.clocks)}): lock the clocks, or compare runs at the same clocks",
                )
            )
            break
    return out


def seed_mismatch(baseline: RunReport, new: RunReport) -> Mismatch | None:
    """The runs' ``seed`` differs (both given): their items ran on other inputs."""
    a, b = baseline.meta.get("seed"), new.meta.get("seed")
    if a is None or b is None or a == b:
        return None
    return Mismatch("seed", f"seed: {a!r} in {baseline.path}, {b!r} in {new.path}: the items ran on other inputs")


def tune_mismatches(src: TimingSources, name: str) -> tuple[list[Mismatch], list[str]]:
    """What ``ckfmha tune`` refuses in one report's timings (emulated; timed items on more than one device or
    seed: the kernels of a shape would be ranked by times of different devices or inputs) and what it only
    warns about (clocks readings more than :data:`CLOCK_TOLERANCE` apart within the run: boost clocks move
    between items of one machine)."""
    refuse = [Mismatch("emulated", src.emulated_text(name))] if src.emulated else []
    for key, counts in (("devices", src.devices), ("seed", src.seeds)):
        if len(counts) > 1:
            refuse.append(
                Mismatch(key, f"{name}: {key}: the timed items ran with {len(counts)} values: {sorted(counts)}")
            )
    warn = []
    figures = [_mhz(c) for c in src.clocks]
    sm = [f[0] for f in figures if f]
    if sm and max(sm) > 0 and (max(sm) - min(sm)) / max(sm) > CLOCK_TOLERANCE:
        warn.append(
            f"{name}: clocks: the timed items saw {min(sm):g} ... {max(sm):g} MHz (more than {CLOCK_TOLERANCE:.0%} "
            "apart): rankings of kernels timed at other clocks are less certain; lock the clocks"
        )
    return refuse, warn


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
    #: whether timings were compared at all (False: ``verdicts_only``)
    timings: bool = True
    #: timed (passed, ``timed`` true) rows of each report
    baseline_timed: int = 0
    new_timed: int = 0
    #: why the runs or their timings are not like for like (:func:`seed_mismatch`, :func:`timing_mismatches`)
    mismatches: list[Mismatch] = field(default_factory=list)
    #: :func:`provenance_line` of each report
    baseline_provenance: str = ""
    new_provenance: str = ""

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.missing or self.slower)

    def refusals(self, allowed: Iterable[str] = ()) -> list[Mismatch]:
        """The mismatches whose override flag is not in ``allowed`` (``ckfmha compare`` refuses those)."""
        ok = set(allowed)
        return [m for m in self.mismatches if m.flag not in ok]

    @property
    def speed_note(self) -> str:
        """Why no speed was compared ("" when some was): no timed item in either or both reports."""
        if self.timed or not self.timings:
            return "" if self.timings else "timings not compared (--verdicts-only)"
        which = [n for n, c in (("the baseline", self.baseline_timed), ("the new report", self.new_timed)) if not c]
        why = (
            f"{' and '.join(which)} {'has' if len(which) == 1 else 'have'} no timed items"
            if which
            else ("no item is timed and passed in both reports")
        )
        return f"speed not compared: {why} (time the runs with --ckfmha-bench)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "new": self.new,
            "threshold": self.threshold,
            "regressed": self.regressed,
            "compared": self.compared,
            "timed": self.timed,
            "speed_note": self.speed_note,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "baseline_provenance": self.baseline_provenance,
            "new_provenance": self.new_provenance,
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
            f"both, threshold {self.threshold:.0%}",
            f"baseline: {self.baseline_provenance}",
            f"new:      {self.new_provenance}",
        ]
        lines += [f"WARNING: not like for like, compared anyway ({m.flag}): {m.text}" for m in self.mismatches]
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
        verdict = "REGRESSED" if self.regressed else "no regression"
        lines.append(f"{verdict} (verdicts only: {self.speed_note})" if self.speed_note else verdict)
        return "\n".join(lines)


#: one string object per verdict: compare's index shares them instead of a copy per row
_VERDICT_WORDS = {v: v for v in VERDICTS}


def _brief(row: dict[str, Any]) -> tuple[str, str, tuple[float, float, float] | None]:
    """What compare keeps of a row (its per-row index): the verdict, the reason of a failing row (300 characters,
    as the comparison shows it) and the timing."""
    verdict = _VERDICT_WORDS.get(row.get("verdict"), str(row.get("verdict")))  # type: ignore[arg-type]
    reason = str(row.get("reason", ""))[:300] if verdict in FAILING else ""
    return verdict, reason, _timing(row)


def _compare_timing(
    cmp: Comparison, rid: str, a: tuple[float, float, float] | None, b: tuple[float, float, float] | None
) -> None:
    """One item's timings (baseline ``a``, new ``b``: median, fastest, slowest) into ``cmp``: counted, and
    slower / faster when past the threshold and outside both spreads (module doc)."""
    if a is None or b is None or a[0] <= 0 or b[0] <= 0:  # a zero median (below the clock) has no ratio
        return
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
    if change > cmp.threshold and b[1] > a[2]:
        cmp.slower.append(entry)
    elif change < -cmp.threshold and b[2] < a[1]:
        cmp.faster.append(entry)


def compare_reports(
    baseline: RunReport, new: RunReport, threshold: float = DEFAULT_THRESHOLD, verdicts_only: bool = False
) -> Comparison:
    """See the module doc.  One pass over each report's rows; in memory: the new report's :func:`_brief` per row
    (an id, a verdict and three numbers; a failing row's reason; an entry leaves when the baseline's pass meets its
    id) and what the comparison lists.  ``verdicts_only``: no timing is compared (nor checked for provenance).
    The mismatches (seeds; with timings: emulation, devices, clocks) are listed, never raised: ``ckfmha compare``
    refuses them, the HTML page flags them."""
    if not threshold >= 0:
        raise ReportError(f"threshold: {threshold!r} must be >= 0 (a fraction: 0.1 = 10% slower)")
    cmp = Comparison(baseline.path, new.path, threshold, timings=not verdicts_only)
    cmp.baseline_state, cmp.new_state = baseline.meta.get("state"), new.meta.get("state")
    cmp.baseline_provenance, cmp.new_provenance = provenance_line(baseline.meta), provenance_line(new.meta)
    src_old, src_new = TimingSources(), TimingSources()
    new_rows = {}
    for r in new.rows:
        new_rows[r["id"]] = _brief(r)
        src_new.add(r)
    for old in baseline.rows:
        src_old.add(old)
        rid = old["id"]
        cur = new_rows.pop(rid, None)  # ids are unique: what stays is what the baseline does not have
        if cur is None or cur[0] == "not_run":
            if old.get("verdict") != "not_run":
                cmp.missing.append(rid)
            continue
        verdict, reason, b = cur
        cmp.compared += 1
        was_failing, failing = old.get("verdict") in FAILING, verdict in FAILING
        if failing and not was_failing:
            cmp.new_failures.append(
                {"id": rid, "baseline_verdict": old.get("verdict"), "verdict": verdict, "reason": reason}
            )
        elif was_failing and verdict == "passed":
            cmp.fixed.append({"id": rid, "baseline_verdict": old["verdict"], "verdict": "passed"})
        if not verdicts_only:
            _compare_timing(cmp, rid, _timing(old), b)
    for rid, (verdict, reason, _) in new_rows.items():  # in the new report's order
        if verdict != "not_run":
            cmp.added.append(rid)
            if verdict in FAILING:
                cmp.new_failures.append(
                    {"id": rid, "baseline_verdict": "(absent)", "verdict": verdict, "reason": reason}
                )
    cmp.slower.sort(key=lambda d: -d["change"])
    cmp.faster.sort(key=lambda d: d["change"])
    cmp.baseline_timed, cmp.new_timed = src_old.rows, src_new.rows
    seed = seed_mismatch(baseline, new)
    cmp.mismatches = [seed] if seed is not None else []
    if not verdicts_only:
        cmp.mismatches += timing_mismatches(src_old, src_new, (baseline.path, new.path))
    return cmp


# ------------------------------------------------------------------------------------------------ merge
class MergedRows(StreamedRows):
    """The rows of a merged report: each shard's rows in shard order, read at each pass (never all in memory)."""

    what = "the merged report"

    def __init__(self, shards: Sequence[RunReport]) -> None:
        self._shards = list(shards)
        self._count = sum(len(s.rows) for s in self._shards)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for s in self._shards:
            yield from s.rows


def merge_reports(reports: Sequence[RunReport]) -> dict[str, Any]:
    """One report document from the shard reports of one sweep (see the module doc): every shard 1..N exactly
    once, each complete, the same sweep settings, no item in two shards (one pass over the shards' rows; in
    memory: each item id and its shard).  Its ``rows`` are a :class:`MergedRows` (the shards' rows, read when
    written: :func:`write_report_doc`)."""
    shards, count = _checked_shards(reports)
    owner: dict[str, int] = {}
    for k in sorted(shards):
        for r in shards[k].rows:
            if r["id"] in owner:
                raise ReportError(f"merge: item {r['id']!r} is in {shards[owner[r['id']]].path} and {shards[k].path}")
            owner[r["id"]] = k
    del owner
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
            # provenance: each shard's own environment, and their merge (merge_environments)
            "environment": merge_environments([shards[k].meta.get("environment") for k in sorted(shards)]),
            "shard_environments": [
                {"shard": k, "path": shards[k].path, "environment": shards[k].meta.get("environment")}
                for k in sorted(shards)
            ],
        }
    )
    return {**meta, "rows": MergedRows([shards[k] for k in sorted(shards)])}


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
    stats = row_stats(rep.rows)
    if stats.not_run:
        raise ReportError(
            f"{rep.path}: rows: {stats.not_run} item(s) of {what} never ran (first {stats.first_not_run!r}) although "
            "its state says complete: resume it with --ckfmha-resume, then merge"
        )
    collected, completed = rep.meta.get("collected"), rep.meta.get("completed")
    if isinstance(collected, int) and stats.count != collected:
        raise ReportError(f"{rep.path}: rows: {stats.count} rows for {collected} collected items ({what})")
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


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[IO[str]]:
    """A text file to write ``path`` through: a temporary file in the same directory, renamed over ``path`` when
    the block ends without an exception (removed when it raises): a reader sees the old file or the new one,
    never a truncated one (a full disk leaves the old file and raises OSError).  The file keeps the mode of the
    one it replaces, or gets the umask's (a published page stays readable)."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_writer`)."""
    with atomic_writer(path) as fh:
        fh.write(text)
    return Path(path)


class Summary:
    """The report's ``summary``, counted one row at a time (:meth:`add`, then :attr:`families`): per family a
    count per verdict, the worst error (largest max_abs_err) and the best TFLOPS."""

    def __init__(self) -> None:
        self.families: dict[str, dict[str, Any]] = {}

    def add(self, r: dict[str, Any]) -> None:
        fam = r.get("family") or "?"
        s = self.families.get(fam)
        if s is None:
            s = self.families[fam] = {
                **{v: 0 for v in VERDICTS},
                "worst_abs_err": None,
                "worst_id": "",
                "best_tflops": None,
                "best_id": "",
            }
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


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: a count per verdict, the worst error (largest max_abs_err) and the best TFLOPS."""
    out = Summary()
    for r in rows:
        out.add(r)
    return out.families


def write_report(
    path: str | Path, meta: Mapping[str, Any], rows: Iterable[dict[str, Any]], fields: Sequence[str] | None = None
) -> tuple[Path, int]:
    """Write a report file in the line layout (module doc) atomically: ``schema`` and ``version`` first, then
    ``meta`` (less ``rows``, ``summary``, ``fields``, ``schema``, ``version``), ``fields`` (default: the first row's
    keys), one line per row in the order ``rows`` gives them, the summary counted on the way.  Returns the path
    and the number of rows.  Memory: one row at a time."""
    it = iter(rows)
    head = next(it, None)
    names = list(fields) if fields is not None else list(head.keys() if head is not None else ())
    rest = {k: v for k, v in meta.items() if k not in ("rows", "summary", "fields", "schema", "version")}
    header = {"schema": REPORT_SCHEMA, "version": max(READABLE_VERSIONS), **rest, "fields": names}
    summary = Summary()
    count = 0
    with atomic_writer(path) as fh:
        fh.write(dumps_line(header)[:-1] + ", " + ROWS_OPEN)
        for part in ([head] if head is not None else []), it:
            for row in part:
                fh.write(("\n" if count == 0 else ",\n") + dumps_line(row))
                summary.add(row)
                count += 1
        fh.write('\n], "summary": ' + dumps_line(summary.families) + "}\n")
    return Path(path), count


def write_report_doc(doc: dict[str, Any], path: str | Path) -> Path:
    """Write a report document (schema, version, summary and field order recomputed) atomically, in the line
    layout (:func:`write_report`)."""
    return write_report(path, doc, doc["rows"], doc.get("fields"))[0]


def rows_of(paths: Iterable[str | Path]) -> Iterator[dict[str, Any]]:
    """The rows of the reports, one after another (read one at a time)."""
    for p in paths:
        yield from load_report(p).rows


def convert_report(source: str | Path, target: str | Path) -> tuple[Path, int]:
    """A report in any layout (one written before the line layout, of any size: read whole, once) -> ``target``
    in the line layout; checked as :func:`report_from_doc` checks a document."""
    from ckfmha.datafile import DataFileError, parse_json, read_text

    try:
        doc = parse_json(read_text(source, unlimited=True), str(source))
    except DataFileError as e:
        raise ReportError(str(e)) from None
    rep = report_from_doc(doc, str(source))
    return write_report(target, rep.meta, rep.rows, rep.meta.get("fields"))


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


def dumps_line(obj: Any) -> str:
    """:func:`dumps` on one line (a row of the line layout): JSON escapes every newline inside strings."""
    try:
        return json.dumps(obj, allow_nan=False, default=_default)
    except ValueError:  # a non-finite float: as its word
        return json.dumps(_finite_json(obj), default=_default)


def _default(v: Any) -> Any:
    return _finite_json(float(v)) if _is_real(v) else str(v)


def _is_real(v: Any) -> bool:
    """A number type JSON does not know (numpy's float32, ...), written as the float it is."""
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, (str, bytes))


def _main(argv: Sequence[str]) -> int:
    """``python -m ckfmha.runreport convert OLD.json NEW.json`` (:func:`convert_report`)."""
    import sys

    if len(argv) != 3 or argv[0] != "convert":
        sys.stderr.write("usage: python -m ckfmha.runreport convert OLD.json NEW.json\n")
        return 2
    try:
        path, count = convert_report(argv[1], argv[2])
    except (ReportError, OSError) as e:
        sys.stderr.write(f"ckfmha.runreport convert: {e}\n")
        return 2
    sys.stdout.write(f"ckfmha.runreport convert: {count} rows -> {path}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a subprocess in the tests
    import sys

    raise SystemExit(_main(sys.argv[1:]))
