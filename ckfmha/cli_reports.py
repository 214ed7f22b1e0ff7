"""The report sub-commands of ``ckfmha`` (registered by :mod:`ckfmha.cli`; implementations load on use).

    ckfmha compare BASELINE.json NEW.json [--threshold 0.10] [--format text|json] [--allow-emulated] [--force]
                   [--verdicts-only]
    ckfmha report RUN.json [--baseline OLD.json] -o report.html
    ckfmha merge SHARD1.json SHARD2.json ... -o ALL.json
    ckfmha tune RUN.json -o heuristics.yaml [--base HEURISTICS.yaml] [--allow-emulated] [--force]

| command | exit status |
|---|---|
| compare | 0 no regression, 1 regressed (new failures, missing items, timing regressions), 2 bad input or runs not like for like (below) |
| report | 0 written, 2 bad input (or matplotlib missing: ``pip install 'ckfmha[report]'``) |
| merge | 0 written, 2 bad input (a duplicate item, a missing shard, a shard whose state is not ``complete``, shards of different sweeps or selections -- the message names the key) |
| tune | 0 written, 1 nothing to learn (no timed kernel items), 2 bad input or timings not like for like (below) |

Timings carry what measured them (:class:`ckfmha.runreport.TimingSources`).  Refused with exit 2, the message
naming each reason and its override (the output then carries a WARNING line per accepted reason):

| what | compare | tune | override |
|---|---|---|---|
| timed items measured on an emulation (the cpu backend, Triton's interpreter) | refused | refused | ``--allow-emulated`` |
| the runs' ``seed`` differs (other inputs; also with ``--verdicts-only``) | refused | timed items of more than one seed: refused | ``--force`` |
| the timed items' devices (models, e.g. ``NVIDIA H100 80GB HBM3``; GPU UUIDs do not count) differ | refused | more than one device: refused | ``--force`` |
| median clocks more than ``CLOCK_TOLERANCE`` (5%) apart | refused | readings within the run more than 5% apart: a warning only (boost clocks move between the items of one machine) | ``--force`` |

``compare --verdicts-only`` compares no timing, so checks none.  ``compare`` of runs with no item timed in both
says so ("speed not compared ... time the runs with --ckfmha-bench") in the verdict line instead of a bare "no
regression".  ``report --baseline`` never refuses: the page shows each mismatch as a warning (a page is read by a
person; ``compare`` is the gate a CI job runs).

The rules live in :mod:`ckfmha.runreport` (compare, merge), :mod:`ckfmha.htmlreport` (the page) and
:mod:`ckfmha.heuristics` (tune: the measured fastest kernel per shape class, for ``--ckfmha-heuristics``).
Reports of any size: each command reads its reports one line at a time (the line layout of
:mod:`ckfmha.runreport`; no command holds the rows in memory) and ``merge`` writes the merged report the same way,
one row at a time.
"""

from __future__ import annotations

import argparse
import sys


def _threshold(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (a fraction: 0.1 = 10% slower)") from None
    if not 0 <= v < 10:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 10) (a fraction: 0.1 = 10% slower)")
    return v


class TimingProvenanceError(ValueError):
    """Timings (or runs) that are not like for like, refused; the message names each reason and its override."""


def _overrides(args: argparse.Namespace) -> set[str]:
    return {f for f, on in (("--allow-emulated", args.allow_emulated), ("--force", args.force)) if on}


def _refuse(command: str, refusals) -> None:
    """Raise :class:`TimingProvenanceError` (exit 2) naming every refused :class:`ckfmha.runreport.Mismatch`."""
    if refusals:
        flags = " / ".join(dict.fromkeys(m.flag for m in refusals))
        raise TimingProvenanceError(
            f"{command} refused: "
            + "; ".join(f"{m.text} (accept it with {m.flag})" for m in refusals)
            + f". Pass {flags} to {command} anyway; the output then carries the warning"
        )


def _compare(args: argparse.Namespace) -> int:
    from ckfmha.runreport import compare_reports, dumps, load_report

    cmp = compare_reports(load_report(args.baseline), load_report(args.new), args.threshold, args.verdicts_only)
    _refuse("compare", cmp.refusals(_overrides(args)))
    sys.stdout.write((dumps(cmp.to_dict()) if args.format == "json" else cmp.text()) + "\n")
    return 1 if cmp.regressed else 0


def _report(args: argparse.Namespace) -> int:
    from ckfmha.htmlreport import ReportDependencyError, render
    from ckfmha.runreport import atomic_write_text, compare_reports, load_report

    rep = load_report(args.run)
    cmp = compare_reports(load_report(args.baseline), rep, args.threshold) if args.baseline else None
    try:
        page = render(rep, cmp)
    except ReportDependencyError as e:
        raise ValueError(str(e)) from None
    path = atomic_write_text(args.output, page)
    sys.stdout.write(f"ckfmha report: {path} ({len(page) // 1024} KiB)\n")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from ckfmha.runreport import load_report, merge_reports, write_report_doc

    doc = merge_reports([load_report(p) for p in args.reports])  # rows read from the shards when written
    path = write_report_doc(doc, args.output)
    sys.stdout.write(f"ckfmha merge: {len(args.reports)} shard(s), {len(doc['rows'])} items -> {path}\n")
    return 0


def _tune(args: argparse.Namespace) -> int:
    import yaml

    from ckfmha.heuristics import heuristics_from_doc, tune, tuned_document
    from ckfmha.runreport import atomic_write_text, load_report, timing_sources, tune_mismatches

    rep = load_report(args.run)
    arch = str(rep.meta.get("arch") or "")
    if not arch:
        raise ValueError(f"{args.run}: arch: the report names no arch")
    refused, warnings = tune_mismatches(timing_sources(rep.rows), args.run)
    allowed = _overrides(args)
    _refuse("tune", [m for m in refused if m.flag not in allowed])
    warnings += [f"{m.text} (accepted: {m.flag})" for m in refused]
    for w in warnings:
        sys.stderr.write(f"ckfmha tune: WARNING: {w}\n")
    entries = tune(rep.rows, arch)
    if not entries:
        sys.stderr.write(
            f"ckfmha tune: {args.run} has no timed kernel items to learn from (run the plugin with --ckfmha-bench)\n"
        )
        return 1
    doc = tuned_document(args.base, entries)
    text = (
        f"# Written by ckfmha tune from {args.run} ({len(entries)} shape classes, arch {arch}); the rules and "
        "short_query_tiles are the base table's.\n"
        + "".join(f"# WARNING: {' '.join(w.split())}\n" for w in warnings)
        + yaml.safe_dump(doc, sort_keys=False, width=120)
    )
    heuristics_from_doc(yaml.safe_load(text), str(args.output))  # what is written must load
    path = atomic_write_text(args.output, text)
    sys.stdout.write(f"ckfmha tune: {len(entries)} shape class(es) -> {path}\n")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two run reports: new failures, fixed, added/missing, slower (exit 1 when anything regressed)",
    )
    p.add_argument("baseline", help="the earlier run's report (JSON)")
    p.add_argument("new", help="the new run's report (JSON)")
    p.add_argument(
        "--threshold",
        type=_threshold,
        default=0.10,
        help="how much slower counts as a regression, "
        "as a fraction (default 0.10); the slowdown must also lie outside both runs' spread",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    _override_options(p, "compare")
    p.add_argument(
        "--verdicts-only",
        action="store_true",
        help="compare verdicts only: no timing is compared, so none is checked for what measured it "
        "(the seeds still must agree)",
    )
    p.set_defaults(func=_compare)
    p = sub.add_parser("report", help="one self-contained HTML page of a run report (plots need matplotlib)")
    p.add_argument("run", help="the run's report (JSON)")
    p.add_argument("--baseline", help="an earlier report: regressions are highlighted")
    p.add_argument("--threshold", type=_threshold, default=0.10, help="as for compare (default 0.10)")
    p.add_argument("-o", "--output", required=True, help="the HTML file to write")
    p.set_defaults(func=_report)
    p = sub.add_parser("merge", help="merge the shard reports of one sweep (--ckfmha-shard K/N) into one")
    p.add_argument("reports", nargs="+", help="shard reports (JSON)")
    p.add_argument("-o", "--output", required=True, help="the merged report (JSON)")
    p.set_defaults(func=_merge)
    p = sub.add_parser(
        "tune",
        help="the dispatcher's tie-break table from a timed run: the fastest kernel per shape "
        "class (use it with --ckfmha-heuristics)",
    )
    p.add_argument("run", help="a run report with timings (--ckfmha-bench)")
    p.add_argument("-o", "--output", required=True, help="the heuristics YAML to write")
    p.add_argument("--base", help="the table whose rules to keep (default: the packaged data/heuristics.yaml)")
    _override_options(p, "tune")
    p.set_defaults(func=_tune)


def _override_options(p, command: str) -> None:
    """``--allow-emulated`` and ``--force``: what ``compare`` / ``tune`` refuse by default (module doc)."""
    p.add_argument(
        "--allow-emulated",
        action="store_true",
        help=f"{command} timings measured on an emulation (the cpu backend, Triton's interpreter) all the same "
        "(refused by default: they do not measure kernels on a GPU); the output carries a warning",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"{command} runs whose seeds, devices or clocks differ all the same (refused by default); the "
        "output carries a warning",
    )
