"""Forward speed on the GPU: the dispatcher-selected Triton kernel against PyTorch SDPA (flash, cuDNN).

Prefill grid: bf16 and fp16; hdim 64/128/256; seqlen 1k/4k/8k/16k; batch x seqlen = 32k tokens;
heads x hdim = 2048; causal and not. TFLOPS use CK's formula (4 * b * h * unmasked area * hdim; causal area
counted exactly). All timings are `triton.testing.do_bench` medians in one process and run.
Targets (issue 6): >= 1.3x SDPA-flash on every row; >= 0.9x cuDNN at hdim 128, seqlen >= 4k.

Decode grid: seqlen_q = 1, paged K/V (page 128) through split-KV + combine; GB/s over the bytes that must move
(K/V cache read once, Q read, O written), against the device's measured copy bandwidth. Target >= 70%.

KV cache (--kvcache, issue 14): append-KV decode (append + RoPE -> split-KV -> combine) in GB/s against the copy
bandwidth (target >= 70%); batch prefill (paged K/V, both tables and layouts) in TFLOPS against SDPA-flash on the
K/V gathered from the same pages (target >= 1.0x).

Usage (on the GPU machine): python benchmarks/bench_fwd.py [--quick] [--kvcache] [--json PATH]
The report of a saved run, anywhere: python benchmarks/fwd_report.py benchmarks/results/bench_fwd_h200.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton
from fwd_report import render
from torch.nn.attention import SDPBackend, sdpa_kernel

from ckfmha.backends.triton.launch import LaunchShape, attention_launcher, combine_launcher
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
                    variant = plan.stages[0].launch.variant  # the plan's launch variants
                    launch = attention_launcher(cfg, p, {"q": q, "k": k, "v": v, "o": o}, variant=variant)
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


#: the decode grid's (batch, nhead_q, nhead_k, seqlen_k); hdim and page 128 (tune_fwd.py times the first three)
DECODE_CASES = ((32, 32, 8, 8192), (64, 32, 8, 16384), (16, 32, 32, 32768), (128, 16, 2, 4096))


def decode_problem(b: int, hq: int, hk: int, sk: int, num_splits: int, d: int = 128, page: int = 128) -> Problem:
    """A decode problem: one bf16 query row per sequence over a paged K/V cache of ``sk`` keys, split-KV."""
    return Problem(
        family="fwd_splitkv",
        dtype="bf16",
        batch=b,
        nhead_q=hq,
        nhead_k=hk,
        seqlen_q=1,
        seqlen_k=sk,
        hdim_q=d,
        page_block_size=page,
        num_splits=num_splits,
    )


def decode_inputs(b: int, hq: int, hk: int, sk: int, d: int = 128, page: int = 128) -> dict[str, torch.Tensor]:
    """A decode problem's inputs: a random bf16 K/V cache in pages of ``page`` keys (a random block table), every
    sequence ``sk`` keys long, and its query row."""
    npages = b * (sk // page)
    kc = torch.randn(npages, hk, page, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    bt = torch.randperm(npages, device="cuda", dtype=torch.int32).reshape(b, sk // page)
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    return {
        "q": q,
        "k_cache": kc,
        "v_cache": vc,
        "block_table": bt,
        "cache_seqlens": torch.full((b,), sk, device="cuda", dtype=torch.int32),
    }


def split_decode(
    split, combine, p: Problem, inputs: dict[str, torch.Tensor], n: int, variant
) -> tuple[Callable[[], None], dict[str, torch.Tensor]]:
    """(launch, tensors): the ``split`` kernel over ``n`` splits then the ``combine`` kernel, on ``inputs``
    (:func:`decode_inputs`) and fresh outputs (o, and the splits' o_acc / lse_acc) -- the tensors'."""
    b, hq, _, d = inputs["q"].shape
    t = {
        **inputs,
        "o": torch.empty(b, hq, 1, d, device="cuda", dtype=torch.bfloat16),
        "o_acc": torch.empty(n, b, hq, 1, d, device="cuda", dtype=torch.float32),
        "lse_acc": torch.empty(n, b, hq, 1, device="cuda", dtype=torch.float32),
    }
    l1 = attention_launcher(split, p, t, split=True, num_splits=n, variant=variant)
    l2 = combine_launcher(combine, p, t, n)

    def both() -> None:
        l1()
        l2()

    return both, t


def decode_rows(disp: Dispatcher, copy_gbps: float, quick: bool) -> list[dict]:
    rows = []
    cases = DECODE_CASES[:2] if quick else DECODE_CASES
    for b, hq, hk, sk in cases:
        d = 128
        page = 128
        p = decode_problem(b, hq, hk, sk, 2, d, page)
        # splits from the dispatcher's decode heuristic (memory-bound: fill the GPU with loads in flight)
        from ckfmha.dispatcher import decode_num_splits

        n = max(2, decode_num_splits(b, hk, sk, 128, disp.num_cus))
        p = p.replace(num_splits=n)
        plan = disp.select(p)
        split, comb = plan.stages
        inputs = decode_inputs(b, hq, hk, sk, d, page)
        q, kc, vc, bt = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["block_table"]
        both, t = split_decode(split.kernel, comb.kernel, p, inputs, n, split.launch.variant)
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
        del kc, vc, inputs, t, both
    return rows


# ------------------------------------------------------------------------------------------ KV cache (--kvcache)
def _pools(kv_layout: str, npages: int, hk: int, page: int, d: int, dt: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Random K/V page pools of a batch-prefill layout: linear (pages, page, hk, d); vectorized K
    (pages, hk, d/vec, page, vec) and V (pages, hk, page/vec, d, vec), vec = 16 bytes."""
    if kv_layout == "linear":
        kc = torch.randn(npages, page, hk, d, device="cuda", dtype=dt)
        return kc, torch.randn_like(kc)
    vec = 16 // torch.tensor([], dtype=dt).element_size()
    kc = torch.randn(npages, hk, d // vec, page, vec, device="cuda", dtype=dt)
    vc = torch.randn(npages, hk, page // vec, d, vec, device="cuda", dtype=dt)
    return kc, vc


def _gathered(kv_layout: str, kc: torch.Tensor, vc: torch.Tensor, bt: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """K and V of every sequence (b, hk, pages * page, d) gathered through the block table ``bt`` (b, pages)."""
    b, n = bt.shape
    kg, vg = kc[bt.long()], vc[bt.long()]
    if kv_layout == "linear":  # (b, n, page, hk, d)
        return tuple(x.permute(0, 3, 1, 2, 4).reshape(b, x.shape[3], -1, x.shape[4]) for x in (kg, vg))
    hk, d = kg.shape[2], kg.shape[3] * kg.shape[5]
    k = kg.permute(0, 2, 1, 4, 3, 5).reshape(b, hk, -1, d)  # (b, n, hk, d/vec, page, vec) -> (b, hk, n, page, d)
    v = vg.permute(0, 2, 1, 3, 5, 4).reshape(b, hk, -1, d)  # (b, n, hk, page/vec, d, vec) -> (b, hk, n, page, d)
    return k, v


def batch_prefill_rows(disp: Dispatcher, quick: bool, shapes: tuple[str, ...] = ()) -> list[dict]:
    """Batch prefill (ragged queries over a paged cache; equal lengths so SDPA can run batched): TFLOPS of the
    dispatcher's kernel against SDPA-flash on the K/V gathered from the pages (same problem); target >= 1.0x."""
    cases = [
        (dt, d, s, causal, "vllm", "vectorized", 16)
        for dt in ("bf16", "fp16")
        for d in (64, 128)
        for s in (1024, 4096, 8192)
        for causal in (False, True)
    ]
    cases += [
        ("bf16", 128, 4096, False, lk, ly, pg)
        for lk, ly, pg in (
            ("sglang", "vectorized", 16),
            ("vllm", "linear", 16),
            ("sglang", "linear", 128),
            ("vllm", "linear", 1),
        )
    ]
    if quick:
        cases = [c for c in cases if c[1] == 128 and c[2] == 4096 and c[0] == "bf16"]
    if shapes:  # a tile sweep: the fp16 vectorized rows of seqlen 4096 and the linear page-16 row
        cases = [c for c in cases if (c[0] == "fp16" and c[2] == 4096) or c[5:] == ("linear", 16)]
    return [batch_prefill_row(disp, *case, shapes=shapes) for case in cases]


def parse_shape(text: str, option: str = "--prefill-shapes") -> tuple[int, int, int, int]:
    """``BMxBNwWsS`` (e.g. ``128x128w8s3``) -> (block_m, block_n, warps, stages); a bad one names ``option``."""
    m = re.fullmatch(r"(\d+)x(\d+)w(\d+)s(\d+)", text)
    if m is None:
        raise ValueError(f"{option}: {text!r} is not BMxBNwWsS (e.g. 128x128w8s3)")
    bm, bn, w, st = (int(g) for g in m.groups())
    return bm, bn, w, st


def batch_prefill_row(
    disp: Dispatcher,
    dt: str,
    d: int,
    s: int,
    causal: bool,
    lookup: str,
    layout: str,
    page: int,
    tokens: int = TOKENS,
    shapes: tuple[str, ...] = (),
) -> dict:
    """One batch-prefill row (see batch_prefill_rows): ``tokens`` query tokens in sequences of ``s``; ``shapes``:
    launch shapes to time the row's kernel with as well."""

    b, hq = tokens // s, HEAD_SIZE // d
    hk = max(1, hq // 4)
    tdt = torch.bfloat16 if dt == "bf16" else torch.float16
    p = Problem(
        family="batch_prefill",
        mode="group",
        dtype=dt,
        batch=b,
        nhead_q=hq,
        nhead_k=hk,
        hdim_q=d,
        seqlens_q=[s] * b,
        seqlens_k=[s] * b,
        kv_lookup=lookup,
        kv_layout=layout,
        page_block_size=page,
        mask="b" if causal else "0",
    )
    stage = disp.select(p).stages[0]
    kernel, variant = stage.kernel, stage.launch.variant  # the plan's launch variant, given to every launch
    npp = s // page
    kc, vc = _pools(layout, b * npp, hk, page, d, tdt)
    bt = torch.randperm(b * npp, device="cuda", dtype=torch.int32).reshape(b, npp)
    starts = torch.arange(0, (b + 1) * s, s, device="cuda", dtype=torch.int32)
    q = torch.randn(1, hq, b * s, d, device="cuda", dtype=tdt)
    t = {
        "q": q,
        "k_cache": kc,
        "v_cache": vc,
        "seqstart_q": starts,
        "seqstart_k": starts,
        "seqlen_k": torch.full((b,), s, device="cuda", dtype=torch.int32),
        "o": torch.empty_like(q),
    }
    if lookup == "vllm":
        t["block_table"] = bt
    else:
        t["kv_indptr"] = torch.arange(0, (b + 1) * npp, npp, device="cuda", dtype=torch.int32)
        t["kv_page_indices"] = bt.reshape(-1).contiguous()
        t["kv_last_page_lens"] = torch.full((b,), page, device="cuda", dtype=torch.int32)
    ours = attention_launcher(kernel, p, t, variant=variant)
    shape_tflops = {}
    for text in shapes:  # the same kernel with other launch shapes (tile tuning for sm90.yaml's batch_prefill)
        bm, bn, w, st = parse_shape(text)
        try:
            alt = attention_launcher(kernel, p, t, shape=LaunchShape(bm, bn, d, d, w, st), variant=variant)
            alt()
            shape_tflops[text] = flops(b, hq, s, d, causal) / bench(alt) * 1e-9
        except Exception as e:  # noqa: BLE001 - a shape that does not compile or fit: reported, the row goes on
            print(f"    shape {text}: {type(e).__name__}: {str(e)[:100]}", flush=True)
            shape_tflops[text] = float("nan")
        print(f"    {shape_tflops[text]:6.1f} TFLOPS  shape {text}", flush=True)
    kg, vg = (x.repeat_interleave(hq // hk, dim=1) for x in _gathered(layout, kc, vc, bt))
    qb = q.reshape(hq, b, s, d).transpose(0, 1)

    def sdpa(qb=qb, kg=kg, vg=vg, causal=causal):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(qb, kg, vg, is_causal=causal)

    ours()
    ref = sdpa()
    o = t["o"].reshape(hq, b, s, d).transpose(0, 1).float()
    err = ((o - ref.float()).norm() / ref.float().norm()).item()
    fl = flops(b, hq, s, d, causal)
    ms, ms_flash = bench(ours), bench(sdpa)
    row = dict(
        dtype=dt,
        hdim=d,
        seqlen=s,
        causal=causal,
        kv_lookup=lookup,
        kv_layout=layout,
        page=page,
        kernel=kernel.kernel_id,
        tflops=fl / ms * 1e-9,
        flash_tflops=fl / ms_flash * 1e-9,
        rel_err=err,
    )
    if shape_tflops:
        row["shapes"] = shape_tflops
    row["vs_flash"] = row["tflops"] / row["flash_tflops"]
    print(
        f"prefill {dt} d{d} s{s} {'causal' if causal else 'full'} {lookup}/{layout}/p{page}: "
        f"{row['tflops']:6.1f} TFLOPS vs flash {row['flash_tflops']:6.1f} = {row['vs_flash']:.2f}x "
        f"err {err:.1e}",
        flush=True,
    )
    return row


def appendkv_decode_rows(disp: Dispatcher, copy_gbps: float, quick: bool) -> list[dict]:
    """Append-KV decode (one new token per sequence, RoPE half-rotated, paged cache of 128 or contiguous): the
    dispatcher's whole plan (append -> split-KV -> combine) in GB/s over the bytes that must move (the cache read
    once, knew/vnew read and stored, Q read, O written) against the measured copy bandwidth; target >= 70%."""
    cases = [(32, 32, 8, 8192, 128), (64, 32, 8, 16384, 128), (16, 32, 32, 32768, 0), (128, 16, 2, 4096, 128)]
    if quick:
        cases = cases[:2]
    return [appendkv_decode_row(disp, copy_gbps, *case) for case in cases]


def appendkv_decode_row(disp: Dispatcher, copy_gbps: float, b: int, hq: int, hk: int, sk: int, page: int) -> dict:
    """One append-KV decode row (see appendkv_decode_rows)."""
    from ckfmha.backends.triton.launch_kvcache import appendkv_launcher

    d = 128
    p = Problem(
        family="fwd_appendkv",
        dtype="bf16",
        batch=b,
        nhead_q=hq,
        nhead_k=hk,
        seqlen_q=1,
        seqlen_k=sk,
        seqlen_knew=1,
        hdim_q=d,
        page_block_size=page,
        rotary_dim=d,
        rope="half_rotated",
    )
    plan = disp.select(p)
    append, attn = plan.stages[0], plan.stages[1:]
    dev = dict(device="cuda", dtype=torch.bfloat16)
    t: dict = {
        "q": torch.randn(b, hq, 1, d, **dev),
        "knew": torch.randn(b, hk, 1, d, **dev),
        "vnew": torch.randn(b, hk, 1, d, **dev),
        "cache_seqlens": torch.full((b,), sk - 1, device="cuda", dtype=torch.int32),
    }
    ang = (
        torch.arange(sk + 1, device="cuda", dtype=torch.float32)[:, None]
        * torch.logspace(0, -4, d // 2, device="cuda")[None, :]
    )
    t["rotary_cos"], t["rotary_sin"] = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
    if page:
        npages = b * (sk // page)
        t["k_cache"] = torch.randn(npages, hk, page, d, **dev)
        t["v_cache"] = torch.randn_like(t["k_cache"])
        t["block_table"] = torch.randperm(npages, device="cuda", dtype=torch.int32).reshape(b, sk // page)
        cache_bytes = 2 * t["k_cache"].numel() * 2
    else:
        t["k"] = torch.randn(b, hk, sk, d, **dev)
        t["v"] = torch.randn_like(t["k"])
        cache_bytes = 2 * t["k"].numel() * 2
    l0, after = appendkv_launcher(append.kernel, p, t)
    ta = {**t, **after, "o": torch.empty(b, hq, 1, d, **dev)}
    n = int(attn[0].launch.num_splits or 1)
    launches = [l0]
    if attn[0].role.value == "splitkv":
        ta["o_acc"] = torch.empty(n, b, hq, 1, d, device="cuda", dtype=torch.float32)
        ta["lse_acc"] = torch.empty(n, b, hq, 1, device="cuda", dtype=torch.float32)
        launches += [
            attention_launcher(attn[0].kernel, p, ta, split=True, num_splits=n, variant=attn[0].launch.variant),
            combine_launcher(attn[1].kernel, p, ta, n),
        ]
    else:
        launches.append(attention_launcher(attn[0].kernel, p, ta, variant=attn[0].launch.variant))

    def whole(launches=launches):
        for f in launches:
            f()

    ms = bench(whole)
    stage_ms = [bench(f) for f in launches]  # each stage alone (all three are idempotent): where the time goes
    # the same plan replayed from a CUDA graph (as decode loops run it): device time without Python's per-launch
    # cost, which the three small append launches pay in eager mode
    whole()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        whole()
    ms_graph = bench(graph.replay)
    nbytes = cache_bytes + 4 * b * hk * d * 2 + 2 * b * hq * d * 2
    gbps = nbytes / (ms * 1e-3) / 1e9
    gbps_graph = nbytes / (ms_graph * 1e-3) / 1e9
    row = dict(
        batch=b,
        nhead_q=hq,
        nhead_k=hk,
        seqlen_k=sk,
        page=page,
        num_splits=n,
        stages=" -> ".join(st.role.value for st in plan.stages),
        kernel=append.kernel.kernel_id,
        kernels=[st.kernel.kernel_id for st in plan.stages],
        ms=ms,
        stage_ms=stage_ms,
        ms_graph=ms_graph,
        gbps_graph=gbps_graph,
        fraction_graph=gbps_graph / copy_gbps,
        gbps=gbps,
        copy_gbps=copy_gbps,
        fraction=gbps / copy_gbps,
    )
    print(
        f"append-KV decode b{b} hq{hq} hk{hk} sk{sk} page {page} ({row['stages']}): {gbps:7.0f} GB/s = "
        f"{row['fraction']:.0%} of copy ({ms:.3f} ms; stages alone {', '.join(f'{x:.3f}' for x in stage_ms)} ms); "
        f"CUDA graph {gbps_graph:7.0f} GB/s = {row['fraction_graph']:.0%}",
        flush=True,
    )
    return row


def render_kvcache(doc: dict) -> str:
    """Markdown tables of the --kvcache rows with the targets (append-KV decode >= 70% of copy bandwidth, batch
    prefill >= 1.0x SDPA-flash on the gathered K/V)."""
    out = [
        "| batch | hq/hk | seqlen_k | page | stages | stages alone ms | GB/s | % of copy | target 70% | "
        "CUDA graph GB/s | % of copy | target 70% |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc.get("appendkv_decode", []):
        graph = r.get("fraction_graph")
        out.append(
            f"| {r['batch']} | {r['nhead_q']}/{r['nhead_k']} | {r['seqlen_k']} | {r['page']} | {r['stages']} | "
            f"{', '.join(f'{x:.3f}' for x in r.get('stage_ms', []))} | "
            f"{r['gbps']:.0f} | {r['fraction']:.0%} | {'PASS' if r['fraction'] >= 0.7 else 'FAIL'} | "
            + (
                f"{r['gbps_graph']:.0f} | {graph:.0%} | {'PASS' if graph >= 0.7 else 'FAIL'} |"
                if graph is not None
                else "- | - | - |"
            )
        )
    out += [
        "",
        "| dtype | hdim | seqlen | causal | table/layout/page | ours TFLOPS | SDPA-flash | x flash | rel err | "
        "target 1.0x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc.get("batch_prefill", []):
        out.append(
            f"| {r['dtype']} | {r['hdim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | "
            f"{r['kv_lookup']}/{r['kv_layout']}/{r['page']} | {r['tflops']:.1f} | {r['flash_tflops']:.1f} | "
            f"{r['vs_flash']:.2f} | {r['rel_err']:.1e} | {'PASS' if r['vs_flash'] >= 1.0 else 'FAIL'} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="write the run's rows here")
    ap.add_argument(
        "--kvcache", action="store_true", help="also append-KV decode (GB/s) and batch prefill (TFLOPS vs SDPA) rows"
    )
    ap.add_argument(
        "--only-kvcache",
        action="store_true",
        help="only the append-KV decode and batch prefill rows (implies --kvcache)",
    )
    ap.add_argument(
        "--prefill-shapes",
        default="",
        help="comma-separated BMxBNwWsS launch shapes to time the batch-prefill rows' kernel with (a subset of rows)",
    )
    args = ap.parse_args()
    args.kvcache = args.kvcache or args.only_kvcache
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
    pre = [] if args.only_kvcache else prefill_rows(disp, args.quick)
    dec = [] if args.only_kvcache else decode_rows(disp, copy, args.quick)
    doc = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gbps": copy,
        "prefill": pre,
        "decode": dec,
    }
    if args.kvcache:
        doc["appendkv_decode"] = appendkv_decode_rows(disp, copy, args.quick)
        shapes = tuple(x for x in args.prefill_shapes.split(",") if x)
        for x in shapes:
            parse_shape(x)  # a bad shape is an error before anything runs
        doc["batch_prefill"] = batch_prefill_rows(disp, args.quick, shapes)
    text = "" if args.only_kvcache else render(doc)[0]
    if args.kvcache:
        text += ("\n\n" if text else "") + render_kvcache(doc)
    print("\n" + text + f"\n({time.time() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
