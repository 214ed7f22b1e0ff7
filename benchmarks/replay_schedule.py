"""Replay a report's items through ckfmha's xdist scheduler (pytest_ckfmha/scheduling.py), without running them.

    python benchmarks/replay_schedule.py REPORT.json [--workers 16] [--memory-gib 251] [--budget-share 0.6]
        [--seconds-per-tflop 0.15] [--seconds-per-gb 2.4] [--seconds 0.73]

Each item's cost and footprint come from its problem (rebuilt from the row's problem columns: FLOPs,
``ckfmha.work.host_bytes``); its duration is the row's measured ``duration_s``, or for an item the report did
not run the linear model ``seconds + seconds-per-gb * host GB + seconds-per-tflop * TFLOP`` (defaults: the fit
over the 2026-11-27 H100 nightly run, docs/results/2026-11-27-h100-nightly-scale.md).  Workers run as xdist's do
(an item starts once its worker knows the next one, or is shut down).  Prints the makespan, the mean number of idle
workers and the items whose problem could not be rebuilt (they count as a 1-second item).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckfmha.problem import Problem  # noqa: E402
from ckfmha.work import flops, host_bytes  # noqa: E402
from pytest_ckfmha.scheduling import BuildOnceScheduling  # noqa: E402

LIST_FIELDS = ("seqlens_q", "seqlens_k", "s_qpad", "s_kpad", "q_eff_lens", "kv_eff_lens")


def problem_of(row: dict) -> Problem | None:
    names = {f.name for f in dataclasses.fields(Problem)}
    kw = {k: row[k] for k in names if row.get(k) not in (None, "")}
    for k in LIST_FIELDS:
        if isinstance(kw.get(k), str):
            kw[k] = tuple(int(x) for x in kw[k].replace(";", ",").replace("_", ",").split(",") if x.strip())
        elif isinstance(kw.get(k), list):
            kw[k] = tuple(kw[k])
    try:
        return Problem(**kw)
    except Exception:  # noqa: BLE001 - counted and reported
        return None


class _Node:
    def __init__(self, name: str) -> None:
        self.gateway = type("G", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def replay(rows: list[dict], workers: int, budget: float | None, model: tuple[float, float, float]):
    coll = [r["nodeid"] for r in rows]
    cost, mem, dur, unparsed = {}, {}, {}, 0
    for r in rows:
        p = problem_of(r)
        nid = r["nodeid"]
        if p is None:
            unparsed += 1
            cost[nid], mem[nid] = 1.0, 0.0
        else:
            cost[nid], mem[nid] = flops(p) + 1.0, float(host_bytes(p))
        if r.get("verdict") not in ("not_run", "skipped", None) and r.get("duration_s"):
            dur[nid] = float(r["duration_s"])
        else:
            dur[nid] = 1.0 if p is None else model[0] + model[1] * mem[nid] / 1e9 + model[2] * (cost[nid] - 1) / 1e12
    nodes = [_Node(f"gw{i}") for i in range(workers)]
    s = BuildOnceScheduling(workers, costs=lambda ids: cost, memory=lambda ids: mem, budget=budget)
    for n in nodes:
        s.add_node(n)
        s.add_node_collection(n, coll)
    s.schedule()
    t, ran, until, idle = 0.0, {n: 0 for n in nodes}, {n: None for n in nodes}, []
    while s.has_pending:
        for n in nodes:
            queue = n.sent[ran[n] :]
            if until[n] is None and queue and (len(queue) >= 2 or n.shutting_down):
                until[n] = t + dur[coll[queue[0]]]
        busy = [n for n in nodes if until[n] is not None]
        if not busy:
            raise SystemExit(f"the scheduler stalled at {t:.0f} s with {len(s.pool)} items queued")
        n = min(busy, key=lambda n: until[n])
        idle.append((until[n] - t, workers - len(busy)))
        t, until[n] = until[n], None
        ran[n] += 1
        s.mark_test_complete(n, n.sent[ran[n] - 1])
    mean_idle = sum(dt * k for dt, k in idle) / t if t else 0.0
    return t, mean_idle, unparsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--memory-gib", type=float, default=251.0)
    ap.add_argument("--budget-share", type=float, default=0.6, help="0: no memory budget")
    ap.add_argument("--seconds", type=float, default=0.73)
    ap.add_argument("--seconds-per-gb", type=float, default=2.4)
    ap.add_argument("--seconds-per-tflop", type=float, default=0.15)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.report).read_text())["rows"]
    budget = args.budget_share * args.memory_gib * 2**30 if args.budget_share > 0 else None
    model = (args.seconds, args.seconds_per_gb, args.seconds_per_tflop)
    makespan, mean_idle, unparsed = replay(rows, args.workers, budget, model)
    print(f"{len(rows)} items, {args.workers} workers, budget "
          f"{'none' if budget is None else f'{budget / 2**30:.0f} GiB'}: makespan {makespan:.0f} s, "
          f"mean idle workers {mean_idle:.2f}, problems not rebuilt {unparsed}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
