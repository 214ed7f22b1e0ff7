"""A category run as a nightly CI job runs it, timed, with the figures of issue 25 read from its report.

    python benchmarks/bench_nightly.py [--category nightly] [--passes cold,warm] [--limit S] [--workers N]
        [--gpus 0,1] [--cpus 0-15] [--out DIR] [--baseline-wall S] [--json FIGURES.json] [-- extra pytest args]

Each pass is one ``pytest --ckfmha-category C -n N --ckfmha-report DIR/<category>_<pass>.json`` (N: ``--workers``,
or the pass's own for a pass named ``<name>_n<N>``, e.g. ``warm_n4``) in a fresh
process group under ``timeout -s TERM LIMIT`` (a CI job's time limit: SIGTERM to every process of the run); the
``cold`` pass starts from an empty ckfmha cache (``CKFMHA_CACHE_DIR``: builds, Triton's JIT cache, references),
later passes reuse it (``--cache DIR``: this cache, kept afterwards; the first pass is cold only when it is empty).  ``--gpus`` sets ``CUDA_VISIBLE_DEVICES`` and ``--cpus`` pins the run with ``taskset`` (one
H100 box of 16 cores emulated on a larger one).  Printed per pass, from the report (docs/report_schema.md):

| figure | from |
|---|---|
| wall s, state, interrupted | the clock around the process; the report's ``state`` / ``interrupted`` (after a SIGTERM the report must say ``interrupted`` and hold every collected item) |
| items | collected, rows, verdict counts (``not_run``: never started) |
| item seconds | the sum of ``duration_s`` and its split: ``build_s`` (compiles, counted once), ``time_ms`` (the plan's run), the rest (inputs, reference, validation) |
| compiles | items that compiled (``build_cached`` false), kernels compiled by more than one item (a second compile of one kernel: another specialization, or two workers at once) |
| spread | items and busy seconds per worker and per GPU (``worker``, ``gpu``: a GPU by its UUID) |
| start-up | when each worker's first item began and when the last item ended (the rows' ``started_s``, seconds after the run's start): the start-up before the items and, with the wall time, the drain after them |
| timeline | the report's ``processes`` (pytest_ckfmha/timeline.py): min/median/max over the workers of when each was configured, collected, forked its kernel child, heard the child's warm-up end, began its session's end, stopped the child and was down; the children's warm-up steps; the controller's marks |
| memory | sampled every 5 s while the pass runs: the lowest MemAvailable of the machine and the highest memory.used of each GPU (nvidia-smi) |
| targets | issue 25's: nightly <= 900 s on one H100, smoke cold <= 60 s / warm <= 15 s, two GPUs <= 0.55x one (``--baseline-wall``: the one-GPU pass's wall time) |

Exit 0 always (a benchmark prints figures; the targets are read, not asserted), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: issue 25's wall-time targets (seconds) per (category, pass); None: none stated
TARGETS = {("nightly", "cold"): 900.0, ("smoke", "cold"): 60.0, ("smoke", "warm"): 15.0}
TWO_GPU_RATIO = 0.55


def group_memory_gib(root: int) -> tuple[float, float]:
    """The memory of a run's processes: every process in process group ``root`` or descended from process
    ``root`` (xdist's workers, whichever way they were started); (GiB resident summed -- shared pages counted in
    every process, an upper bound --, GiB proportional ``Pss`` of /proc/PID/smaps_rollup summed -- shared pages
    split --, 0 where the kernel gives no smaps_rollup)."""
    procs: dict[int, tuple[int, int]] = {}  # pid -> (ppid, pgrp)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()  # after the command: state ppid pgrp
                procs[int(d.name)] = (int(fields[1]), int(fields[2]))
            except (OSError, ValueError, IndexError):
                continue  # the process ended meanwhile
    mine = {pid for pid, (_, pgrp) in procs.items() if pgrp == root or pid == root}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in mine and pid not in mine}
        mine |= more
        grew = bool(more)
    rss_kib = pss_kib = 0
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    for pid in mine:
        try:
            rss_kib += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_kib
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            pss_kib += next(int(ln.split()[1]) for ln in rollup.splitlines() if ln.startswith("Pss:"))
        except (OSError, ValueError, IndexError, StopIteration):
            continue
    return rss_kib / 2**20, pss_kib / 2**20


class MemorySampler:
    """Every ``every`` seconds: the machine's MemAvailable, each GPU's memory.used (nvidia-smi) and, given the run's
    process group, that group's memory (:func:`group_memory_gib`: the run's own share of a shared machine); extremes
    kept."""

    def __init__(self, every: float = 5.0, pgid: int | None = None) -> None:
        import threading

        self.every, self.low_available, self.gpu_high = every, None, {}
        self.pgid, self.rss_high, self.pss_high = pgid, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                for line in Path("/proc/meminfo").read_text().splitlines():
                    if line.startswith("MemAvailable:"):
                        gib = int(line.split()[1]) / 2**20
                        self.low_available = gib if self.low_available is None else min(self.low_available, gib)
            except OSError:
                pass
            if self.pgid is not None:
                rss, pss = group_memory_gib(self.pgid)
                self.rss_high, self.pss_high = max(self.rss_high, rss), max(self.pss_high, pss)
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                continue
            for line in out.splitlines():
                idx, _, used = line.partition(",")
                if used.strip().isdigit():
                    self.gpu_high[idx.strip()] = max(self.gpu_high.get(idx.strip(), 0), int(used) / 1024)

    def words(self) -> str:
        gpus = ", ".join(f"GPU {i} {g:.1f} GiB" for i, g in sorted(self.gpu_high.items()))
        low = "?" if self.low_available is None else f"{self.low_available:.1f} GiB"
        group = (
            ""
            if self.pgid is None
            else f"; the run's processes at most {self.rss_high:.1f} GiB resident summed, {self.pss_high:.1f} GiB Pss"
        )
        return f"memory: lowest MemAvailable {low}{group}; highest used {gpus or '? (no nvidia-smi)'}"


def pass_workers(name: str, default: str) -> str:
    """-n of a pass: ``<name>_n<N>`` (e.g. ``warm_n4``) runs with N workers, any other name with ``--workers``."""
    head, sep, n = name.rpartition("_n")
    return n if sep and head and n.isdigit() and int(n) > 0 else default


def run_pass(args: argparse.Namespace, name: str, cache: Path, extra: list[str]) -> tuple[Path, float, int]:
    report = Path(args.out) / f"{args.category}_{name}.json"
    cmd = [sys.executable, "-m", "pytest", "--ckfmha-category", args.category, "-n", pass_workers(name, args.workers),
           "-p", "no:cacheprovider", "-q", "--ckfmha-report", str(report), *extra]  # fmt: skip
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus, *cmd]
    env = dict(os.environ, CKFMHA_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1")
    env.pop("TRITON_CACHE_DIR", None)  # under the ckfmha cache: cold means cold
    if args.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = args.gpus
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    with MemorySampler(pgid=proc.pid) as memory:
        try:
            out, _ = proc.communicate(timeout=args.limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as timeout(1) and CI runners do
            print(f"[bench_nightly] SIGTERM to the run's process group after {args.limit:.0f} s", flush=True)
            try:
                out, _ = proc.communicate(timeout=args.grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                out += f"\n[bench_nightly] still running {args.grace:.0f} s after SIGTERM: SIGKILL\n"
    wall = time.perf_counter() - t0
    print(memory.words())
    tail = out.strip().splitlines()[-args.tail :]
    print("\n".join(tail))
    return report, wall, proc.returncode


def figures(report: Path) -> dict:
    doc = json.loads(report.read_text())
    rows = doc.get("rows", [])
    verdicts = collections.Counter(r.get("verdict") for r in rows)
    dur = sum(float(r.get("duration_s") or 0) for r in rows)
    build = sum(float(r.get("build_s") or 0) for r in rows)
    run = sum(float(r.get("time_ms") or 0) for r in rows) / 1e3
    compiled = [r for r in rows if r.get("build_cached") is False]
    per_kernel = collections.Counter(k for r in compiled for k in (r.get("plan_kernels") or [r.get("kernel_id")]))
    workers: dict[str, list[float]] = collections.defaultdict(list)
    gpus: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        if r.get("verdict") in ("not_run", None):
            continue
        d = float(r.get("duration_s") or 0)
        workers[str(r.get("worker") or "?")].append(d)
        gpus[str(r.get("gpu") or "none").split(":", 1)[-1][-12:]].append(d)  # the UUID's tail (a worker sees index 0)
    return {
        "state": doc.get("state"),
        "interrupted": doc.get("interrupted"),
        "collected": doc.get("collected"),
        "rows": len(rows),
        "verdicts": dict(verdicts),
        "item_s": dur,
        "build_s": build,
        "run_s": run,
        "rest_s": dur - build - run,
        "compiling_items": len(compiled),
        "kernels_compiled_twice": sum(1 for n in per_kernel.values() if n > 1),
        "workers": {w: (len(v), sum(v)) for w, v in sorted(workers.items())},
        # started_s (seconds after the run's start): each worker's first item (its start-up), the last item's end
        "first_started_s": sorted(
            min(float(r["started_s"]) for r in rows if r.get("worker") == w and r.get("started_s") is not None)
            for w in workers
            if any(r.get("worker") == w and r.get("started_s") is not None for r in rows)
        ),
        "last_ended_s": max(
            (float(r["started_s"]) + float(r.get("duration_s") or 0) for r in rows if r.get("started_s") is not None),
            default=None,
        ),
        "gpus": {g: (len(v), sum(v)) for g, v in sorted(gpus.items())},
        "timeline": timeline_figures(doc.get("processes") or []),
    }


#: the workers' timeline marks (pytest_ckfmha/timeline.py) in the order a worker passes them
WORKER_MARKS = (
    "started", "configured", "child_forked", "collected", "child_warm", "finish_begins", "child_closed", "down",
)  # fmt: skip


def _spread(values: list[float]) -> list[float] | None:
    v = sorted(values)
    return [v[0], v[len(v) // 2], v[-1]] if v else None


def timeline_figures(processes: list[dict]) -> dict:
    """min/median/max over the workers of each timeline mark (seconds after the run's start), of the kernel
    children's warm-up steps and of the seconds stopping them took; the controller's own marks."""
    workers = [p for p in processes if p.get("worker") != "controller"]
    controller = next((p for p in processes if p.get("worker") == "controller"), None)
    steps: dict[str, list[float]] = collections.defaultdict(list)
    for p in workers:
        for k, v in ((p.get("warm_up") or {}).get("phases") or {}).items():
            steps[k].append(float(v))
    return {
        "marks": {m: _spread([p["marks"][m] for p in workers if m in p.get("marks", {})]) for m in WORKER_MARKS},
        "warm_up_s": _spread([float(p["warm_up"]["seconds"]) for p in workers if p.get("warm_up")]),
        "warm_up_steps": {k: _spread(v) for k, v in steps.items()},
        "close_child_s": _spread([float(p["close_child_s"]) for p in workers if p.get("close_child_s") is not None]),
        "controller": (controller or {}).get("marks", {}),
    }


def show_timeline(t: dict) -> None:
    def fmt(s):
        return "/".join(f"{x:.1f}" for x in s) if s else "-"

    marks = ", ".join(f"{m} {fmt(s)}" for m, s in t["marks"].items() if s)
    if marks:
        print(f"timeline (workers, s after the run's start, min/median/max): {marks}")
        print(f"controller: {', '.join(f'{k} {v:.1f}' for k, v in t['controller'].items())}")
    if t["warm_up_s"]:
        steps = ", ".join(f"{k} {'/'.join(f'{x:.2f}' for x in s)}" for k, s in t["warm_up_steps"].items() if s)
        print(f"child warm-up s {fmt(t['warm_up_s'])}: {steps}; stopping the child s {fmt(t['close_child_s'])}")


def show(category: str, name: str, wall: float, rc: int, f: dict) -> None:
    print(f"\n== {category} {name}: wall {wall:.1f} s, exit {rc}, state {f['state']}, interrupted {f['interrupted']}")
    print(
        f"items: collected {f['collected']}, rows {f['rows']}, "
        + ", ".join(f"{k} {v}" for k, v in sorted(f["verdicts"].items()))
    )
    print(
        f"item seconds: {f['item_s']:.0f} = build {f['build_s']:.0f} + run {f['run_s']:.0f} + inputs/reference/validation {f['rest_s']:.0f}"
    )
    print(
        f"compiles: {f['compiling_items']} items compiled, {f['kernels_compiled_twice']} kernels compiled by more than one item"
    )
    busy = [s for _, s in f["workers"].values()]
    if busy:
        print(
            f"workers: {len(busy)}, busy s min/median/max {min(busy):.0f}/{sorted(busy)[len(busy) // 2]:.0f}/{max(busy):.0f}"
        )
    first = f.get("first_started_s") or []
    if first:
        print(
            f"start-up: workers' first items began {first[0]:.1f}/{first[len(first) // 2]:.1f}/{first[-1]:.1f} s "
            f"(min/median/max) after the run's start; the last item ended at {f['last_ended_s']:.1f} s"
        )
    for g, (n, s) in f["gpus"].items():
        print(f"gpu {g}: {n} items, {s:.0f} item-seconds")
    show_timeline(f["timeline"])
    target = TARGETS.get((category, name))
    if target is not None:
        print(f"target: <= {target:.0f} s -> {'met' if wall <= target and f['state'] == 'complete' else 'MISSED'}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--category", default="nightly", choices=("smoke", "full", "nightly"))
    ap.add_argument("--passes", default="cold", help="comma-separated pass names; the first starts cold")
    ap.add_argument("--limit", type=float, default=900.0, help="seconds before the SIGTERM (default 900)")
    ap.add_argument("--grace", type=float, default=60.0, help="seconds after the SIGTERM before SIGKILL")
    ap.add_argument("--workers", default="auto", help="-n for pytest-xdist")
    ap.add_argument("--gpus", default=None, help="CUDA_VISIBLE_DEVICES for the run")
    ap.add_argument("--cpus", default=None, help="taskset CPU list for the run (e.g. 0-15)")
    ap.add_argument("--out", default=".", help="where the reports go")
    ap.add_argument("--baseline-wall", type=float, default=None, help="the one-GPU pass's wall seconds (2-GPU ratio)")
    ap.add_argument("--json", default=None, help="write the figures of every pass here")
    ap.add_argument("--cache", default=None, help="use and keep this ckfmha cache (default: a fresh one, removed)")
    ap.add_argument("--tail", type=int, default=8, help="lines of pytest's output shown per pass")
    args = ap.parse_args(argv)
    passes = [p for p in args.passes.split(",") if p]
    if not passes:
        ap.error("--passes: no pass named")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="ckfmha-bench-cache-"))
    cache.mkdir(parents=True, exist_ok=True)
    try:
        results = {}
        for name in passes:
            report, wall, rc = run_pass(args, name, cache, extra)
            if not report.is_file():
                print(f"\n== {args.category} {name}: wall {wall:.1f} s, exit {rc}: NO REPORT at {report}")
                continue
            f = results[name] = figures(report)
            show(args.category, name, wall, rc, f)
            f["wall_s"] = wall
        if args.baseline_wall and passes[0] in results:
            base_wall = args.baseline_wall
            ratio = results[passes[0]]["wall_s"] / base_wall
            print(f"\n{args.category} {passes[0]} vs the baseline: {ratio:.2f}x of {base_wall:.0f} s "
                  f"(target <= {TWO_GPU_RATIO}x): {'met' if ratio <= TWO_GPU_RATIO else 'MISSED'}")  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        if not args.cache:
            shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
