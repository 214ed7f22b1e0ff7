"""Host side of the Triton forward family: tensors in, kernel arguments out, launches.

Everything here imports torch and triton; the backend imports this module only when it runs a kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from ckfmha.backends.triton import kernels
from ckfmha.backends.triton.backend import interpreting, unhonoured_lengths
from ckfmha.heuristics import LaunchVariant, load_heuristics
from ckfmha.kernel import Bias, DType, Family, KernelConfig, MaskImpl, Mode, Pipeline, QScale
from ckfmha.plan import FAMILY_ROLE, StageRole
from ckfmha.problem import Layout, Problem
from ckfmha.rng import DROPOUT_ROUNDS, p_undrop_u8
from ckfmha.rules import misfit

SMEM_BYTES = 227 * 1024  # Hopper: 227 KiB of shared memory per block
# where tensors live: the GPU, or the CPU when Triton interprets the kernels (TRITON_INTERPRET=1)
DEVICE = "cpu" if interpreting() else "cuda"
# The trailing masked key blocks join the pipelined loop (FUSE_TAIL) up to this many key blocks per sequence; past
# it the uniform branch in the loop costs more than the unpipelined edge block. H200, fp16 causal
# (benchmarks/tune_fwd.py --only causal): s1k d64 281 vs 259 TFLOPS, d128 64x64 349 vs 327; s4k within 1%;
# s16k d128 474 vs 483.
FUSE_TAIL_MAX_KEY_BLOCKS = 32


class PreconditionError(ValueError):
    """A problem the chosen kernel cannot run (the kernel's host-side check)."""


# NUM_STAGES that fit shared memory, by kernel and the rest of its compile-time arguments (launch_fitting_stages)
_FITTING_STAGES: dict[tuple, int] = {}


def launch_fitting_stages(kern, grid, args: tuple, meta: dict, num_warps: int) -> None:
    """Launch with ``meta["NUM_STAGES"]``, or fewer where the compiled kernel needs more shared memory than the
    device has (Triton's OutOfResources; the host estimate in :func:`launch_shape` sees only the K/V tiles, not the
    bias tiles or the compiler's own buffers).  The stage count that fits is remembered per kernel and compile-time
    arguments, so the retry happens once per process.  One stage that does not fit re-raises Triton's error."""
    fixed = sorted((name, repr(value)) for name, value in meta.items() if name != "NUM_STAGES")
    key = (id(kern), num_warps, *fixed)
    stages = min(_FITTING_STAGES.get(key, meta["NUM_STAGES"]), meta["NUM_STAGES"])
    while True:
        try:
            kern[grid](*args, **{**meta, "NUM_STAGES": stages}, num_warps=num_warps, num_stages=1)
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
            continue
        _FITTING_STAGES[key] = stages
        return


_ELEM = {
    DType.FP16: tl.float16,
    DType.BF16: tl.bfloat16,
    DType.FP32: tl.float32,
    DType.FP8: tl.float16,  # fp8 in, fp8 out: e4m3 (OCP or fnuz) exact in fp16, P in fp16; O rounded by the store
    DType.FP8BF16: tl.bfloat16,
    DType.FP8FP32: tl.bfloat16,
}
_TORCH_OUT = {
    DType.FP16: torch.float16,
    DType.BF16: torch.bfloat16,
    DType.FP32: torch.float32,
    DType.FP8: torch.float8_e4m3fn,  # OCP; fnuz: a float32 buffer rounded on the host (out_torch_dtype)
    DType.FP8BF16: torch.bfloat16,
    DType.FP8FP32: torch.float32,
}


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


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


# ------------------------------------------------------------------------------------------ tensors
def to_torch(a: np.ndarray, device: str | None = None) -> torch.Tensor:
    """NumPy (incl. ml_dtypes bf16/fp8) -> torch on the device, same bits."""
    device = device or DEVICE
    name = a.dtype.name
    if name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).to(device).view(torch.bfloat16)
    if name == "float8_e4m3fn":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint8)).to(device).view(torch.float8_e4m3fn)
    if name == "float8_e4m3fnuz":
        # AMD's fp8 (bias 8) has no NVIDIA type: widen to bf16 (exact), which the kernels load like fp8
        import ml_dtypes

        return to_torch(np.ascontiguousarray(a).astype(ml_dtypes.bfloat16), device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    import ml_dtypes

    t = t.detach().cpu()
    if t.dtype is torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype is torch.float8_e4m3fn:  # torch has no NumPy bridge for fp8: the same bits as ml_dtypes' type
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return t.numpy()


def seq_strides(t: torch.Tensor, layout: Layout) -> tuple[int, int, int]:
    """(batch, head, seq) strides of a 4-D tensor stored in ``layout``; the last dim must be contiguous (an empty
    tensor -- no keys: CK's smoke tests run ``-s_k=0`` -- has no elements to address, whatever its strides)."""
    if t.numel() and t.stride(-1) != 1:
        raise PreconditionError("the head dim of every tensor must be contiguous")
    if layout is Layout.BHSD:
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), t.stride(2), t.stride(1)


_DESCALE_KEYS = ("q_descale", "k_descale", "v_descale")


def _dummy(device: str) -> torch.Tensor:
    return torch.empty(1, dtype=torch.float32, device=device)


def check_fp8_output(dtype: DType, q: torch.Tensor, o: torch.Tensor) -> None:
    """A plain-fp8 kernel's O buffer must match the input encoding: OCP inputs (device ``float8_e4m3fn``) store
    ``float8_e4m3fn``; fnuz inputs (widened to bf16 by :func:`to_torch`) store float32 that :func:`stored_output`
    rounds to fnuz on the host.  An fp8 buffer for fnuz inputs would store the wrong encoding: a
    PreconditionError."""
    if dtype is DType.FP8 and o.dtype is torch.float8_e4m3fn and q.dtype is not torch.float8_e4m3fn:
        raise PreconditionError(
            f"o: dtype {o.dtype} for fp8 inputs widened from fnuz ({q.dtype}): an fnuz output needs a float32 "
            "buffer (out_torch_dtype(dtype, 'fnuz')) rounded on the host (stored_output)"
        )


# ------------------------------------------------------------------------------------------ checks
def _required(t: dict[str, torch.Tensor], name: str, reader: str) -> torch.Tensor:
    """``t[name]``, which ``reader`` reads: a stage's tensors without it are a bug of its inputs, not a skip."""
    tensor = t.get(name)
    if tensor is None:
        raise ValueError(f"tensors: {name!r} is missing; {reader} reads it")
    return tensor


def check_preconditions(c: KernelConfig, p: Problem, role: StageRole | None = None) -> None:
    """The checks of a real kernel launch, by the dispatcher's rules (:func:`ckfmha.rules.misfit`: family, dtype,
    mode, head dims, features, sequence padding incl. group mode and pad 8): a :class:`PreconditionError` with the
    rule's words. ``role``: the stage the kernel runs in; a kernel's family plays exactly one role
    (:data:`ckfmha.plan.FAMILY_ROLE`), which is the one checked when no role is given.  Then the lengths the
    forward kernel would not honour (:func:`~ckfmha.backends.triton.backend.unhonoured_lengths`: ``q_eff_lens``,
    ``kv_eff_lens`` without ``cache_seqlens``, group-mode ``s_qpad``)."""
    m = misfit(p, FAMILY_ROLE[c.family] if role is None else role, c)
    if m is not None:
        raise PreconditionError(m.message(c.kernel_id))
    why = unhonoured_lengths(c.family, p)
    if why is not None:
        raise PreconditionError(f"{c.kernel_id}: {why}")


# ------------------------------------------------------------------------------------------ forward
def _mask_args(p: Problem) -> tuple[int, int, int, int, int, int]:
    """(mask_kind, left, right, y, x, alibi_mode) runtime arguments.

    mask_kind 1 / 2 is a top-left / bottom-right window ``(left, right)`` the kernel turns into coordinates per
    sequence. A ``g:y,x`` mask is sent as what CK's kernels make of it (MaskSpec.kernel_window: a bottom-right
    window left = y, right = x), so the kernel's raw-coordinate kind 3 is never launched."""
    from ckfmha.masking import MaskKind

    m = p.mask
    # no mask: ALiBi bottom-right; generic masks never come with ALiBi (the problem rejects it): any value will do
    alibi = {"vertical": 0, "top_left": 1, "bottom_right": 2}.get(m.alibi_mode(), 0)
    if m.kind is MaskKind.NONE:
        return 0, m.left, m.right, 0, 0, alibi
    left, right, top_left = m.kernel_window()
    return (1 if top_left else 2), left, right, 0, 0, alibi


def pack_gqa(c: KernelConfig, p: Problem) -> bool:
    """Serve all q-heads of a kv-head in one program (rows = query x head-in-group) when the query blocks would
    otherwise be mostly empty (decode) — K/V are then read once per kv-head. Not with per-head terms that need
    a head per row in the inner loop (bias, ALiBi, dropout)."""
    g = p.nhead_q // p.nhead_k
    return g > 1 and p.seqlen_q * 2 <= c.algorithm.tile[0] and c.signature.bias is Bias.NONE and p.p_drop == 0


def attention_launcher(
    c: KernelConfig,
    p: Problem,
    t: dict[str, torch.Tensor],
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
    dispatcher's table gives them), applied where the problem can take them; None: the packaged table's.

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
        from ckfmha.backends.triton.launch_kvcache import prefill_pools

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
        lse = t.get("lse")
        if lse is None:
            lse = _dummy(dev)
            sls = slb = slh = slm = 0
        else:
            sls, slb, slh, slm = 0, lse.stride(0), lse.stride(1), lse.stride(2)
    bias = t.get("bias")
    sbb = sbh = sbm = sbn = 0
    if s.bias is Bias.ELEMENTWISE:
        bias = _required(t, "bias", "a kernel with elementwise bias")
        # broadcast dims (size 1) get stride 0
        sbb = bias.stride(0) if bias.shape[0] > 1 else 0
        sbh = bias.stride(1) if bias.shape[1] > 1 else 0
        sbm, sbn = bias.stride(2), bias.stride(3)
    alibi = t.get("alibi_slopes")
    salb = 0
    if s.bias is Bias.ALIBI:
        alibi = _required(t, "alibi_slopes", "a kernel with alibi bias")
        salb = alibi.stride(0) if alibi.shape[0] > 1 else 0
    randval = t.get("randval")
    srb = srh = srm = srn = 0
    if randval is not None:
        srb, srh, srm, srn = randval.stride()
    bt = t.get("block_table") if kv_pool is None else kv_pool.table
    sbtb = bt.stride(0) if bt is not None else 0
    seqlens_k = t.get("cache_seqlens") if not group else t.get("seqlen_k")
    qd, kd, vd = (t.get(n) for n in _DESCALE_KEYS)
    qscale = {QScale.NONE: 0, QScale.PERTENSOR: 1, QScale.BLOCKSCALE: 2, QScale.KV_BLOCKSCALE: 3}[p.qscale]
    qdv = kdv = vdv = 1.0
    sqdb = sqdh = skdb = skdh = svdb = svdh = 0
    if qscale:
        qd, kd, vd = (_required(t, n, f"a kernel with qscale {p.qscale.value}") for n in _DESCALE_KEYS)
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
    mask_kind, ml, mr, my, mx, alibi_mode = _mask_args(p)
    seed = p.drop_seed & ((1 << 64) - 1)
    off = p.drop_offset & ((1 << 64) - 1)
    p_keep = 1.0 - p.p_drop
    dummy = _dummy(dev)
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
        t.get("sink", dummy),
        randval if randval is not None else dummy,
        bt if bt is not None else dummy,
        t.get("seqstart_q", dummy),
        t.get("seqstart_k", dummy),
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
        p.seqlen_k,
        p.nhead_q,
        p.nhead_q // p.nhead_k,
        num_splits,
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
        seed & 0xFFFFFFFF,
        seed >> 32,
        off & 0xFFFFFFFF,
        off >> 32,
        p_undrop_u8(p.p_drop) if p.p_drop > 0 else 255,
        1.0 / p_keep,
        *(kv_pool.args if kv_pool is not None else (dummy, dummy, 0, 1)),
    )
    meta = dict(
        HDIM_Q=p.hdim_q,
        HDIM_V=p.hdim_v,
        BLOCK_M=ls.block_m,
        BLOCK_N=ls.block_n,
        BLOCK_DQ=ls.block_dq,
        BLOCK_DV=ls.block_dv,
        HAS_MASK=s.mask is not MaskImpl.NONE,
        BIAS_KIND={Bias.NONE: 0, Bias.ELEMENTWISE: 1, Bias.ALIBI: 2}[s.bias],
        HAS_LSE=split or t.get("lse") is not None,
        HAS_DROPOUT=p.p_drop > 0,
        STORE_RANDVAL=randval is not None and p.p_drop > 0,
        HAS_SOFTCAP=s.logits_soft_cap,
        HAS_SINK=s.sink,
        IS_GROUP=group,
        IS_SPLIT=split,
        IS_PAGED=paged,
        HAS_SEQLENS_K=seqlens_k is not None,
        QSCALE=qscale,
        EVEN_M=not c.algorithm.pad_s and not pack,
        EVEN_N=not c.algorithm.pad_sk,
        ELEM=_ELEM[s.dtype],
        DOT_PREC="ieee" if s.dtype is DType.FP32 else "tf32",
        DROPOUT_ROUNDS=DROPOUT_ROUNDS,
        NUM_STAGES=ls.num_stages,
        PACK_GQA=pack,
        REVERSE_M=s.mask is not MaskImpl.NONE and not pack,
        WARP_SPEC=warp_specialize,
    )
    k_tma = v_tma = None
    if tma is None:  # the config's load strategy (see the package table)
        tma = c.algorithm.pipeline in (Pipeline.TRITON, Pipeline.QR_ASYNC_TRLOAD, Pipeline.QR_ASYNC_TRLOAD_V3)
    if tma_edges is None:  # masked edge blocks: plain loads measured as fast or faster under a mask
        tma_edges = s.mask is MaskImpl.NONE
    use_tma = (
        tma
        and not paged
        and not group
        and "cache_batch_idx" not in t
        and p.input_layout is Layout.BHSD
        and k.numel() > 0  # no keys (-s_k=0): nothing to describe, and a descriptor needs a non-empty shape
        and k.is_contiguous()
        and v.is_contiguous()
        and p.hdim_q == ls.block_dq
        and p.hdim_v == ls.block_dv
        and s.dtype in (DType.FP16, DType.BF16)
    )
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        k_tma = TensorDescriptor.from_tensor(k.view(-1, p.hdim_q), [ls.block_n, ls.block_dq])
        v_tma = TensorDescriptor.from_tensor(v.view(-1, p.hdim_v), [ls.block_n, ls.block_dv])
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
    not_plain = [
        why
        for why, bad in (
            ("paged K/V", paged),
            (f"bias={s.bias.value}", s.bias is not Bias.NONE),
            (f"p_drop={p.p_drop}", p.p_drop > 0),
            ("logits_soft_cap", s.logits_soft_cap),
            (f"qscale={p.qscale.value}", qscale not in (0, 1)),
        )
        if bad
    ]
    no_lpt = [why for why, bad in (("mode=group", group), ("packed GQA rows", pack)) if bad]
    if variant is None:
        variant = load_heuristics().launch_variant(c)
    if qk_ahead is None:
        qk_ahead = variant.qk_ahead and not not_plain
    if qk_ahead and not_plain:
        raise ValueError(
            f"qk_ahead=True: Q.K one block ahead serves plain problems only; this one has {', '.join(not_plain)}"
        )
    meta["QK_AHEAD"] = qk_ahead
    if lpt_heads is None:
        lpt_heads = 0 if no_lpt else variant.lpt_heads
    if lpt_heads < 0:
        raise ValueError(f"lpt_heads={lpt_heads}: the longest-first grid takes a head count >= 0 (0: off)")
    if lpt_heads and no_lpt:
        raise ValueError(
            f"lpt_heads={lpt_heads}: the longest-first grid serves batch mode without packed GQA rows; this "
            f"problem has {', '.join(no_lpt)}"
        )
    meta["LPT_HEADS"] = lpt_heads
    if lpt_heads:
        grid = (grid[0] * grid[1], 1, grid[2])
    kern = kernels.attn_fwd_kernel

    def launch() -> None:
        launch_fitting_stages(kern, grid, args, meta, ls.num_warps)

    return launch


def combine_launcher(c: KernelConfig, p: Problem, t: dict[str, torch.Tensor], num_splits: int) -> Callable[[], None]:
    group = p.mode is Mode.GROUP
    oacc, lacc, o = t["o_acc"], t["lse_acc"], t["o"]
    if "q" in t:
        check_fp8_output(c.signature.dtype, t["q"], o)
    lse = t.get("lse")
    sob, soh, som = seq_strides(o, p.output_layout)
    dummy = _dummy(o.device)
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


def out_torch_dtype(dtype: DType, fp8_format: str = "ocp") -> torch.dtype:
    """The torch dtype of the O buffer a kernel of ``dtype`` stores into.  Plain fp8 in AMD's fnuz encoding has
    no NVIDIA type: the kernel stores float32 and :func:`stored_output` rounds it on the host."""
    if _fnuz_output(dtype, fp8_format):
        return torch.float32
    return _TORCH_OUT[dtype]


def _fnuz_output(dtype: DType, fp8_format: str) -> bool:
    """O is stored as AMD's fnuz fp8 (:func:`ckfmha.inputs.output_dtype`, which also rejects an unknown
    ``fp8_format`` for fp8 dtypes)."""
    from ckfmha.inputs import output_dtype

    return output_dtype(dtype, fp8_format).name == "float8_e4m3fnuz"


def input_fp8_format(tensors: dict) -> str:
    """The fp8 encoding of a stage's NumPy inputs: ``fnuz`` when ``q`` (or ``k_cache``) is
    ``ml_dtypes.float8_e4m3fnuz`` (make_inputs' ``fp8_format="fnuz"``), else ``ocp``."""
    for name in ("q", "k_cache", "k"):
        a = tensors.get(name)
        if isinstance(a, np.ndarray):
            return "fnuz" if a.dtype.name == "float8_e4m3fnuz" else "ocp"
    return "ocp"


def stored_output(o: torch.Tensor, dtype: DType, fp8_format: str = "ocp") -> np.ndarray:
    """O as the problem stores it: :func:`to_numpy` of the buffer, and for plain fp8 in the fnuz encoding the
    float32 buffer rounded to ``ml_dtypes.float8_e4m3fnuz`` (NumPy's ``astype``: round to nearest even, exactly as
    the validator rounds the reference, validator.same_precision_reference)."""
    out = to_numpy(o)
    if _fnuz_output(dtype, fp8_format):
        import ml_dtypes

        return out.astype(ml_dtypes.float8_e4m3fnuz)
    return out
