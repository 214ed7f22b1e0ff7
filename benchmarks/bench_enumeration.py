"""Speed and memory of the exact CK enumeration (issue 2, item 8): a benchmark, not a timed test.

Lists CK instance names for all 6 apis x 5 archs x 2 mask modes at receipt 0 through
``ckfmha.enumeration.ck_instance_names``, starting each run from cold caches (arch specs re-read, nothing
enumerated yet; modules are imported beforehand). Prints the per-api counts, the wall time of each run, and
the peak memory: the Python heap peak under ``tracemalloc`` (measured in a separate run, because tracing
slows Python down) and the process's maximum resident set size (``resource.getrusage``).

Targets on the 2-core dev machine: <= 1.0 s total (median of the runs) and <= 300 MB peak.
The machine's own speed drifts (shared cores): a fixed pure-Python calibration loop is timed before and after the
runs, so a reader can tell a slow machine from a slow enumeration; the fastest run is printed too.
An api whose enumerator module does not exist yet is reported as 'not implemented' and skipped.

Usage: python benchmarks/bench_enumeration.py [--repeat N] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ckfmha.archs  # noqa: E402
import ckfmha.enumeration as enumeration  # noqa: E402
from ckfmha.archs import CK_ARCHS  # noqa: E402
from ckfmha.kernel import Api  # noqa: E402

MASK_MODES = ("simplified", "generic")
TIME_TARGET_S = 1.0
MEMORY_TARGET_MB = 300.0


def implemented_apis() -> tuple[list[Api], list[Api]]:
    """(apis with an enumerator module, apis without one); the modules are imported here, outside timing."""
    have, missing = [], []
    for api in Api:
        name = enumeration._MODULES[api]
        if importlib.util.find_spec(name) is None:
            missing.append(api)
        else:
            importlib.import_module(name)
            have.append(api)
    return have, missing


def clear_caches() -> None:
    """Cold start: every enumeration cache and the parsed arch files (the enumerators' own per-section caches
    are keyed by the section objects, which a fresh load replaces)."""
    enumeration.clear_caches()
    ckfmha.archs.load_arch_spec.cache_clear()


def run_once(apis: list[Api]) -> tuple[float, dict[str, int], dict[str, float]]:
    """One cold-cache run: (total seconds, names per api, seconds per api)."""
    clear_caches()
    counts = {api.value: 0 for api in apis}
    per_api = {api.value: 0.0 for api in apis}
    t0 = time.perf_counter()
    for api in apis:
        t_api = time.perf_counter()
        for arch in CK_ARCHS:
            for mode in MASK_MODES:
                counts[api.value] += len(enumeration.ck_instance_names(api, arch, 0, mode))
        per_api[api.value] = time.perf_counter() - t_api
    return time.perf_counter() - t0, counts, per_api


def calibration_s() -> float:
    """Seconds for a fixed pure-Python loop (3M multiply-adds): the machine's speed at the moment."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(3_000_000):
        acc += i * i
    return time.perf_counter() - t0


def maxrss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0  # bytes on macOS, KiB on Linux


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs (the median is judged); default 3")
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = ap.parse_args(argv)

    apis, missing = implemented_apis()
    calib_before = calibration_s()
    times: list[float] = []
    counts: dict[str, int] = {}
    api_times: dict[str, list[float]] = {api.value: [] for api in apis}
    for _ in range(max(1, args.repeat)):
        dt, counts, per_api = run_once(apis)
        times.append(dt)
        for k, v in per_api.items():
            api_times[k].append(v)
    api_median = {k: statistics.median(v) for k, v in api_times.items()}
    calib_after = calibration_s()

    tracemalloc.start()
    run_once(apis)
    _, heap_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    heap_mb = heap_peak / (1024.0 * 1024.0)
    rss_mb = maxrss_mb()

    median = statistics.median(times)
    peak_mb = max(heap_mb, rss_mb)
    time_ok = median <= TIME_TARGET_S
    mem_ok = peak_mb <= MEMORY_TARGET_MB

    print(
        f"CK enumeration benchmark: {len(Api)} apis x {len(CK_ARCHS)} archs ({', '.join(CK_ARCHS)}) "
        f"x {len(MASK_MODES)} mask modes, receipt 0"
    )
    print(f"{'api':<18}{'names':>10}{'seconds':>10}")
    for api in Api:
        if api in missing:
            print(f"{api.value:<18}{'not implemented':>18}")
        else:
            print(f"{api.value:<18}{counts[api.value]:>10,}{api_median[api.value]:>10.3f}")
    print(f"{'total':<18}{sum(counts.values()):>10,}{median:>10.3f}")
    print("(the first api's time includes reading the arch data files)")
    print(
        f"wall time: median {median:.3f} s, fastest {min(times):.3f} s over {len(times)} run(s) "
        f"({', '.join(f'{t:.3f}' for t in times)})"
    )
    print(
        f"machine calibration loop: {calib_before:.3f} s before, {calib_after:.3f} s after "
        "(compare runs only at similar calibration times)"
    )
    print(f"peak memory: tracemalloc heap {heap_mb:.1f} MB, maxrss {rss_mb:.1f} MB")
    print(f"target time   <= {TIME_TARGET_S:.1f} s : {'PASS' if time_ok else 'FAIL'} ({median:.3f} s)")
    print(f"target memory <= {MEMORY_TARGET_MB:.0f} MB: {'PASS' if mem_ok else 'FAIL'} ({peak_mb:.1f} MB)")
    if missing:
        print(f"note: not implemented yet: {', '.join(a.value for a in missing)} (excluded from the totals)")

    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "counts": counts,
                    "api_median_s": api_median,
                    "not_implemented": [a.value for a in missing],
                    "times_s": times,
                    "median_s": median,
                    "fastest_s": min(times),
                    "calibration_s": [calib_before, calib_after],
                    "tracemalloc_peak_mb": heap_mb,
                    "maxrss_mb": rss_mb,
                    "time_target_s": TIME_TARGET_S,
                    "memory_target_mb": MEMORY_TARGET_MB,
                    "time_pass": time_ok,
                    "memory_pass": mem_ok,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
