"""Kernel and feature coverage of several runs side by side, as markdown (issue 27: a client suite beside ckfmha's
own categories).

    python benchmarks/coverage_side_by_side.py --arch gfx942 "LABEL=PATH[,PATH...]" ["LABEL=PATH..." ...]

| step | what |
|---|---|
| per source | ``ckfmha coverage PATH... --arch ARCH --format json`` (run reports, compat kernel logs, or a report whose logs lie beside it; the same table as the command and the HTML page) |
| kernels | per kernel family: the kernels each source reached, out of the arch's kernel space |
| problem features | per feature of ``ckfmha.coverage``: the calls/items of each source that exercised it; 0 is "never" |
| errors | a source without ``=``, an empty label or a repeated one exits 2 naming it; a failing ``ckfmha coverage`` exits with its status and its message |
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any


def parse_source(text: str) -> tuple[str, list[str]]:
    """``LABEL=PATH[,PATH...]`` -> (label, paths); a ValueError naming the argument and the rule otherwise."""
    label, sep, paths = text.partition("=")
    if not sep or not label.strip() or not paths.strip():
        raise ValueError(f"source {text!r}: must be LABEL=PATH[,PATH...] with a label and at least one path")
    return label.strip(), [p for p in paths.split(",") if p]


def side_by_side(covs: dict[str, dict[str, Any]]) -> str:
    """The markdown tables of several ``ckfmha coverage --format json`` documents, keyed by their labels."""
    labels = list(covs)
    head = "| " + " | ".join(labels) + " |"
    rule = "|---" * (len(labels) + 1) + "|"
    out = ["| source | calls or items | kernels reached |", "|---|---|---|"]
    for lab, c in covs.items():
        pct = 100.0 * c["kernels_reached"] / c["kernels_in_space"] if c["kernels_in_space"] else 0.0
        out.append(f"| {lab} | {c['calls_or_items']} | {c['kernels_reached']}/{c['kernels_in_space']} ({pct:.1f}%) |")
    fams: dict[str, dict[str, str]] = {}
    for lab, c in covs.items():
        for f in c["families"]:
            fams.setdefault(f["family"], {})[lab] = f"{f['reached']}/{f['total']}"
    out += ["", "| kernel family " + head, rule]
    out += [f"| {fam} | " + " | ".join(row.get(lab, "-") for lab in labels) + " |" for fam, row in sorted(fams.items())]
    feats: dict[str, dict[str, int]] = {}
    meaning: dict[str, str] = {}
    for lab, c in covs.items():
        for f in c["problem_features"]:
            feats.setdefault(f["feature"], {})[lab] = int(f["count"])
            meaning[f["feature"]] = str(f.get("meaning") or f["feature"])
    out += ["", "| problem feature " + head, rule]
    for name, row in feats.items():
        cells = [("never" if row[lab] == 0 else str(row[lab])) if lab in row else "-" for lab in labels]
        out.append(f"| {meaning[name]} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--arch", required=True, help="the kernel space the coverage is counted against")
    ap.add_argument("sources", nargs="+", metavar="LABEL=PATH[,PATH...]")
    args = ap.parse_args(argv)
    try:
        sources = [parse_source(s) for s in args.sources]
    except ValueError as e:
        print(f"coverage_side_by_side: error: {e}", file=sys.stderr)
        return 2
    labels = [lab for lab, _ in sources]
    if len(set(labels)) != len(labels):
        print(f"coverage_side_by_side: error: labels {labels}: each label must be given once", file=sys.stderr)
        return 2
    covs = {}
    for lab, paths in sources:
        cmd = [sys.executable, "-m", "ckfmha.cli", "coverage", *paths, "--arch", args.arch, "--format", "json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"coverage_side_by_side: {lab}: {proc.stderr.strip()}", file=sys.stderr)
            return proc.returncode
        covs[lab] = json.loads(proc.stdout[proc.stdout.index("{") :])
    sys.stdout.write(side_by_side(covs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
