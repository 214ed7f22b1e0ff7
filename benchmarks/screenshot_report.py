"""Render a run report to its HTML page and take a PNG screenshot of it with headless Chromium.

    python benchmarks/screenshot_report.py RUN.json [--baseline OLD.json] [--html page.html]
        [--png docs/report_screenshot.png] [--window 1400x2400] [--chromium /usr/bin/chromium]

| step | what |
|---|---|
| page | ``ckfmha.htmlreport.render`` of RUN.json (against ``--baseline``: ``ckfmha.runreport.compare_reports``), written to ``--html`` (default: a temporary file, removed after the shot) |
| screenshot | Chromium (``--chromium``, else ``$CHROMIUM``, else ``/usr/bin/chromium``: Debian's ``apt-get install -y chromium``) headless, with a new empty profile directory and no network features, the window ``--window`` WIDTHxHEIGHT pixels (the shot is the window: the top of the page) |
| result | the PNG at ``--png``; its size is printed; exit 1 when Chromium fails or writes no PNG, 2 for a missing Chromium or bad arguments (the message names the option, the value and the rule) |

Chromium is needed by this script only: neither CI nor the test suite requires it (tests/test_htmlreport.py skips
its screenshot test, naming the reason, where ``/usr/bin/chromium`` is absent).  docs/report_screenshot.png is made
with it from a GPU run's report.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: flags that work on a headless machine without a sandbox, a GPU or a network (and keep Chromium from calling home)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
TIMEOUT_S = 180


class ScreenshotError(RuntimeError):
    """Chromium is missing, failed or wrote no PNG."""


def parse_window(text: str) -> tuple[int, int]:
    """``1400x2400`` -> (1400, 2400); ValueError naming the value and the rule."""
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not (200 <= int(w) <= 8000 and 200 <= int(h) <= 30000):
        raise ValueError(f"--window: {text!r} must be WIDTHxHEIGHT in pixels, 200-8000 by 200-30000 (e.g. 1400x2400)")
    return int(w), int(h)


def find_chromium(given: str | None = None) -> str:
    """The Chromium to run: ``given``, else ``$CHROMIUM``, else :data:`DEFAULT_CHROMIUM`; ScreenshotError when that
    is not an executable file."""
    path = given or os.environ.get("CHROMIUM") or DEFAULT_CHROMIUM
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ScreenshotError(
            f"--chromium: {path!r} is not an executable file; install Debian's chromium (apt-get install -y chromium) "
            "or name one with --chromium / $CHROMIUM"
        )
    return path


def chromium_command(chromium: str, html: Path, png: Path, window: tuple[int, int], profile: Path) -> list[str]:
    """The command line of one screenshot: :data:`FLAGS`, the profile directory, the PNG, the window, the page."""
    return [
        chromium,
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        f"--window-size={window[0]},{window[1]}",
        html.resolve().as_uri(),
    ]


def screenshot(html: Path, png: Path, window: tuple[int, int] = (1400, 2400), chromium: str | None = None) -> Path:
    """Take the screenshot of ``html`` into ``png`` (module doc); the PNG's path."""
    exe = find_chromium(chromium)
    png = png.resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()  # a PNG left from before must not pass for this one
    with tempfile.TemporaryDirectory(prefix="ckfmha-chromium.") as profile:
        cmd = chromium_command(exe, html, png, window, Path(profile))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ScreenshotError(f"{exe}: no screenshot within {TIMEOUT_S} s") from None
    if not png.is_file() or png.stat().st_size == 0 or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        tail = "\n".join((done.stderr or "").strip().splitlines()[-8:])
        raise ScreenshotError(f"{exe} exited {done.returncode} without writing a PNG at {png}:\n{tail}")
    return png


def render_page(run: Path, out: Path, baseline: Path | None = None) -> Path:
    """Write ``ckfmha report``'s page of ``run`` (against ``baseline``) to ``out``."""
    from ckfmha.htmlreport import render
    from ckfmha.runreport import atomic_write_text, compare_reports, load_report

    rep = load_report(run)
    cmp = compare_reports(load_report(baseline), rep) if baseline else None
    return Path(atomic_write_text(out, render(rep, cmp)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("run", type=Path, help="the run report (JSON)")
    ap.add_argument("--baseline", type=Path, help="a previous report to compare with")
    ap.add_argument("--png", type=Path, default=Path("docs/report_screenshot.png"), help="the screenshot to write")
    ap.add_argument("--html", type=Path, help="keep the page there (default: a temporary file)")
    ap.add_argument("--window", default="1400x2400", help="WIDTHxHEIGHT of the window, in pixels")
    ap.add_argument("--chromium", help=f"the Chromium binary (default: $CHROMIUM or {DEFAULT_CHROMIUM})")
    args = ap.parse_args(argv)
    try:
        window = parse_window(args.window)
        exe = find_chromium(args.chromium)
    except (ValueError, ScreenshotError) as e:
        print(f"screenshot_report: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ckfmha-report.") as tmp:
        page = render_page(args.run, args.html or Path(tmp) / "report.html", args.baseline)
        size = page.stat().st_size
        try:
            png = screenshot(page, args.png, window, exe)
        except ScreenshotError as e:
            print(f"screenshot_report: {e}", file=sys.stderr)
            return 1
    print(f"screenshot_report: page {size // 1024} KiB -> {png} ({png.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
