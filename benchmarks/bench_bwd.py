"""Backward speed on the GPU: the dispatcher's backward plan (Triton dot_do_o -> dq_dk_dv -> convert_dq) against
PyTorch SDPA's flash and cuDNN backward.

Grid (issue 14, item 5): bf16 and fp16; hdim 64/128; seqlen 1k/4k/16k; batch x seqlen = 32k tokens; heads x hdim =
2048; causal and not. Backward TFLOPS = 2.5 x the forward's FLOPs (bench_fwd.flops: 4 * b * h * unmasked area *
hdim, causal area counted exactly). Our time: the plan's three stages (the dq_acc clear included); SDPA's:
``torch.autograd.grad`` of one saved forward (backward only). All timings are ``triton.testing.do_bench`` medians
in one process and run; inputs are random normal (never zeros); dQ/dK/dV are checked against SDPA's.
Targets: >= 1.2x SDPA-flash on every row with seqlen >= 4k; >= 0.8x cuDNN at hdim 128, seqlen >= 4k.

Usage (on the GPU machine): python benchmarks/bench_bwd.py [--quick] [--candidates] [--variants]
[--dtypes bf16,fp16] [--hdims 64,128] [--seqlens 1024,4096,16384] [--json PATH]
``--candidates`` also times every dq_dk_dv kernel the dispatcher accepts for each row (tile tuning for sm90.yaml);
``--variants`` the plan's kernel with each descriptor path (plain loads / TMA loads of Q and dO / dQ by the
descriptor reduce-add / both: launch_bwd._bwd_descriptors).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
import triton
from bench_fwd import HEAD_SIZE, TOKENS, bench, flops, parse_shape
from torch.nn.attention import SDPBackend, sdpa_kernel

from ckfmha.backends.triton.launch import attention_launcher
from ckfmha.backends.triton.launch_bwd import stage_launcher
from ckfmha.dispatcher import Dispatcher
from ckfmha.problem import Problem
from ckfmha.registry import Registry

BWD_OVER_FWD = 2.5  # backward FLOPs / forward FLOPs (5 GEMMs of the backward vs 2 of the forward)
SDPA_BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))
TDT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float(((x.float() - ref.float()).norm() / ref.float().norm()).item())


def our_backward(disp: Dispatcher, p: Problem, t: dict[str, torch.Tensor], main=None):
    """(kernel id of dq_dk_dv, a callable running the backward plan on ``t``): the forward's O and LSE first come
    from the dispatcher's forward kernel. ``main``: a dq_dk_dv kernel to run instead of the plan's."""
    fwd = p.replace(family="fwd", lse=True)
    fwd_stage = disp.select(fwd).stages[0]
    launch_fwd = attention_launcher(fwd_stage.kernel, fwd, t, variant=fwd_stage.launch.variant)
    launch_fwd()
    plan = disp.select(p)
    kernels = [main if main is not None and st.role.value == "dq_dk_dv" else st.kernel for st in plan.stages]
    launches = [stage_launcher(c, p, t) for c in kernels]  # in order: each allocates what it writes

    def run() -> None:
        for launch in launches:
            launch()

    return next(c for c in kernels if c.family.value == "bwd_dq_dk_dv").kernel_id, run


def candidate_tflops(disp: Dispatcher, p: Problem, t: dict[str, torch.Tensor], fl: float) -> dict[str, float]:
    """kernel id -> backward TFLOPS of each dq_dk_dv kernel of ``p``'s head dims the dispatcher accepts for ``p``."""
    from ckfmha.plan import StageRole

    out = {}
    for c in disp.ranked_candidates(p, StageRole.DQ_DK_DV):
        if (c.hdim_q, c.hdim_v) != (p.hdim_q, p.hdim_v):
            continue  # a padded bigger head dim: never the better tile
        _, run = our_backward(disp, p, t, main=c)
        run()
        out[c.kernel_id] = fl / bench(run) / 1e9
        print(f"    {out[c.kernel_id]:6.1f} TFLOPS  {c.kernel_id}", flush=True)
    return out


def sdpa_backward(name, backend, q, k, v, do, causal: bool):
    """(ms, (dq, dk, dv)) of SDPA's backward with one backend, or (nan, None) where it cannot run the shape."""
    try:
        with sdpa_kernel([backend]):
            qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)

            def grad():
                return torch.autograd.grad(out, (qq, kk, vv), do, retain_graph=True)

            grads = grad()
            return bench(grad), grads
    except RuntimeError as e:  # the backend cannot run this shape
        print(f"  {name} unavailable: {str(e)[:80]}", file=sys.stderr)
        return math.nan, None


#: the dq_dk_dv launcher's descriptor paths (launch_bwd._bwd_descriptors): name -> (tma, dq_tma_add)
VARIANTS = {"plain": (False, False), "tma": (True, False), "dq-add": (False, True), "tma+dq-add": (True, True)}


def variant_tflops(disp: Dispatcher, p: Problem, t: dict[str, torch.Tensor], fl: float) -> dict[str, float]:
    """variant name -> backward TFLOPS of the plan's dq_dk_dv kernel with that descriptor path forced."""
    plan = disp.select(p)
    out = {}
    for name, (tma, add) in VARIANTS.items():
        launches = [
            stage_launcher(st.kernel, p, t, tma=tma, dq_tma_add=add)
            if st.role.value == "dq_dk_dv"
            else stage_launcher(st.kernel, p, t)
            for st in plan.stages
        ]

        def run(launches=launches) -> None:
            for launch in launches:
                launch()

        run()
        out[name] = fl / bench(run) / 1e9
        print(f"    {out[name]:6.1f} TFLOPS  variant {name}", flush=True)
    return out


def retiled(c, bm: int, bn: int, warps: int, stages: int):
    """The dq_dk_dv config ``c`` with another query/key block, warp count and pipelining depth (what the launcher
    reads: tile[0], tile[1], warps[0], num_stages): tiles to try before they go into sm90.yaml."""
    a = c.algorithm
    w0 = (1, warps, 1)
    alg = dataclasses.replace(a, tile=(bm, bn, *a.tile[2:]), warps=(w0, *a.warps[1:]), num_stages=stages)
    return dataclasses.replace(c, algorithm=alg)


def tile_tflops(disp: Dispatcher, p: Problem, t: dict[str, torch.Tensor], fl: float, tiles: list) -> dict[str, float]:
    """``BMxBNwWsS`` -> backward TFLOPS of the plan's dq_dk_dv kernel re-tiled so (errors: nan, named)."""
    from ckfmha.plan import StageRole

    base = disp.ranked_candidates(p, StageRole.DQ_DK_DV)[0]
    out = {}
    for text in tiles:
        try:
            _, run = our_backward(disp, p, t, main=retiled(base, *parse_shape(text, "--tiles")))
            run()
            out[text] = fl / bench(run) / 1e9
        except Exception as e:  # noqa: BLE001 - a tile that does not compile or fit: reported, the row goes on
            print(f"    tile {text}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            out[text] = math.nan
        print(f"    {out[text]:6.1f} TFLOPS  tile {text}", flush=True)
    return out


def row(
    disp: Dispatcher,
    dt: str,
    d: int,
    s: int,
    causal: bool,
    candidates: bool = False,
    variants: bool = False,
    tiles: list | None = None,
) -> dict:
    b, h = TOKENS // s, HEAD_SIZE // d
    p = Problem(
        family="bwd", dtype=dt, batch=b, nhead_q=h, seqlen_q=s, seqlen_k=s, hdim_q=d, mask="b" if causal else "0"
    )
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, h, s, d, device="cuda", dtype=TDT[dt]) for _ in range(4))
    t = {"q": q, "k": k, "v": v, "do": do}
    t["o"] = torch.empty_like(q)
    t["lse"] = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    kernel, run = our_backward(disp, p, t)
    run()
    torch.cuda.synchronize()
    ms = bench(run)
    fl = BWD_OVER_FWD * flops(b, h, s, d, causal)
    out = dict(dtype=dt, hdim=d, seqlen=s, batch=b, heads=h, causal=causal, kernel=kernel, ms=ms, tflops=fl / ms / 1e9)
    if candidates:
        out["candidates"] = candidate_tflops(disp, p, dict(t), fl)
    if variants:
        out["variants"] = variant_tflops(disp, p, dict(t), fl)
    if tiles:
        out["tiles"] = tile_tflops(disp, p, dict(t), fl, tiles)
    for name, backend in SDPA_BACKENDS:
        ms_ref, grads = sdpa_backward(name, backend, q, k, v, do, causal)
        out[f"{name}_ms"] = ms_ref
        out[f"{name}_tflops"] = fl / ms_ref / 1e9
        out[f"vs_{name}"] = out["tflops"] / out[f"{name}_tflops"]
        if grads is not None and "rel_err" not in out:  # against the first backend that ran
            errs = [rel_err(t[n], g) for n, g in zip(("dq", "dk_raw", "dv_raw"), grads)]
            out["rel_err"] = max(errs)
    print(
        f"{dt} d{d:<3} s{s:<5} {'causal' if causal else 'full  '} ours {out['tflops']:6.1f} "
        f"flash {out['flash_tflops']:6.1f} cudnn {out['cudnn_tflops']:6.1f} "
        f"x{out['vs_flash']:.2f}/x{out['vs_cudnn']:.2f} err {out.get('rel_err', math.nan):.1e}",
        flush=True,
    )
    return out


def table(rows: list[dict]) -> str:
    head = "| dtype | hdim | seqlen | causal | ours TFLOPS | flash | cuDNN | vs flash | vs cuDNN | max rel err |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['hdim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | {r['tflops']:.1f} | "
            f"{r['flash_tflops']:.1f} | {r['cudnn_tflops']:.1f} | {r['vs_flash']:.2f} | {r['vs_cudnn']:.2f} | "
            f"{r.get('rel_err', math.nan):.1e} |"
        )
    flash_ok = [r for r in rows if r["seqlen"] >= 4096]
    cudnn_ok = [r for r in flash_ok if r["hdim"] == 128]
    met_f = sum(r["vs_flash"] >= 1.2 for r in flash_ok)
    met_c = sum(r["vs_cudnn"] >= 0.8 for r in cudnn_ok)
    lines.append(f"\n>= 1.2x SDPA-flash at seqlen >= 4k: {met_f} of {len(flash_ok)} rows")
    lines.append(f">= 0.8x cuDNN at hdim 128, seqlen >= 4k: {met_c} of {len(cudnn_ok)} rows")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fp16, hdim 128, seqlen 4k only")
    ap.add_argument("--candidates", action="store_true", help="also time every dq_dk_dv kernel that fits a row")
    ap.add_argument(
        "--variants", action="store_true", help="also time the plan's dq_dk_dv kernel with each descriptor path"
    )
    ap.add_argument("--dtypes", default="bf16,fp16", help="comma-separated dtypes of the grid (default bf16,fp16)")
    ap.add_argument("--hdims", default="64,128", help="comma-separated head dims of the grid (default 64,128)")
    ap.add_argument("--seqlens", default="1024,4096,16384", help="comma-separated sequence lengths of the grid")
    ap.add_argument("--tiles", default="", help="comma-separated BMxBNwWsS tiles to time each row's kernel with")
    ap.add_argument("--json", default=None, help="write the run's rows here")
    args = ap.parse_args()
    t0 = time.time()
    from ckfmha.backends import get_backend

    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    disp = Dispatcher(reg, get_backend("triton"), num_cus=torch.cuda.get_device_properties(0).multi_processor_count)
    print(f"device {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    dtypes, hdims, seqs = (
        (["fp16"], [128], [4096])
        if args.quick
        else (
            args.dtypes.split(","),
            [int(x) for x in args.hdims.split(",")],
            [int(x) for x in args.seqlens.split(",")],
        )
    )
    grid = [(dt, d, s, c) for dt in dtypes for d in hdims for s in seqs for c in (False, True)]
    tiles = [x for x in args.tiles.split(",") if x]
    for x in tiles:
        parse_shape(x, "--tiles")  # a bad tile is an error before anything runs
    rows = [row(disp, dt, d, s, c, args.candidates, args.variants, tiles) for dt, d, s, c in grid]
    print("\n" + table(rows) + f"\n({time.time() - t0:.0f} s)")
    if args.json:
        doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
        with open(args.json, "w") as fh:
            json.dump({**doc, "command": " ".join(sys.argv), "bwd": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
