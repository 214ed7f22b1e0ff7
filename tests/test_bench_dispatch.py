"""benchmarks/bench_dispatch.py on the cpu backend (the GPU run is the real measurement): the script times the
candidates, tunes from its own timings and reports the dispatcher's share within 5% of the fastest."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_dispatch_tunes_from_its_own_timings(tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("bench_dispatch", ROOT / "benchmarks" / "bench_dispatch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "bd.json"
    args = [str(out), "--arch", "gfx942", "--backend", "cpu", "--category", "smoke", "--max-shapes", "6"]
    assert mod.main([*args, "--max-kernels", "3", "--repeat", "2"]) == 0
    doc = json.loads(out.read_text())
    assert doc["shapes"] >= 3 and len(doc["rows"]) >= 2 * doc["shapes"]
    # each shape is its own class here, so the tuned table names each shape's fastest kernel
    assert doc["share_after"] == 1.0 and doc["share_after"] >= doc["share_before"]
    for c in doc["choices"].values():
        assert c["times_ms"][c["after"]] == min(c["times_ms"].values())
