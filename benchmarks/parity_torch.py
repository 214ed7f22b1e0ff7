#!/usr/bin/env python3
"""Torch-parity sweep on a GPU: every torch backend (math, efficient, flash, cudnn, flex) against ckfmha's references,
fwd and bwd, masks none / top-left / bottom-right / windows, MHA and GQA, fp16 and bf16, with both verdicts.

    python benchmarks/parity_torch.py REPORT.json [--backends flash,flex] [--quick] [--seed 0]
           [--inject grad-element|dropout-threshold] [--ckfmha-backends auto,cpu] [--ckfmha-arch gfx942]

Every output is judged by both rules (ckfmha.upstream.judging, docs/parity.md): CK's elementwise tolerance against
the float32 reference, and the noise floor against the float64 ground truth -- decided per row against the rounding
bound (tolerances.yaml ``row_noise_floor``), with FlashAttention's tensor-wide form ``max|out - truth| <= k *
max|same_precision - truth| + atol`` reported next to it; the error ratios of both are kept per output.  A torch
side's verdict is the (per-row) noise floor's (torch kernels are not bound by CK's elementwise tolerance).

Injected bugs (``--inject``), each reported as "injected bug caught in N of M rows" (a row: one injected run judged;
caught = its verdict is ran_invalid):

* ``grad-element``: on every backward problem each torch side ran, each gradient (dq, dk, dv) in turn gets one
  element off by 1% (``--grad-fraction``) of that gradient's max |value| (the float64 truth's; exactly-zero
  gradients are listed as not injected) -- the element at the middle of the flattened tensor, raised -- applied to
  the side's outputs before judging; one row per (backend, problem, gradient), judged on that gradient by the
  side's own rule (the clean row holds the verdicts of the untouched ones).  The clean sweep runs as usual.
* ``dropout-threshold``: torch cannot take CK's dropout (it draws its own random mask, torch_express), so the bug
  goes into the ckfmha side instead: its kernels keep ``randval <= t - 1`` instead of ``randval <= t``
  (``t = p_undrop_u8(p_drop)``, ckfmha/rng.py) -- the cpu backend's engine and the triton launcher's threshold are
  patched; the references are not.  Dropout problems (fwd and bwd) run through ``ckfmha:<backend>`` for each of
  ``--ckfmha-backends`` (arch ``--ckfmha-arch``, default gfx942: sm90 has no dropout kernels), once clean (the
  control: must be valid) and once with the bug.  The torch sweep is not run in this mode.

Writes one JSON report: the environment, both noise floors' constants, per backend the verdict counts and how many
rows each rule alone would have failed (``row_noise_floor_invalid``, ``tensor_noise_floor_invalid``,
``elementwise_invalid``), the worst error ratio per backend and direction, one row per (backend, problem) with the
verdicts, the error ratios and the check summaries, and the injected rows with the catch summary (``caught_by_rule``
per rule).  Printed at the end, one line per rule: "clean rows invalid N of M; injected bug caught in C of R".  Exit
status 1 when a clean row ran invalid or errored, or an injected bug was not caught; else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from ckfmha.problem import Problem  # noqa: E402
from ckfmha.upstream.judging import judge  # noqa: E402
from ckfmha.upstream.reference_cache import noise_references  # noqa: E402
from ckfmha.upstream.result import SideResult, Verdict  # noqa: E402
from ckfmha.upstream.torch_express import BACKENDS  # noqa: E402

MASKS = ("0", "t", "b", "t:64,0", "b:32,16")
INJECTIONS = ("grad-element", "dropout-threshold")
GRADIENTS = ("dq", "dk", "dv")
#: the injected gradient error, as a fraction of the tensor's max |value| (--grad-fraction)
GRAD_ELEMENT_FRACTION = 0.01


def sweep_problem(
    family: str, dtype: str, b: int, hq: int, hk: int, sq: int, sk: int, d: int, mask: str, **extra
) -> Problem:
    """One problem of the sweeps (these and benchmarks/noise_rule_study.py's): ``(b, hq, hk, sq, sk, d)`` with
    ``mask``; the forward stores its LSE (the backward takes the forward's)."""
    return Problem(
        family=family,
        dtype=dtype,
        batch=b,
        nhead_q=hq,
        nhead_k=hk,
        seqlen_q=sq,
        seqlen_k=sk,
        hdim_q=d,
        mask=mask,
        lse=(family == "fwd"),
        **extra,
    )


def family_grid(shapes, masks, **extra) -> list[Problem]:
    """fwd then bwd, fp16 then bf16, each shape ``(b, hq, hk, sq, sk, d)`` with each mask: :func:`sweep_problem`."""
    return [
        sweep_problem(fam, dt, *shape, m, **extra)
        for fam in ("fwd", "bwd")
        for dt in ("fp16", "bf16")
        for shape in shapes
        for m in masks
    ]


def sweep(quick: bool) -> list[Problem]:
    shapes = (
        [(2, 8, 8, 256, 256, 64), (2, 8, 2, 200, 333, 128)]
        if quick
        else [
            (2, 8, 8, 256, 256, 64),
            (2, 8, 2, 200, 333, 128),
            (1, 16, 4, 1024, 1024, 128),
            (4, 4, 1, 77, 512, 64),
            (1, 8, 8, 1, 4096, 128),
        ]
    )
    out = family_grid(shapes, MASKS)
    # features only some backends express
    out += [
        Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, bias="elementwise"),
        Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, bias="alibi", mask="b"),
        Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, logits_soft_cap=30.0, lse=True),
        Problem(batch=2, nhead_q=8, seqlen_q=256, hdim_q=64, sink=True, mask="t:64,0", lse=True),
        Problem(
            mode="group",
            batch=3,
            nhead_q=8,
            nhead_k=2,
            seqlens_q=(17, 256, 5),
            seqlens_k=(33, 256, 300),
            hdim_q=128,
            mask="b",
            lse=True,
        ),
        Problem(
            family="bwd",
            dtype="bf16",
            mode="group",
            batch=2,
            nhead_q=4,
            seqlens_q=(100, 37),
            seqlens_k=(64, 200),
            hdim_q=64,
            mask="t",
        ),
    ]
    return out


def dropout_sweep() -> list[Problem]:
    """Dropout problems for the dropout-threshold injection (small: the cpu backend runs them too)."""
    return family_grid(((2, 4, 4, 128, 128, 64), (1, 4, 2, 96, 160, 128)), ("0", "t"), p_drop=0.2)


# ------------------------------------------------------------------------------------------ injections
def inject_grad_element(
    outputs: dict, name: str, magnitude: float, fraction: float = GRAD_ELEMENT_FRACTION
) -> tuple[dict, tuple[int, ...], float]:
    """A copy of ``outputs`` whose ``name`` has its middle element (flattened order) raised by ``fraction`` x
    ``magnitude`` (the gradient's max |value|: the float64 truth's, so that a gradient that is exactly zero -- a
    query that sees a single key -- has nothing to inject into, whatever noise a kernel leaves there); returns
    (outputs, index, delta), delta 0 when nothing was injected."""
    a = np.asarray(outputs[name])
    flat = a.astype(np.float64).reshape(-1).copy()
    delta = fraction * float(magnitude) if flat.size else 0.0
    i = flat.size // 2
    flat[i] += delta
    bad = dict(outputs)
    bad[name] = flat.reshape(a.shape).astype(a.dtype)
    index = tuple(int(x) for x in np.unravel_index(i, a.shape))
    return bad, index, delta


class _OffByOneRng:
    """ckfmha.rng as one backend sees it, with the keep threshold off by one (keep iff randval <= t - 1)."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def dropout_keep(self, randval, p_drop):
        return randval <= np.uint8(self._real.p_undrop_u8(p_drop) - 1)


@contextlib.contextmanager
def dropout_threshold_off_by_one():
    """Inside: every ckfmha backend keeps ``randval <= p_undrop_u8(p) - 1`` (cpu: its engine's binding of
    ckfmha.rng; triton: the threshold each of its launchers -- forward and backward -- passes to the kernels); the
    references are untouched."""
    from ckfmha.backends.cpu import engine

    real_rng = engine.rng
    engine.rng = _OffByOneRng(real_rng)
    launchers = []
    try:  # imports torch and triton: only where they are installed
        from ckfmha.backends.triton import device

        launchers = [device]  # device.dropout_args: the threshold of the forward's and the backward's launchers
    except ImportError:
        pass
    real = {m: m.p_undrop_u8 for m in launchers}
    for m in launchers:
        m.p_undrop_u8 = lambda p_drop, _real=real[m]: _real(p_drop) - 1
    try:
        yield
    finally:
        engine.rng = real_rng
        for m in launchers:
            m.p_undrop_u8 = real[m]


# ------------------------------------------------------------------------------------------ rows
def _by_output(r: SideResult, key: str) -> dict:
    return {n: c.get(key) for n, c in r.checks.items()}


def _all(r: SideResult, key: str):
    v = [c.get(key) for c in r.checks.values()]
    return all(bool(x) for x in v) if v else None


def row_of(side_name: str, p: Problem, r: SideResult) -> dict:
    return {
        "backend": side_name,
        "problem": str(p),
        "family": p.family.value,
        "dtype": p.dtype.value,
        "mask": p.mask.to_ck(),
        "gqa": p.nhead_q != p.nhead_k,
        "verdict": r.verdict.value,
        "rule": r.rule.value if r.rule else None,
        "noise_passed": _all(r, "noise_passed"),
        "tensor_noise_passed": _all(r, "tensor_noise_passed"),
        "elementwise_passed": _all(r, "elementwise_passed"),
        "error_ratio": _by_output(r, "error_ratio"),
        "tensor_error_ratio": _by_output(r, "tensor_error_ratio"),
        "err_vs_truth": _by_output(r, "err_vs_truth"),
        "ref_err_vs_truth": _by_output(r, "ref_err_vs_truth"),
        "reason": r.reason,
        "notes": r.notes,
        "checks": r.checks,
        "torch_seconds": r.fields.get("seconds"),
    }


def _ratios(r: SideResult) -> str:
    return " ".join(
        f"{n}:{'-' if c.get('error_ratio') is None else format(c['error_ratio'], '.2f')}" for n, c in r.checks.items()
    )


def _flag(v) -> str:
    return "-" if v is None else ("pass" if v else "FAIL")


def _injected_row(
    kind: str, side_name: str, p: Problem, verdict: Verdict, words: str, checks: dict, extra: dict
) -> dict:
    """One injected run: caught iff its verdict is ran_invalid (an error or a skip is not a catch)."""
    return {
        "inject": kind,
        "backend": side_name,
        "problem": str(p),
        "family": p.family.value,
        "dtype": p.dtype.value,
        **extra,
        "verdict": verdict.value,
        "caught": verdict is Verdict.RAN_INVALID,
        "noise_passed": all(c["noise_passed"] for c in checks.values()),
        "tensor_noise_passed": all(c.get("tensor_noise_passed", c["noise_passed"]) for c in checks.values()),
        "elementwise_passed": all(c["elementwise_passed"] for c in checks.values()),
        "error_ratio": {n: c["error_ratio"] for n, c in checks.items()},
        "tensor_error_ratio": {n: c.get("tensor_error_ratio") for n, c in checks.items()},
        "words": words,
    }


#: the rules a catch summary and the clean counts are reported for: (key, the row key of its pass flag, words)
RULES = (
    ("row_noise_floor", "noise_passed", "per-row noise floor (decides the torch sides)"),
    ("tensor_noise_floor", "tensor_noise_passed", "tensor-wide noise floor (FlashAttention)"),
    ("elementwise", "elementwise_passed", "CK's elementwise tolerance"),
)


def catch_summary(kind: str, injected: list[dict], not_injected: list[str] = ()) -> dict:
    """Counts over the injected rows: caught (verdict ran_invalid), and what each rule alone would have caught
    (``caught_by_rule``, per :data:`RULES`; ``caught_by_noise_floor`` is the deciding per-row rule's);
    ``not_injected`` names the runs where no bug could be injected (side did not run, all-zero tensor)."""
    n = len(injected)
    caught = sum(1 for r in injected if r["caught"])
    by_rule = {key: sum(1 for r in injected if r.get(flag) is False) for key, flag, _ in RULES}
    return {
        "inject": kind,
        "rows": n,
        "caught": caught,
        "not_injected": list(not_injected),
        "caught_by_rule": by_rule,
        "caught_by_noise_floor": by_rule["row_noise_floor"],
        "caught_elementwise": by_rule["elementwise"],
        "missed": [f"{r['backend']} {r['problem']} {r.get('tensor', '')}".strip() for r in injected if not r["caught"]],
        "line": f"injected bug caught in {caught} of {n} rows ({kind})",
    }


def new_counts() -> dict[str, int]:
    """One backend's clean-row counts: per verdict, and per rule of :data:`RULES` the rows it alone would have
    failed (``row_noise_floor_invalid``, ``tensor_noise_floor_invalid``, ``elementwise_invalid``)."""
    c = {v: 0 for v in ("ran_valid", "ran_invalid", "skipped", "error", "unsupported")}
    c.update({f"{key}_invalid": 0 for key, _, _ in RULES})
    return c


def count_row(counts: dict[str, int], row: dict) -> None:
    counts[row["verdict"]] += 1
    for key, flag, _ in RULES:
        if row.get(flag) is False:
            counts[f"{key}_invalid"] += 1


def rule_lines(counts: dict, summary: dict | None) -> list[str]:
    """Per rule of :data:`RULES`: the clean rows it fails (over every backend) and, with an injection, the injected
    bugs it catches -- the figures that compare the rules."""
    total = sum(c["ran_valid"] + c["ran_invalid"] for c in counts.values())
    lines = []
    for key, _, words in RULES:
        failed = sum(c[f"{key}_invalid"] for c in counts.values())
        line = f"  {words}: clean rows invalid {failed} of {total}"
        if summary is not None:
            line += f"; injected bug caught in {summary['caught_by_rule'][key]} of {summary['rows']}"
        lines.append(line)
    return lines


# ------------------------------------------------------------------------------------------ modes
def run_torch_sweep(args, backends: list[str], inject: str | None) -> tuple[list, dict, list, list]:
    from ckfmha.upstream.torch_sdpa import TorchSide

    problems = sweep(args.quick)
    rows, counts, injected, not_injected = [], {}, [], []
    sides = {b: TorchSide(b, device=args.device) for b in backends}
    for b in backends:
        counts[b] = new_counts()
    # problem-major, so each problem's inputs and references are made once (the caches keep the latest two)
    for p in problems:
        for b, side in sides.items():
            t0 = time.perf_counter()
            r = side.run(p, args.seed)
            row = row_of(b, p, r)
            count_row(counts[b], row)
            row["row_seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(
                f"{b:9s} {r.verdict.value:11s} noise {_flag(row['noise_passed']):4s} "
                f"elementwise {_flag(row['elementwise_passed']):4s} ratio {_ratios(r):28s} {p}",
                flush=True,
            )
            if inject == "grad-element" and p.is_backward and r.verdict.ran:
                truth, _ = noise_references(p, args.seed)
                for g in (n for n in GRADIENTS if n in r.outputs):
                    magnitude = float(np.max(np.abs(np.nan_to_num(truth[g])))) if truth[g].size else 0.0
                    bad, index, delta = inject_grad_element(r.outputs, g, magnitude, args.grad_fraction)
                    if delta == 0:  # an all-zero gradient (e.g. one query seeing one key): no bug to inject
                        not_injected.append(f"{b} {p} {g}: the gradient is 0")
                        continue
                    # only the injected tensor changed: it alone is judged (the clean row holds the others)
                    j = judge(p, args.seed, bad, [g], r.rule)
                    injected.append(
                        _injected_row(
                            inject,
                            b,
                            p,
                            j.verdict,
                            j.words,
                            j.checks,
                            {"rule": j.rule.value, "tensor": g, "index": list(index), "delta": delta},
                        )
                    )
                    ratio = j.checks[g]["error_ratio"]
                    print(
                        f"  injected {g}{list(index)} += {delta:.3g}: {j.verdict.value} (noise "
                        f"{_flag(j.checks[g]['noise_passed'])}, ratio {'-' if ratio is None else f'{ratio:.2f}'})",
                        flush=True,
                    )
    return rows, counts, injected, not_injected


def run_dropout_injection(args) -> tuple[list, dict, list, list]:
    from ckfmha.upstream.ckfmha_side import CkfmhaSide

    sides, seen = [], set()
    for spec in (s.strip() for s in args.ckfmha_backends.split(",") if s.strip()):
        side = CkfmhaSide(spec, arch=args.ckfmha_arch)
        if side.name not in seen:  # auto may resolve to a backend listed too
            seen.add(side.name)
            sides.append(side)
    rows, counts, injected, not_injected = [], {}, [], []
    for side in sides:
        counts[side.name] = new_counts()
    for p in dropout_sweep():
        for side in sides:
            clean = side.run(p, args.seed)
            row = row_of(side.name, p, clean)
            count_row(counts[side.name], row)
            rows.append(row)
            if not clean.verdict.ran:
                not_injected.append(f"{side.name} {p}: {clean.verdict.value}")
                print(f"{side.name:12s} {clean.verdict.value:11s} (not injected) {p}: {clean.reason[:100]}", flush=True)
                continue
            with dropout_threshold_off_by_one():
                bad = side.run(p, args.seed)
            injected.append(
                _injected_row(
                    "dropout-threshold",
                    side.name,
                    p,
                    bad.verdict,
                    bad.reason,
                    bad.checks,
                    {"rule": bad.rule.value if bad.rule else None, "threshold": "randval <= p_undrop_u8(p_drop) - 1"},
                )
            )
            print(
                f"{side.name:12s} clean {clean.verdict.value:11s} injected {bad.verdict.value:11s} "
                f"noise {_flag(_all(bad, 'noise_passed'))} elementwise {_flag(_all(bad, 'elementwise_passed'))} "
                f"ratio {_ratios(bad)} {p}",
                flush=True,
            )
    return rows, counts, injected, not_injected


def _floor_dict(f) -> dict:
    return {"k": f.k, "atol": f.atol, "granularity": f.granularity.value, "magnitude_floor": f.magnitude_floor}


def worst_ratios(rows: list[dict]) -> dict:
    """Per backend and direction (fwd / bwd): the largest error ratio over the rows that ran."""
    out: dict = {}
    for r in rows:
        if r["verdict"] not in ("ran_valid", "ran_invalid"):
            continue
        direction = "bwd" if r["family"].startswith("bwd") else "fwd"
        for n, v in (r.get("error_ratio") or {}).items():
            if v is None:
                continue
            cur = out.setdefault(r["backend"], {}).setdefault(direction, {"ratio": 0.0, "output": "", "problem": ""})
            if v > cur["ratio"]:
                cur.update(ratio=v, output=n, problem=r["problem"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="output JSON path")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--quick", action="store_true", help="two shapes instead of five")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="default: the GPU (cpu only for checking the script)")
    ap.add_argument("--inject", choices=INJECTIONS, default=None, help="run with an injected bug (see the doc)")
    ap.add_argument(
        "--grad-fraction",
        type=float,
        default=GRAD_ELEMENT_FRACTION,
        help="grad-element: the injected error as a fraction of the tensor's max |value| (default 0.01)",
    )
    ap.add_argument(
        "--ckfmha-backends",
        default="auto,cpu",
        help="dropout-threshold: the ckfmha backends the dropout problems run on (default auto,cpu)",
    )
    ap.add_argument(
        "--ckfmha-arch",
        default="gfx942",
        help="dropout-threshold: the kernel space of the ckfmha side (default gfx942; sm90 has no dropout kernels)",
    )
    args = ap.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        ap.error(f"--backends: {', '.join(unknown)} unknown; allowed: {', '.join(BACKENDS)}")
    if not (np.isfinite(args.grad_fraction) and 0 < args.grad_fraction <= 1):
        ap.error(f"--grad-fraction: {args.grad_fraction!r} must be a number in (0, 1]")
    from ckfmha.upstream.torch_sdpa import gpu_status

    ok, gpu = gpu_status()
    if not ok and args.device is None and args.inject != "dropout-threshold":
        sys.stderr.write(f"parity_torch: {gpu}\n")
        return 2
    t_all = time.perf_counter()
    if args.inject == "dropout-threshold":
        rows, counts, injected, not_injected = run_dropout_injection(args)
    else:
        rows, counts, injected, not_injected = run_torch_sweep(args, backends, args.inject)
    env = {"gpu": gpu if ok else args.device, "python": platform.python_version(), "seed": args.seed}
    try:
        import torch

        env.update(
            torch=torch.__version__, cuda=getattr(torch.version, "cuda", None), hip=getattr(torch.version, "hip", None)
        )
    except ImportError:
        env["torch"] = None
    from ckfmha.validator import DECIDING_GRANULARITY, Granularity, noise_floor_for

    floors = {
        g.value: {d: _floor_dict(noise_floor_for(d == "backward", granularity=g)) for d in ("forward", "backward")}
        for g in Granularity
    }
    deciding = floors[DECIDING_GRANULARITY.value]
    report = {
        "tool": "benchmarks/parity_torch.py",
        "reference": "ckfmha NumPy reference: float32 accumulation (elementwise rule, CK's tolerances) and "
        "float64 ground truth with the same-precision reference (noise-floor rule); "
        "ckfmha/data/tolerances.yaml",
        "noise_floor": floors,
        "noise_floor_decides": DECIDING_GRANULARITY.value,
        "environment": env,
        "inject": args.inject,
        "seconds": time.perf_counter() - t_all,
        "counts": counts,
        "worst_error_ratio": worst_ratios(rows),
        "rows": rows,
    }
    summary = None
    if args.inject:
        summary = catch_summary(args.inject, injected, not_injected)
        if args.inject == "grad-element":
            summary["grad_fraction"] = args.grad_fraction
        report["injection"] = summary
        report["injected_rows"] = injected
    Path(args.report).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps(counts, indent=1))
    print(
        f"worst error ratio of the deciding {DECIDING_GRANULARITY.value} noise floor (err / ref_err of the worst "
        f"{DECIDING_GRANULARITY.value}), k: fwd {deciding['forward']['k']:g}, bwd {deciding['backward']['k']:g}"
    )
    for b, per in report["worst_error_ratio"].items():
        print(
            "  "
            + b
            + ": "
            + ", ".join(f"{d} {v['ratio']:.2f} ({v['output']}, {v['problem']})" for d, v in sorted(per.items()))
        )
    bad = sum(c["ran_invalid"] + c["error"] for c in counts.values())
    print("per rule (clean rows: ran_valid + ran_invalid of every backend):")
    print("\n".join(rule_lines(counts, summary)))
    if summary is not None:
        print(
            summary["line"] + f"; per-row noise floor alone: {summary['caught_by_noise_floor']}, tensor-wide "
            f"noise floor alone: {summary['caught_by_rule']['tensor_noise_floor']}, CK's elementwise "
            f"tolerance alone: {summary['caught_elementwise']}"
        )
        for m in summary["missed"]:
            print(f"  MISSED {m}")
        if not_injected:
            print(f"  not injected ({len(not_injected)}): " + "; ".join(not_injected))
        if summary["caught"] < summary["rows"] or summary["rows"] == 0:
            return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
