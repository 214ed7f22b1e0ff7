#!/usr/bin/env python3
"""Torch-parity sweep on a GPU: every torch backend (math, efficient, flash, cudnn, flex) against ckfmha's NumPy
reference, fwd and bwd, masks none / top-left / bottom-right / windows, MHA and GQA, fp16 and bf16.

    python benchmarks/parity_torch.py REPORT.json [--backends flash,flex] [--quick] [--seed 0]

Writes one JSON report: the environment (torch version, GPU), per backend the counts of ran_valid / ran_invalid /
skipped / error, and one row per (backend, problem) with the verdict, the side's words, the check summaries and the
wall time of the torch call.  Exit status 1 when any expressible problem ran invalid or errored, else 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ckfmha.problem import Problem  # noqa: E402
from ckfmha.upstream.torch_express import BACKENDS  # noqa: E402
from ckfmha.upstream.torch_sdpa import TorchSide, gpu_status  # noqa: E402

MASKS = ("0", "t", "b", "t:64,0", "b:32,16")


def sweep(quick: bool) -> list[Problem]:
    shapes = [(2, 8, 8, 256, 256, 64), (2, 8, 2, 200, 333, 128)] if quick else [
        (2, 8, 8, 256, 256, 64), (2, 8, 2, 200, 333, 128), (1, 16, 4, 1024, 1024, 128), (4, 4, 1, 77, 512, 64),
        (1, 8, 8, 1, 4096, 128)]
    out = []
    for fam in ("fwd", "bwd"):
        for dt in ("fp16", "bf16"):
            for b, hq, hk, sq, sk, d in shapes:
                for m in MASKS:
                    out.append(Problem(family=fam, dtype=dt, batch=b, nhead_q=hq, nhead_k=hk, seqlen_q=sq,
                                       seqlen_k=sk, hdim_q=d, mask=m, lse=(fam == "fwd")))
    # features only some backends express
    out += [Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, bias="elementwise"),
            Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, bias="alibi", mask="b"),
            Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, logits_soft_cap=30.0, lse=True),
            Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, sink=True, mask="t:64,0", lse=True),
            Problem(mode="group", batch=3, nhead_q=8, nhead_k=2, seqlens_q=(17, 256, 5), seqlens_k=(33, 256, 300),
                    hdim_q=128, mask="b", lse=True),
            Problem(family="bwd", dtype="bf16", mode="group", batch=2, nhead_q=4, seqlens_q=(100, 37),
                    seqlens_k=(64, 200), hdim_q=64, mask="t")]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="output JSON path")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--quick", action="store_true", help="two shapes instead of five")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="default: the GPU (cpu only for checking the script)")
    args = ap.parse_args(argv)
    ok, gpu = gpu_status()
    if not ok and args.device is None:
        sys.stderr.write(f"parity_torch: {gpu}\n")
        return 2
    import torch

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    problems = sweep(args.quick)
    rows, counts = [], {}
    t_all = time.perf_counter()
    sides = {b: TorchSide(b, device=args.device) for b in backends}
    for b in backends:
        counts[b] = {"ran_valid": 0, "ran_invalid": 0, "skipped": 0, "error": 0, "unsupported": 0}
    # problem-major, so each problem's inputs and reference are made once (the cache keeps the latest two)
    for p in problems:
        for b, side in sides.items():
            t0 = time.perf_counter()
            r = side.run(p, args.seed)
            counts[b][r.verdict.value] += 1
            rows.append({"backend": b, "problem": str(p), "family": p.family.value, "dtype": p.dtype.value,
                         "mask": p.mask.to_ck(), "gqa": p.nhead_q != p.nhead_k, "verdict": r.verdict.value,
                         "reason": r.reason, "notes": r.notes, "checks": r.checks,
                         "torch_seconds": r.fields.get("seconds"), "row_seconds": time.perf_counter() - t0})
            print(f"{b:9s} {r.verdict.value:11s} {p}  {r.reason[:120]}", flush=True)
    report = {"tool": "benchmarks/parity_torch.py", "reference": "ckfmha NumPy reference (float32 accumulation), "
              "validator tolerances (ckfmha/data/tolerances.yaml)",
              "environment": {"torch": torch.__version__, "gpu": gpu if ok else args.device,
                              "cuda": getattr(torch.version, "cuda", None), "hip": getattr(torch.version, "hip", None),
                              "python": platform.python_version(), "seed": args.seed},
              "seconds": time.perf_counter() - t_all, "counts": counts, "rows": rows}
    Path(args.report).write_text(json.dumps(report, indent=1, default=str) + "\n")
    bad = sum(c["ran_invalid"] + c["error"] for c in counts.values())
    print(json.dumps(counts, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
