"""benchmarks/bench_nightly.py's memory figure of a run's own processes (a run sharing a machine with others is
judged by its own processes' memory, not the machine's)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# a process in a new session that starts a child in a session of its own (as a launcher may): both are the run's
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {child!r}], start_new_session=True, stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ok"
b = bytearray(200 * 2**20); b[::4096] = b"x" * len(b[::4096])
print("ok", flush=True)
time.sleep(60)
"""
CHILD = "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(60)"


def test_run_memory_counts_the_run_and_its_descendants_and_nothing_else(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_nightly

    code = PARENT.format(child=CHILD)
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ok"
        rss, pss = bench_nightly.group_memory_gib(proc.pid)
        assert 0.48 <= rss <= 0.9, rss  # 200 + 300 MiB touched, two interpreters, nothing of this process
        assert pss == 0.0 or 0.45 <= pss <= rss, pss
        assert bench_nightly.group_memory_gib(2**22 + 12345) == (0.0, 0.0)  # no such process
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)  # its child, in a session of its own
        proc.kill()
        proc.wait()
    time.sleep(0.2)
    assert bench_nightly.group_memory_gib(proc.pid) == (0.0, 0.0)
