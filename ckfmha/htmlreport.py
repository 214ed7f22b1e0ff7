"""``ckfmha report RUN.json [--baseline OLD.json] -o report.html``: one self-contained HTML page of a run.

The page, top to bottom:

| part | content |
|---|---|
| verdict | one word first -- FAILED (an item failed, errored, crashed or timed out), INCOMPLETE (the run's ``state`` is not ``complete``), EXIT N (pytest's exit status was not 0), REGRESSED (with ``--baseline``: new failures, missing items or slower timings), NOTHING PASSED (no item passed), else PASSED -- with the item counts per verdict, the first :data:`SUMMARY_FAILURES` failing items (short id, verdict, reason), the baseline's verdict in large type (not like-for-like warnings in red under it), and one line of context (category, arch, device, backends, seed, when) |
| contents | a link to each section below |
| families | per family: passed / failed / skipped / error / crashed / timeout / not_run, worst error, best TFLOPS |
| against the baseline | with ``--baseline``: new failures, missing items and timing regressions (red), fixed items (green), faster items and items new in this run (ckfmha.runreport.compare_reports); runs or timings not like for like (emulated timings, other seeds, devices, clocks) as red warnings, never refused; untimed runs say so |
| failures | every failing item with its verdict and reason |
| tolerance | per family, each compared item's error against CK's tolerance (:func:`tolerance_ratio`) on a log axis, the line at 1.0 being the validator's pass/fail boundary; every item in a histogram bar of its family's column (in the report's order; green at or below the line, red above), the :data:`PLOT_POINTS` worst items above it also as dots (hover: the id); a table per family (items, over the line, within rtol, the worst) |
| speed | TFLOPS against the longest query length, one panel per family, one series per dtype / hdim / backend (the best kernel of each shape) |
| kernel ranking | per shape with two or more timed kernels: the kernels, the best TFLOPS and the share of it the plan's kernel reaches (shapes furthest from the best first); each shape's kernels in TFLOPS order in a collapsed list in its row, the plan's kernel marked |
| skips | the skip reasons, counted |
| feature coverage | per kernel feature / code path (:mod:`ckfmha.coverage`: split-KV with num_splits > 1, paged KV with partial last pages, padding, dropout, deterministic backward, GQA ratios, masks at partial edge tiles, lengths 0 and 1, ...): the items that ran and exercised it; the features no item reached marked ``never reached`` (red) |
| run | where and how the run happened: category, arch, device, backends, versions, command, state, exit status; the provenance: ckfmha's git commit, the CK checkout (path, commit, codegen hash), host, GPU UUIDs |

How the page behaves:

| what | rule |
|---|---|
| tables | every table is sortable (click a header; again to reverse; numbers sort as numbers) and filterable (a text box above it matching any cell's text or full id); one embedded script of a few dozen lines, :data:`SCRIPT`, does both for every ``table[data-sortable]`` |
| ids | an item id is shown short (:func:`short_id`: a full kernel id becomes its kernel token, as pytest_ckfmha.ids prints it), the full id in the ``title`` (hover) and a copy button beside it (``data-copy``); kernel ids likewise (:func:`kernel_token`) |
| size | item tables show at most :data:`ROW_CAP` rows and say how many more there are; the rows are read as a stream (one pass for the summary, failures, tolerance and skips, one each for speed, ranking and coverage), keeping per-family counts, the capped lists, the distinct skip reasons, the best TFLOPS per plotted length, and for the ranking one (TFLOPS, kernel id) pair per timed kernel row and one plan kernel per shape |
| self-contained | no network resource: the style, the script and the tolerance plot (inline SVG) are in the page, the speed plot a PNG data URI |

The tolerance plot's value per item (:func:`tolerance_ratio`) is the row's ``tol_ratio``: the validator's own
figure, the worst element's ``|out - ref| / (atol + rtol * |ref|)`` over the item's compared outputs
(:attr:`ckfmha.validator.CheckResult.limit_ratio`; > 1 exactly where a check failed), so the line at 1.0 is the
validator's pass/fail boundary.  A row of an older report without ``tol_ratio`` is plotted with an upper bound of
that figure: ``max|out - ref| / atol`` -- the largest error of its compared outputs over CK's atol for its dtype and
direction (:func:`ckfmha.validator.tolerance_for`, fp8 by the arch's format) -- for an item with mismatches, and
that value capped at 1.0 for an item without; such an item with ``mismatches`` > 0 always lies above 1.0, every
other item at or below it (the page's note says which figure it plots).  Items whose ``max|out - ref|``
passed ``atol`` but stayed within ``atol + rtol * |ref|`` are counted in the table ("within rtol").  Parity rows
(judged by the parity rules) and rows without an error are left out.

The speed plot is drawn with matplotlib (the optional ``report`` extra: ``pip install 'ckfmha[report]'``) and
embedded as a PNG data URI.  Without matplotlib the command fails with that hint.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import html
import io
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from ckfmha.coverage import feature_table, row_features
from ckfmha.runreport import FAILING, VERDICTS, Comparison, RunReport, Summary, _num

#: rows an item table shows at most (the rest are counted under it)
ROW_CAP = 500
#: failing items listed in the verdict at the top
SUMMARY_FAILURES = 10
#: items above the tolerance line drawn one by one (the worst; the rest are in the histogram bars)
PLOT_POINTS = 300
#: characters of a reason a table cell shows
REASON_CHARS = 600
#: hex digits of the SHA-1 in a kernel token (pytest_ckfmha.ids.KERNEL_HASH_LEN)
KERNEL_HASH_LEN = 8
#: the mark of the plan's kernel in the kernel ranking
STAR = "\u2605 "

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:20px 24px;color:#1b1f24;max-width:1320px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:17px;margin:26px 0 6px;border-bottom:1px solid #d0d7de;padding-bottom:3px}
h3{font-size:14px;margin:14px 0 4px}
.verdict{border-radius:8px;padding:12px 16px;margin:6px 0 8px;border:1px solid}
.verdict .word{font-size:30px;font-weight:700;letter-spacing:.5px;margin-right:14px}
.verdict .why{font-size:17px}.v-ok{background:#dafbe1;border-color:#4ac26b;color:#116329}
.v-bad{background:#ffebe9;border-color:#ff8182;color:#a40e26}.v-warn{background:#fff8c5;border-color:#d4a72c;color:#7d4e00}
.counts{margin:6px 0}.pill{display:inline-block;padding:2px 10px;border-radius:11px;font-size:13px;font-weight:600;
margin:0 6px 4px 0;background:#eaeef2;color:#24292f}.pill.ok{background:#dafbe1;color:#116329}
.pill.ko{background:#ffebe9;color:#a40e26}.pill.warn{background:#fff8c5;color:#7d4e00}
.base{font-size:16px;font-weight:600;margin:6px 0}ol.first{margin:4px 0 6px;padding-left:22px;font-size:13px}
ol.first li{margin:2px 0}.context{color:#57606a;font-size:13px;margin:4px 0}
nav.toc{font-size:13px;margin:10px 0;padding:6px 10px;background:#f6f8fa;border-radius:6px}nav.toc a{margin-right:12px}
.tw{overflow:auto;max-width:100%;max-height:560px}.tw.plot{max-height:none}thead th{position:sticky;top:0;z-index:1}
table{border-collapse:collapse;font-size:12.5px;margin:4px 0}th,td{border:1px solid #d0d7de;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f6f8fa;white-space:nowrap}td{max-width:640px;overflow-wrap:anywhere}
table[data-sortable] th{cursor:pointer;user-select:none}th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#ffebe9}tr.good td{background:#dafbe1}.muted{color:#57606a;font-size:12px}
.warnline{color:#a40e26;font-weight:600;font-size:14px;margin:4px 0}
code{font-size:12px}.idw{white-space:nowrap}button.cp{border:0;background:none;cursor:pointer;color:#57606a;
padding:0 0 0 5px;font-size:10px;opacity:.55}button.cp:hover{opacity:1;text-decoration:underline}button.cp::before{content:"copy"}button.cp.done::before{content:"copied"}
.bar{margin:6px 0 2px;font-size:12px}.bar input{font-size:12px;padding:2px 6px;width:260px}
.bar span{margin-left:8px}img{max-width:100%}details{margin:0}details summary{cursor:pointer}
svg text{font-family:inherit}dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:13px}
dl.facts dt{color:#57606a}dl.facts dd{margin:0;overflow-wrap:anywhere}
"""

#: the page's one script: sorting and filtering of every ``table[data-sortable]``, the copy buttons
SCRIPT = """
(function(){
function val(td){var v=td?td.getAttribute('data-v'):null;return v===null?null:parseFloat(v);}
function txt(td){return td?td.textContent:'';}
document.querySelectorAll('table[data-sortable]').forEach(function(t){
 var body=t.tBodies[0],rows=[].slice.call(body.rows),ths=[].slice.call(t.tHead.rows[0].cells);
 rows.forEach(function(r){var s=r.textContent;r.querySelectorAll('[title]').forEach(function(e){s+=' '+e.title;});
  r.dataset.q=s.toLowerCase();});
 var bar=document.createElement('div'),box=document.createElement('input'),note=document.createElement('span');
 bar.className='bar';box.type='search';box.placeholder='filter '+rows.length+' row(s)';
 bar.appendChild(box);bar.appendChild(note);t.parentNode.parentNode.insertBefore(bar,t.parentNode);
 box.addEventListener('input',function(){var q=box.value.toLowerCase().trim(),n=0;
  rows.forEach(function(r){var ok=!q||r.dataset.q.indexOf(q)>=0;r.hidden=!ok;if(ok)n++;});
  note.textContent=q?n+' of '+rows.length+' row(s)':'';});
 ths.forEach(function(th,c){th.title='sort';th.addEventListener('click',function(){
  var dir=th.getAttribute('aria-sort')==='ascending'?-1:1;
  ths.forEach(function(h){h.removeAttribute('aria-sort');});
  th.setAttribute('aria-sort',dir>0?'ascending':'descending');
  var order=rows.map(function(r,i){return i;});
  order.sort(function(a,b){var x=rows[a].cells[c],y=rows[b].cells[c],p=val(x),q=val(y),d;
   if(p!==null&&q!==null&&!isNaN(p)&&!isNaN(q))d=p-q;
   else if(p!==null&&!isNaN(p))d=-1;else if(q!==null&&!isNaN(q))d=1;
   else d=txt(x).localeCompare(txt(y),undefined,{numeric:true});
   return d*dir||a-b;});
  order.forEach(function(i){body.appendChild(rows[i]);});});});
});
document.addEventListener('click',function(e){var b=e.target;
 if(!b.classList||!b.classList.contains('cp'))return;var s=b.getAttribute('data-copy');
 function done(){b.classList.add('done');setTimeout(function(){b.classList.remove('done');},900);}
 if(navigator.clipboard){navigator.clipboard.writeText(s).then(done,function(){window.prompt('the full id',s);});}
 else{window.prompt('the full id',s);}});
})();
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
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _e(x: Any) -> str:
    return html.escape(str(x))


# ------------------------------------------------------------------------------------------------ ids
@lru_cache(maxsize=4096)
def kernel_token(kernel_id: str) -> str | None:
    """The compact id pytest_ckfmha.ids.kernel_token gives the kernel (``{pipeline}-b{bm0}x{bn0}x{bk0}-{hash}``,
    the same string), or None when ``kernel_id`` is not a kernel id this version parses."""
    from ckfmha.kernel_id import KernelIdError, parse_kernel_id

    try:
        c = parse_kernel_id(kernel_id)
    except (KernelIdError, ValueError):
        return None
    a = c.algorithm
    digest = hashlib.sha1(c.kernel_id.encode()).hexdigest()[:KERNEL_HASH_LEN]
    return f"{a.pipeline.value}-b{'x'.join(str(v) for v in a.tile[:3])}-{digest}"


def short_id(item_id: str) -> str:
    """An item id as the page shows it: ``<shape id>::<kernel token>`` for an id whose last part is a full kernel
    id (reports of id format 1), every other id as it is (format 2 ids are short already)."""
    shape, sep, last = str(item_id).rpartition("::")
    if sep and "." in last:
        token = kernel_token(last)
        if token is not None:
            return f"{shape}::{token}"
    return str(item_id)


class Html(str):
    """Markup a table cell takes as it is (every other value is escaped)."""


class Num(NamedTuple):
    """A numeric cell: ``text`` shown, ``value`` sorted by (None: not a number, sorted last)."""

    value: float | None
    text: str


def _copyable(full: str, short: str) -> Html:
    f = _e(full)
    return Html(
        f'<span class="idw"><code class="id" title="{f}">{_e(short)}</code>'
        f'<button type="button" class="cp" data-copy="{f}" title="copy the full id" aria-label="copy"></button></span>'
    )


def _id(item_id: Any) -> Html:
    """An item id cell: the short id, the full id on hover and in the copy button."""
    return _copyable(str(item_id), short_id(str(item_id)))


def _kernel(kernel_id: Any) -> Html:
    """A kernel id cell: its kernel token (the id itself when it does not parse), the full id on hover and copy."""
    kid = str(kernel_id or "?")
    return _copyable(kid, kernel_token(kid) or kid)


def _n(v: Any, digits: int = 4) -> Num:
    f = _num(v)
    return Num(f, "-" if f is None else f"{f:.{digits}g}")


def _pct(share: float | None, signed: bool = False) -> Num:
    if share is None:
        return Num(None, "-")
    return Num(share, f"{share:+.1%}" if signed else f"{share:.0%}")


def _cell(v: Any, numeric: bool) -> str:
    if isinstance(v, Num):
        dv = "" if v.value is None or math.isnan(v.value) else f' data-v="{v.value!r}"'
        return f'<td class="n"{dv}>{_e(v.text)}</td>'
    if numeric:
        f = _num(v)
        dv = "" if f is None or math.isnan(f) else f' data-v="{f!r}"'
        return f'<td class="n"{dv}>{_e(v)}</td>'
    return f"<td>{v}</td>" if isinstance(v, Html) else f"<td>{_e(v)}</td>"


def _table(
    head: Iterable[str],
    rows: Iterable[Iterable[Any]],
    classes: Iterable[str] | None = None,
    numeric: Iterable[int] = (),
    total: int | None = None,
    what: str = "rows",
) -> str:
    """A sortable, filterable table (:data:`SCRIPT`); ``total``: how many rows there are when ``rows`` holds only
    the first :data:`ROW_CAP` (a note under the table says so)."""
    num = set(numeric)
    out = [
        '<div class="tw"><table data-sortable><thead><tr>'
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
    ]
    cls = list(classes) if classes is not None else None
    shown = 0
    for i, r in enumerate(rows):
        c = f' class="{cls[i]}"' if cls and cls[i] else ""
        out.append(f"<tr{c}>" + "".join(_cell(v, j in num) for j, v in enumerate(r)) + "</tr>")
        shown += 1
    out.append("</tbody></table></div>")
    if total is not None and total > shown:
        out.append(
            f"<div class='muted'>{shown} of {total} {what} shown; the report file has them all "
            "(<code>ckfmha compare</code>, <code>jq</code>)</div>"
        )
    return "".join(out)


def _section(anchor: str, title: str, body: str) -> tuple[str, str, str]:
    return anchor, title, f'<section id="{anchor}"><h2>{title}</h2>{body}</section>'


# --------------------------------------------------------------------------------------- the tolerance
@dataclass(frozen=True)
class ToleranceRatio:
    """One item's error against CK's tolerance (module doc): ``ratio`` is the plotted value, above 1.0 exactly when
    the validator found mismatches (``over``); ``abs_ratio`` = max|out - ref| / atol."""

    ratio: float
    abs_ratio: float
    atol: float
    rtol: float
    over: bool
    exact: bool = False  # ratio is the row's tol_ratio (the validator's own figure), not the upper bound


def tolerance_ratio(row: dict[str, Any]) -> ToleranceRatio | None:
    """The tolerance plot's value of a report row (module doc), from the row's ``max_abs_err`` and ``mismatches``
    and :func:`ckfmha.validator.tolerance_for` of its dtype, direction, head sizes and arch's fp8 format; None for a
    parity row, a row that was not compared (a verdict other than passed / failed, no error) or a dtype without a
    tolerance."""
    from ckfmha.archs import fp8_format
    from ckfmha.validator import ToleranceError, tolerance_for

    err = _num(row.get("max_abs_err"))
    if err is None or row.get("kind") == "parity" or row.get("verdict") not in ("passed", "failed"):
        return None
    if not row.get("dtype"):
        return None
    try:
        fmt = fp8_format(str(row["arch"])) if row.get("arch") else "ocp"
    except (KeyError, ValueError):
        fmt = "ocp"
    try:
        tol = tolerance_for(
            row["dtype"],
            backward=row.get("family") == "bwd",
            hdim_q=_int(row.get("hdim_q")),
            hdim_v=_int(row.get("hdim_v")),
            fp8_format=fmt,
        )
    except (ToleranceError, ValueError):
        return None
    if tol.atol <= 0:
        return None
    abs_ratio = err / tol.atol if math.isfinite(err) else math.inf
    exact = _num(row.get("tol_ratio"))
    # the validator's figure (reports since tol_ratio): > 1 exactly where a check failed
    if exact is not None and not math.isnan(exact):
        return ToleranceRatio(exact, abs_ratio, tol.atol, tol.rtol, exact > 1.0, exact=True)
    mism = row.get("mismatches")
    over = mism > 0 if isinstance(mism, int) and not isinstance(mism, bool) else row.get("verdict") == "failed"
    return ToleranceRatio(abs_ratio if over else min(abs_ratio, 1.0), abs_ratio, tol.atol, tol.rtol, over)


#: histogram bins per decade of the tolerance plot (1.0 is a bin edge)
BINS_PER_DECADE = 4
#: the plot's lowest decade (ratios below 10**LOW_DECADE, zero included, are in its lowest bin)
LOW_DECADE = -4


def _bin(ratio: float) -> int:
    """Bin k holds ratios in (10**(k/B), 10**((k+1)/B)]: 1.0 closes bin -1, anything above it is in bin >= 0."""
    if ratio <= 10.0**LOW_DECADE:
        return LOW_DECADE * BINS_PER_DECADE
    return math.ceil(math.log10(ratio) * BINS_PER_DECADE - 1e-9) - 1


@dataclass
class _FamilyTolerance:
    bins: Counter = field(default_factory=Counter)
    items: int = 0
    over: int = 0
    within_rtol: int = 0  # passed, with max|err| above atol
    exact: int = 0  # items plotted with the validator's own figure (tol_ratio)
    worst: tuple[float, str] = (-1.0, "")


class _Tolerance:
    """The tolerance plot's data, one row at a time, bounded: per family its bins and counts, the
    :data:`PLOT_POINTS` worst items above the line."""

    def __init__(self) -> None:
        self.families: dict[str, _FamilyTolerance] = {}
        self.points: list[tuple[float, str, str, float, int]] = []  # (ratio, id, family, abs_ratio, mismatches)
        self.over = 0

    def add(self, r: dict[str, Any]) -> None:
        t = tolerance_ratio(r)
        if t is None:
            return
        fam = str(r.get("family") or "?")
        s = self.families.setdefault(fam, _FamilyTolerance())
        s.items += 1
        s.exact += t.exact
        if t.ratio > s.worst[0]:
            s.worst = (t.ratio, str(r["id"]))
        if math.isfinite(t.ratio):
            s.bins[_bin(t.ratio)] += 1
        if not t.over:
            s.within_rtol += t.abs_ratio > 1.0
            return
        s.over += 1
        self.over += 1
        point = (t.ratio, str(r["id"]), fam, t.abs_ratio, _int(r.get("mismatches")))
        if len(self.points) < PLOT_POINTS:
            heapq.heappush(self.points, point)
        elif point > self.points[0]:
            heapq.heapreplace(self.points, point)


def _fmt_ratio(v: float) -> str:
    return "non-finite" if not math.isfinite(v) else f"{v:.3g}"


def _tolerance_svg(tol: _Tolerance) -> str:
    """The plot as inline SVG (module doc): one column per family (in the report's order); bars = the items' bins
    (green at or below the line, red above), dots = the items above the line; the dashed line at 1.0.  Long because
    the drawing is one coordinate system: the axes, the bars, the dots and the limit line share its scale closures."""
    fams = list(tol.families)
    finite = [p[0] for p in tol.points if math.isfinite(p[0])]
    hi = max(1, min(8, math.ceil(math.log10(max(finite))) if finite else 1))
    lo = LOW_DECADE
    width, height, left, right, top, bottom = 980, 330, 64, 250, 26, 44
    ph = height - top - bottom
    cw = (width - left - right) / max(1, len(fams))

    def y(v: float) -> float:
        if not math.isfinite(v):
            return top - 12
        lv = min(max(math.log10(v) if v > 0 else lo, lo), hi)
        return top + ph * (hi - lv) / (hi - lo)

    out = [
        f'<svg class="tolerance" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="error against the tolerance per family">'
    ]
    for d in range(lo, hi + 1):
        yy = y(10.0**d)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eaeef2"/>')
        label = "1" if d == 0 else f"1e{d}"
        out.append(
            f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end" fill="#57606a">{label}</text>'
        )
    out.append(
        f'<text x="14" y="{top + ph / 2:.0f}" font-size="11" fill="#57606a" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + ph / 2:.0f})">{_axis_label(tol)}</text>'
    )
    for i, fam in enumerate(fams):
        s = tol.families[fam]
        x0 = left + i * cw
        cx = x0 + cw / 2
        peak = max(s.bins.values(), default=0) or 1
        for k, count in sorted(s.bins.items()):
            if not count:
                continue
            y_top, y_bot = y(10.0 ** ((k + 1) / BINS_PER_DECADE)), y(10.0 ** (k / BINS_PER_DECADE))
            w = max(2.0, (cw * 0.8) * count / peak)
            a, b = 10.0 ** (k / BINS_PER_DECADE), 10.0 ** ((k + 1) / BINS_PER_DECADE)
            colour = "#2da44e" if b <= 1.0 + 1e-9 else "#cf222e"
            out.append(
                f'<rect class="bin" x="{cx - w / 2:.1f}" y="{y_top:.1f}" width="{w:.1f}" '
                f'height="{max(1.0, y_bot - y_top - 1):.1f}" fill="{colour}" fill-opacity="0.55" '
                f'data-family="{_e(fam)}" data-count="{count}"><title>{_e(fam)}: {count} item(s) with a ratio in '
                f"({a:.3g}, {b:.3g}]</title></rect>"
            )
        out.append(
            f'<text x="{cx:.1f}" y="{height - bottom + 16}" font-size="12" text-anchor="middle" '
            f'font-weight="600">{_e(fam)}</text>'
            f'<text x="{cx:.1f}" y="{height - bottom + 31}" font-size="11" text-anchor="middle" '
            f'fill="{"#a40e26" if s.over else "#57606a"}">{s.items} items, {s.over} over</text>'
        )
        if i:
            out.append(f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="{top}" y2="{top + ph}" stroke="#d0d7de"/>')
    for ratio, item, fam, abs_ratio, mism in sorted(tol.points, reverse=True):
        i = fams.index(fam)
        jitter = (int(hashlib.sha1(item.encode()).hexdigest()[:6], 16) / 0xFFFFFF - 0.5) * 0.6 * cw
        cx = left + i * cw + cw / 2 + jitter
        out.append(
            f'<circle class="pt" cx="{cx:.1f}" cy="{y(ratio):.1f}" r="3.5" fill="#cf222e" stroke="#fff" '
            f'stroke-width="0.8" data-id="{_e(item)}" data-ratio="{ratio!r}"><title>{_e(short_id(item))}: '
            f"max|err|/atol {_fmt_ratio(abs_ratio)}, {mism} mismatch(es)\n{_e(item)}</title></circle>"
        )
    y1 = y(1.0)
    out.append(
        f'<line class="limit" data-ratio="1.0" x1="{left}" x2="{width - right}" y1="{y1:.1f}" y2="{y1:.1f}" '
        f'stroke="#a40e26" stroke-width="1.5" stroke-dasharray="6 4"/>'
        f'<text x="{width - right + 6}" y="{y1 - 4:.1f}" font-size="11" fill="#a40e26">the validator\'s limit:</text>'
        f'<text x="{width - right + 6}" y="{y1 + 10:.1f}" font-size="11" fill="#a40e26">|err| = atol + rtol\u00b7|ref|'
        "</text>"
        f'<text x="{width - right + 6}" y="{y1 - 40:.1f}" font-size="11" fill="#57606a">above: items with '
        "mismatches</text>"
        f'<text x="{width - right + 6}" y="{y1 + 40:.1f}" font-size="11" fill="#57606a">at or below: passed</text>'
        f'<text x="{width - right + 6}" y="{top - 8}" font-size="11" fill="#57606a">top: non-finite errors</text>'
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{ph}" fill="none" stroke="#d0d7de"/>'
        "</svg>"
    )
    return "".join(out)


def _axis_label(tol: _Tolerance) -> str:
    exact = sum(s.exact for s in tol.families.values())
    items = sum(s.items for s in tol.families.values())
    if exact == items:
        return "|err| / (atol + rtol\u00b7|ref|), worst element"
    return "max|err| / atol (capped at 1 where passed)" if not exact else "|err| / allowance (see note)"


def _tolerance(tol: _Tolerance) -> str:
    if not tol.families:
        return "<p>no compared outputs (no passed or failed item with an error)</p>"
    exact = sum(s.exact for s in tol.families.values())
    items = sum(s.items for s in tol.families.values())
    exact_words = (
        "Per item: the validator's own figure, |out &minus; ref| / (atol + rtol&middot;|ref|) at the worst element "
        "of its compared outputs (the report's tol_ratio, ckfmha.validator.CheckResult.limit_ratio, with CK's "
        "tolerances for its dtype and direction), so an item lies above the line exactly when the validator found "
        "an element beyond its allowance. "
    )
    bound_words = (
        "the largest |out &minus; ref| of its compared outputs over CK's atol for its dtype and direction "
        "(ckfmha.validator.tolerance_for), capped at 1 for items without mismatches: an upper bound of the "
        "validator's |err| / (atol + rtol&middot;|ref|) at the worst element, so an item lies above the line "
        "exactly when the validator found an element beyond its allowance. "
    )
    if exact == items:
        how = exact_words
    elif not exact:
        how = "Per item (a report without tol_ratio): " + bound_words
    else:
        how = exact_words + f"The {items - exact} item(s) whose rows lack tol_ratio (an older report): " + bound_words
    note = (
        f"<div class='muted'>{how}Bars: items per bin; dots: the "
        f"{PLOT_POINTS} worst items above the line (hover for the id). "
        "'within rtol': passed with max|err| over atol, inside atol + rtol&middot;|ref|.</div>"
    )
    more = (
        f"<div class='warnline'>{tol.over - len(tol.points)} more item(s) above the line are not drawn "
        f"(the {PLOT_POINTS} worst are): see Failures</div>"
        if tol.over > len(tol.points)
        else ""
    )
    body, cls = [], []
    for fam in list(tol.families):
        s = tol.families[fam]
        body.append(
            (
                fam,
                Num(s.items, str(s.items)),
                Num(s.over, str(s.over)),
                Num(s.within_rtol, str(s.within_rtol)),
                Num(s.worst[0] if math.isfinite(s.worst[0]) else 1e308, _fmt_ratio(s.worst[0])),
                _id(s.worst[1]),
            )
        )
        cls.append("bad" if s.over else "")
    return f"<div class='tw plot'>{_tolerance_svg(tol)}</div>{more}{note}" + _table(
        ("family", "items compared", "over the line", "within rtol", "worst (plotted)", "worst item"),
        body,
        cls,
    )


# ------------------------------------------------------------------------------------------ one pass
class _Scan:
    """What one pass over the rows collects for the summary, families, failures, tolerance and skips (bounded:
    per-family counts, the first :data:`ROW_CAP` failures, the skip reasons)."""

    def __init__(self) -> None:
        self.summary = Summary()
        self.verdicts: Counter[str] = Counter()
        self.failures: list[tuple[str, str, str]] = []
        self.failing = 0
        self.tolerance = _Tolerance()
        self.skips: Counter[str] = Counter()

    def add(self, r: dict[str, Any]) -> None:
        self.summary.add(r)
        v = r.get("verdict")
        self.verdicts[str(v)] += 1
        if v in FAILING:
            self.failing += 1
            if len(self.failures) < ROW_CAP:
                self.failures.append((str(r["id"]), str(v), str(r.get("reason") or "")[:REASON_CHARS]))
        elif v == "skipped":
            reason = str(r.get("reason") or "")
            shape = str(r["id"]).split("::")[0]
            self.skips[reason[len(shape) + 2 :] if reason.startswith(shape + ": ") else reason] += 1
        self.tolerance.add(r)


# --------------------------------------------------------------------------------------------- sections
def _overall(meta: dict[str, Any], scan: _Scan, cmp: Comparison | None) -> tuple[str, str, str]:
    """(word, css class, why) of the verdict at the top (module doc)."""
    total = sum(scan.verdicts.values())
    state, status = meta.get("state"), meta.get("exit_status")
    if scan.failing:
        parts = ", ".join(f"{scan.verdicts[v]} {v}" for v in FAILING if scan.verdicts[v])
        return "FAILED", "v-bad", f"{scan.failing} of {total} items failing ({parts})"
    if state not in (None, "complete"):
        reason = meta.get("reason") or ""
        return "INCOMPLETE", "v-warn", f"the run's state is {state}" + (f": {reason}" if reason else "")
    if status not in (None, 0):
        return f"EXIT {status}", "v-bad", f"pytest's exit status was {status} with no failing item"
    if cmp is not None and cmp.regressed:
        return "REGRESSED", "v-bad", f"no failing item, but against the baseline: {_base_words(cmp)}"
    if not scan.verdicts["passed"]:
        return "NOTHING PASSED", "v-warn", f"none of {total} items passed"
    return "PASSED", "v-ok", f"all {scan.verdicts['passed']} of {total} items that ran passed"


def _base_words(cmp: Comparison) -> str:
    parts = [
        f"{n} {w}"
        for n, w in (
            (len(cmp.new_failures), "new failure(s)"),
            (len(cmp.missing), "missing item(s)"),
            (len(cmp.slower), "slower item(s)"),
        )
        if n
    ]
    return ", ".join(parts) if parts else "no regression"


def _top(rep: RunReport, scan: _Scan, cmp: Comparison | None) -> str:
    m = rep.meta
    env = m.get("environment") or {}
    word, cls, why = _overall(m, scan, cmp)
    pills = []
    for v in VERDICTS:
        n = scan.verdicts[v]
        if n or v == "passed":
            kind = "ok" if v == "passed" else "ko" if v in FAILING else "warn" if v == "not_run" else ""
            pills.append(f'<span class="pill {kind}" data-verdict="{v}" data-count="{n}">{n} {v}</span>')
    parts = [
        "<h1>ckfmha run report</h1>",
        f'<div class="verdict {cls}" id="verdict"><span class="word">{_e(word)}</span>'
        f'<span class="why">{_e(why)}</span></div>',
        f'<div class="counts">{"".join(pills)}</div>',
    ]
    if scan.failures:
        items = "".join(
            f"<li>{_id(i)} <b>{_e(v)}</b> <span class='muted'>{_e(_first_line(why, 200))}</span></li>"
            for i, v, why in scan.failures[:SUMMARY_FAILURES]
        )
        more = (
            f" (the first {SUMMARY_FAILURES}; <a href='#failures'>all {scan.failing}</a>)"
            if scan.failing > SUMMARY_FAILURES
            else ""
        )
        parts.append(f"<div class='base'>Failing items{more}</div><ol class='first'>{items}</ol>")
    if cmp is not None:
        ok = not cmp.regressed
        parts.append(
            f"<div class='base' id='baseline-verdict'>Against the baseline: <span class='pill "
            f"{'ok' if ok else 'ko'}'>{'no regression' if ok else 'REGRESSED'}</span> {_e(_base_words(cmp))} "
            f"<a href='#baseline'>details</a></div>"
        )
        parts += [f"<div class='warnline'>not like for like: {_e(x.text)}</div>" for x in cmp.mismatches]
    facts = [
        m.get("category") and f"category {m.get('category')}",
        m.get("arch") and f"arch {m.get('arch')}",
        ", ".join(env.get("devices") or []) or None,
        ", ".join(m.get("backends") or []) and "backend " + ", ".join(m.get("backends") or []),
        m.get("seed") is not None and f"seed {m.get('seed')}",
        f"{m.get('completed')} of {m.get('collected')} collected items completed",
        m.get("created") and f"created {m.get('created')}",
    ]
    parts.append(f"<div class='context'>{_e(' · '.join(str(f) for f in facts if f))}</div>")
    return "".join(parts)


def _first_line(text: str, limit: int) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _run(rep: RunReport) -> str:
    m = rep.meta
    env = m.get("environment") or {}
    pk = env.get("packages") or {}
    facts = [
        ("file", rep.path),
        ("state", f"{m.get('state')}, exit status {m.get('exit_status')}"),
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
    return (
        "<dl class='facts'>"
        + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v if v not in (None, '') else '-')}</dd>" for k, v in facts)
        + "</dl>"
    )


def _git_text(ident: Any) -> str:
    """``<commit> (dirty)`` of a ckfmha / CK identity (ckfmha.runreport.git_identity); "not a git checkout"."""
    if not isinstance(ident, dict) or not ident.get("commit"):
        return "not a git checkout"
    return f"{ident['commit']}{' (dirty: tracked files changed)' if ident.get('dirty') else ''}"


def _provenance_facts(env: dict[str, Any]) -> list[tuple[str, Any]]:
    """The provenance lines (ckfmha.runreport.provenance): ckfmha's commit, the CK checkout, the host, the GPU
    UUIDs; a merged report's shards' own are named by shard."""
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


def _families(summ: dict[str, dict[str, Any]]) -> str:
    body, cls = [], []
    for fam, s in summ.items():
        body.append([fam, *[s[v] for v in VERDICTS], _n(s["worst_abs_err"], 3), _n(s["best_tflops"])])
        cls.append("bad" if any(s[v] for v in FAILING) else "")
    return _table(("family", *VERDICTS, "worst abs err", "best TFLOPS"), body, cls, numeric=range(1, 10))


def _capped(items: Sequence[Any]) -> tuple[Sequence[Any], int]:
    return items[:ROW_CAP], len(items)


def _regressions(cmp: Comparison) -> str:
    parts = [
        f"<div class='muted'>baseline {_e(cmp.baseline)}: {cmp.compared} items in both, {cmp.timed} timed in both, "
        f"threshold {cmp.threshold:.0%}{'; ' + _e(cmp.speed_note) if cmp.speed_note else ''}</div>",
        f"<div class='base'>{'REGRESSED: ' if cmp.regressed else ''}{_e(_base_words(cmp))}</div>",
        *(f"<div class='warnline'>WARNING, not like for like: {_e(m.text)}</div>" for m in cmp.mismatches),
    ]
    for prov in (cmp.baseline_provenance, cmp.new_provenance):
        if prov:
            parts.append(f"<div class='muted'>{_e(prov)}</div>")
    if cmp.new_failures:
        shown, total = _capped(cmp.new_failures)
        parts.append(
            "<h3>New failures</h3>"
            + _table(
                ("item", "was", "now", "reason"),
                [(_id(d["id"]), d["baseline_verdict"], d["verdict"], d["reason"]) for d in shown],
                ["bad"] * len(shown),
                total=total,
            )
        )
    if cmp.missing:
        shown, total = _capped(cmp.missing)
        parts.append(
            "<h3>Missing now</h3>" + _table(("item",), [(_id(i),) for i in shown], ["bad"] * len(shown), total=total)
        )
    for title, rows, cls in (("Slower", cmp.slower, "bad"), ("Faster", cmp.faster, "good")):
        if rows:
            shown, total = _capped(rows)
            parts.append(
                f"<h3>{title}</h3>"
                + _table(
                    ("item", "baseline ms", "now ms", "change"),
                    [(_id(d["id"]), _n(d["baseline_ms"]), _n(d["new_ms"]), _pct(d["change"], True)) for d in shown],
                    [cls] * len(shown),
                    total=total,
                )
            )
        if title == "Slower" and cmp.fixed:
            shown, total = _capped(cmp.fixed)
            parts.append(
                "<h3>Fixed</h3>"
                + _table(
                    ("item", "was", "now"),
                    [(_id(d["id"]), d["baseline_verdict"], d["verdict"]) for d in shown],
                    ["good"] * len(shown),
                    total=total,
                )
            )
    if cmp.added:
        shown, total = _capped(cmp.added)
        parts.append(f"<h3>New in this run ({total})</h3>" + _table(("item",), [(_id(i),) for i in shown], total=total))
    return "".join(parts)


def _failures(scan: _Scan) -> str:
    if not scan.failing:
        return "<p>none</p>"
    return _table(
        ("item", "verdict", "reason"),
        [(_id(i), v, why) for i, v, why in scan.failures],
        ["bad"] * len(scan.failures),
        total=scan.failing,
        what="failing items",
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


def _speed(rows: Iterable[dict[str, Any]], plt) -> str:
    """One panel per family; per series (dtype, hdim, mask or not, backend) the best TFLOPS at
    each length."""
    best: dict[tuple[str, str], dict[float, float]] = defaultdict(dict)
    timed = False
    for r in rows:
        timed = timed or r.get("timed") is True
        t, s = _num(r.get("tflops")), _seqlen(r)
        if r.get("verdict") != "passed" or t is None or s is None or r.get("kind") == "parity":
            continue
        masked = "masked" if r.get("mask") not in ("", "0", None) else "no mask"
        key = (_plain(r.get("family")), _plain(f"{r.get('dtype')} d{r.get('hdim_q')} {masked} ({r.get('backend')})"))
        best[key][s] = max(best[key].get(s, 0.0), t)
    if not best:
        return "<p>no items with a time (every item was skipped or failed)</p>"
    fams = sorted({k[0] for k in best})
    cols = min(3, len(fams))
    nrows = -(-len(fams) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols, 3.0 * nrows), squeeze=False)
    for ax, fam in zip(axes.flat, fams):
        for (f, label), pts in sorted(best.items()):
            if f == fam:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], "o-", ms=3, lw=1, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(fam, fontsize=10)
        ax.set_xlabel("longest sequence (queries or keys)", fontsize=8)
        ax.set_ylabel("TFLOPS (best kernel)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5.5, ncol=2)
    for ax in list(axes.flat)[len(fams) :]:
        ax.axis("off")
    fig.tight_layout()
    note = (
        ""
        if timed
        else (
            "<div class='muted'>one untimed run per item: wall-clock figures; run with --ckfmha-bench for device "
            "medians</div>"
        )
    )
    return f"{note}<img alt='TFLOPS against sequence length' src='{_png(fig)}'>"


def _ranking(rows: Iterable[dict[str, Any]], limit: int = ROW_CAP) -> str:
    """Per shape: the kernels in TFLOPS order and where the plan's choice stands (module doc)."""
    shapes: dict[str, list[tuple[float, Any]]] = defaultdict(list)
    plan_kernel: dict[str, str] = {}
    kernel_ids: dict[Any, Any] = {}  # one string per kernel id, not one per row
    timed = False
    for r in rows:
        timed = timed or r.get("timed") is True
        shape = str(r["id"]).split("::")[0]
        if r.get("kind") == "plan":
            plan_kernel[shape] = str(r.get("kernel_id") or "")
        elif r.get("kind") == "kernel" and r.get("verdict") == "passed" and (_num(r.get("tflops")) or 0) > 0:
            kid = kernel_ids.setdefault(r.get("kernel_id"), r.get("kernel_id"))
            shapes[shape].append((float(r["tflops"]), kid))  # not the whole row
    ranked = []
    for shape, ks in shapes.items():
        if len(ks) < 2:
            continue
        ks.sort(key=lambda k: -k[0])
        chosen = next((t for t, kid in ks if kid == plan_kernel.get(shape)), None)
        ranked.append((chosen / ks[0][0] if chosen is not None else None, shape, ks))
    if not ranked:
        return "<p>no shape has two or more kernels with a time</p>"
    ranked.sort(key=lambda x: (x[0] is None, x[0] if x[0] is not None else 0.0, x[1]))  # furthest from best first
    body, cls = [], []
    for share, shape, ks in ranked[:limit]:
        top = ks[0][0]
        items = "".join(
            f"<li>{STAR if kid == plan_kernel.get(shape) else ''}{_kernel(kid)} {t:.4g} ({t / top:.0%})</li>"
            for t, kid in ks
        )
        body.append(
            (
                _id(shape),
                Num(len(ks), str(len(ks))),
                _n(top),
                _kernel(ks[0][1]),
                _pct(share),
                Html(f"<details><summary>{len(ks)} kernels</summary><ol>{items}</ol></details>"),
            )
        )
        cls.append("bad" if share is not None and share < 0.95 else "")
    return (
        f"<div class='muted'>{len(ranked)} shape(s) with two or more kernels with a time; 'plan' = the TFLOPS of the "
        "kernel the dispatcher's plan chose, as a share of the best (red: under 95%); &#9733; = the plan's kernel"
        "</div>"
        + (
            ""
            if timed
            else "<div class='warnline'>untimed run: one wall-clock run per item, so this order is mostly noise "
            "(run with --ckfmha-bench for device medians)</div>"
        )
        + _table(
            ("shape", "kernels", "best TFLOPS", "best kernel", "plan", "all kernels"),
            body,
            cls,
            total=len(ranked),
            what="shapes",
        )
    )


def _skips(scan: _Scan) -> str:
    common = scan.skips.most_common(ROW_CAP)
    return _table(
        ("items", "reason"),
        [(Num(n, str(n)), why[:400]) for why, n in common],
        total=len(scan.skips),
        what="distinct reasons",
    )


def _coverage(rows: Iterable[dict[str, Any]]) -> str:
    counts, ran = row_features(rows)
    table = feature_table(counts)
    never = [t for t in table if not t["count"]]
    head = (
        f"<div class='muted'>{ran} item(s) ran; {len(never)} of {len(table)} features never reached "
        "(ckfmha.coverage; <code>ckfmha coverage</code> adds the kernel space)</div>"
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
    scan = _Scan()
    for r in rows:
        scan.add(r)
    sections = [_section("families", "Families", _families(scan.summary.families))]
    if comparison is not None:
        sections.append(_section("baseline", "Against the baseline", _regressions(comparison)))
    sections.append(_section("failures", f"Failures ({scan.failing})", _failures(scan)))
    sections.append(_section("tolerance", "Errors against the tolerance", _tolerance(scan.tolerance)))
    sections.append(_section("speed", "Speed", _speed(rows, plt)))
    sections.append(_section("ranking", "Kernel ranking", _ranking(rows)))
    if scan.skips:
        sections.append(_section("skips", f"Skips ({scan.verdicts['skipped']})", _skips(scan)))
    sections.append(_section("coverage", "Feature coverage", _coverage(rows)))
    sections.append(_section("run", "Run and provenance", _run(rep)))
    toc = "<nav class='toc'><b>Contents:</b> " + "".join(f"<a href='#{a}'>{t}</a>" for a, t, _ in sections) + "</nav>"
    body = _top(rep, scan, comparison) + toc + "".join(s for _, _, s in sections)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>ckfmha report</title>"
        f"<style>{_CSS}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
