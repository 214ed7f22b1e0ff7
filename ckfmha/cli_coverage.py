"""``ckfmha coverage REPORT.json [...] --arch gfx942``: which kernels, pipelines and features a run exercised, and
which of the arch's kernel space it never reached.

    ckfmha coverage smoke.json --arch gfx942                      # a ckfmha plugin report (--ckfmha-report)
    ckfmha coverage fa.json --arch gfx942 --format markdown       # FA's suite: fa.flash_attn_calls*.json beside it
    ckfmha coverage a.json b.flash_attn_calls.json --format json

Inputs (each argument; several are combined):

| file | what counts as exercised |
|---|---|
| a ckfmha run report (``schema: ckfmha.report``) | every row that ran (verdict other than ``skipped`` / ``not_run``): its ``kernel_id`` and every kernel of its ``plan_kernels``; its problem columns give the features |
| a compat kernel log (``schema: ckfmha.flash_attn_calls``, :mod:`ckfmha.compat.calllog`) | every call: the kernels of its stages; its ``features`` |
| ``REPORT.json`` of a ``--ckfmha-flash-attn-compat`` run | the kernel logs the plugin wrote beside it (``REPORT.flash_attn_calls*.json``, one per process), and the report itself when it exists |

The kernel space is ``Registry.from_enumeration(arch, receipt, mask_mode)`` (``--arch``, ``--receipt`` /
``--profile``, ``--mask-mode``; the same as ``ckfmha list``), narrowed to ``--family`` (:func:`ckfmha.families.
kernel_families`: ``fwd``, ``splitkv``, ``bwd``, ...) when given.

| section | rows |
|---|---|
| kernels | per kernel family: kernels reached / in the space; ``--list-unreached`` lists the unreached ids (and their CK names with ``--ck-names``) |
| pipelines | per family and pipeline: reached / in the space |
| kernel features | per family, per signature field that varies in the space (dtype, mode, head dims, mask, bias, lse, dropout, paged KV, RoPE, deterministic, ...) and per value: kernels reached / in the space |
| problem features | what the calls or items exercised (:mod:`ckfmha.coverage`, shared with the HTML page): split-KV with num_splits > 1, paged KV (and partial last pages), padding (ragged or effective lengths), dropout, deterministic backward, GQA/MQA (and each ratio seen), group mode, causal / window masks (and at a partial edge tile), lengths 0 and 1, ALiBi, append-KV, RoPE, cache_batch_idx -- with the number of calls (items) that did, ``0`` = never reached |
| outside the space | kernels that ran but are not in the arch's space (another arch's or a backend's own tiles) |

Exit status: 0, or 2 for an unreadable file or bad arguments (the message names the file or option and the rule).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckfmha.coverage import NOT_RAN, feature_table, features_of_call, features_of_row, row_kernels

CALL_LOG_SCHEMA = "ckfmha.flash_attn_calls"  # ckfmha.compat.calllog.LOG_SCHEMA (not imported: no torch path here)
RUN_REPORT_SCHEMA = "ckfmha.report"
LOG_SUFFIX = ".flash_attn_calls"  # pytest_ckfmha.flash_attn_compat.LOG_SUFFIX
#: the signature fields whose values the kernel-features section counts (when they vary within a family)
SIGNATURE_FIELDS = (
    "dtype", "mode", "hdim_q", "hdim_v", "vlayout", "mask", "bias", "dbias", "lse", "dropout", "logits_soft_cap",
    "skip_min_seqlen_q", "qscale", "sink", "paged_kv", "rope", "deterministic", "kv_memory_layout",
    "kv_lookup_table", "page_size",
)  # fmt: skip


class CoverageInputError(ValueError):
    """An input file that cannot be used: the message names the file and the rule."""


@dataclass
class Exercised:
    """What the inputs exercised: kernel ids (with how many calls/items ran each) and problem-feature counts."""

    kernels: Counter = field(default_factory=Counter)
    features: Counter = field(default_factory=Counter)
    units: int = 0  # calls + report rows that ran
    sources: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- inputs
def expand_inputs(paths: list[str]) -> list[Path]:
    """Each argument, plus the compat kernel logs beside it (``<stem>.flash_attn_calls*.json``); an argument that
    does not exist and has no such logs is an error."""
    out: list[Path] = []
    for arg in paths:
        p = Path(arg)
        stem = p.name[: -len(".json")] if p.name.endswith(".json") else p.name
        logs = sorted(Path(x) for x in glob.glob(str(p.with_name(glob.escape(stem) + LOG_SUFFIX + "*.json"))))
        logs = [x for x in logs if x != p]
        if p.exists():
            out.append(p)
        elif not logs:
            raise CoverageInputError(f"{arg}: no such file (nor a kernel log {stem}{LOG_SUFFIX}*.json beside it)")
        out.extend(x for x in logs if x not in out)
    return out


def _load(path: Path) -> dict[str, Any]:
    from ckfmha.datafile import DataFileError, load_json

    try:
        doc = load_json(path)
    except DataFileError as e:
        raise CoverageInputError(str(e)) from None
    if not isinstance(doc, dict) or doc.get("schema") not in (RUN_REPORT_SCHEMA, CALL_LOG_SCHEMA):
        raise CoverageInputError(
            f"{path}: schema {doc.get('schema') if isinstance(doc, dict) else None!r} is neither a ckfmha run report "
            f"({RUN_REPORT_SCHEMA}) nor a compat kernel log ({CALL_LOG_SCHEMA})"
        )
    return doc


def exercised(paths: list[Path]) -> Exercised:
    """What the files exercised (module table)."""
    ex = Exercised()
    for path in paths:
        doc = _load(path)
        ex.sources.append(str(path))
        if doc["schema"] == CALL_LOG_SCHEMA:
            for call in doc.get("calls", []):
                ex.units += 1
                for st in call.get("stages", []):
                    ex.kernels[st["kernel_id"]] += 1
                ex.features.update(features_of_call(call))
            continue
        for row in doc.get("rows", []):
            if row.get("verdict") in NOT_RAN:
                continue
            ex.units += 1
            ex.kernels.update(row_kernels(row))
            ex.features.update(features_of_row(row))
    return ex


# --------------------------------------------------------------------------------------------- coverage
def _value(v: Any) -> str:
    return str(getattr(v, "value", v))


def coverage(ex: Exercised, space: list, arch: str) -> dict[str, Any]:
    """The coverage tables of ``ex`` against ``space`` (the arch's KernelConfigs) as one JSON-able dict."""
    by_id = {c.kernel_id: c for c in space}
    reached = {k for k in ex.kernels if k in by_id}
    fam_total: Counter = Counter(c.signature.family.value for c in space)
    fam_hit: Counter = Counter(by_id[k].signature.family.value for k in reached)
    pipe_total: Counter = Counter((c.signature.family.value, c.algorithm.pipeline.value) for c in space)
    pipe_hit: Counter = Counter((by_id[k].signature.family.value, by_id[k].algorithm.pipeline.value) for k in reached)
    values: dict[tuple[str, str], set] = defaultdict(set)
    for c in space:
        for f in SIGNATURE_FIELDS:
            values[(c.signature.family.value, f)].add(_value(getattr(c.signature, f)))
    feat_total: Counter = Counter()
    feat_hit: Counter = Counter()
    for c in space:
        fam = c.signature.family.value
        for f in SIGNATURE_FIELDS:
            if len(values[(fam, f)]) > 1:
                key = (fam, f, _value(getattr(c.signature, f)))
                feat_total[key] += 1
                if c.kernel_id in reached:
                    feat_hit[key] += 1
    return {
        "arch": arch,
        "sources": ex.sources,
        "calls_or_items": ex.units,
        "kernels_in_space": len(by_id),
        "kernels_reached": len(reached),
        "families": [{"family": f, "reached": fam_hit[f], "total": fam_total[f]} for f in sorted(fam_total)],
        "pipelines": [
            {"family": f, "pipeline": p, "reached": pipe_hit[(f, p)], "total": n}
            for (f, p), n in sorted(pipe_total.items())
        ],
        "kernel_features": [
            {"family": f, "field": k, "value": v, "reached": feat_hit[(f, k, v)], "total": n}
            for (f, k, v), n in sorted(feat_total.items())
        ],
        "problem_features": feature_table(ex.features),
        "reached": sorted(reached),
        "unreached": sorted(set(by_id) - reached),
        "outside_space": sorted(k for k in ex.kernels if k not in by_id),
    }


def _pct(hit: int, total: int) -> str:
    return f"{hit}/{total} ({100.0 * hit / total:.1f}%)" if total else "0/0"


def render_text(cov: dict[str, Any], *, markdown: bool = False, list_unreached: bool = False,
                ck_names: dict[str, str] | None = None) -> str:  # fmt: skip
    """The tables of :func:`coverage` as text (aligned columns) or Markdown."""
    lines: list[str] = []

    def table(title: str, head: list[str], rows: list[list[str]]) -> None:
        lines.append(f"## {title}" if markdown else title)
        if markdown:
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            lines.extend("| " + " | ".join(r) + " |" for r in rows)
        else:
            widths = [max(len(x) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
            for r in [head, *rows]:
                lines.append("  " + "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
        lines.append("")

    lines.append(
        f"coverage of {', '.join(cov['sources'])} against {cov['arch']}: {cov['calls_or_items']} calls/items, "
        f"{_pct(cov['kernels_reached'], cov['kernels_in_space'])} kernels reached"
    )
    lines.append("")
    table("kernels", ["family", "reached"], [[r["family"], _pct(r["reached"], r["total"])] for r in cov["families"]])
    table(
        "pipelines",
        ["family", "pipeline", "reached"],
        [[r["family"], r["pipeline"], _pct(r["reached"], r["total"])] for r in cov["pipelines"]],
    )
    table(
        "kernel features",
        ["family", "field", "value", "reached"],
        [[r["family"], r["field"], r["value"], _pct(r["reached"], r["total"])] for r in cov["kernel_features"]],
    )
    table(
        "problem features",
        ["feature", "calls/items", ""],
        [[r["meaning"], str(r["count"]), "" if r["count"] else "never reached"] for r in cov["problem_features"]],
    )
    if cov["outside_space"]:
        table("ran outside the kernel space", ["kernel id"], [[k] for k in cov["outside_space"]])
    if list_unreached:
        names = ck_names or {}
        table(
            "unreached kernels",
            ["kernel id", "CK name"] if names else ["kernel id"],
            [[k, names.get(k, "")] if names else [k] for k in cov["unreached"]],
        )
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------------------------- command
def _cmd_coverage(args: argparse.Namespace) -> int:
    from ckfmha.archs import default_arch
    from ckfmha.receipts import resolve_receipt
    from ckfmha.runner import enumerated_registry

    receipt = resolve_receipt(args.receipt, profile=args.profile)
    arch = args.arch or default_arch()
    space = list(enumerated_registry(arch, receipt, args.mask_mode))
    if args.family:
        from ckfmha.families import kernel_families

        wanted = {
            f
            for name in args.family
            for part in name.split(",")
            if part.strip()
            for f in kernel_families(part.strip(), "--family")
        }
        space = [c for c in space if c.signature.family in wanted]
    cov = coverage(exercised(expand_inputs(args.reports)), space, arch)
    if args.format == "json":
        sys.stdout.write(json.dumps(cov, indent=1) + "\n")
        return 0
    names = None
    if args.list_unreached and args.ck_names:
        from ckfmha.naming import ck_instance_name

        by_id = {c.kernel_id: c for c in space}
        names = {k: ck_instance_name(by_id[k]) for k in cov["unreached"]}
    sys.stdout.write(
        render_text(cov, markdown=args.format == "markdown", list_unreached=args.list_unreached, ck_names=names)
    )
    return 0


def add_commands(sub) -> None:
    """Register ``coverage`` on the ``ckfmha`` command line's subparsers."""
    p = sub.add_parser(
        "coverage",
        help="which kernels, pipelines and features a run report (or a flash-attn compat kernel log) exercised "
        "and which of the arch's kernel space it never reached",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT.json", help="run reports and/or compat kernel logs")
    p.add_argument("--arch", help="the kernel space (default: the arch data's default arch)")
    p.add_argument("--receipt", help="CK receipt selecting the kernel space (default 0)")
    p.add_argument("--profile", help="receipt by profile name")
    p.add_argument("--mask-mode", default="simplified", choices=("simplified", "generic"))
    p.add_argument(
        "--family",
        action="append",
        help="only these families' kernels (problem families or kernel families as in `ckfmha list`; repeatable "
        "or comma-separated): FA's suite never reaches batch_prefill, say",
    )
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    p.add_argument("--list-unreached", action="store_true", help="also list every kernel never reached")
    p.add_argument("--ck-names", action="store_true", help="with --list-unreached: their CK instance names too")
    p.set_defaults(func=_cmd_coverage)
