"""benchmarks/bench_dispatch.py on the cpu backend (the GPU run is the real measurement): the script times the
candidates, tunes from its own timings and reports the dispatcher's share within 5% of the fastest."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script(monkeypatch):
    """The script as an importable module (``--prebuild``'s spawned processes import it by name)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.delitem(sys.modules, "bench_dispatch", raising=False)
    return importlib.import_module("bench_dispatch")


def test_bench_dispatch_tunes_from_its_own_timings(tmp_path, monkeypatch) -> None:
    mod = _script(monkeypatch)
    out = tmp_path / "bd.json"
    args = [str(out), "--arch", "gfx942", "--backend", "cpu", "--category", "smoke", "--max-shapes", "6"]
    assert mod.main([*args, "--max-kernels", "3", "--repeat", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["shapes"] >= 3 and len(doc["rows"]) >= 2 * doc["shapes"]
    # a shape alone in its class gets its own fastest kernel from the tuned table; shapes sharing a class (same
    # family, dtype, mode, head dims, mask kind, length buckets: ckfmha.heuristics.row_class) get the kernel
    # fastest on average, which on a loaded machine's timings may be another shape's fastest
    from ckfmha.heuristics import row_class

    members: dict[tuple, set[str]] = {}
    for r in doc["rows"]:
        members.setdefault(row_class(r), set()).add(r["id"].split("::", 1)[0])
    alone = {next(iter(m)) for m in members.values() if len(m) == 1}
    assert len(alone) >= 2, members
    for sid, c in doc["choices"].items():
        if sid in alone:
            assert c["times_ms"][c["after"]] == min(c["times_ms"].values()), sid
    assert doc["share_after"] >= len(alone & set(doc["choices"])) / len(doc["choices"])


def test_bench_dispatch_shards_prebuild_and_merge(tmp_path, monkeypatch) -> None:
    """Two shards (one compiled ahead in a process pool) time disjoint shapes that together are one run's; the merge
    gives the figures over both, with the held-out split by position in the selected list."""
    mod = _script(monkeypatch)
    common = ["--arch", "gfx942", "--backend", "cpu", "--category", "smoke", "--max-shapes", "6", "--max-kernels", "2"]
    one, s1, s2, merged = (tmp_path / f"{n}.json" for n in ("one", "s1", "s2", "merged"))
    assert mod.main([str(one), *common, "--repeat", "1"]) == 0
    assert mod.main([str(s1), *common, "--repeat", "1", "--shard", "1/2", "--prebuild", "2"]) == 0
    assert mod.main([str(s2), *common, "--repeat", "1", "--shard", "2/2"]) == 0
    docs = [json.loads(p.read_text()) for p in (one, s1, s2)]
    assert docs[1]["choices"] and docs[2]["choices"]
    assert not set(docs[1]["choices"]) & set(docs[2]["choices"])
    # whole pairs per shard (positions 0,1,4,5 and 2,3): each shard alone has tuned and held-out shapes
    assert all(0 < d["held_out"]["shapes"] < len(d["choices"]) for d in docs[1:])
    assert set(docs[1]["choices"]) | set(docs[2]["choices"]) == set(docs[0]["choices"])
    assert mod.main([str(merged), "--merge", str(s1), str(s2)]) == 0
    m = json.loads(merged.read_text())
    assert list(m["choices"]) == list(docs[0]["choices"])  # the selected list's order, not the shards'
    assert m["shapes"] == docs[0]["shapes"] and m["held_out"]["shapes"] == docs[0]["held_out"]["shapes"]
    assert len(m["rows"]) == len(docs[1]["rows"]) + len(docs[2]["rows"])
    # the tuned choice on a shape alone in its class is that shape's fastest kernel, in the merged figures too
    from ckfmha.heuristics import row_class

    members: dict[tuple, set[str]] = {}
    for r in m["rows"]:
        members.setdefault(row_class(r), set()).add(r["id"].split("::", 1)[0])
    for cls_members in members.values():
        if len(cls_members) == 1:
            (sid,) = cls_members
            c = m["choices"][sid]
            assert c["times_ms"][c["after"]] == min(c["times_ms"].values()), sid


def test_bench_dispatch_merge_refuses_shards_of_different_selections(tmp_path, monkeypatch) -> None:
    mod = _script(monkeypatch)
    base = {"schema": "ckfmha.report", "arch": "gfx942", "category": "smoke", "rows": [], "choices": {},
            "environment": {"devices": []}}  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps({**base, "max_shapes": 6}))
    (tmp_path / "b.json").write_text(json.dumps({**base, "max_shapes": 8}))
    rc = mod.main([str(tmp_path / "m.json"), "--backend", "cpu", "--merge", str(tmp_path / "a.json"),
                   str(tmp_path / "b.json")])  # fmt: skip
    assert rc == 2 and not (tmp_path / "m.json").exists()


def test_paired_selection_holds_out_one_shape_of_each_class(monkeypatch) -> None:
    """--select paired: two shapes of each class that has two, one after the other, so the held-out split (even
    positions tuned, odd measured) measures a shape of every class it tuned on."""
    mod = _script(monkeypatch)
    from ckfmha.heuristics import shape_class

    paired = mod._shapes("full", 40, "paired")
    assert paired and len(paired) % 2 == 0 and len(paired) <= 40
    classes = [shape_class(s.problem) for s in paired]
    assert all(classes[i] == classes[i + 1] and paired[i] is not paired[i + 1] for i in range(0, len(paired), 2))
    assert len(set(classes)) == len(paired) // 2  # one pair per class
    spread = mod._shapes("full", 40)
    assert len(spread) == 40 and [shape_class(s.problem) for s in spread] != classes


def test_bench_dispatch_keeps_its_timings_through_a_sigterm(tmp_path, monkeypatch) -> None:
    """The report is written after every timed shape (state running); a SIGTERM writes the timings so far (state
    interrupted, exit 143), and --merge makes the figures from that file -- the shard of session 11 that its time
    limit killed lost every timing."""
    import os
    import signal
    import subprocess
    import time

    out = tmp_path / "bd.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_dispatch.py"), str(out), "--arch", "gfx942",
           "--backend", "cpu", "--category", "smoke", "--max-shapes", "6", "--max-kernels", "2", "--repeat", "40"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    doc = None
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        if out.exists():
            doc = json.loads(out.read_text())  # whole or absent: written through a renamed temporary file
            if doc["state"] == "running" and doc["shapes"] >= 1:
                break
    assert doc is not None and doc["state"] == "running", "no checkpoint before the run ended"
    assert "share_after" not in doc and all(set(c) == {"times_ms"} for c in doc["choices"].values())
    os.kill(proc.pid, signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, text
    doc = json.loads(out.read_text())
    assert doc["state"] == "interrupted" and doc["shapes"] >= 1 and len(doc["rows"]) >= 2 * doc["shapes"]
    assert all(r["time_min_ms"] <= r["time_ms"] <= r["time_max_ms"] and r["repeats"] == 40 for r in doc["rows"])
    assert "SIGTERM" in text
    mod = _script(monkeypatch)
    merged = tmp_path / "m.json"
    assert mod.main([str(merged), "--backend", "cpu", "--merge", str(out)]) == 0
    m = json.loads(merged.read_text())
    assert m["state"] == "complete" and m["shapes"] == doc["shapes"] and set(m["choices"]) == set(doc["choices"])
    held = m["held_out"]
    assert sum(b["shapes"] for b in held["by_fastest_ms"].values()) == held["shapes"]
    assert held["slowdown_after"] >= 1.0 or held["shapes"] == 0


def _timed(sid: str, kernel: str, med: float, lo: float, hi: float) -> dict:
    return {"id": f"{sid}::{kernel}", "kernel_id": kernel, "time_ms": med, "time_min_ms": lo, "time_max_ms": hi}


def test_noise_profile_tells_apart_only_what_the_repeats_separate(monkeypatch) -> None:
    bench_dispatch = _script(monkeypatch)
    rows = [
        # shape a: k1 fastest and told apart (its max 1.05 < k2's min 1.2); the held-out choice k2 misses by 30%,
        # outside k1's range
        _timed("a", "k1", 1.0, 0.95, 1.05), _timed("a", "k2", 1.3, 1.2, 1.4),
        # shape b: the ranges overlap; the choice k2 misses by 10% but its min 0.9 is within k1's range (max 1.2)
        _timed("b", "k1", 1.0, 0.8, 1.2), _timed("b", "k2", 1.1, 0.9, 1.3),
        # shape c: no min/max (a run before they were recorded): left out
        {"id": "c::k1", "kernel_id": "k1", "time_ms": 1.0}, {"id": "c::k2", "kernel_id": "k2", "time_ms": 2.0},
    ]  # fmt: skip
    n = bench_dispatch._noise_profile(rows, {"a": "k2", "b": "k2", "c": "k2"})
    assert (n["shapes"], n["distinguishable"], n["held_out_misses"], n["misses_within_range"]) == (2, 1, 2, 1)
    assert n["median_spread"] == pytest.approx(np.median([0.1, 0.2 / 1.3, 0.4, 0.4 / 1.1]))
    # a choice within 5% is no miss, whatever the ranges
    assert bench_dispatch._noise_profile(rows, {"a": "k1", "b": "k1"})["held_out_misses"] == 0
