"""``ckfmha report RUN.json [--baseline OLD.json] -o report.html``: one self-contained HTML page of a run.

Sections, in order:

| section | content |
|---|---|
| header | where and how the run happened: category, arch, device, backends, versions, command, state, exit status; the provenance: ckfmha's git commit, the CK checkout (path, commit, codegen hash), host, GPU UUIDs |
| summary | per family: passed / failed / skipped / error / crashed / timeout / not_run, worst error, best TFLOPS |
| regressions | with ``--baseline``: new failures, missing items and timing regressions (red), fixed items (green), and faster items (ckfmha.runreport.compare_reports); runs or timings not like for like (emulated timings, other seeds, devices, clocks) as red warnings, never refused; untimed runs say so |
| failures | every failing item with its verdict and reason |
| speed | TFLOPS against the longest query length, one panel per family, one series per dtype / hdim / backend (the best kernel of each shape) |
| kernel ranking | per shape with timed kernels: the kernels in TFLOPS order, the plan's kernel marked |
| errors | per family, the distribution of each item's max abs error as a fraction of CK's tolerance (1.0 = the limit) |
| skips | the skip reasons, counted |
| feature coverage | per kernel feature / code path (:mod:`ckfmha.coverage`: split-KV with num_splits > 1, paged KV with partial last pages, padding, dropout, deterministic backward, GQA ratios, masks at partial edge tiles, lengths 0 and 1, ...): the items that ran and exercised it; the features no item reached marked ``never reached`` (red) |

Plots are drawn with matplotlib (the optional ``report`` extra: ``pip install 'ckfmha[report]'``) and embedded as
PNG data URIs, so the file needs nothing beside it.  Without matplotlib the command fails with that hint.
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ckfmha.coverage import feature_table, row_features
from ckfmha.runreport import FAILING, VERDICTS, Comparison, RunReport, _num, summarize

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1b1f24;max-width:1280px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{background:#ffebe9}.good{background:#dafbe1}.muted{color:#57606a;font-size:12px}.pill{display:inline-block;
padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}.ok{background:#dafbe1;color:#116329}
.ko{background:#ffebe9;color:#a40e26}code{font-size:12px;word-break:break-all}img{max-width:100%}
details{margin:4px 0}
"""


class ReportDependencyError(RuntimeError):
    """matplotlib is missing."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportDependencyError(
            "ckfmha report draws its plots with matplotlib, which is not installed: pip install 'ckfmha[report]'"
        ) from None
    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _e(x: Any) -> str:
    return html.escape(str(x))


def _table(
    head: Iterable[str],
    rows: Iterable[Iterable[Any]],
    classes: Iterable[str] | None = None,
    numeric: Iterable[int] = (),
) -> str:
    num = set(numeric)
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    cls = list(classes) if classes is not None else None
    for i, r in enumerate(rows):
        c = f' class="{cls[i]}"' if cls and cls[i] else ""
        out.append(
            f"<tr{c}>"
            + "".join(f'<td class="n">{_e(v)}</td>' if j in num else f"<td>{_e(v)}</td>" for j, v in enumerate(r))
            + "</tr>"
        )
    return "".join(out) + "</table>"


def _fmt(v: Any, digits: int = 4) -> str:
    f = _num(v)
    return "-" if f is None else f"{f:.{digits}g}"


# --------------------------------------------------------------------------------------------- sections
def _header(rep: RunReport) -> str:
    m = rep.meta
    env = m.get("environment") or {}
    pk = env.get("packages") or {}
    ok = m.get("exit_status") == 0 and m.get("state") == "complete"
    pill = f'<span class="pill {"ok" if ok else "ko"}">{_e(m.get("state"))}, exit {_e(m.get("exit_status"))}</span>'
    facts = [
        ("category", m.get("category")),
        ("arch", m.get("arch")),
        ("device", ", ".join(env.get("devices") or [])),
        ("backends", ", ".join(m.get("backends") or [])),
        ("seed", m.get("seed")),
        ("items", f"{m.get('completed')} of {m.get('collected')} completed"),
        ("created", m.get("created")),
        ("versions", ", ".join(f"{k} {v}" for k, v in pk.items() if v)),
        ("python", env.get("python")),
        ("command", env.get("command")),
        *_provenance_facts(env),
    ]
    return f"<h1>ckfmha run report {pill}</h1><div class='muted'>{_e(rep.path)}</div>" + _table(
        ("", ""), [(k, v if v not in (None, "") else "-") for k, v in facts]
    )


def _git_text(ident: Any) -> str:
    """``<commit> (dirty)`` of a ckfmha / CK identity (ckfmha.runreport.git_identity); "not a git checkout"."""
    if not isinstance(ident, dict) or not ident.get("commit"):
        return "not a git checkout"
    return f"{ident['commit']}{' (dirty: tracked files changed)' if ident.get('dirty') else ''}"


def _provenance_facts(env: dict[str, Any]) -> list[tuple[str, Any]]:
    """The header's provenance lines (ckfmha.runreport.provenance): ckfmha's commit, the CK checkout, the host,
    the GPU UUIDs; a merged report's shards' own are named by shard."""
    ck = env.get("ck")
    ck_text = (
        f"{ck.get('root')}: {_git_text(ck)}; codegen {ck.get('codegen') or '-'}" if isinstance(ck, dict) else "none"
    )
    facts: list[tuple[str, Any]] = [
        ("ckfmha commit", _git_text(env.get("ckfmha")) if "ckfmha" in env else None),
        ("CK checkout", ck_text if "ck" in env else None),
        ("host", env.get("hostname")),
        ("GPUs", ", ".join(env.get("gpus") or [])),
    ]
    if env.get("differs_by_shard"):
        facts.append(("differs by shard", ", ".join(env["differs_by_shard"]) + " (each shard's: shard_environments)"))
    return facts


def _summary(rows: Sequence[dict[str, Any]]) -> str:
    summ = summarize(rows)
    body, cls = [], []
    for fam, s in summ.items():
        body.append([fam, *[s[v] for v in VERDICTS], _fmt(s["worst_abs_err"], 3), _fmt(s["best_tflops"])])
        cls.append("bad" if any(s[v] for v in FAILING) else "")
    return "<h2>Summary</h2>" + _table(
        ("family", *VERDICTS, "worst abs err", "best TFLOPS"), body, cls, numeric=range(1, 10)
    )


def _regressions(cmp: Comparison) -> str:
    parts = [
        f"<h2>Against the baseline</h2><div class='muted'>{_e(cmp.baseline)}: {cmp.compared} items in both, "
        f"{cmp.timed} timed in both, threshold {cmp.threshold:.0%}; "
        f"{'<b>regressed</b>' if cmp.regressed else 'no regression'}"
        f"{'; ' + _e(cmp.speed_note) if cmp.speed_note else ''}</div>",
        *(f"<p class='ko pill'>WARNING, not like for like: {_e(m.text)}</p>" for m in cmp.mismatches),
    ]
    if cmp.new_failures:
        parts.append(
            "<h3>New failures</h3>"
            + _table(
                ("item", "was", "now", "reason"),
                [(d["id"], d["baseline_verdict"], d["verdict"], d["reason"]) for d in cmp.new_failures],
                ["bad"] * len(cmp.new_failures),
            )
        )
    if cmp.missing:
        parts.append(
            "<h3>Missing now</h3>" + _table(("item",), [(i,) for i in cmp.missing], ["bad"] * len(cmp.missing))
        )
    if cmp.slower:
        parts.append(
            "<h3>Slower</h3>"
            + _table(
                ("item", "baseline ms", "now ms", "change"),
                [(d["id"], _fmt(d["baseline_ms"]), _fmt(d["new_ms"]), f"{d['change']:+.1%}") for d in cmp.slower],
                ["bad"] * len(cmp.slower),
                numeric=(1, 2, 3),
            )
        )
    if cmp.fixed:
        parts.append(
            "<h3>Fixed</h3>"
            + _table(
                ("item", "was", "now"),
                [(d["id"], d["baseline_verdict"], d["verdict"]) for d in cmp.fixed],
                ["good"] * len(cmp.fixed),
            )
        )
    if cmp.faster:
        parts.append(
            "<h3>Faster</h3>"
            + _table(
                ("item", "baseline ms", "now ms", "change"),
                [(d["id"], _fmt(d["baseline_ms"]), _fmt(d["new_ms"]), f"{d['change']:+.1%}") for d in cmp.faster],
                ["good"] * len(cmp.faster),
                numeric=(1, 2, 3),
            )
        )
    if cmp.added:
        parts.append(
            f"<details><summary>{len(cmp.added)} item(s) new in this run</summary>"
            + _table(("item",), [(i,) for i in cmp.added])
            + "</details>"
        )
    return "".join(parts)


def _failures(rows: Sequence[dict[str, Any]]) -> str:
    bad = [  # what the table shows, not the whole rows
        {"id": r["id"], "verdict": r["verdict"], "reason": str(r.get("reason", ""))[:600]}
        for r in rows
        if r.get("verdict") in FAILING
    ]
    if not bad:
        return "<h2>Failures</h2><p>none</p>"
    return f"<h2>Failures ({len(bad)})</h2>" + _table(
        ("item", "verdict", "reason"),
        [(r["id"], r["verdict"], str(r.get("reason", ""))[:600]) for r in bad],
        ["bad"] * len(bad),
    )


def _int(v: Any) -> int:
    """A row's integer field as an int (0 when it is missing or not an integer: a hand-edited report may hold
    anything the schema allows)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _plain(v: Any) -> str:
    """Text for a plot label: matplotlib would read ``$...$`` as mathtext (and raise on bad mathtext)."""
    return str(v).replace("$", r"\$")


def _seqlen(r: dict[str, Any]) -> float | None:
    lens = [v for v in (_num(r.get("seqlen_q")), _num(r.get("seqlen_k"))) if v]
    return max(lens) if lens else None


def _speed(rows: Sequence[dict[str, Any]], plt) -> str:
    """One panel per family; per series (dtype, hdim, mask or not, backend) the best TFLOPS at each length."""
    best: dict[tuple[str, str], dict[float, float]] = defaultdict(dict)
    for r in rows:
        t, s = _num(r.get("tflops")), _seqlen(r)
        if r.get("verdict") != "passed" or t is None or s is None or r.get("kind") == "parity":
            continue
        masked = "masked" if r.get("mask") not in ("", "0", None) else "no mask"
        key = (_plain(r.get("family")), _plain(f"{r.get('dtype')} d{r.get('hdim_q')} {masked} ({r.get('backend')})"))
        best[key][s] = max(best[key].get(s, 0.0), t)
    if not best:
        return "<h2>Speed</h2><p>no items with a time (every item was skipped or failed)</p>"
    timed = any(r.get("timed") is True for r in rows)
    fams = sorted({k[0] for k in best})
    cols = min(2, len(fams))
    nrows = -(-len(fams) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.4 * cols, 3.9 * nrows), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        for (f, label), pts in sorted(best.items()):
            if f == fam:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], "o-", ms=3, lw=1, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(fam, fontsize=11)
        ax.set_xlabel("longest sequence (queries or keys)")
        ax.set_ylabel("TFLOPS (best kernel at that length)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(fams) :]:
        ax.axis("off")
    fig.tight_layout()
    note = (
        ""
        if timed
        else (
            " <span class='muted'>(one untimed run per item: wall-clock figures; run with "
            "--ckfmha-bench for device medians)</span>"
        )
    )
    return f"<h2>Speed{note}</h2><img alt='TFLOPS against sequence length' src='{_png(fig)}'>"


def _ranking(rows: Sequence[dict[str, Any]], limit: int = 200) -> str:
    """Per shape: the kernels in TFLOPS order and where the plan's choice stands."""
    shapes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    plan_kernel: dict[str, str] = {}
    kernel_ids: dict[Any, Any] = {}  # one string per kernel id, not one per row
    for r in rows:
        shape = r["id"].split("::")[0]
        if r.get("kind") == "plan":
            plan_kernel[shape] = str(r.get("kernel_id") or "")
        elif r.get("kind") == "kernel" and r.get("verdict") == "passed" and (_num(r.get("tflops")) or 0) > 0:
            kid = kernel_ids.setdefault(r.get("kernel_id"), r.get("kernel_id"))
            shapes[shape].append({"kernel_id": kid, "tflops": r["tflops"]})  # not the whole row
    ranked = sorted(
        ((s, sorted(rs, key=lambda r: -float(r["tflops"]))) for s, rs in shapes.items() if len(rs) > 1),
        key=lambda kv: kv[0],
    )
    if not ranked:
        return "<h2>Kernel ranking</h2><p>no shape has two or more kernels with a time</p>"
    overview, cls = [], []
    for shape, rs in ranked:
        top = float(rs[0]["tflops"])
        chosen = next((r for r in rs if r.get("kernel_id") == plan_kernel.get(shape)), None)
        share = float(chosen["tflops"]) / top if chosen is not None else None
        overview.append((shape, len(rs), _fmt(top), "-" if share is None else f"{share:.0%}"))
        cls.append("bad" if share is not None and share < 0.95 else "")
    parts = [
        f"<h2>Kernel ranking</h2><div class='muted'>{len(ranked)} shape(s) with two or more kernels with a "
        "time; 'plan' = the TFLOPS of the kernel the dispatcher's plan chose, as a share of the best (red: "
        "under 95%)</div>",
        _table(("shape", "kernels", "best TFLOPS", "plan"), overview, cls, numeric=(1, 2, 3)),
    ]
    for shape, rs in ranked[:limit]:
        top = float(rs[0]["tflops"])
        body = [
            (
                ("\u2605 " if r.get("kernel_id") == plan_kernel.get(shape) else "") + str(r.get("kernel_id", "?")),
                _fmt(r["tflops"]),
                f"{float(r['tflops']) / top:.0%}",
            )
            for r in rs
        ]
        parts.append(
            f"<details><summary><code>{_e(shape)}</code></summary>"
            + _table(("kernel (\u2605 = plan)", "TFLOPS", "of best"), body, numeric=(1, 2))
            + "</details>"
        )
    return "".join(parts)


def _error_ratio(r: dict[str, Any]) -> float | None:
    from ckfmha.validator import ToleranceError, tolerance_for

    err = _num(r.get("max_abs_err"))
    if err is None or r.get("verdict") not in ("passed", "failed") or not r.get("dtype"):
        return None
    try:
        tol = tolerance_for(
            r["dtype"],
            backward=r.get("family") == "bwd",
            hdim_q=_int(r.get("hdim_q")),
            hdim_v=_int(r.get("hdim_v")),
        )
    except (ToleranceError, ValueError):
        return None
    return err / tol.atol if tol.atol > 0 else None


def _errors(rows: Sequence[dict[str, Any]], plt) -> str:
    import math

    per_fam: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        q = _error_ratio(r)
        if q is not None:
            per_fam[_plain(r.get("family") or "?")].append(max(q, 1e-6))
    if not per_fam:
        return "<h2>Errors</h2><p>no compared outputs</p>"
    fig, ax = plt.subplots(figsize=(9, 3.6))
    bins = [10 ** (x / 4) for x in range(-24, 9)]
    for fam, qs in sorted(per_fam.items()):
        ax.hist(qs, bins=bins, histtype="step", lw=1.4, label=f"{fam} ({len(qs)})")
    ax.axvline(1.0, color="#a40e26", ls="--", lw=1)
    ax.text(1.05, ax.get_ylim()[1] * 0.9, "tolerance", color="#a40e26", fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("max |error| / CK's atol for the dtype (elementwise rule: also rtol x |ref|)")
    ax.set_ylabel("items")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    worst = max((q, fam) for fam, qs in per_fam.items() for q in qs)
    return (
        f"<h2>Errors against the tolerance</h2><div class='muted'>largest ratio {worst[0]:.3g} "
        f"({_e(worst[1])}); log10 spread {math.log10(worst[0]):+.1f}</div><img alt='error distribution' "
        f"src='{_png(fig)}'>"
    )


def _skips(rows: Sequence[dict[str, Any]]) -> str:
    reasons: Counter[str] = Counter()
    for r in rows:
        if r.get("verdict") == "skipped":
            reason = str(r.get("reason") or "")
            shape = r["id"].split("::")[0]
            reasons[reason[len(shape) + 2 :] if reason.startswith(shape + ": ") else reason] += 1
    if not reasons:
        return ""
    return f"<h2>Skips ({sum(reasons.values())})</h2>" + _table(
        ("items", "reason"), [(n, why[:400]) for why, n in reasons.most_common()], numeric=(0,)
    )


def _coverage(rows: Sequence[dict[str, Any]]) -> str:
    counts, ran = row_features(rows)
    table = feature_table(counts)
    never = [t for t in table if not t["count"]]
    head = (
        f"<h2>Feature coverage</h2><div class='muted'>{ran} item(s) ran; {len(never)} of {len(table)} features "
        "never reached (ckfmha.coverage; `ckfmha coverage` adds the kernel space)</div>"
    )
    return head + _table(
        ("feature", "what", "items", ""),
        [(t["feature"], t["meaning"], t["count"], "" if t["count"] else "never reached") for t in table],
        ["" if t["count"] else "bad" for t in table],
        numeric=(2,),
    )


def render(rep: RunReport, comparison: Comparison | None = None) -> str:
    """The whole page (see the module doc)."""
    plt = _pyplot()
    rows = rep.rows
    body = [_header(rep), _summary(rows)]
    if comparison is not None:
        body.append(_regressions(comparison))
    body += [_failures(rows), _speed(rows, plt), _ranking(rows), _errors(rows, plt), _skips(rows), _coverage(rows)]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>ckfmha report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
