"""One attention launch to profile with Nsight Compute (ncu): ckfmha's Triton kernel or SDPA's cuDNN / flash.

The script warms the target up (compile, autotune, caches), then runs it once more inside the NVTX range
``profile``; ncu profiles only the kernels in that range:

    ncu --nvtx --nvtx-include "profile/" --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section LaunchStats \
        python3 benchmarks/profile_attn.py fwd ours --hdim 128 --seqlen 4096

Shapes as bench_fwd / bench_bwd: 32k tokens (batch = 32768 / seqlen), heads x hdim = 2048, random normal inputs.
``bwd`` profiles the backward only (our plan's three stages; SDPA's autograd backward of one saved forward).

Usage (GPU machine): python benchmarks/profile_attn.py {fwd,bwd} {ours,cudnn,flash} [--dtype fp16|bf16]
[--hdim N] [--seqlen N] [--causal]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from bench_fwd import HEAD_SIZE, TOKENS
from torch.nn.attention import SDPBackend, sdpa_kernel

from ckfmha.problem import Problem

SDPA = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
TDT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def ours(direction: str, p: Problem, t: dict):
    """A callable running our plan (the forward kernel, or the backward's three stages) on ``t``."""
    from ckfmha.backends import get_backend
    from ckfmha.backends.triton.launch import attention_launcher
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.registry import Registry

    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    disp = Dispatcher(reg, get_backend("triton"), num_cus=torch.cuda.get_device_properties(0).multi_processor_count)
    fwd = p.replace(family="fwd", lse=True)
    stage = disp.select(fwd).stages[0]
    launch_fwd = attention_launcher(stage.kernel, fwd, t, variant=stage.launch.variant)  # the plan's launch variant
    if direction == "fwd":
        print("kernel", disp.select(fwd).stages[0].kernel.kernel_id, flush=True)
        return launch_fwd
    from ckfmha.backends.triton.launch_bwd import stage_launcher

    launch_fwd()
    plan = disp.select(p)
    print("kernels", " -> ".join(st.kernel.kernel_id for st in plan.stages), flush=True)
    launches = [stage_launcher(st.kernel, p, t) for st in plan.stages]

    def run() -> None:
        for launch in launches:
            launch()

    return run


def sdpa(direction: str, backend, t: dict, causal: bool):
    """A callable running SDPA's forward (or the backward of one saved forward) with one backend."""
    q, k, v, do = t["q"], t["k"], t["v"], t["do"]
    if direction == "fwd":

        def run_fwd() -> None:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run_fwd
    with sdpa_kernel([backend]):
        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)

    def run_bwd() -> None:
        torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)

    return run_bwd


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("direction", choices=("fwd", "bwd"))
    ap.add_argument("target", choices=("ours", *SDPA))
    ap.add_argument("--dtype", choices=tuple(TDT), default="fp16")
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    s, d = a.seqlen, a.hdim
    b, h = TOKENS // s, HEAD_SIZE // d
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=TDT[a.dtype]) for _ in range(4))
    t = {"q": q, "k": k, "v": v, "do": do, "o": torch.empty_like(q)}
    t["lse"] = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    p = Problem(
        family="bwd", dtype=a.dtype, batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b" if a.causal else "0"
    )
    run = ours(a.direction, p, t) if a.target == "ours" else sdpa(a.direction, SDPA[a.target], t, a.causal)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profile")
    run()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    print(f"profiled {a.direction} {a.target} {a.dtype} d{d} s{s} b{b} h{h} {'causal' if a.causal else 'full'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
