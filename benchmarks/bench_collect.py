"""Time ``pytest --collect-only -q --ckfmha-category <category>`` (target for nightly: <= 15 s on the dev box).

    python benchmarks/bench_collect.py [--category nightly] [--repeat 3] [extra pytest args...]

Runs pytest in a fresh process each time (what a user waits for, imports included) from the repository root, so
the packaged matrices and the default arch are used; prints each wall time, the best and the item count.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--category", default="nightly", choices=("smoke", "full", "nightly"))
    ap.add_argument("--repeat", type=int, default=3)
    args, extra = ap.parse_known_args(argv)
    env = dict(os.environ, CKFMHA_NO_DETECT=os.environ.get("CKFMHA_NO_DETECT", "1"))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--collect-only",
        "-q",
        "--ckfmha-category",
        args.category,
        *extra,
    ]
    times, count = [], "?"
    for i in range(args.repeat):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
            return r.returncode
        m = re.search(r"(\d+) tests? collected", r.stdout)
        count = m.group(1) if m else "?"
        times.append(dt)
        print(f"run {i + 1}: {dt:.2f} s wall ({count} items)")
    print(
        f"collect-only --ckfmha-category {args.category}: best {min(times):.2f} s, {count} items "
        f"(target for nightly: <= 15 s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
