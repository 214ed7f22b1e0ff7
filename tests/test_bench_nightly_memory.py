"""benchmarks/bench_nightly.py's memory figure of a run's own process group (a run sharing a machine with others
is judged by its own processes' memory, not the machine's)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_group_memory_counts_the_process_group_and_nothing_else(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_nightly

    code = "import sys, time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ok"
        gib, kind = bench_nightly.group_memory_gib(proc.pid)
        assert kind in ("pss", "rss")
        assert 0.28 <= gib <= 0.6, gib  # the 300 MiB it touched, its interpreter, nothing of this process
        assert bench_nightly.group_memory_gib(2**22 + 12345)[0] == 0.0  # no such group
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.1)
    assert bench_nightly.group_memory_gib(proc.pid)[0] == 0.0  # the group is gone
