"""The report of a forward benchmark run (benchmarks/bench_fwd.py): markdown tables with ratios, the target
verdict per row and the counts. Imports nothing heavy, so a saved run renders anywhere:

    python benchmarks/fwd_report.py benchmarks/results/bench_fwd_h200.json
"""

from __future__ import annotations

import json
import sys


def render(doc: dict) -> tuple[str, bool]:
    """The report (markdown tables with ratios and target verdicts, then the counts) of a run's JSON document."""
    out = [
        f"# device {doc['device']}, torch {doc['torch']}, triton {doc['triton']}, "
        f"measured copy bandwidth {doc['copy_gbps']:.0f} GB/s",
        "# do_bench medians; TFLOPS = 4*b*h*area*d (causal area exact); targets: >=1.3x SDPA-flash every row, "
        ">=0.9x cuDNN at d128 s>=4k, decode >=70% of copy bandwidth",
        "",
        "| dtype | hdim | seqlen | causal | kernel tile | ours TFLOPS | SDPA-flash | cuDNN | x flash | x cuDNN "
        "| targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    flash_met = cudnn_met = cudnn_rows = 0
    ok_all = True
    for r in doc["prefill"]:
        t_flash = r["vs_flash"] >= 1.3
        t_cudnn = r["vs_cudnn"] >= 0.9 if (r["hdim"] == 128 and r["seqlen"] >= 4096) else None
        flash_met += t_flash
        cudnn_rows += t_cudnn is not None
        cudnn_met += bool(t_cudnn)
        ok = t_flash and (t_cudnn is not False)
        ok_all &= ok
        tile = next((tok[1:] for tok in r["kernel"].split(".") if tok.startswith("b") and "x" in tok), "?")
        out.append(
            f"| {r['dtype']} | {r['hdim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | {tile} | "
            f"{r['tflops']:.1f} | {r['flash_tflops']:.1f} | {r['cudnn_tflops']:.1f} | {r['vs_flash']:.2f} | "
            f"{r['vs_cudnn']:.2f} | {'PASS' if ok else 'FAIL'} |"
        )
    out += [
        "",
        "| batch | hq/hk | seqlen_k | splits | GB/s | % of copy | target 70% |",
        "|---|---|---|---|---|---|---|",
    ]
    dec_met = 0
    for r in doc["decode"]:
        ok = r["fraction"] >= 0.7
        dec_met += ok
        ok_all &= ok
        out.append(
            f"| {r['batch']} | {r['nhead_q']}/{r['nhead_k']} | {r['seqlen_k']} | {r['num_splits']} | "
            f"{r['gbps']:.0f} | {r['fraction']:.0%} | {'PASS' if ok else 'FAIL'} |"
        )
    out += [
        "",
        f">=1.3x SDPA-flash: {flash_met}/{len(doc['prefill'])} rows; >=0.9x cuDNN (d128, s>=4k): "
        f"{cudnn_met}/{cudnn_rows} rows; decode >=70% of copy: {dec_met}/{len(doc['decode'])} rows; "
        f"all targets {'met' if ok_all else 'NOT met'}",
    ]
    return "\n".join(out), ok_all


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/fwd_report.py RUN.json", file=sys.stderr)
        return 2
    with open(argv[0]) as fh:
        text, ok = render(json.load(fh))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
