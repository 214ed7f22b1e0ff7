"""Forward speed on the GPU: the dispatcher-selected Triton kernel against PyTorch SDPA (flash, cuDNN).

Prefill grid: bf16 and fp16; hdim 64/128/256; seqlen 1k/4k/8k/16k; batch x seqlen = 32k tokens;
heads x hdim = 2048; causal and not. TFLOPS use CK's formula (4 * b * h * unmasked area * hdim; causal area
counted exactly). All timings are `triton.testing.do_bench` medians in one process and run.
Targets (issue 6): >= 1.3x SDPA-flash on every row; >= 0.9x cuDNN at hdim 128, seqlen >= 4k.

Decode grid: seqlen_q = 1, paged K/V (page 128) through split-KV + combine; GB/s over the bytes that must move
(K/V cache read once, Q read, O written), against the device's measured copy bandwidth. Target >= 70%.

Usage (on the GPU machine): python benchmarks/bench_fwd.py [--quick] [--json PATH]
The report of a saved run, anywhere: python benchmarks/fwd_report.py benchmarks/results/bench_fwd_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
import triton
from fwd_report import render
from torch.nn.attention import SDPBackend, sdpa_kernel

from ckfmha.backends.triton.launch import attention_launcher, combine_launcher
from ckfmha.dispatcher import Dispatcher
from ckfmha.problem import Problem
from ckfmha.registry import Registry

TOKENS = 32 * 1024
HEAD_SIZE = 2048


def flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    area = s * (s + 1) // 2 if causal else s * s
    return 4.0 * b * h * area * d


def bench(fn, reps_ms: int = 200) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=reps_ms, return_mode="median"))


def measure_copy_bandwidth() -> float:
    n = 1 << 30  # 1 GiB of bf16 elements -> 2 GiB per tensor
    a = torch.randn(n // 2, device="cuda", dtype=torch.float32).to(torch.bfloat16).repeat(2)
    b = torch.empty_like(a)
    ms = bench(lambda: b.copy_(a))
    return 2 * a.numel() * a.element_size() / (ms * 1e-3) / 1e9


def prefill_rows(disp: Dispatcher, quick: bool) -> list[dict]:
    rows = []
    dtypes = ["bf16", "fp16"]
    hdims = [64, 128, 256]
    seqs = [1024, 4096, 8192, 16384]
    if quick:
        dtypes, hdims, seqs = ["fp16"], [128], [4096, 16384]
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dt in dtypes:
        for d in hdims:
            for s in seqs:
                for causal in (False, True):
                    b, h = TOKENS // s, HEAD_SIZE // d
                    p = Problem(
                        dtype=dt, batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b" if causal else "0"
                    )
                    plan = disp.select(p)
                    cfg = plan.stages[0].kernel
                    torch.manual_seed(0)
                    q = torch.randn(b, h, s, d, device="cuda", dtype=tdt[dt])
                    k = torch.randn_like(q)
                    v = torch.randn_like(q)
                    o = torch.full_like(q, float("nan"))
                    launch = attention_launcher(cfg, p, {"q": q, "k": k, "v": v, "o": o})
                    launch()
                    torch.cuda.synchronize()
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                    ms_ours = bench(launch)
                    out = {}
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel([be]):

                                def fn(q=q, k=k, v=v, c=causal):
                                    return F.scaled_dot_product_attention(q, k, v, is_causal=c)

                                fn()
                                out[name] = bench(fn)
                        except RuntimeError as e:  # backend cannot run this shape
                            out[name] = float("nan")
                            print(f"  {name} unavailable for {dt} d{d} s{s}: {str(e)[:80]}", file=sys.stderr)
                    fl = flops(b, h, s, d, causal)
                    row = dict(
                        dtype=dt,
                        hdim=d,
                        seqlen=s,
                        batch=b,
                        heads=h,
                        causal=causal,
                        kernel=cfg.kernel_id,
                        rel_err=err,
                        ms=ms_ours,
                        tflops=fl / ms_ours / 1e9,
                        flash_tflops=fl / out["flash"] / 1e9,
                        cudnn_tflops=fl / out["cudnn"] / 1e9,
                    )
                    row["vs_flash"] = row["tflops"] / row["flash_tflops"]
                    row["vs_cudnn"] = row["tflops"] / row["cudnn_tflops"]
                    rows.append(row)
                    print(
                        f"{dt} d{d:<3} s{s:<5} {'causal' if causal else 'full  '} ours {row['tflops']:6.1f} "
                        f"flash {row['flash_tflops']:6.1f} cudnn {row['cudnn_tflops']:6.1f} "
                        f"x{row['vs_flash']:.2f}/x{row['vs_cudnn']:.2f} err {err:.1e}",
                        flush=True,
                    )
    return rows


def decode_rows(disp: Dispatcher, copy_gbps: float, quick: bool) -> list[dict]:
    rows = []
    cases = [(32, 32, 8, 8192), (64, 32, 8, 16384), (16, 32, 32, 32768), (128, 16, 2, 4096)]
    if quick:
        cases = cases[:2]
    for b, hq, hk, sk in cases:
        d = 128
        page = 128
        p = Problem(
            family="fwd_splitkv",
            dtype="bf16",
            batch=b,
            nhead_q=hq,
            nhead_k=hk,
            seqlen_q=1,
            seqlen_k=sk,
            hdim_q=d,
            page_block_size=page,
            num_splits=2,
        )
        # splits from the dispatcher's decode heuristic (memory-bound: fill the GPU with loads in flight)
        from ckfmha.dispatcher import decode_num_splits

        n = max(2, decode_num_splits(b, hk, sk, 128, disp.num_cus))
        p = p.replace(num_splits=n)
        plan = disp.select(p)
        split, comb = plan.stages
        npages = b * (sk // page)
        kc = torch.randn(npages, hk, page, d, device="cuda", dtype=torch.bfloat16)
        vc = torch.randn_like(kc)
        bt = torch.randperm(npages, device="cuda", dtype=torch.int32).reshape(b, sk // page)
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        t = {
            "q": q,
            "k_cache": kc,
            "v_cache": vc,
            "block_table": bt,
            "cache_seqlens": torch.full((b,), sk, device="cuda", dtype=torch.int32),
            "o": torch.empty(b, hq, 1, d, device="cuda", dtype=torch.bfloat16),
            "o_acc": torch.empty(n, b, hq, 1, d, device="cuda", dtype=torch.float32),
            "lse_acc": torch.empty(n, b, hq, 1, device="cuda", dtype=torch.float32),
        }
        l1 = attention_launcher(split.kernel, p, t, split=True, num_splits=n)
        l2 = combine_launcher(comb.kernel, p, t, n)

        def both(l1=l1, l2=l2):
            l1()
            l2()

        both()
        torch.cuda.synchronize()
        # check against SDPA on the gathered cache
        kg = kc[bt.long()].permute(0, 2, 1, 3, 4).reshape(b, hk, sk, d)
        vg = vc[bt.long()].permute(0, 2, 1, 3, 4).reshape(b, hk, sk, d)
        ref = F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True)
        err = ((t["o"].float() - ref.float()).norm() / ref.float().norm()).item()
        ms = bench(both)
        nbytes = (kc.numel() + vc.numel()) * 2 + q.numel() * 2 * 2
        gbps = nbytes / (ms * 1e-3) / 1e9
        row = dict(
            batch=b,
            nhead_q=hq,
            nhead_k=hk,
            seqlen_k=sk,
            num_splits=n,
            kernel=split.kernel.kernel_id,
            ms=ms,
            gbps=gbps,
            copy_gbps=copy_gbps,
            fraction=gbps / copy_gbps,
            rel_err=err,
        )
        rows.append(row)
        print(
            f"decode b{b} hq{hq} hk{hk} sk{sk} splits {n}: {gbps:7.0f} GB/s = {row['fraction']:.0%} of copy "
            f"({ms:.3f} ms) err {err:.1e}",
            flush=True,
        )
        del kc, vc
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="write the run's rows here")
    args = ap.parse_args()
    t0 = time.time()
    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    from ckfmha.backends import get_backend

    disp = Dispatcher(reg, get_backend("triton"), num_cus=torch.cuda.get_device_properties(0).multi_processor_count)
    copy = measure_copy_bandwidth()
    print(
        f"device {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}  "
        f"copy bandwidth {copy:.0f} GB/s",
        flush=True,
    )
    pre = prefill_rows(disp, args.quick)
    dec = decode_rows(disp, copy, args.quick)
    doc = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gbps": copy,
        "prefill": pre,
        "decode": dec,
    }
    text, _ = render(doc)
    print("\n" + text + f"\n({time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
