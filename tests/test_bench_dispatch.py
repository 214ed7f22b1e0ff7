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
