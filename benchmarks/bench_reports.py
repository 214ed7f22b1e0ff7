"""Reports at scale: wall time and peak RSS of writing, merging, comparing, rendering and resuming large reports.

    python benchmarks/bench_reports.py [--rows 50000 200000] [--dir DIR] [--keep]

For each row count N it generates synthetic, schema-valid reports whose rows look like the plugin's (every field of
``pytest_ckfmha.reporting.row_fields()``, about 2 KB a row, verdicts mostly passed with some skipped, failed,
error and timeout rows, timed figures), then runs each step below in a fresh Python process and reads that
process's own peak RSS from ``os.wait4`` (``ru_maxrss``):

| step | what the process does |
|---|---|
| python + imports | imports what the steps import (``ckfmha.runreport``, ``ckfmha.cli``, jsonschema): the floor of every figure |
| write | ``ckfmha.runreport.write_report`` of N rows from a generator (the line layout, atomically) |
| write 3 shards | the same for the three shard reports of one sweep (N/3 rows each, ``--ckfmha-shard K/3``) |
| merge 3 shards | ``ckfmha merge s1.json s2.json s3.json -o merged.json`` |
| compare | ``ckfmha compare base.json new.json`` (``new`` differs in about 1% of the rows: failures, fixes, timings) |
| report (HTML) | ``ckfmha report new.json --baseline base.json -o r.html`` (matplotlib) |
| resume-read | what ``--ckfmha-resume base.json`` reads: ``load_report`` (every row checked), the selection check, \
``completed_nodeids`` over the rows (``pytest_ckfmha.sharding``) |

It prints one table (N, step, seconds, peak RSS MiB, file MiB).  The files go to ``--dir`` (default: a temporary
directory, removed afterwards unless ``--keep``); at 200,000 rows they take about 2 GB.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: verdicts of the synthetic rows, one per row in turn (100 rows: 90 passed, 6 skipped, 2 failed, 1 error, 1 timeout)
VERDICT_CYCLE = ["passed"] * 90 + ["skipped"] * 6 + ["failed", "failed", "error", "timeout"]
KERNELS = [
    f"fwd.{dt}.batch.d{d}x{d}.{pipe}.b{bm}x128x32x{d}x32x{d}.r4x1x1-4x1x1.w16x16x32-16x16x16.p1011.o-1.gfx9"
    for dt in ("fp16", "bf16")
    for d in (64, 128)
    for pipe in ("qr", "qr_async")
    for bm in (64, 128)
]
SELECTION = {
    "category": "nightly",
    "ck_smoke": None,
    "parity": None,
    "families": None,
    "arch": "gfx942",
    "backend": "triton",
    "receipt": None,
    "profile": None,
    "mask_mode": "simplified",
    "filter": None,
    "filter_file": None,
    "sweep": None,
    "matrices": None,
    "max_kernels_per_shape": None,
    "ck_root": None,
    "durations": None,
    "shard": None,
}


def header(rows: int, shard: tuple[int, int] | None = None) -> dict:
    """A plugin-like header of a complete run of ``rows`` items."""
    sh = {"index": shard[0], "count": shard[1]} if shard else None
    return {
        "created": "2026-11-27T00:00:00+00:00",
        "state": "complete",
        "interrupted": False,
        "exit_status": 1,
        "signal": None,
        "reason": "",
        "collected": rows,
        "completed": rows,
        "category": "nightly",
        "arch": "gfx942",
        "arch_source": "option",
        "backend_option": "triton",
        "backends": ["triton"],
        "seed": 0,
        "max_kernels_per_shape": None,
        "receipt": None,
        "profile": None,
        "collect_seconds": 2.5,
        "shard": sh,
        "selection": {**SELECTION, "shard": sh},
        "resumed_from": None,
        "bench_repeat": 10,
        "heuristics": None,
        "environment": {
            "command": "pytest --ckfmha-category nightly --ckfmha-bench --ckfmha-report r.json",
            "python": "3.11.7",
            "platform": "Linux",
            "packages": {"ckfmha": "0.1.0", "numpy": "2.1.0"},
            "devices": ["NVIDIA H100 80GB HBM3"],
            "clocks": [],
        },
    }


def synthetic_rows(start: int, stop: int, variant: int = 0) -> Iterator[dict]:
    """Rows ``start .. stop-1`` of a synthetic run (the same item ids for every ``variant``; ``variant`` 1 turns
    about 1% of them into new failures, fixes and slower timings: a "new" run to compare)."""
    from pytest_ckfmha.reporting import row_fields

    fields = row_fields()
    base = dict.fromkeys(fields, "")
    base.update(
        kind="kernel",
        matrix="fwd.yaml",
        entry="gqa_prefill",
        category="nightly",
        family="fwd",
        mode="batch",
        nhead_q=8,
        nhead_k=2,
        input_layout="bhsd",
        output_layout="bhsd",
        vlayout="row",
        scale=0.0,
        bias="none",
        bias_rank=0,
        lse=False,
        p_drop=0.0,
        drop_seed=1,
        drop_offset=0,
        logits_soft_cap=0.0,
        sink=False,
        qscale="none",
        page_block_size=0,
        kv_lookup="none",
        kv_layout="none",
        cache_batch_idx=False,
        seqlen_knew=0,
        rotary_dim=0,
        rope="none",
        num_splits=1,
        deterministic=False,
        dbias=False,
        min_seqlen_q=0,
        backend="triton",
        device="NVIDIA H100 80GB HBM3",
        arch="gfx942",
        seed=0,
        reference="numpy",
        build_cached=True,
        ref_cached=True,
        unwritten=0,
    )
    for i in range(start, stop):
        kernel = KERNELS[i % len(KERNELS)]
        d = 64 if ".d64x" in kernel else 128
        s = 128 << (i // len(KERNELS) % 6)
        b = 1 + i // (len(KERNELS) * 6) % 8
        dtype = kernel.split(".")[1]
        shape = f"fwd-{dtype}-batch-b{b}h8k2s{s}d{d}-{'causal' if i % 3 else 'nomask'}-{i // (len(KERNELS) * 48)}"
        verdict = VERDICT_CYCLE[i % len(VERDICT_CYCLE)]
        if variant and i % 97 == 0:  # a new failure, or a fix
            verdict = "failed" if verdict == "passed" else "passed"
        row = dict(base)
        flops = 4 * b * 8 * s * s * d
        ms = 0.01 + (i % 1009) * 1e-3 * (1.3 if variant and i % 89 == 0 else 1.0)
        row.update(
            id=f"{shape}::{kernel}",
            nodeid=f"ckfmha::{shape}::{kernel}",
            dtype=dtype,
            batch=b,
            seqlen_q=s,
            seqlen_k=s,
            hdim_q=d,
            hdim_v=d,
            mask="t" if i % 3 else "0",
            kernel_id=kernel,
            plan_kernels=kernel,
            verdict=verdict,
            worker=f"gw{i % 8}",
            gpu=f"{i % 8}:GPU-6f1c2a44-8d7e-11ee-b9d1-0242ac12000{i % 8}",
            duration_s=round(0.5 + (i % 211) * 0.01, 6),
            flops=flops,
            bytes=4 * b * 8 * s * d * 2,
            build_s=0.0,
        )
        if verdict == "skipped":
            row["reason"] = (
                f"{shape}: the kernel does not serve this problem: seqlen_q {s} is not a multiple of the tile's "
                "bm0 128 and the pipeline has no padding for queries (rules.misfit: pad_q)"
            )
        elif verdict in ("passed", "failed"):
            row.update(
                max_abs_err=0.0003 * (1 + i % 7) * (40 if verdict == "failed" else 1),
                max_rel_err=0.01 * (1 + i % 5),
                mismatches=0 if verdict == "passed" else 17,
                elements=b * 8 * s * d,
                time_ms=round(ms, 6),
                time_min_ms=round(ms * 0.98, 6),
                time_max_ms=round(ms * 1.02, 6),
                repeats=10,
                timed=True,
                clocks="sm, mem: 1980 MHz, 2619 MHz",
                tflops=round(flops / 1e9 / ms, 6),
                gbps=round(4 * b * 8 * s * d * 2 / 1e6 / ms, 6),
            )
            if verdict == "failed":
                row["reason"] = (
                    f"o: 17 of {b * 8 * s * d} elements outside atol 0.001 + rtol 0.001 * |ref| "
                    f"(worst at [0, 3, {s - 1}, 5]: {row['max_abs_err']:.4g}); lse ok"
                )
        else:
            row["reason"] = (
                "the kernel process was killed after 120 s (--ckfmha-timeout)"
                if verdict == "timeout"
                else "RuntimeError: a launch failed: hipErrorIllegalAddress (the kernel read out of bounds)"
            )
        yield row


# ------------------------------------------------------------------------------------------------ child steps
def _child(step: str, n: int, where: Path) -> None:
    """One step, in this (child) process."""
    if step == "imports":
        import jsonschema  # noqa: F401

        import ckfmha.cli  # noqa: F401
        import ckfmha.runreport  # noqa: F401

        return
    if step == "write":
        from ckfmha.runreport import write_report

        write_report(where / "base.json", header(n), synthetic_rows(0, n))
        return
    if step == "write-new":
        from ckfmha.runreport import write_report

        write_report(where / "new.json", header(n), synthetic_rows(0, n, variant=1))
        return
    if step == "write-shards":
        from ckfmha.runreport import write_report

        cuts = [0, n // 3, 2 * n // 3, n]
        for k in range(3):
            lo, hi = cuts[k], cuts[k + 1]
            write_report(where / f"s{k + 1}.json", header(hi - lo, (k + 1, 3)), synthetic_rows(lo, hi))
        return
    if step in ("merge", "compare", "report"):
        from ckfmha.cli import main

        argv = {
            "merge": ["merge", *(str(where / f"s{k}.json") for k in (1, 2, 3)), "-o", str(where / "merged.json")],
            "compare": ["compare", str(where / "base.json"), str(where / "new.json")],
            "report": ["report", str(where / "new.json"), "--baseline", str(where / "base.json")]
            + ["-o", str(where / "r.html")],
        }[step]
        with open(os.devnull, "w") as sink:
            sys.stdout = sink
            code = main(argv)
            sys.stdout = sys.__stdout__
        if code not in (0, 1):  # compare exits 1: the new run regressed (it does, by construction)
            raise SystemExit(f"ckfmha {step} exited {code}")
        return
    if step == "resume-read":
        from ckfmha.runreport import load_report
        from pytest_ckfmha.reporting import selection_difference
        from pytest_ckfmha.sharding import completed_nodeids

        rep = load_report(where / "base.json")
        assert selection_difference(rep.meta["selection"], rep.meta["selection"]) is None
        done = completed_nodeids(rep.rows)
        assert len(done) == n, (len(done), n)
        return
    raise SystemExit(f"unknown step {step!r}")


def _measure(step: str, n: int, where: Path) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one step run in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", step, "--rows", str(n), "--dir", str(where)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"step {step} at {n} rows failed with exit status {proc.returncode}")
    return seconds, usage.ru_maxrss / 1024  # Linux: KiB


STEPS = [
    ("python + imports", "imports", None),
    ("write", "write", "base.json"),
    ("write 3 shards", "write-shards", "s1.json"),
    ("merge 3 shards", "merge", "merged.json"),
    ("compare", "compare", "new.json"),
    ("report (HTML)", "report", "r.html"),
    ("resume-read", "resume-read", "base.json"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[50_000, 200_000])
    ap.add_argument("--dir", type=Path, help="where the reports go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child, args.rows[0], args.dir)
        return 0
    if any(n < 3 for n in args.rows):
        ap.error(f"--rows: {args.rows}: every count must be >= 3 (three shards)")
    top = args.dir or Path(tempfile.mkdtemp(prefix="bench_reports."))
    print(f"# python benchmarks/bench_reports.py --rows {' '.join(map(str, args.rows))}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.node()}; {os.cpu_count()} cpus; {platform.platform()}")
    print(f"# python {platform.python_version()}; peak RSS = ru_maxrss of the step's own process (os.wait4)")
    print(f"{'rows':>8} | {'step':<18} | {'seconds':>8} | {'peak RSS MiB':>12} | {'file MiB':>9}")
    print(f"{'-' * 8}-|-{'-' * 18}-|-{'-' * 8}-|-{'-' * 12}-|-{'-' * 9}")
    results = []
    try:
        for n in args.rows:
            where = top / f"rows-{n}"
            where.mkdir(parents=True, exist_ok=True)
            _measure("write-new", n, where)  # compare's and report's second report (not a figure)
            for label, step, out in STEPS:
                seconds, rss = _measure(step, n, where)
                size = (where / out).stat().st_size / 2**20 if out else 0.0
                results.append({"rows": n, "step": label, "seconds": seconds, "rss_mib": rss, "file_mib": size})
                print(f"{n:>8} | {label:<18} | {seconds:>8.2f} | {rss:>12.1f} | {size:>9.1f}", flush=True)
            print(f"# {n} rows: a row is {synthetic_rows_size()} bytes of JSON on average (the first 1,000)")
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(top, ignore_errors=True)
    return 0


def synthetic_rows_size() -> int:
    """The mean JSON length of the first 1,000 synthetic rows (bytes)."""
    from ckfmha.runreport import dumps_line

    return round(sum(len(dumps_line(r)) for r in synthetic_rows(0, 1000)) / 1000)


if __name__ == "__main__":
    raise SystemExit(main())
