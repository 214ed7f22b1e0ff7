"""The HTML page (ckfmha.htmlreport, issue 28): the verdict first with counts equal to the rows', failing items
listed first, every table sortable and filterable by the one embedded script, short ids with the full id on hover and
to copy, no network resource, the tolerance plot's points equal to the validator's numbers (a failing output above
the line, a passing one at or below it), the caps that keep a large report's page small; the screenshot script
(benchmarks/screenshot_report.py) and the page's script in headless Chromium where /usr/bin/chromium exists."""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ckfmha import htmlreport
from ckfmha.htmlreport import ToleranceRatio, kernel_token, render, short_id, tolerance_ratio
from ckfmha.kernel_id import parse_kernel_id
from ckfmha.runreport import compare_reports, report_from_doc
from ckfmha.validator import CheckResult, check, tolerance_for

pytest.importorskip("matplotlib")  # the page's speed plot (the report extra)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (Debian: apt-get install -y chromium); not needed by CI"
)

#: a full kernel id as reports of id format 1 carry it in the item id
KID = "fwd.fp16.batch.d128x128.triton.b64x64.r4x1x1-4x1x1.w.p0000.o-1.sm90.mask=causal.stages=3"
SHAPE = "fwd-fp16-batch-b2h8k2s128d128-causal"


def _row(rid: str, verdict: str = "passed", **extra) -> dict:
    r = {
        "id": rid,
        "verdict": verdict,
        "family": "fwd",
        "kind": "plan" if rid.endswith("::plan") else "kernel",
        "reason": "",
        "dtype": "fp16",
        "arch": "gfx942",
        "hdim_q": 64,
        "hdim_v": 64,
        "seqlen_q": 128,
        "seqlen_k": 128,
        "mask": "0",
        "backend": "cpu",
        "max_abs_err": 1e-4 if verdict in ("passed", "failed") else "",
        "mismatches": 0,
        "tflops": 1.0 if verdict == "passed" else "",
        "kernel_id": rid.split("::")[-1],
    }
    r.update(extra)
    return r


def _rep(rows: list[dict], path: str = "r.json", **meta):
    doc = {
        "schema": "ckfmha.report",
        "version": 2,
        "state": "complete",
        "exit_status": 0,
        "category": "smoke",
        "arch": "gfx942",
        "seed": 0,
        "collected": len(rows),
        "completed": len(rows),
        **meta,
        "rows": rows,
    }
    return report_from_doc(doc, path)


def _section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}">')
    return page[start : page.index("</section>", start)]


def _search(pattern: str, text: str) -> re.Match[str]:
    m = re.search(pattern, text)
    assert m, pattern
    return m


def _attr(tag: str, name: str) -> str:
    m = re.search(rf'{name}="([^"]*)"', tag)
    assert m, (name, tag)
    return m.group(1)


# ----------------------------------------------------------------------------------------- the verdict
MIXED = [
    _row("fwd-a::k1"),
    _row("fwd-a::k2", "skipped", reason="fwd-a: no kernel"),
    _row("fwd-b::k1", "failed", reason="o: 3/4096 mismatches", max_abs_err=0.5, mismatches=3),
    _row("fwd-c::plan", "crashed", reason="killed by signal 11"),
    _row("fwd-d::k1"),
    _row("fwd-e::k1", "timeout", reason="no result within 60 s"),
    _row("fwd-f::k1", "not_run"),
]


def test_the_verdict_comes_first_with_the_rows_counts_and_failures_first() -> None:
    page = render(_rep(MIXED))
    verdict = page.index('id="verdict"')
    assert verdict < page.index("<section") and verdict < page.index("<nav class='toc'>")
    top = page[verdict : page.index("<nav class='toc'>")]
    assert ">FAILED<" in top and "3 of 7 items failing (1 failed, 1 crashed, 1 timeout)" in top
    pills = {m.group(1): int(m.group(2)) for m in re.finditer(r'data-verdict="(\w+)" data-count="(\d+)"', top)}
    counts = Counter(r["verdict"] for r in MIXED)
    assert pills == {v: n for v, n in counts.items()}  # every verdict that occurs, with the rows' count
    assert sum(pills.values()) == len(MIXED)
    # the failing items are listed in the verdict, in report order, before anything else
    listed = re.findall(r'<li><span class="idw"><code class="id" title="([^"]+)"', top)
    assert listed == ["fwd-b::k1", "fwd-c::plan", "fwd-e::k1"]
    assert "killed by signal 11" in top
    # the families table counts the same rows
    fam = _section(page, "families")
    fwd = _search(r'<tr class="bad"><td>fwd</td>(.*?)</tr>', fam).group(1)
    cells = re.findall(r'<td class="n" data-v="([^"]+)">', fwd)
    assert [int(float(c)) for c in cells[:7]] == [counts[v] for v in htmlreport.VERDICTS]


@pytest.mark.parametrize(
    "rows, meta, word",
    [
        ([_row("a::k"), _row("b::k", "skipped")], {}, "PASSED"),
        ([_row("a::k"), _row("b::k", "not_run")], {"state": "interrupted", "reason": "Ctrl-C"}, "INCOMPLETE"),
        ([_row("a::k")], {"exit_status": 3}, "EXIT 3"),
        ([_row("a::k", "skipped")], {}, "NOTHING PASSED"),
        ([_row("a::k"), _row("b::k", "error")], {"state": "interrupted"}, "FAILED"),  # a failure outranks the rest
    ],
)
def test_each_verdict_rule(rows, meta, word) -> None:
    page = render(_rep(rows, **meta))
    assert _search(r'<div class="verdict [^"]+" id="verdict"><span class="word">([^<]+)<', page).group(1) == word


def test_a_regression_against_the_baseline_is_the_verdict_and_shown_large() -> None:
    base = _rep([_row("a::k"), _row("b::k"), _row("c::k")], "old.json")
    new = _rep([_row("a::k"), _row("b::k")], "new.json")
    page = render(new, compare_reports(base, new))
    assert '<span class="word">REGRESSED</span>' in page and "1 missing item(s)" in page
    top = page[: page.index("<nav class='toc'>")]
    assert "id='baseline-verdict'" in top and "REGRESSED</span>" in top
    assert "Missing now" in _section(page, "baseline") and "#baseline" in page


def test_the_contents_link_every_section() -> None:
    page = render(_rep(MIXED))
    toc = page[page.index("<nav class='toc'>") : page.index("</nav>")]
    links = re.findall(r"href='#([a-z]+)'", toc)
    sections = re.findall(r'<section id="([a-z]+)">', page)
    assert links == sections and {"families", "failures", "tolerance", "speed", "coverage", "run"} <= set(links)


# --------------------------------------------------------------------------------- tables, ids, script
def test_every_table_is_sortable_with_the_data_the_script_needs() -> None:
    page = render(_rep(MIXED))
    assert (
        page.count("<table") == page.count("<table data-sortable>") == 5
    )  # families, failures, tolerance, skips, coverage
    assert page.count("<thead>") == page.count("<tbody>") == page.count("<table")
    assert page.count("<script>") == 1 and htmlreport.SCRIPT in page
    for needed in ("table[data-sortable]", "data-v", "aria-sort", "'search'", "data-copy", "clipboard"):
        assert needed in htmlreport.SCRIPT, needed
    # numeric cells carry their value for sorting: the families table's worst abs err is the worst row's
    fam = _section(page, "families")
    assert 'data-v="0.5"' in fam


def test_short_ids_keep_the_full_id_on_hover_and_to_copy() -> None:
    full = f"{SHAPE}::{KID}"
    token = kernel_token(KID)
    assert short_id(full) == f"{SHAPE}::{token}" and len(short_id(full)) < len(full) - 40
    assert short_id(f"{SHAPE}::plan") == f"{SHAPE}::plan" and short_id("odd::not.a.kernel") == "odd::not.a.kernel"
    page = render(_rep([_row(full, "failed", reason="o: 1/4 mismatches", max_abs_err=1.0, mismatches=1)]))
    tags = re.findall(r'<code class="id" title="([^"]*)">([^<]*)</code><button[^>]*data-copy="([^"]*)"', page)
    assert tags and all(t == (full, short_id(full), full) for t in tags)
    assert f">{full}<" not in page  # shown only short; the full id is in attributes (and the plot's hover text)


def test_kernel_tokens_are_the_plugins() -> None:
    from ckfmha.selection import KernelQuery
    from pytest_ckfmha.ids import KERNEL_HASH_LEN
    from pytest_ckfmha.ids import kernel_token as plugin_token

    assert htmlreport.KERNEL_HASH_LEN == KERNEL_HASH_LEN
    kernels = KernelQuery(arch="gfx942").run()[::97] + [parse_kernel_id(KID)]
    assert len(kernels) > 10
    for k in kernels:
        assert kernel_token(k.kernel_id) == plugin_token(k), k.kernel_id


def test_no_network_resource_in_the_page() -> None:
    page = render(_rep(MIXED))
    assert not re.search(r"https?://", page) and "<link" not in page and "src='//" not in page
    assert not re.search(r"<script[^>]+src=", page)
    assert page.count("data:image/png;base64,") == 1 and '<svg class="tolerance"' in page


# -------------------------------------------------------------------------------- the tolerance plot
def _checked_row(rid: str, out: np.ndarray, ref: np.ndarray, dtype: str = "fp16", **extra) -> tuple[dict, CheckResult]:
    """A report row of one output as the plugin writes it (pytest_ckfmha.reporting.result_props), from the
    validator's own CheckResult."""
    tol = tolerance_for(dtype, hdim_q=64, hdim_v=64, fp8_format="fnuz")
    c = check(out, ref, tol.rtol, tol.atol, name="o")
    row = _row(
        rid,
        "passed" if c.passed else "failed",
        dtype=dtype,
        max_abs_err=c.max_abs_err,
        max_rel_err=c.max_rel_err,
        mismatches=c.mismatch_count,
        elements=c.total,
        **extra,
    )
    return row, c


def _ratio(row: dict) -> ToleranceRatio:
    t = tolerance_ratio(row)
    assert t is not None, row
    return t


def _points(page: str) -> tuple[dict[str, float], dict[str, float], float]:
    """The plot's dots: {id: data-ratio}, {id: cy}; the limit line's y."""
    svg = page[page.index('<svg class="tolerance"') : page.index("</svg>")]
    ratios, ys = {}, {}
    for tag in re.findall(r'<circle class="pt"[^>]*>', svg):
        ratios[_attr(tag, "data-id")] = float(_attr(tag, "data-ratio"))
        ys[_attr(tag, "data-id")] = float(_attr(tag, "cy"))
    line = _search(r'<line class="limit" data-ratio="1.0"[^>]*>', svg).group(0)
    return ratios, ys, float(_attr(line, "y1"))


def test_an_injected_failure_is_above_the_line_at_the_validators_numbers() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 64)).astype(np.float32)
    tol = tolerance_for("fp16")
    good = ref + np.float32(0.2 * tol.atol)
    bad = ref.copy()
    bad[1, 7] += 40 * tol.atol  # one element far beyond atol + rtol * |ref|
    rtol_only = ref.copy()
    big = int(np.argmax(np.abs(ref)))
    rtol_only.flat[big] += np.float32(0.9 * (tol.atol + tol.rtol * abs(float(ref.flat[big]))))  # > atol, passes
    rows = []
    for rid, out in (("fwd-x::good", good), ("fwd-x::bad", bad), ("fwd-x::rtol", rtol_only)):
        row, c = _checked_row(rid, out, ref)
        rows.append(row)
        assert c.passed is (rid != "fwd-x::bad")
    assert rows[2]["max_abs_err"] > tol.atol  # what the old atol-only line put on the wrong side
    page = render(_rep(rows))
    ratios, ys, y1 = _points(page)
    assert set(ratios) == {"fwd-x::bad"}  # only the item with mismatches is drawn above the line
    assert ratios["fwd-x::bad"] == rows[1]["max_abs_err"] / tol.atol
    assert ratios["fwd-x::bad"] > 1 and ys["fwd-x::bad"] < y1  # above the line (SVG y grows downwards)
    assert _ratio(rows[0]).ratio == rows[0]["max_abs_err"] / tol.atol < 1
    assert _ratio(rows[2]).ratio == 1.0 and _ratio(rows[2]).abs_ratio > 1
    table = _section(page, "tolerance").split("<tbody>", 1)[1]
    cells = re.findall(r'data-v="([^"]+)"', table)
    assert [float(c) for c in cells[:3]] == [3, 1, 1]  # items compared, over the line, within rtol


def test_rows_with_tol_ratio_are_plotted_at_the_validators_own_figure() -> None:
    """A report since tol_ratio: the plotted value is the validator's limit_ratio (the rtol-only item, above atol,
    sits below the line at its real figure, not capped at 1), and the axis and note say which figure it is."""
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((4, 64)).astype(np.float32)
    tol = tolerance_for("fp16")
    bad = ref.copy()
    bad[2, 3] += 30 * tol.atol
    rtol_only = ref.copy()
    big = int(np.argmax(np.abs(ref)))
    rtol_only.flat[big] += np.float32(0.8 * (tol.atol + tol.rtol * abs(float(ref.flat[big]))))
    rows, checks = [], []
    for rid, out in (("fwd-y::bad", bad), ("fwd-y::rtol", rtol_only)):
        row, c = _checked_row(rid, out, ref)
        row["tol_ratio"] = c.limit_ratio
        rows.append(row)
        checks.append(c)
    t_bad, t_rtol = _ratio(rows[0]), _ratio(rows[1])
    assert t_bad.exact and t_bad.ratio == checks[0].limit_ratio > 1 and t_bad.over
    assert t_rtol.exact and t_rtol.ratio == checks[1].limit_ratio == pytest.approx(0.8, rel=1e-2)
    assert t_rtol.abs_ratio > 1 and not t_rtol.over
    page = render(_rep(rows))
    ratios, ys, y1 = _points(page)
    assert ratios == {"fwd-y::bad": checks[0].limit_ratio} and ys["fwd-y::bad"] < y1
    assert "worst element</text>" in page and "the report&#x27;s tol_ratio" not in page
    assert "the validator's own figure" in page and "(a report without tol_ratio)" not in page


@pytest.mark.parametrize("seed", range(6))
def test_above_the_line_exactly_when_the_validator_fails(seed: int) -> None:
    """Random outputs around the boundary, zeros and non-finite values in the reference and the output: an item is
    above 1.0 exactly when the validator's elementwise rule failed it."""
    rng = np.random.default_rng(seed)
    for dtype in ("fp16", "bf16", "fp8"):
        tol = tolerance_for(dtype, fp8_format="fnuz")
        for case in range(25):
            ref = rng.standard_normal(200) * 10.0 ** rng.uniform(-3, 2)
            ref[rng.random(200) < 0.1] = 0.0
            allowed = tol.atol + tol.rtol * np.abs(ref)
            out = ref + rng.uniform(-1.15, 1.15, 200) * allowed * rng.uniform(0, 1)
            if case % 7 == 0:
                out[3] = np.inf
            row, c = _checked_row(f"fwd-r::{case}", out, ref, dtype=dtype)
            t = tolerance_ratio(row)
            assert t is not None and (t.ratio > 1.0) is (not c.passed), (dtype, case, c)
            assert t.abs_ratio == (c.max_abs_err / tol.atol if np.isfinite(c.max_abs_err) else np.inf)


def test_tolerance_follows_the_rows_dtype_direction_and_arch() -> None:
    assert _ratio(_row("a::k", max_abs_err=0.02, dtype="bf16")).ratio == 1.0  # passed: capped
    bwd = _row("a::k", "failed", family="bwd", dtype="bf16", hdim_q=256, hdim_v=256, max_abs_err=0.064, mismatches=5)
    assert _ratio(bwd).abs_ratio == pytest.approx(0.064 / 3.2e-2)  # bwd bf16 large_hdim
    fp8 = {"dtype": "fp8", "max_abs_err": 48.0, "mismatches": 1}
    assert _ratio(_row("a::k", "failed", arch="gfx942", **fp8)).abs_ratio == 3.0  # fnuz atol 16
    assert _ratio(_row("a::k", "failed", arch="gfx950", **fp8)).abs_ratio == 1.5  # ocp atol 32
    for not_compared in (
        _row("a::k", "skipped"),
        _row("a::k", kind="parity"),
        _row("a::k", max_abs_err=""),
        _row("a::k", dtype=""),
    ):
        assert tolerance_ratio(not_compared) is None


# ---------------------------------------------------------------------------------------------- scale
def test_tables_and_plot_points_are_capped(monkeypatch) -> None:
    monkeypatch.setattr(htmlreport, "ROW_CAP", 40)
    monkeypatch.setattr(htmlreport, "PLOT_POINTS", 25)
    rows = [_row(f"fwd-s{i}::k", "failed", max_abs_err=0.01 * (i + 1), mismatches=1) for i in range(120)]
    page = render(_rep(rows))
    fail = _section(page, "failures")
    assert fail.count('<tr class="bad">') == 40 and "40 of 120 failing items shown" in fail
    ratios, _, _ = _points(page)
    assert len(ratios) == 25 and min(ratios.values()) == pytest.approx(0.01 * 96 / 1e-3)  # the 25 worst
    assert "95 more item(s) above the line are not drawn" in page
    bars = re.findall(r'<rect class="bin"[^>]*data-count="(\d+)"', page)
    assert sum(map(int, bars)) == 120  # every item is in a bar
    assert "Failing items (the first 10; <a href='#failures'>all 120</a>)" in page


# ------------------------------------------------------------------------------ screenshot and browser
def _screenshot_module():
    spec = importlib.util.spec_from_file_location("screenshot_report", ROOT / "benchmarks" / "screenshot_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_screenshot_script_names_bad_arguments(tmp_path: Path, capsys) -> None:
    shot = _screenshot_module()
    with pytest.raises(ValueError, match=r"--window: '1400' must be WIDTHxHEIGHT"):
        shot.parse_window("1400")
    assert shot.parse_window("1400x2400") == (1400, 2400)
    with pytest.raises(shot.ScreenshotError, match=r"--chromium: '/nonexistent/chromium' is not an executable"):
        shot.find_chromium("/nonexistent/chromium")
    assert shot.main(["r.json", "--chromium", "/nonexistent/chromium", "--png", str(tmp_path / "x.png")]) == 2
    assert "apt-get install -y chromium" in capsys.readouterr().err


@needs_chromium
def test_screenshot_of_a_report_in_headless_chromium(tmp_path: Path) -> None:
    from ckfmha.runreport import write_report_doc

    shot = _screenshot_module()
    run = tmp_path / "r.json"
    doc = {"schema": "ckfmha.report", "version": 2, "state": "complete", "exit_status": 0, "rows": MIXED}
    write_report_doc({**doc, "collected": len(MIXED), "completed": len(MIXED)}, run)
    png = tmp_path / "shot.png"
    assert shot.main([str(run), "--png", str(png), "--window", "900x700", "--html", str(tmp_path / "r.html")]) == 0
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (900, 700)
    assert "FAILED" in (tmp_path / "r.html").read_text()


@needs_chromium
def test_the_script_sorts_and_filters_in_chromium(tmp_path: Path) -> None:
    """Click a header twice and type into a filter box in headless Chromium; the DOM it dumps shows the order and
    the hidden rows."""
    page = render(_rep(MIXED))
    drive = """<script>
    var cov=document.querySelector('#coverage table');
    var head=[].slice.call(cov.tHead.rows[0].cells).filter(function(h){return h.textContent=='items';})[0];
    head.click();head.click();
    var box=cov.parentNode.previousSibling.querySelector('input');
    box.value='mask_';box.dispatchEvent(new Event('input'));
    document.body.setAttribute('data-done','1');
    </script></body>"""
    path = tmp_path / "p.html"
    path.write_text(page.replace("</body>", drive))
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [
                str(CHROMIUM),
                *_screenshot_module().FLAGS,
                f"--user-data-dir={profile}",
                "--dump-dom",
                path.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    dom = done.stdout
    assert 'data-done="1"' in dom, done.stderr[-2000:]
    cov = dom[dom.index('<section id="coverage">') :]
    cov = cov[: cov.index("</section>")]
    assert 'aria-sort="descending"' in cov
    body = cov.split("<tbody>", 1)[1]
    counts = [float(v) for v in re.findall(r'<td class="n" data-v="([^"]+)">', body)]
    assert counts == sorted(counts, reverse=True) and len(counts) > 10  # sorted by items, largest first
    visible = re.findall(r"<tr(?![^>]*hidden)[^>]*><td>([^<]+)</td>", body)
    assert visible and all("mask_" in f for f in visible)  # the filter hid every other row
    note = re.search(r"(\d+) of (\d+) row\(s\)", cov)
    assert note and int(note.group(1)) == len(visible) == 5 and int(note.group(2)) == len(counts)
