"""Forward reference speed vs a plain NumPy softmax(Q K^T) V of the same shape (target: ratio <= 1.5).

python3 benchmarks/bench_reference.py [--b 1 --h 8 --s 2048 --d 128 --repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import reference


def plain(q, k, v, scale):
    s = np.matmul(q, k.transpose(0, 1, 3, 2)) * scale
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.matmul(s / s.sum(axis=-1, keepdims=True), v)


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--b", type=int, default=1)
    ap.add_argument("--h", type=int, default=8)
    ap.add_argument("--s", type=int, default=2048)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    p = Problem(batch=a.b, nhead_q=a.h, seqlen_q=a.s, hdim_q=a.d, dtype="fp16")
    x = make_inputs(p, seed=0)
    q, k, v = (x[n].astype(np.float32) for n in ("q", "k", "v"))
    t_ref = best(lambda: reference(p, x, accum=np.float32), a.repeat)
    t_plain = best(lambda: plain(q, k, v, np.float32(p.softmax_scale)), a.repeat)
    err = float(np.abs(reference(p, x)["o"] - plain(q, k, v, np.float32(p.softmax_scale))).max())
    print(f"shape b={a.b} h={a.h} s={a.s} d={a.d} fp32 accumulation (best of {a.repeat})")
    print(f"ckfmha reference : {t_ref * 1e3:9.1f} ms")
    print(f"plain numpy      : {t_plain * 1e3:9.1f} ms")
    print(f"ratio            : {t_ref / t_plain:9.2f}  (target <= 1.5)   max|diff| = {err:.2e}")


if __name__ == "__main__":
    main()
