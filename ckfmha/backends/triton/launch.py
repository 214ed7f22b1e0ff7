"""The forward launchers of the Triton backend: one config and problem -> the arguments and grid of a kernel of
:mod:`.kernels`, as a zero-argument launch callable (no host sync, no output read back).

=========================  =========================================================================================
name                       what it launches
=========================  =========================================================================================
:func:`attention_launcher`  ``kernels.attn_fwd_kernel``: fwd, paged-KV, batch prefill (pools from
                           :func:`.launch_kvcache.prefill_pools`) and, with ``split``, the split-KV partials
                           ``o_acc`` / ``lse_acc``; the launch ``variant`` is the plan stage's
                           (:attr:`ckfmha.plan.Launch.variant`; None: no variant -- this module reads no heuristics)
:func:`combine_launcher`   ``kernels.splitkv_combine_kernel``: ``o`` (and ``lse``) from the split-KV partials
:func:`launch_shape`       what the config decides: blocks, warps, pipelining depth within shared memory
=========================  =========================================================================================

Layers: imports :mod:`.device` and :mod:`.capability` (below it), :mod:`.kernels` and :mod:`.launch_kvcache`
(the batch-prefill pools); the stage module :mod:`.execute` calls it.  The dropout words come from
:func:`.device.dropout_args` (shared with the backward's launcher).  The ``perturb("triton.<point>", value)``
calls are the fault catalogue's hook points (:mod:`ckfmha.faults`, docs/faults.md): each returns its value unless a
fault is active, so a launch hands the kernel exactly what it would without them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton

from ckfmha.backends.triton import kernels
from ckfmha.backends.triton.capability import SMEM_BYTES, next_pow2
from ckfmha.backends.triton.device import (  # noqa: F401  (DEVICE, PreconditionError, check_preconditions)
    BIAS_KIND,
    DEVICE,
    ELEM,
    PreconditionError,
    check_fp8_output,
    check_preconditions,
    dropout_args,
    dummy_tensor,
    launch_fitting_stages,
    mask_args,
    philox_words,
    required,
    seq_strides,
)
from ckfmha.backends.triton.launch_kvcache import prefill_pools
from ckfmha.faults import perturb  # the fault hooks (docs/faults.md): each returns its value unless a fault is active
from ckfmha.kernel import Bias, DType, Family, KernelConfig, MaskImpl, Mode, Pipeline, QScale
from ckfmha.plan import LaunchVariant
from ckfmha.problem import Layout, Problem
from ckfmha.rng import DROPOUT_ROUNDS

# The trailing masked key blocks join the pipelined loop (FUSE_TAIL) up to this many key blocks per sequence; past
# it the uniform branch in the loop costs more than the unpipelined edge block. H200, fp16 causal
# (benchmarks/tune_fwd.py --only causal): s1k d64 281 vs 259 TFLOPS, d128 64x64 349 vs 327; s4k within 1%;
# s16k d128 474 vs 483.
FUSE_TAIL_MAX_KEY_BLOCKS = 32


@dataclass(frozen=True)
class LaunchShape:
    """What the config decides: block sizes, warps, pipelining depth."""

    block_m: int
    block_n: int
    block_dq: int
    block_dv: int
    num_warps: int
    num_stages: int


def launch_shape(c: KernelConfig) -> LaunchShape:
    a, s = c.algorithm, c.signature
    bm0, bn0 = a.tile[0], a.tile[1]
    warps = math.prod(a.warps[0]) if a.warps else 4
    if a.num_stages:
        stages = a.num_stages
    elif a.pipeline is Pipeline.QR:
        stages = 1
    elif a.pipeline in (Pipeline.QR_ASYNC_TRLOAD, Pipeline.QR_ASYNC_TRLOAD_V3):
        stages = 3
    else:
        stages = 2
    bdq, bdv = next_pow2(max(s.hdim_q, 16)), next_pow2(max(s.hdim_v, 16))
    eb = 2 if s.dtype is not DType.FP32 else 4
    # K and V tiles per stage; fall back to fewer stages where they do not fit (documented in the table).
    while stages > 1 and (bm0 * bdq + stages * bn0 * (bdq + bdv)) * eb > SMEM_BYTES:
        stages -= 1
    return LaunchShape(bm0, bn0, bdq, bdv, warps, stages)


_DESCALE_KEYS = ("q_descale", "k_descale", "v_descale")


# ------------------------------------------------------------------------------------------ forward
def pack_gqa(c: KernelConfig, p: Problem) -> bool:
    """Serve all q-heads of a kv-head in one program (rows = query x head-in-group) when the query blocks would
    otherwise be mostly empty (decode) — K/V are then read once per kv-head. Not with per-head terms that need
    a head per row in the inner loop (bias, ALiBi, dropout)."""
    g = p.nhead_q // p.nhead_k
    return g > 1 and p.seqlen_q * 2 <= c.algorithm.tile[0] and c.signature.bias is Bias.NONE and p.p_drop == 0


def attention_launcher(
    c: KernelConfig,
    p: Problem,
    t: Mapping[str, torch.Tensor],
    *,
    split: bool = False,
    num_splits: int = 1,
    shape: LaunchShape | None = None,
    warp_specialize: bool = False,
    tma: bool | None = None,
    tma_edges: bool | None = None,
    fuse_tail: bool | None = None,
    qk_ahead: bool | None = None,
    lpt_heads: int | None = None,
    variant: LaunchVariant | None = None,
) -> Callable[[], None]:
    """A zero-argument callable that runs the attention kernel once (writes t['o']/t['lse'], or with ``split``
    t['o_acc']/t['lse_acc']). ``shape``/``warp_specialize``/``tma``/``tma_edges``/``fuse_tail``/``qk_ahead``/
    ``lpt_heads`` override the config's launch (tuning only; a variant the problem cannot take is refused).
    ``variant``: the launch variants the plan's stage carries (data/heuristics.yaml ``launch_variants`` as the
    dispatcher's table gives them: :attr:`ckfmha.plan.Launch.variant`), applied where the problem can take them;
    None: no variant.

    Long because it maps one config and problem to the one argument list of :func:`kernels.attn_fwd_kernel`
    (nineteen tensors, some sixty strides and scalars, then about thirty constexpr meta-parameters) in the
    kernel's positional order; the values depend on the same few choices (paged or not, split or not, qscale,
    TMA), so the list is built in one place where it can be read against the kernel's signature."""
    s = c.signature
    ls = shape or launch_shape(c)
    pack = pack_gqa(c, p)
    dev = t["q"].device
    group = p.mode is Mode.GROUP
    paged = "k_cache" in t
    q = t["q"]
    k = t["k_cache"] if paged else t["k"]
    v = t["v_cache"] if paged else t["v"]
    sqb, sqh, sqm = seq_strides(q, p.input_layout)
    if paged:
        # (blocks, hk, page, d) for bhsd or (blocks, page, hk, d) for bshd; the "batch" stride is per block
        kl = Layout.BHSD if p.input_layout is Layout.BHSD else Layout.BSHD
        skb, skh, skn = seq_strides(k, kl)
        svb, svh, svn = seq_strides(v, kl)
    else:
        skb, skh, skn = seq_strides(k, p.input_layout)
        svb, svh, svn = seq_strides(v, p.input_layout)
    kv_pool = None
    if p.family is Family.BATCH_PREFILL:  # CK's batch-prefill pools and page tables (launch_kvcache.py)
        kv_pool = prefill_pools(c, p, t)
        (skb, skh, skn), (svb, svh, svn) = kv_pool.k_strides, kv_pool.v_strides
    if split:
        o = t["o_acc"]
        lse = t["lse_acc"]
        sos, sob, soh, som = o.stride(0), o.stride(1), o.stride(2), o.stride(3)
        sls, slb, slh, slm = lse.stride(0), lse.stride(1), lse.stride(2), lse.stride(3)
    else:
        o = t["o"]
        check_fp8_output(s.dtype, q, o)
        sob, soh, som = seq_strides(o, p.output_layout)
        sos = 0
        given = t.get("lse")
        lse = given if given is not None else dummy_tensor(dev)
        sls, slb, slh, slm = (0, lse.stride(0), lse.stride(1), lse.stride(2)) if given is not None else (0, 0, 0, 0)
    bias = t.get("bias")
    sbb = sbh = sbm = sbn = 0
    if s.bias is Bias.ELEMENTWISE:
        bias = required(t, "bias", "a kernel with elementwise bias")
        # broadcast dims (size 1) get stride 0
        sbb = bias.stride(0) if bias.shape[0] > 1 else 0
        sbh = bias.stride(1) if bias.shape[1] > 1 else 0
        sbm, sbn = bias.stride(2), bias.stride(3)
    alibi = t.get("alibi_slopes")
    salb = 0
    if s.bias is Bias.ALIBI:
        alibi = perturb("triton.alibi.slopes", required(t, "alibi_slopes", "a kernel with alibi bias"))
        salb = alibi.stride(0) if alibi.shape[0] > 1 else 0
    randval = t.get("randval")
    srb = srh = srm = srn = 0
    if randval is not None:
        srb, srh, srm, srn = randval.stride()
    elif p.p_drop > 0:
        # every dropout launch compiles the store (STORE_RANDVAL below): without a randval buffer it writes to a
        # one-byte sink, masked off by its zero strides (kernels.py: no column passes).  The variant compiled
        # without the store computed a different keep mask on sm90 (Triton 3.6; tests/test_triton_dropout_large.py
        # failed there, passes in the interpreter): docs/hopper_forward.md
        randval = torch.empty(1, dtype=torch.uint8, device=dev)
    bt = t.get("block_table") if kv_pool is None else kv_pool.table
    sbtb = bt.stride(0) if bt is not None else 0
    seqlens_k = t.get("cache_seqlens") if not group else t.get("seqlen_k")
    if seqlens_k is None and not group and p.kv_eff_lens is not None:
        # batch mode's per-batch key lengths without a cache_seqlens input: CK's seqlen_k_ptr, here a device copy
        seqlens_k = torch.tensor(p.kv_eff_lens, dtype=torch.int32, device=dev)
    dummy = dummy_tensor(dev)
    pool_args = kv_pool.args if kv_pool is not None else (dummy, dummy, 0, 1)
    if paged:
        if bt is not None:
            bt = perturb("triton.kv.page_table", bt, pages=k.shape[0])
        if kv_pool is not None and kv_pool.kv_table == 1:  # SGLang: the key count comes from the last page length
            pool_args = (pool_args[0], perturb("triton.kv.paged_seqlens", pool_args[1]), *pool_args[2:])
        elif seqlens_k is not None:
            seqlens_k = perturb("triton.kv.paged_seqlens", seqlens_k)
    seqstarts = (t.get("seqstart_q"), t.get("seqstart_k"))
    if group and seqstarts[0] is not None and seqstarts[1] is not None:
        seqstarts = perturb("triton.group.seqstarts", seqstarts, problem=p)
    qd, kd, vd = (t.get(n) for n in _DESCALE_KEYS)
    qscale = {QScale.NONE: 0, QScale.PERTENSOR: 1, QScale.BLOCKSCALE: 2, QScale.KV_BLOCKSCALE: 3}[p.qscale]
    qdv = kdv = vdv = 1.0
    sqdb = sqdh = skdb = skdh = svdb = svdh = 0
    if qscale:
        qd, kd, vd = (required(t, n, f"a kernel with qscale {p.qscale.value}") for n in _DESCALE_KEYS)
        if qscale == 1:
            qdv, kdv, vdv = (float(x.reshape(-1)[0].item()) for x in (qd, kd, vd))
        elif qscale == 3:  # kv_blockscale (batch prefill): scalar q descale; K/V descales (pages, hk)
            qdv = float(qd.reshape(-1)[0].item())
            skdb, skdh = kd.stride(0), kd.stride(1)
            svdb, svdh = vd.stride(0), vd.stride(1)
        else:
            sqdb, sqdh = qd.stride(0), qd.stride(1)
            skdb, skdh = kd.stride(0), kd.stride(1)
            svdb, svdh = vd.stride(0), vd.stride(1)
    mask_kind, ml, mr, my, mx, alibi_mode = perturb("triton.mask.window", mask_args(p))
    seed, off, p_undrop, rp_keep = dropout_args(p)
    rows_per_head = p.seqlen_q * (p.nhead_q // p.nhead_k if pack else 1)
    grid = (
        triton.cdiv(rows_per_head, ls.block_m),
        p.batch * (p.nhead_k if pack else p.nhead_q),
        num_splits if split else 1,
    )
    scale = p.softmax_scale
    args: tuple[object, ...] = (
        q,
        k,
        v,
        o,
        lse,
        bias if bias is not None else dummy,
        alibi if alibi is not None else dummy,
        perturb("triton.sink", t["sink"]) if "sink" in t else dummy,
        randval if randval is not None else dummy,
        bt if bt is not None else dummy,
        seqstarts[0] if seqstarts[0] is not None else dummy,
        seqstarts[1] if seqstarts[1] is not None else dummy,
        seqlens_k if seqlens_k is not None else dummy,
        qd if qscale == 2 else dummy,
        kd if qscale >= 2 else dummy,
        vd if qscale >= 2 else dummy,
        sqb if not group else 0,
        sqh,
        sqm,
        skb,
        skh,
        skn,
        svb,
        svh,
        svn,
        sos,
        sob if not group else 0,
        soh,
        som,
        sls,
        slb,
        slh,
        slm,
        sbb,
        sbh,
        sbm,
        sbn,
        salb,
        srb,
        srh,
        srm,
        srn,
        sbtb,
        sqdb,
        sqdh,
        skdb,
        skdh,
        svdb,
        svdh,
        p.seqlen_q,
        p.seqlen_k if group else perturb("triton.seqlen_k", p.seqlen_k, block_n=ls.block_n),
        p.nhead_q,
        p.nhead_q // p.nhead_k,
        perturb("triton.splitkv.num_splits", num_splits) if split else num_splits,
        p.page_block_size or 1,
        scale,
        p.logits_soft_cap or 1.0,
        qdv,
        kdv,
        vdv,
        mask_kind,
        ml,
        mr,
        my,
        mx,
        alibi_mode,
        p.min_seqlen_q,
        *philox_words(seed, off),
        p_undrop,
        rp_keep,
        *pool_args,
    )
    meta = dict(
        HDIM_Q=p.hdim_q,
        HDIM_V=p.hdim_v,
        BLOCK_M=ls.block_m,
        BLOCK_N=ls.block_n,
        BLOCK_DQ=ls.block_dq,
        BLOCK_DV=ls.block_dv,
        HAS_MASK=s.mask is not MaskImpl.NONE,
        BIAS_KIND=BIAS_KIND[s.bias],
        HAS_LSE=split or t.get("lse") is not None,
        HAS_DROPOUT=p.p_drop > 0,
        STORE_RANDVAL=p.p_drop > 0,  # compiled with every dropout launch; masked off without a buffer (above)
        HAS_SOFTCAP=s.logits_soft_cap,
        HAS_SINK=s.sink,
        IS_GROUP=group,
        IS_SPLIT=split,
        IS_PAGED=paged,
        HAS_SEQLENS_K=seqlens_k is not None,
        QSCALE=qscale,
        EVEN_M=not c.algorithm.pad_s and not pack,
        EVEN_N=not c.algorithm.pad_sk,
        ELEM=ELEM[s.dtype],
        DOT_PREC="ieee" if s.dtype is DType.FP32 else "tf32",
        DROPOUT_ROUNDS=DROPOUT_ROUNDS,
        NUM_STAGES=ls.num_stages,
        PACK_GQA=pack,
        REVERSE_M=s.mask is not MaskImpl.NONE and not pack,
        WARP_SPEC=warp_specialize,
    )
    if tma_edges is None:  # masked edge blocks: plain loads measured as fast or faster under a mask
        tma_edges = s.mask is MaskImpl.NONE
    k_tma, v_tma = _kv_descriptors(
        c, p, ls, k, v, tma=tma, plain_kv=not paged and not group and "cache_batch_idx" not in t
    )
    use_tma = k_tma is not None
    cbi = t.get("cache_batch_idx")
    args = args[:16] + (k_tma, v_tma, cbi if cbi is not None else dummy) + args[16:]
    meta["HAS_CBI"] = cbi is not None
    meta["KV_TABLE"] = kv_pool.kv_table if kv_pool is not None else 0
    meta["KV_VEC"] = kv_pool.kv_vec if kv_pool is not None else 0
    meta["SKIP_MIN_SEQLEN_Q"] = bool(s.skip_min_seqlen_q and group)
    meta["USE_TMA"] = use_tma
    meta["TMA_EDGES"] = tma_edges
    if fuse_tail is None:
        fuse_tail = triton.cdiv(max(p.seqlens_k_list, default=p.seqlen_k), ls.block_n) <= FUSE_TAIL_MAX_KEY_BLOCKS
    # the trailing masked blocks join the pipelined loop where its loads need no key bound (aligned keys or TMA)
    meta["FUSE_TAIL"] = fuse_tail and (meta["EVEN_N"] or use_tma)
    chosen = variant if variant is not None else LaunchVariant()  # no variant given: none (no table read here)
    meta["QK_AHEAD"], meta["LPT_HEADS"] = _launch_variant(c, p, chosen, qk_ahead, lpt_heads, paged=paged, pack=pack)
    fault = perturb("triton.kernel.fault", "", kernel="attn_fwd")
    if fault:  # an in-kernel fault's compile-time switch (kernels.py module doc); never set otherwise
        meta["FAULT"] = fault
    if meta["LPT_HEADS"]:
        grid = (grid[0] * grid[1], 1, grid[2])
    kern = kernels.attn_fwd_kernel

    def launch() -> None:
        launch_fitting_stages(kern, grid, args, meta, ls.num_warps)

    return launch


def _kv_descriptors(
    c: KernelConfig, p: Problem, ls: LaunchShape, k: torch.Tensor, v: torch.Tensor, *, tma: bool | None, plain_kv: bool
) -> tuple[Any, Any]:
    """(K, V) tensor descriptors of the kernel's ``USE_TMA`` path, or (None, None) for masked pointer loads.
    ``tma`` None: the config's load strategy (see the package table); the descriptors need ``plain_kv`` (not paged,
    batch mode, no ``cache_batch_idx``), BHSD, contiguous non-empty K/V (``-s_k=0``: nothing to describe), head
    dims equal to their blocks and fp16/bf16."""
    if tma is None:
        tma = c.algorithm.pipeline in (Pipeline.TRITON, Pipeline.QR_ASYNC_TRLOAD, Pipeline.QR_ASYNC_TRLOAD_V3)
    use_tma = (
        tma
        and plain_kv
        and p.input_layout is Layout.BHSD
        and k.numel() > 0
        and k.is_contiguous()
        and v.is_contiguous()
        and p.hdim_q == ls.block_dq
        and p.hdim_v == ls.block_dv
        and c.signature.dtype in (DType.FP16, DType.BF16)
    )
    if not use_tma:
        return None, None
    from triton.tools.tensor_descriptor import TensorDescriptor

    k_tma = TensorDescriptor.from_tensor(k.view(-1, p.hdim_q), [ls.block_n, ls.block_dq])
    v_tma = TensorDescriptor.from_tensor(v.view(-1, p.hdim_v), [ls.block_n, ls.block_dv])
    return k_tma, v_tma


def _launch_variant(
    c: KernelConfig,
    p: Problem,
    variant: LaunchVariant,
    qk_ahead: bool | None,
    lpt_heads: int | None,
    *,
    paged: bool,
    pack: bool,
) -> tuple[bool, int]:
    """(QK_AHEAD, LPT_HEADS) of a launch: the plan's ``variant`` where the problem can take it, or the explicit
    ``qk_ahead`` / ``lpt_heads`` overrides (tuning), refused (ValueError) where the problem cannot take them: Q.K
    ahead serves plain problems only (no paging, bias, dropout, soft-cap or per-block scales), the longest-first
    grid batch mode without packed GQA rows."""
    s = c.signature
    not_plain = [
        why
        for why, bad in (
            ("paged K/V", paged),
            (f"bias={s.bias.value}", s.bias is not Bias.NONE),
            (f"p_drop={p.p_drop}", p.p_drop > 0),
            ("logits_soft_cap", s.logits_soft_cap),
            (f"qscale={p.qscale.value}", p.qscale not in (QScale.NONE, QScale.PERTENSOR)),
        )
        if bad
    ]
    no_lpt = [why for why, bad in (("mode=group", p.mode is Mode.GROUP), ("packed GQA rows", pack)) if bad]
    if qk_ahead is None:
        qk_ahead = variant.qk_ahead and not not_plain
    if qk_ahead and not_plain:
        raise ValueError(
            f"qk_ahead=True: Q.K one block ahead serves plain problems only; this one has {', '.join(not_plain)}"
        )
    if lpt_heads is None:
        lpt_heads = 0 if no_lpt else variant.lpt_heads
    if lpt_heads < 0:
        raise ValueError(f"lpt_heads={lpt_heads}: the longest-first grid takes a head count >= 0 (0: off)")
    if lpt_heads and no_lpt:
        raise ValueError(
            f"lpt_heads={lpt_heads}: the longest-first grid serves batch mode without packed GQA rows; this "
            f"problem has {', '.join(no_lpt)}"
        )
    return bool(qk_ahead), int(lpt_heads)


def combine_launcher(c: KernelConfig, p: Problem, t: Mapping[str, torch.Tensor], num_splits: int) -> Callable[[], None]:
    group = p.mode is Mode.GROUP
    oacc, lacc, o = t["o_acc"], t["lse_acc"], t["o"]
    if "q" in t:
        check_fp8_output(c.signature.dtype, t["q"], o)
    lse = t.get("lse")
    sob, soh, som = seq_strides(o, p.output_layout)
    dummy = dummy_tensor(o.device)
    rows = p.total_q if group else p.seqlen_q
    block_m = 32
    grid = (triton.cdiv(rows, block_m), (1 if group else p.batch) * p.nhead_q)
    args = (
        oacc,
        lacc,
        o,
        lse if lse is not None else dummy,
        oacc.stride(0),
        oacc.stride(1),
        oacc.stride(2),
        oacc.stride(3),
        lacc.stride(0),
        lacc.stride(1),
        lacc.stride(2),
        lacc.stride(3),
        sob,
        soh,
        som,
        *(lse.stride() if lse is not None else (0, 0, 0)),
        rows,
        p.nhead_q,
        num_splits,
    )
    meta = dict(
        HDIM_V=p.hdim_v,
        BLOCK_M=block_m,
        BLOCK_DV=next_pow2(max(p.hdim_v, 16)),
        MAX_SPLITS=next_pow2(max(num_splits, 2)),
        HAS_LSE=lse is not None and c.signature.lse,
    )

    def launch() -> None:
        kernels.splitkv_combine_kernel[grid](*args, **meta, num_warps=4)

    return launch
