#!/usr/bin/env python3
"""Study of the noise-floor rule's granularity: how far correct-but-differently-rounded outputs stay below each
candidate rule's limit, and how often an injected single-element bug is caught.  No GPU needed.

    python benchmarks/noise_rule_study.py [REPORT.json] [--family fwd|bwd|all] [--no-gpu-elements]

*Correct outputs on the CPU*: ckfmha's cpu backend (tile-faithful: P and dS rounded to the input type before the
second GEMMs, as flash kernels do; float32 accumulation; outputs rounded to the stored dtype) on a grid of problems:
fwd and bwd, fp16 and bf16, hdim 64 and 128, MHA (4 heads) and GQA (4 q-heads, 1 kv-head), no mask and causal,
seqlens (64, 64), (200, 333), (512, 512) -- 96 problems, 48 fwd tensors (o) and 144 bwd tensors (dq, dk, dv).

*Correct outputs on a GPU* (``--no-gpu-elements`` skips them): the committed H100 torch sweep
(benchmarks/results/parity_torch_h100.json) keeps, for every output CK's elementwise tolerance failed, the first
failing element's value (``first mismatch out=... ref=...``); the element is found again by its float32 reference
value, and its error against the float64 truth is judged under each candidate -- real flash / cuDNN / efficient /
math / flex errors, at the elements where they are largest relative to their neighbourhood.

*Injected bug*: ``benchmarks/parity_torch.py``'s ``inject_grad_element`` (the middle element of the flattened
tensor raised by 1% / 0.5% of the tensor's max |truth|, stored back in the output dtype).

*Candidates* (per row = per vector along the last axis; ``ref_err`` = max|same_precision - truth|; u: the unit
roundoff of the stored dtype; M: max|truth| of the tensor; m_row: of the row):

==============  ===========================================================================
tensor          FlashAttention's rule over the whole tensor: err <= k * ref_err + atol
row             per row: err_row <= k * ref_err_row + atol
row_u           per row, floored at the rounding bound: k * max(ref_err_row, u * m_row)
row_g0.5        row_u with m_row floored at 0.5 * M
row_g0.8        row_u with m_row floored at 0.8 * M
tensor_u        row_u with m_row floored at M: k * max(ref_err_row, u * M) -- the rounding bound tensor-wide
==============  ===========================================================================

For each candidate: the k a correct output needs (max over its rows of (err_row - atol) / scale_row; a rule's
margin is its k over that), and at k = 1.75 .. 3: false alarms and injected bugs caught (bf16 / fp16).  The deciding
rule itself is cross-checked through :func:`ckfmha.validator.validate_noise_floor` (``validator``).  Last, the
whole committed H100 sweep is re-judged under the deciding form (magnitude_floor 1): the k its correct outputs need
at most, and the injected rows it catches per k (``rejudge_h100``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from ckfmha.problem import Problem  # noqa: E402

ATOL = 1e-5
FRACTIONS = ("0.01", "0.005")
KS = (1.75, 2.0, 2.25, 2.5, 3.0)
CANDIDATES = ("tensor", "row", "row_u", "row_g0.5", "row_g0.8", "tensor_u")
H100_REPORT = Path(__file__).resolve().parent / "results" / "parity_torch_h100.json"


def grid(family: str) -> list[Problem]:
    from parity_torch import sweep_problem

    out = []
    for fam, dt, d, (hq, hk), m, (sq, sk) in itertools.product(
        ("bwd", "fwd"), ("bf16", "fp16"), (64, 128), ((4, 4), (4, 1)), ("0", "t"), ((64, 64), (200, 333), (512, 512))
    ):
        if family in ("all", fam):
            out.append(sweep_problem(fam, dt, 1, hq, hk, sq, sk, d, m))
    return out


def _rows(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(-1, a.shape[-1])


def scales(cand: str, ref_rows: np.ndarray, mag_rows: np.ndarray, u: float) -> np.ndarray:
    """Each row's reference-error scale under a candidate (module doc)."""
    if cand == "tensor":
        return np.full_like(ref_rows, float(ref_rows.max()))
    if cand == "row":
        return ref_rows
    floor = {"row_u": 0.0, "row_g0.5": 0.5, "row_g0.8": 0.8, "tensor_u": 1.0}.get(cand)
    if floor is None:
        raise ValueError(f"candidate: {cand!r} unknown; allowed: {', '.join(CANDIDATES)}")
    return np.maximum(ref_rows, u * np.maximum(mag_rows, floor * float(mag_rows.max())))


def k_needed(err_rows: np.ndarray, scale: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(
            scale > 0, (err_rows - ATOL) / np.where(scale > 0, scale, 1.0), np.where(err_rows > ATOL, np.inf, 0)
        )
    return float(max(q.max(), 0.0))


def study_tensor(p: Problem, name: str, out, truth, same) -> dict:
    from parity_torch import inject_grad_element

    from ckfmha.validator import unit_roundoff, validate_noise_floor

    t = _rows(truth[name])
    o = np.asarray(out[name])
    err = np.abs(_rows(o) - t).max(axis=1)
    ref = np.abs(_rows(same[name]) - t).max(axis=1)
    mag = np.abs(t).max(axis=1)
    u = unit_roundoff(np.asarray(same[name]).dtype)
    magnitude = float(np.abs(truth[name]).max())
    rec: dict = {"problem": str(p), "output": name, "dtype": p.dtype.value, "need": {}, "caught": {}}
    for cand in CANDIDATES:
        rec["need"][cand] = k_needed(err, scales(cand, ref, mag, u))
    clean = {name: o}
    rec["validator_clean_passed"] = validate_noise_floor(p, clean, truth, same, names=[name])[name].passed
    for frac in FRACTIONS:
        bad, index, _ = inject_grad_element(clean, name, magnitude, float(frac))
        row = int(np.ravel_multi_index(index, o.shape)) // o.shape[-1]
        bad_err = float(np.abs(_rows(bad[name])[row] - t[row]).max())
        bad_tensor = float(np.abs(_rows(bad[name]) - t).max())
        for cand in CANDIDATES:
            s = scales(cand, ref, mag, u)
            e = bad_tensor if cand == "tensor" else bad_err
            rec["caught"][f"{cand} {frac}"] = {str(k): bool(e > k * s[row] + ATOL) for k in KS}
        rec[f"validator_caught {frac}"] = not validate_noise_floor(p, bad, truth, same, names=[name])[name].passed
    return rec


def summarize(records: list[dict]) -> list[str]:
    lines = []
    for fam in ("bwd", "fwd"):
        recs = [r for r in records if r["problem"].startswith(fam)]
        if not recs:
            continue
        by_dt = {dt: [r for r in recs if r["dtype"] == dt] for dt in ("bf16", "fp16")}
        lines.append(f"== {fam}: {len(recs)} tensors")
        for cand in CANDIDATES:
            need = np.array([r["need"][cand] for r in recs])
            cells = []
            for k in KS:
                fa = int((need > k).sum())
                caught = " ".join(
                    f"{frac}: bf16 {sum(r['caught'][f'{cand} {frac}'][str(k)] for r in by_dt['bf16'])}/{len(by_dt['bf16'])}"
                    f" fp16 {sum(r['caught'][f'{cand} {frac}'][str(k)] for r in by_dt['fp16'])}/{len(by_dt['fp16'])}"
                    for frac in FRACTIONS
                )
                cells.append(f"    k={k:g}: false alarms {fa}/{len(recs)}; caught {caught}")
            lines.append(f"  {cand:8s} k needed: max {need.max():.2f}, median {np.median(need):.2f}")
            lines += cells
        clean_fail = sum(not r["validator_clean_passed"] for r in recs)
        caught = {frac: sum(r[f"validator_caught {frac}"] for r in recs) for frac in FRACTIONS}
        lines.append(
            f"  validator (tolerances.yaml row_noise_floor): clean failed {clean_fail}/{len(recs)}; caught "
            + ", ".join(f"{frac}: {c}/{len(recs)}" for frac, c in caught.items())
        )
    return lines


def gpu_elements(path: Path = H100_REPORT) -> list[dict]:
    """The first element CK's elementwise tolerance failed in each output of the committed H100 sweep, found again by
    its float32 reference value, with its row's figures (module doc)."""
    from ckfmha.upstream.reference_cache import inputs_and_reference, noise_references
    from ckfmha.validator import unit_roundoff

    report = json.loads(path.read_text())
    wanted: dict[str, list] = {}
    for row in report["rows"]:
        for name, c in (row.get("checks") or {}).items():
            m = re.search(r"out=(\S+) ref=(\S+)", c.get("message") or "")
            if c.get("elementwise_passed") is False and m:
                wanted.setdefault(row["problem"], []).append((row["backend"], name, float(m[1]), float(m[2])))
    out = []
    for problem, items in wanted.items():
        label, args = problem.split(": ", 1)
        p = Problem.from_ck_args(args, binary="bwd" if label.startswith("bwd") else "fwd")
        _, ref = inputs_and_reference(p, 0)
        truth, same = noise_references(p, 0)
        for backend, name, value, ref_value in items:
            hits = np.argwhere(np.asarray(ref[name], dtype=np.float64) == ref_value)
            if not len(hits):
                continue
            at = tuple(int(i) for i in hits[0])
            t, sp = truth[name], np.asarray(same[name]).astype(np.float64)
            out.append(
                {
                    "backend": backend,
                    "problem": problem,
                    "output": name,
                    "index": list(at),
                    "err": abs(value - float(t[at])),
                    "ref_err_row": float(np.abs(sp[at[:-1]] - t[at[:-1]]).max()),
                    "ref_err": float(np.abs(sp - t).max()),
                    "m_row": float(np.abs(t[at[:-1]]).max()),
                    "m": float(np.abs(t).max()),
                    "u": unit_roundoff(np.asarray(same[name]).dtype),
                }
            )
    return out


def summarize_gpu(elements: list[dict]) -> list[str]:
    """Per candidate, the k the H100 elements need (module doc)."""
    if not elements:
        return []
    lines = [f"== H100 elements CK's elementwise tolerance failed (correct kernels): {len(elements)}"]
    for cand in CANDIDATES:
        need = []
        for e in elements:
            if cand == "tensor":
                scale = e["ref_err"]
            elif cand == "row":
                scale = e["ref_err_row"]
            else:
                floor = {"row_u": 0.0, "row_g0.5": 0.5, "row_g0.8": 0.8, "tensor_u": 1.0}[cand]
                scale = max(e["ref_err_row"], e["u"] * max(e["m_row"], floor * e["m"]))
            need.append((e["err"] - ATOL) / scale)
        worst = elements[int(np.argmax(need))]
        lines.append(
            f"  {cand:8s} k needed: max {max(need):.2f} ({worst['backend']} {worst['output']} {worst['problem']}), "
            f"median {np.median(need):.2f}"
        )
    return lines


def rejudge_h100(path: Path = H100_REPORT) -> list[str]:
    """The committed H100 sweep's outputs under the deciding rule at magnitude_floor 1 (module doc): per dtype and
    direction the k its clean outputs need at most (``max|out - truth| / (u * max|truth|)``: every row's limit is at
    least ``k * u * max|truth|``), and per k the injected rows caught (exact: the injected element holds its
    tensor's largest error, checked; its row's own reference error is recomputed)."""
    from ckfmha.upstream.reference_cache import noise_references
    from ckfmha.validator import unit_roundoff

    report = json.loads(path.read_text())
    clean: dict = {}
    need: dict[tuple[str, str], float] = {}
    for row in (r for r in report["rows"] if r["verdict"] in ("ran_valid", "ran_invalid")):
        label, args = row["problem"].split(": ", 1)
        p = Problem.from_ck_args(args, binary="bwd" if label.startswith("bwd") else "fwd")
        truth, same = noise_references(p, 0)
        for n, err in row["err_vs_truth"].items():
            if err is None or n not in same:
                continue
            scale = unit_roundoff(np.asarray(same[n]).dtype) * float(np.abs(np.nan_to_num(truth[n], neginf=0)).max())
            clean[(row["backend"], row["problem"], n)] = (err, row["ref_err_vs_truth"][n])
            key = (row["dtype"], label[:3])
            if scale > 0:
                need[key] = max(need.get(key, 0.0), (err - ATOL) / scale)
    lines = [f"== H100 sweep re-judged (magnitude_floor 1): {len(clean)} clean outputs"]
    lines += [f"  {dt} {fam}: k needed at most {v:.2f}" for (dt, fam), v in sorted(need.items())]
    caught = {(k, dt): 0 for k in KS for dt in ("bf16", "fp16")}
    total = {"bf16": 0, "fp16": 0}
    unknown = 0
    for row in report.get("injected_rows", []):
        n, prob = row["tensor"], row["problem"]
        p = Problem.from_ck_args(prob.split(": ", 1)[1], binary="bwd")
        truth, same = noise_references(p, 0)
        err_clean, ref_err = clean[(row["backend"], prob, n)]
        if row["error_ratio"][n] is None:  # the same-precision reference exact: no error to recover
            unknown += 1
            continue
        err = row["error_ratio"][n] * ref_err
        assert err > err_clean, f"{prob} {n}: the injected element is not the tensor's largest error"
        at = tuple(row["index"])[:-1]
        t = truth[n]
        row_ref = float(np.abs(np.asarray(same[n]).astype(np.float64)[at] - t[at]).max())
        bound = unit_roundoff(np.asarray(same[n]).dtype) * float(np.abs(t).max())
        total[row["dtype"]] += 1
        for k in KS:
            caught[(k, row["dtype"])] += err > k * max(row_ref, bound) + ATOL
    for k in KS:
        lines.append(
            f"  k={k:g}: injected caught bf16 {caught[(k, 'bf16')]}/{total['bf16']}, "
            f"fp16 {caught[(k, 'fp16')]}/{total['fp16']}"
        )
    lines.append(f"  injected rows without a recoverable error (ratio None): {unknown}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", help="optional JSON path for the per-tensor records")
    ap.add_argument("--family", choices=("fwd", "bwd", "all"), default="all")
    ap.add_argument("--no-gpu-elements", action="store_true", help="skip the H100 elements (module doc)")
    args = ap.parse_args(argv)
    from ckfmha import run
    from ckfmha.upstream.reference_cache import inputs_and_reference, noise_references

    records = []
    for p in grid(args.family):
        inputs, _ = inputs_and_reference(p, 0)
        truth, same = noise_references(p, 0)
        out = run(p, inputs, backend="cpu").outputs
        for name in ("dq", "dk", "dv") if p.is_backward else ("o",):
            records.append(study_tensor(p, name, out, truth, same))
        print(p, flush=True)
    lines = summarize(records)
    gpu = [] if args.no_gpu_elements else gpu_elements()
    lines += summarize_gpu(gpu)
    if not args.no_gpu_elements:
        lines += rejudge_h100()
    print("\n".join(lines))
    if args.report:
        Path(args.report).write_text(json.dumps({"summary": lines, "records": records, "gpu_elements": gpu}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
