"""The run's timeline: when each pytest process (the only one, or the xdist controller and each worker) reached
the steps around its items, so a report shows where a run's seconds outside the items went -- start-up before the
first item, the kernel child's warm-up, the drain after the last item.

| mark | set by | when |
|---|---|---|
| ``started`` | every process (Linux) | the process was created (``/proc/self/stat``'s start time; 10 ms resolution): before it, nothing; until ``configured``, Python's and pytest's start, the plugins' imports and, in a controller, the arch's detection |
| ``configured`` | every process | ckfmha's ``pytest_configure`` (a worker: after xdist started it and pytest loaded the plugins) |
| ``child_forked`` | a process that pre-starts its kernel child (warmup.py) | the fork: at its session's start, before the collection (or after it, for a run of parity items only) |
| ``collected`` | every process that collects (not an xdist controller) | ``pytest_collection_finish`` |
| ``child_warm`` | the same | the child said its warm-up ended (the first item received it) |
| ``finish_begins`` | every process | ckfmha's ``pytest_sessionfinish`` begins (the items are over) |
| ``child_closed`` | a process that forked a kernel child | the session's end stopped its child (isolation.py: ``ChildExecutor.close``; a child forked early and stopped when the collection left nothing to run is gone by then) |
| ``down`` | the controller, for each worker | the worker's session finished and the controller heard it (``pytest_testnodedown``) |

Besides the marks, a process records ``warm_up`` (the warm-up's seconds and its steps' seconds, as the child
measured them: ``pytest_ckfmha.warmup.warm_up``) and ``close_child_s`` (how long stopping the child took).

A worker hands its record to the controller in xdist's ``workeroutput`` (sent when its session finished); the
controller's report header lists every process's record as ``processes`` (docs/report_schema.md), the marks in
seconds after the run's start -- the origin of the rows' ``started_s`` (one host shares the clock).
"""

from __future__ import annotations

import os
import time
from typing import Any

#: the key of a worker's record in xdist's workeroutput
WORKEROUTPUT_KEY = "ckfmha_timeline"


class Timeline:
    """One process's record (see the module doc); plain data, so a worker can send it."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.pid = os.getpid()
        self.marks: dict[str, float] = {}  # mark -> time.time()
        started = _process_started()
        if started is not None:
            self.marks["started"] = started
        self.warm_up: dict[str, Any] | None = None
        self.close_child_s: float | None = None

    def mark(self, name: str, at: float | None = None) -> None:
        self.marks.setdefault(name, time.time() if at is None else at)

    def record(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "pid": self.pid,
            "marks": dict(self.marks),
            "warm_up": self.warm_up,
            "close_child_s": self.close_child_s,
        }


def relative(records: list[dict[str, Any]], origin: float) -> list[dict[str, Any]]:
    """The records with their marks in seconds after ``origin`` (rounded to ms), ordered controller first, then by
    worker id."""
    out = []
    for r in records:
        marks = {
            k: round(float(v) - origin, 3) + 0.0 for k, v in sorted(r.get("marks", {}).items(), key=lambda kv: kv[1])
        }
        out.append({**r, "marks": marks})
    return sorted(out, key=lambda r: (r["worker"] != "controller", _worker_number(r["worker"]), r["worker"]))


def _worker_number(worker: str) -> int:
    digits = worker[2:] if worker.startswith("gw") else ""
    return int(digits) if digits.isdigit() else -1


def _process_started() -> float | None:
    """When this process was created, as a time.time() value (Linux: its start time in clock ticks since boot
    against /proc/uptime); None elsewhere."""
    import time

    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime (fields 3.. follow the ")")
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
