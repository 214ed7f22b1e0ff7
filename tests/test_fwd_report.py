"""benchmarks/fwd_report.py: the forward benchmark's verdicts and counts from a run's JSON (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fwd_report", ROOT / "benchmarks" / "fwd_report.py")
fwd_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fwd_report)


def prefill(hdim: int, seqlen: int, ours: float, flash: float, cudnn: float) -> dict:
    return dict(
        dtype="fp16",
        hdim=hdim,
        seqlen=seqlen,
        causal=False,
        tflops=ours,
        flash_tflops=flash,
        cudnn_tflops=cudnn,
        vs_flash=ours / flash,
        vs_cudnn=ours / cudnn,
        kernel=f"fwd.fp16.batch.d{hdim}x{hdim}.triton.b128x64.r8x1x1-8x1x1.w.p0000.o-1.sm90.stages=2",
    )


def doc(rows: list, fraction: float = 0.8) -> dict:
    return dict(
        device="GPU",
        torch="t",
        triton="tr",
        copy_gbps=4000.0,
        prefill=rows,
        decode=[
            dict(batch=1, nhead_q=8, nhead_k=2, seqlen_k=4096, num_splits=2, gbps=4000 * fraction, fraction=fraction)
        ],
    )


def test_verdicts_and_counts() -> None:
    text, ok = fwd_report.render(
        doc(
            [
                prefill(64, 1024, 400, 300, 500),  # 1.33x flash; 0.80x cuDNN at d64 (target 1.0): FAIL
                prefill(128, 4096, 400, 300, 500),  # 0.80x cuDNN at d128 s4k: FAIL
                prefill(128, 1024, 380, 300, 500),  # 1.27x flash: FAIL; no cuDNN target below 4k
                prefill(256, 1024, 460, 300, 500),  # 0.92x cuDNN at d256 non-causal (target 0.9): PASS
            ]
        )
    )
    assert not ok
    assert "| 64 | 1024 | no | 128x64 | 400.0 | 300.0 | 500.0 | 1.33 | 0.80 | 1.00 | FAIL |" in text
    assert "| 128 | 4096 | no | 128x64 | 400.0 | 300.0 | 500.0 | 1.33 | 0.80 | 1.00 | FAIL |" in text
    assert "| 128 | 1024 | no | 128x64 | 380.0 | 300.0 | 500.0 | 1.27 | 0.76 | - | FAIL |" in text
    assert "| 256 | 1024 | no | 128x64 | 460.0 | 300.0 | 500.0 | 1.53 | 0.92 | 0.90 | PASS |" in text
    assert ">=1.3x SDPA-flash: 3/4 rows; cuDNN targets: 1/3 rows; decode >=70% of copy: 1/1" in text
    assert fwd_report.render(doc([prefill(128, 4096, 500, 300, 500)]))[1]
    assert not fwd_report.render(doc([prefill(128, 4096, 495, 300, 500)]))[1]  # 0.99x cuDNN at d128 s4k
    assert not fwd_report.render(doc([prefill(128, 4096, 500, 300, 500)], fraction=0.69))[1]


def test_cudnn_targets_follow_the_issue() -> None:
    row = dict(hdim=256, causal=True, seqlen=1024)
    assert fwd_report.cudnn_target(row) == 0.85
    assert fwd_report.cudnn_target({**row, "causal": False}) == 0.9
    assert fwd_report.cudnn_target({**row, "hdim": 128}) is None
    assert fwd_report.cudnn_target({**row, "hdim": 128, "seqlen": 4096}) == 1.0
    assert fwd_report.cudnn_target({**row, "hdim": 64, "seqlen": 1024}) == 1.0


def test_committed_h200_run_renders_its_own_ratios() -> None:
    run = json.loads((ROOT / "benchmarks" / "results" / "bench_fwd_h200.json").read_text())
    text, _ = fwd_report.render(run)
    met = sum(r["tflops"] / r["flash_tflops"] >= 1.3 for r in run["prefill"])
    assert f">=1.3x SDPA-flash: {met}/{len(run['prefill'])} rows" in text
    assert len([ln for ln in text.splitlines() if ln.startswith("| bf16") or ln.startswith("| fp16")]) == 48
