"""Sweep the Triton forward kernel's launch shapes on the GPU, to choose the sm90 tile table.

For each (hdim, causal) it times candidate (BLOCK_M, BLOCK_N, warps, stages, warp_specialize) launches at
seqlen 4k and 16k (32k tokens, heads x hdim = 2048, fp16) and prints the best; for decode it sweeps the split
count, BLOCK_N and stages of the paged split-KV kernel; ``--only causal`` times causal tiles at seqlen 1k/4k/16k with
the trailing masked blocks inside the pipelined loop (FUSE_TAIL) and in a loop of their own. The winners go into ckfmha/data/archs/sm90.yaml by hand
(the table is data; this script is how it was chosen).

Usage (GPU machine): python benchmarks/tune_fwd.py [--only prefill|decode|causal] [--tma] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import torch
from bench_fwd import DECODE_CASES, bench, decode_inputs, decode_problem, flops, split_decode

from ckfmha.backends.triton.launch import LaunchShape, attention_launcher
from ckfmha.heuristics import load_heuristics
from ckfmha.kernel import KernelConfig
from ckfmha.problem import Problem

PREFILL_CANDIDATES = {
    64: [(128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 4, 3), (128, 64, 4, 4), (256, 64, 8, 3)],
    128: [(128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 4), (256, 64, 8, 2)],
    256: [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 128, 8, 2), (128, 64, 8, 1)],
}
# --tma: the best tiles of the first sweep, with and without bulk tensor (TMA) loads of K/V
TMA_CANDIDATES = {
    64: [(128, 128, 4, 3), (128, 128, 4, 4)],
    128: [(128, 128, 8, 3), (128, 128, 8, 4), (128, 128, 8, 2)],
    256: [(128, 64, 8, 2), (128, 64, 8, 3)],
}

# --only causal: causal tiles at short and long sequences, the trailing masked blocks fused into the pipelined
# loop (FUSE_TAIL) or in a loop of their own; smaller tiles let two programs share an SM
CAUSAL_CANDIDATES = {
    64: [(128, 128, 4, 3), (128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3)],
    128: [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 2), (64, 64, 4, 3)],
    256: [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 32, 4, 3)],
}


def cfg_for(d: int, causal: bool, bm: int, bn: int, w: int, st: int) -> KernelConfig:
    return KernelConfig.make(
        family="fwd",
        dtype="fp16",
        mode="batch",
        hdim_q=d,
        hdim_v=d,
        arch_tag="sm90",
        pipeline="triton",
        tile=(bm, bn),
        warps=((w, 1, 1), (w, 1, 1)),
        mask="causal" if causal else "none",
        num_stages=st,
    )


def med(fn) -> float:
    return bench(fn, reps_ms=150)


def tune_prefill(rows: list, tma_mode: bool = False) -> None:
    table = TMA_CANDIDATES if tma_mode else PREFILL_CANDIDATES
    for d, cands in table.items():
        for causal in (False, True):
            for s in (4096, 16384):
                b, h = 32768 // s, 2048 // d
                p = Problem(
                    dtype="fp16", batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b" if causal else "0"
                )
                q = torch.randn(b, h, s, d, device="cuda", dtype=torch.float16)
                k, v = torch.randn_like(q), torch.randn_like(q)
                o = torch.empty_like(q)
                fl = flops(b, h, s, d, causal)
                for bm, bn, w, st in cands:
                    variants = (
                        ((False, False, True), (False, True, True), (False, True, False))
                        if tma_mode
                        else ((False, False, True), (True, False, True))
                    )
                    for ws, use_tma, edges in variants:
                        c = cfg_for(d, causal, bm, bn, w, st)
                        try:
                            launch = attention_launcher(
                                c,
                                p,
                                {"q": q, "k": k, "v": v, "o": o},
                                shape=LaunchShape(bm, bn, d, d, w, st),
                                warp_specialize=ws,
                                tma=use_tma,
                                tma_edges=edges,
                                variant=load_heuristics().launch_variant(c),  # the table's, as a plan would carry
                            )
                            launch()
                            ms = med(launch)
                        except Exception as e:  # a shape that does not compile or fit: report and go on
                            print(
                                f"  d{d} {'causal' if causal else 'full'} s{s} {bm}x{bn} w{w} s{st} ws{int(ws)}: "
                                f"{type(e).__name__}: {str(e)[:100]}",
                                flush=True,
                            )
                            continue
                        tf = fl / ms / 1e9
                        rows.append(
                            dict(
                                kind="prefill",
                                hdim=d,
                                causal=causal,
                                seqlen=s,
                                bm=bm,
                                bn=bn,
                                warps=w,
                                stages=st,
                                warp_specialize=ws,
                                tma=use_tma,
                                tma_edges=edges,
                                tflops=tf,
                            )
                        )
                        print(
                            f"d{d} {'causal' if causal else 'full  '} s{s:<5} {bm:>3}x{bn:<3} w{w} st{st} "
                            f"ws{int(ws)} tma{int(use_tma)}{'' if edges else '-middle'}: {tf:6.1f} TFLOPS",
                            flush=True,
                        )
                del q, k, v, o


def tune_causal(rows: list) -> None:
    for d, cands in CAUSAL_CANDIDATES.items():
        for s in (1024, 4096, 16384):
            b, h = 32768 // s, 2048 // d
            p = Problem(dtype="fp16", batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b")
            q = torch.randn(b, h, s, d, device="cuda", dtype=torch.float16)
            k, v = torch.randn_like(q), torch.randn_like(q)
            o = torch.empty_like(q)
            ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
            fl = flops(b, h, s, d, True)
            for bm, bn, w, st in cands:
                for fuse in (True, False):
                    c = cfg_for(d, True, bm, bn, w, st)
                    try:
                        launch = attention_launcher(
                            c,
                            p,
                            {"q": q, "k": k, "v": v, "o": o},
                            shape=LaunchShape(bm, bn, d, d, w, st),
                            fuse_tail=fuse,
                            variant=load_heuristics().launch_variant(c),  # the table's, as a plan would carry
                        )
                        o.fill_(float("nan"))
                        launch()
                        err = ((o.float() - ref).norm() / ref.norm()).item()
                        ms = med(launch)
                    except Exception as e:  # a shape that does not compile or fit: report and go on
                        print(
                            f"  d{d} causal s{s} {bm}x{bn} w{w} st{st} fuse{int(fuse)}: {type(e).__name__}: "
                            f"{str(e)[:100]}",
                            flush=True,
                        )
                        continue
                    tf = fl / ms / 1e9
                    rows.append(
                        dict(
                            kind="causal",
                            hdim=d,
                            causal=True,
                            seqlen=s,
                            bm=bm,
                            bn=bn,
                            warps=w,
                            stages=st,
                            fuse_tail=fuse,
                            rel_err=err,
                            tflops=tf,
                        )
                    )
                    print(
                        f"d{d} causal s{s:<5} {bm:>3}x{bn:<3} w{w} st{st} fuse{int(fuse)}: {tf:6.1f} TFLOPS "
                        f"err {err:.1e}",
                        flush=True,
                    )
            del q, k, v, o, ref


# --only hopper: (hdim, causal, seqlen) cases, bf16, 32k tokens, heads x hdim = 2048
HOPPER_CASES = [
    (64, False, 8192),
    (64, True, 8192),
    (128, False, 4096),
    (128, True, 4096),
    (128, False, 16384),
    (128, True, 16384),
    (256, False, 4096),
    (256, True, 4096),
    (256, True, 1024),
]
# variant name -> (attention_launcher overrides, head dims it is timed at, causal cases only); "shape" replaces the
# dispatcher's (BM, BN, warps, stages). "base" is the dispatcher's own launch (data/heuristics.yaml launch_variants
# included); "plain" switches both launch variants off.
ALL, WIDE = (64, 128, 256), (128, 256)
HOPPER_VARIANTS: dict[str, tuple[dict, tuple[int, ...], bool]] = {
    "base": ({}, ALL, False),
    "plain": ({"qk_ahead": False, "lpt_heads": 0}, ALL, False),
    "ahead": ({"qk_ahead": True}, ALL, False),
    "ws": ({"warp_specialize": True}, ALL, False),
    "lpt4": ({"lpt_heads": 4}, ALL, True),
    "lpt8": ({"lpt_heads": 8}, ALL, True),
    "lpt16": ({"lpt_heads": 16}, ALL, True),
    "lpt8+ahead": ({"lpt_heads": 8, "qk_ahead": True}, ALL, True),
    "tma_edges": ({"tma_edges": True}, ALL, True),
    "128x64w8s3+ahead": ({"shape": (128, 64, 8, 3), "qk_ahead": True}, (128,), False),
    "128x128w8s2+ahead": ({"shape": (128, 128, 8, 2), "qk_ahead": True}, (128,), False),
    "128x32w8s3": ({"shape": (128, 32, 8, 3)}, (256,), False),
    "64x128w4s2": ({"shape": (64, 128, 4, 2)}, WIDE, False),
    "64x64w4s2": ({"shape": (64, 64, 4, 2)}, WIDE, False),
    "64x64w4s3+ahead": ({"shape": (64, 64, 4, 3), "qk_ahead": True}, WIDE, False),
    # round 2 (after the first run, benchmarks/results/tune_hopper_h100.txt)
    "128x32w8s3+ahead": ({"shape": (128, 32, 8, 3), "qk_ahead": True}, (256,), False),
    "128x32w8s3+ahead+lpt8": ({"shape": (128, 32, 8, 3), "qk_ahead": True, "lpt_heads": 8}, (256,), True),
    "128x128w8s3+ahead": ({"shape": (128, 128, 8, 3), "qk_ahead": True}, (64,), False),
    "128x64w4s3+ahead": ({"shape": (128, 64, 4, 3), "qk_ahead": True}, (64,), False),
    "128x128w8s3": ({"shape": (128, 128, 8, 3)}, (64,), False),
    "ws+lpt8": ({"warp_specialize": True, "lpt_heads": 8}, (128,), True),
    "lpt4+tma_edges": ({"lpt_heads": 4, "tma_edges": True}, (64, 128), True),
    "fuse_tail": ({"fuse_tail": True}, ALL, True),
    # round 3: 64-row programs of one warpgroup whose shared memory lets two share an SM (out of phase, like
    # FlashAttention-3's ping-pong of two consumer warpgroups)
    "64x128w4s1": ({"shape": (64, 128, 4, 1)}, ALL, False),
    "64x128w4s1+ahead": ({"shape": (64, 128, 4, 1), "qk_ahead": True}, ALL, False),
    "64x64w4s3": ({"shape": (64, 64, 4, 3)}, ALL, False),
    "64x128w4s3": ({"shape": (64, 128, 4, 3)}, (64,), False),
}


def tune_hopper(rows: list, variants: list[str], cases: list[tuple[int, bool, int]]) -> None:
    """Each variant of HOPPER_VARIANTS that applies to a case, with its error against SDPA (a fast wrong variant
    shows), its TFLOPS and its ratio to the dispatcher's launch and to cuDNN measured in the same process."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ckfmha.backends import get_backend
    from ckfmha.backends.triton.launch import launch_shape
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.registry import Registry

    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    disp = Dispatcher(reg, get_backend("triton"), num_cus=torch.cuda.get_device_properties(0).multi_processor_count)
    for d, causal, s in cases:
        b, h = 32768 // s, 2048 // d
        p = Problem(dtype="bf16", batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b" if causal else "0")
        stage = disp.select(p).stages[0]
        c, variant = stage.kernel, stage.launch.variant  # "base": the dispatcher's launch, its variant included
        ls = launch_shape(c)
        torch.manual_seed(0)
        q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        o = torch.empty_like(q)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
        fl = flops(b, h, s, d, causal)

        def sdpa(q=q, k=k, v=v, causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            cudnn = fl / med(sdpa) / 1e9
        case = f"d{d} {'causal' if causal else 'full'} s{s}"
        print(f"{case}: kernel tile {ls.block_m}x{ls.block_n} w{ls.num_warps} st{ls.num_stages}, cuDNN {cudnn:.1f}")
        base = None
        for name in variants:
            overrides, hdims, causal_only = HOPPER_VARIANTS[name]
            if d not in hdims or (causal_only and not causal):
                continue
            kw = dict(overrides)
            if "shape" in kw:
                bm, bn, w, st = kw.pop("shape")
                kw["shape"] = LaunchShape(bm, bn, d, d, w, st)
            try:
                launch = attention_launcher(c, p, {"q": q, "k": k, "v": v, "o": o}, variant=variant, **kw)
                o.fill_(float("nan"))
                launch()
                err = ((o.float() - ref).norm() / ref.norm()).item()
                tf = fl / med(launch) / 1e9
            except Exception as e:  # a variant that does not compile or fit: report and go on
                print(f"  {name:<18} {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            if name == "base":
                base = tf
            rows.append(
                dict(
                    kind="hopper",
                    hdim=d,
                    causal=causal,
                    seqlen=s,
                    variant=name,
                    tflops=tf,
                    cudnn_tflops=cudnn,
                    rel_err=err,
                )
            )
            print(
                f"  {name:<18} {tf:6.1f} TFLOPS  {f'x{tf / base:.3f}' if base else 'x  -  '} of base  "
                f"x{tf / cudnn:.3f} cuDNN  err {err:.1e}",
                flush=True,
            )


def tune_decode(rows: list) -> None:
    for b, hq, hk, sk in DECODE_CASES[:3]:
        d, page = 128, 128
        inputs = decode_inputs(b, hq, hk, sk, d, page)
        nbytes = (inputs["k_cache"].numel() + inputs["v_cache"].numel()) * 2
        for n in (1, 2, 3, 4, 6, 8, 12):
            p = decode_problem(b, hq, hk, sk, max(n, 2), d, page)
            for bn, st in ((128, 2), (128, 3), (64, 3), (64, 4)):
                c = KernelConfig.make(
                    family="fwd_splitkv",
                    dtype="bf16",
                    mode="batch",
                    hdim_q=d,
                    hdim_v=d,
                    arch_tag="sm90",
                    pipeline="triton",
                    tile=(16, bn),
                    warps=((4, 1, 1), (4, 1, 1)),
                    lse=True,
                    paged_kv=True,
                    pad_s=1,
                    pad_sk=1,
                    pad_d=1,
                    pad_dv=1,
                    num_stages=st,
                )
                comb = KernelConfig.make(
                    family="fwd_splitkv_combine",
                    dtype="bf16",
                    mode="batch",
                    hdim_q=d,
                    hdim_v=d,
                    arch_tag="sm90",
                    pipeline="splitkv_combine",
                    tile=(32,),
                )
                both, _ = split_decode(c, comb, p, inputs, n, load_heuristics().launch_variant(c))
                both()
                ms = med(both)
                gbps = nbytes / (ms * 1e-3) / 1e9
                rows.append(
                    dict(
                        kind="decode",
                        batch=b,
                        nhead_q=hq,
                        nhead_k=hk,
                        seqlen_k=sk,
                        splits=n,
                        bn=bn,
                        stages=st,
                        gbps=gbps,
                    )
                )
                print(f"decode b{b} hk{hk} sk{sk} splits {n:<2} bn{bn} st{st}: {gbps:6.0f} GB/s", flush=True)
        del inputs


def variant_list(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in HOPPER_VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(HOPPER_VARIANTS)}"
        )
    return names


def case_list(text: str) -> list[tuple[int, bool, int]]:
    out = []
    for tok in (x for x in text.split(",") if x):
        m = re.fullmatch(r"d(\d+)(c?)s(\d+)", tok)
        if not m:
            raise argparse.ArgumentTypeError(f"{tok!r} is not d<hdim>[c]s<seqlen> (e.g. d128cs4096)")
        out.append((int(m.group(1)), bool(m.group(2)), int(m.group(3))))
    if not out:
        raise argparse.ArgumentTypeError("no case given")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", choices=("prefill", "decode", "causal", "hopper"), default=None)
    ap.add_argument("--tma", action="store_true", help="prefill: compare TMA loads on the best tiles")
    ap.add_argument(
        "--variants",
        type=variant_list,
        default=list(HOPPER_VARIANTS),
        help="hopper: comma-separated variant names (default: all of HOPPER_VARIANTS)",
    )
    ap.add_argument(
        "--cases",
        type=case_list,
        default=HOPPER_CASES,
        help="hopper: comma-separated cases d<hdim>[c]s<seqlen>, c = causal (e.g. d128cs4096,d256s4096)",
    )
    args = ap.parse_args()
    rows: list = []
    if args.only in (None, "decode"):
        tune_decode(rows)
    if args.only in (None, "prefill"):
        tune_prefill(rows, tma_mode=args.tma)
    if args.only == "causal":
        tune_causal(rows)
    if args.only == "hopper":
        tune_hopper(rows, args.variants, args.cases)
    print("\nbest per case:")
    keyf = lambda r: (r["kind"], r.get("hdim"), r.get("causal"), r.get("seqlen"), r.get("batch"))  # noqa: E731
    best: dict = {}
    for r in rows:
        k = keyf(r)
        score = r.get("tflops", r.get("gbps"))
        if k not in best or score > best[k][0]:
            best[k] = (score, r)
    for k, (score, r) in sorted(best.items(), key=lambda kv: str(kv[0])):
        print(f"  {k}: {score:.1f}  {r}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
