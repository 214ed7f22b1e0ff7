"""``ckfmha adequacy``: does a matrix category catch every catalogued fault? (registered by :mod:`ckfmha.cli`)

    ckfmha adequacy --category smoke [--backend cpu|triton] [--fault NAME ...] [--family F ...] [--first N]
                    [--workers N|auto]

Runs the category through the pytest plugin -- the plugin's own items, dispatcher plans, isolation and validator
-- on ``--backend`` once without a fault (the baseline) and once per fault of :mod:`ckfmha.faults` that the
backend hosts (``--ckfmha-fault NAME``), each time over the problem families of the fault's row for that backend
(``--family`` narrows them further), and prints per fault whether an item caught it (an item that passes in the
baseline and fails, crashes or times out with the fault) and the first ``--first`` items that did; a fault run
stops after that many failures (``--maxfail``).  A fault the catalogue says the backend cannot host is printed
with the catalogue's reason, not run.

| outcome | meaning | exit status |
|---|---|---|
| ``caught`` | some item that passes without the fault fails with it | 0 when every fault run is caught |
| ``ESCAPED`` | every item of the fault's families passed (or was skipped) with the fault | 1 |
| ``ERROR`` | the fault run did not finish with a report (its pytest output's tail is printed) | 1 |
| ``n/a`` | ``--family`` selects none of the fault's families (not run, not counted) | -- |
| ``n/i`` | the catalogue says the backend cannot host the fault (its reason is printed; not run; counted apart) | -- |

Bad arguments (an unknown fault or family, a backend with no fault hooks -- the backends are
:data:`ckfmha.faults.INJECTION_BACKENDS` --, a ``--fault`` the backend cannot host, a ``--family`` no selected
fault applies to) exit with 2, naming the option, the value and the rule; a baseline whose run ends without a
report exits 1.
Each run is ``python -m pytest`` in a scratch directory (``--rootdir`` there, so no project's configuration or
tests join in) with ``--ckfmha-report``, whose rows the command reads (:func:`ckfmha.runreport.load_report`); the
reference cache (``--ckfmha-cache-dir``, default the usual one) is shared by all runs.  pytest is needed (the
``dev`` extra).  ``--backend triton`` needs a GPU (or Triton's interpreter) like any Triton run; without ``--arch``
its runs use the arch the plugin detects on the GPU (``sm90`` on an H100), the cpu backend's the default arch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CAUGHT_VERDICTS = ("failed", "error", "crashed", "timeout")
DEFAULT_FIRST = 3
OUTPUT_TAIL_LINES = 15


@dataclass
class RunOutcome:
    """One pytest run of the category: its rows' verdicts by item id (None: no report) and its output."""

    verdicts: dict[str, str] | None
    output: str
    seconds: float
    returncode: int


@dataclass
class FaultResult:
    name: str
    families: tuple[str, ...]
    status: str  # caught | ESCAPED | ERROR | n/a | n/i
    caught_by: list[str] = field(default_factory=list)
    ran: int = 0
    seconds: float = 0.0
    note: str = ""


def pytest_run(args: argparse.Namespace, families: tuple[str, ...], fault: str | None, maxfail: int) -> RunOutcome:
    """The category over ``families`` through the plugin (``fault`` injected when given)."""
    with tempfile.TemporaryDirectory(prefix="ckfmha-adequacy-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini), "--rootdir", tmp]
        cmd += ["--ckfmha-category", args.category, "--ckfmha-backend", args.backend, "--ckfmha-report", str(report)]
        cmd += [f"--ckfmha-family={f}" for f in families]
        cmd += [f"--ckfmha-matrix={Path(m).resolve()}" for m in args.matrix]
        if args.arch:
            cmd.append(f"--ckfmha-arch={args.arch}")
        if args.cache_dir:
            cmd.append(f"--ckfmha-cache-dir={Path(args.cache_dir).resolve()}")
        if fault is not None:
            cmd += [f"--ckfmha-fault={fault}", f"--maxfail={maxfail}"]
        workers = getattr(args, "workers", None)
        if workers:
            cmd += ["-n", str(workers)]
        env = dict(os.environ)
        if args.backend == "cpu":  # no GPU arch detection for the cpu backend; Triton runs the detected GPU's arch
            env["CKFMHA_NO_DETECT"] = "1"
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        verdicts = None
        if report.is_file():
            from ckfmha.runreport import load_report

            verdicts = {str(r["id"]): str(r["verdict"]) for r in load_report(report).rows}
        return RunOutcome(verdicts, proc.stdout + proc.stderr, seconds, proc.returncode)


def _tail(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-OUTPUT_TAIL_LINES:])


def _check_backend(backend: str) -> None:
    from ckfmha.faults import INJECTION_BACKENDS

    if backend not in INJECTION_BACKENDS:
        raise ValueError(
            f"--backend: {backend!r} has no fault hooks; faults are injected into: {', '.join(INJECTION_BACKENDS)}"
        )


def _selected_faults(args: argparse.Namespace) -> list:
    """The faults to judge: every catalogued one (those the backend cannot host are reported, not run), or each
    ``--fault``, which must be one the backend hosts."""
    from ckfmha.faults import FaultError, catalogue, injectable_fault

    if not args.fault:
        return list(catalogue().values())
    out = []
    for name in args.fault:
        try:
            out.append(injectable_fault(name, args.backend, "--fault"))
        except FaultError as e:
            raise ValueError(str(e)) from None
    return out


def _selected_families(args: argparse.Namespace) -> tuple[str, ...] | None:
    from ckfmha.families import FamilyError, problem_family

    if not args.family:
        return None
    out: list[str] = []
    for item in (part.strip() for value in args.family for part in value.split(",") if part.strip()):
        try:
            fam = problem_family(item)
        except FamilyError as e:
            raise ValueError(f"--family: {item!r} is not a problem family ({e})") from None
        if fam not in out:
            out.append(fam)
    return tuple(out)


def _judge(fault, families: tuple[str, ...], run: RunOutcome, baseline_failing: set[str], first: int) -> FaultResult:
    res = FaultResult(fault.name, families, "ESCAPED", seconds=run.seconds)
    if run.verdicts is None:
        res.status, res.note = "ERROR", f"pytest exited with {run.returncode} and wrote no report:\n{_tail(run.output)}"
        return res
    res.ran = sum(v != "not_run" for v in run.verdicts.values())
    res.caught_by = [i for i, v in run.verdicts.items() if v in CAUGHT_VERDICTS and i not in baseline_failing][:first]
    if res.caught_by:
        res.status = "caught"
    else:
        skipped = sum(v == "skipped" for v in run.verdicts.values())
        res.note = f"{res.ran} item(s) ran, {skipped} skipped, none failed"
    return res


def _print_result(r: FaultResult, out) -> None:
    fams = ",".join(r.families)
    if r.status == "caught":
        out.write(f"caught   {r.name:32s} [{fams}] {r.seconds:5.1f} s  by: {', '.join(r.caught_by)}\n")
    elif r.status in ("n/a", "n/i"):
        out.write(f"{r.status:8s} {r.name:32s} {r.note}\n")
    else:
        out.write(f"{r.status:8s} {r.name:32s} [{fams}] {r.seconds:5.1f} s  {r.note}\n")
    out.flush()


def _cmd_adequacy(args: argparse.Namespace) -> int:
    """Baseline, then one run per fault (module doc)."""
    _check_backend(args.backend)
    if args.first < 1:
        raise ValueError(f"--first: {args.first} must be >= 1")
    if args.workers is not None and args.workers != "auto" and not (args.workers.isdigit() and int(args.workers) >= 1):
        raise ValueError(f"--workers: {args.workers!r} must be a count >= 1 or 'auto' (pytest-xdist's -n)")
    faults = _selected_faults(args)
    chosen = _selected_families(args)
    rows = {f.name: f.injection(args.backend) for f in faults}
    plans = [(f, tuple(x for x in rows[f.name].families if chosen is None or x in chosen)) for f in faults]
    if not any(fams for _, fams in plans):
        raise ValueError(
            f"--family: {', '.join(chosen or ())} selects none of the families of the selected fault(s) "
            f"({', '.join(sorted({x for r in rows.values() for x in r.families}))})"
        )
    out = sys.stdout
    union = tuple(dict.fromkeys(x for _, fams in plans for x in fams))
    base = pytest_run(args, union, None, 0)
    if base.verdicts is None:
        sys.stderr.write(f"ckfmha adequacy: error: the baseline run wrote no report:\n{_tail(base.output)}\n")
        return EXIT_FAILED
    failing = {i for i, v in base.verdicts.items() if v in CAUGHT_VERDICTS}
    counts = {v: sum(x == v for x in base.verdicts.values()) for v in ("passed", "skipped")}
    out.write(
        f"baseline: category {args.category}, backend {args.backend}, families {','.join(union)}: "
        f"{len(base.verdicts)} items ({counts['passed']} passed, {counts['skipped']} skipped, {len(failing)} failing "
        f"without a fault) in {base.seconds:.1f} s\n"
    )
    if failing:
        out.write(f"  failing without a fault (they catch nothing): {', '.join(sorted(failing)[:5])}\n")
    results = []
    for fault, fams in plans:
        reason = rows[fault.name].reason
        if reason is not None:
            r = FaultResult(fault.name, fams, "n/i", note=f"not injectable into the {args.backend} backend: {reason}")
        elif not fams:
            r = FaultResult(
                fault.name, fams, "n/a", note=f"--family selects none of {','.join(rows[fault.name].families)}"
            )
        else:
            run = pytest_run(args, fams, fault.name, args.first + len(failing))
            r = _judge(fault, fams, run, failing, args.first)
        results.append(r)
        _print_result(r, out)
    n = {s: sum(r.status == s for r in results) for s in ("caught", "ESCAPED", "ERROR", "n/a", "n/i")}
    not_applicable = f", {n['n/a']} not applicable" if n["n/a"] else ""
    not_injectable = f", {n['n/i']} not injectable into {args.backend}" if n["n/i"] else ""
    out.write(
        f"{len(results)} fault(s): {n['caught']} caught, {n['ESCAPED']} escaped, {n['ERROR']} error(s)"
        f"{not_applicable}{not_injectable}\n"
    )
    return EXIT_FAILED if n["ESCAPED"] or n["ERROR"] else EXIT_OK


def add_commands(sub) -> None:
    from ckfmha.categories import CATEGORIES

    p = sub.add_parser(
        "adequacy",
        help="run a matrix category once per catalogued fault (docs/faults.md) and say which faults its items "
        "catch (exit 1 when one escapes)",
    )
    p.add_argument("--category", required=True, choices=CATEGORIES, help="the matrix category to judge")
    p.add_argument(
        "--backend", default="cpu", help="the backend the faults are injected into: cpu (the default) or triton"
    )
    p.add_argument("--fault", action="append", default=[], help="only this catalogued fault; repeatable")
    p.add_argument(
        "--family", action="append", default=[], help="only these problem families; repeatable or comma-separated"
    )
    p.add_argument("--matrix", action="append", default=[], help="matrix files/directories instead of the packaged")
    p.add_argument("--arch", default=None, help="kernel space (default: the plugin's default arch)")
    p.add_argument("--cache-dir", default=None, help="the plugin's build + reference cache root")
    p.add_argument(
        "--workers",
        default=None,
        metavar="N|auto",
        help="run each pytest run with pytest-xdist's -n N (default: one process; a fault run's --maxfail then "
        "stops it after about that many failures)",
    )
    p.add_argument(
        "--first",
        type=int,
        default=DEFAULT_FIRST,
        help=f"items listed per caught fault; a fault run stops after that many failures (default {DEFAULT_FIRST})",
    )
    p.set_defaults(func=_cmd_adequacy)
