"""Triton kernels of the KV-cache families: the append-KV row kernel (RoPE + cache store).

Imported only by the triton backend (this module imports triton). The attention of append-KV's second stage and
the batch-prefill attention are :func:`ckfmha.backends.triton.kernels.attn_fwd_kernel` (its paged address modes:
vLLM block table, SGLang page table, vectorized pools); only the append itself has a kernel of its own here.

:func:`append_rows_kernel` copies ``nrows`` rows per (batch, head) from a source tensor to a destination, rotating
the first ``ROTARY_DIM`` features with RoPE on the way, as CK's append-KV kernel (fmha_fwd_appendkv_kernel.hpp,
block_rotary_embedding.hpp; ckfmha/backends/common/rope.py is the cpu twin):

========================  ==========================================================================================
argument                  meaning
========================  ==========================================================================================
DST_MODE 0                destination row ``i`` of batch ``b`` (rotated q: a new tensor of q's layout)
DST_MODE 1                contiguous cache: row ``cache_batch_idx[b]`` (HAS_CBI) or ``b``, key ``cache_seqlens[b] + i``
DST_MODE 2                paged cache (vLLM block table): key ``j = cache_seqlens[b] + i`` in page
                          ``block_table[b, j // page_size]`` at offset ``j % page_size`` (CK's PageBlockNavigator)
ROTARY_DIM 0              plain copy (vnew, knew without RoPE)
INTERLEAVED               pairs (2t, 2t + 1) with table column t: ``x*cos - y*sin`` / ``y*cos + x*sin``; else
                          half-rotated: t < R/2 with t + R/2, column t mod R/2 (``-sin`` for the first half)
PER_ROW                   table row ``cache_seqlens[b] + i``; else ``cache_seqlens[b]`` for every row (q of an
                          unmasked problem: CK's q table view has row stride ``has_mask * rotary_dim / 2``)
========================  ==========================================================================================

``FAULT`` (a constexpr, ``""`` unless the fault catalogue's Triton hook ``triton.kernel.fault`` names a fault; the
launcher passes it only then): ``rope_halves_swapped`` (each rotated feature and its partner swap roles) and
``rope_dim_ignored`` (every feature rotated as if ROTARY_DIM were HDIM, the table columns wrapping), the bug
classes of docs/faults.md no launch argument can express.

The rotation runs in float32 (values, cos and sin widened), one operation at a time (the launch turns Triton's
fp fusion off: no fused multiply-add, as CK's kernel and ckfmha/backends/common/rope.py), and rounds once to the
destination's type.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rope(
    x,
    src_row,
    offs_s,
    offs_d,
    smask,
    cache,
    COS,
    SIN,
    stride_tab,
    ROTARY_DIM: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PER_ROW: tl.constexpr,
    HDIM: tl.constexpr = 0,
    FAULT: tl.constexpr = "",
):
    """``x`` (rows x features, loaded from ``src_row + feature``) with its first ROTARY_DIM features rotated, in
    float32 (module table: partner feature, table column and sign of the interleaved / half-rotated forms)."""
    DIM: tl.constexpr = HDIM if FAULT == "rope_dim_ignored" else ROTARY_DIM
    if INTERLEAVED:
        partner = offs_d ^ 1
        col = offs_d // 2
        first = offs_d % 2 == 0
    else:
        HALF: tl.constexpr = DIM // 2
        first = offs_d < HALF
        partner = tl.where(first, offs_d + HALF, offs_d - HALF)
        col = offs_d % HALF
    if FAULT == "rope_dim_ignored":  # the table has ROTARY_DIM / 2 columns: they wrap
        col = col % (ROTARY_DIM // 2)
    rot = offs_d < DIM
    r2 = smask[:, None] & rot[None, :]
    y = tl.load(src_row + partner[None, :], mask=r2, other=0.0).to(tl.float32)
    if PER_ROW:
        trow = cache + offs_s
    else:
        trow = cache + offs_s * 0
    t_off = trow.to(tl.int64)[:, None] * stride_tab + col[None, :]
    c = tl.load(COS + t_off, mask=r2, other=1.0).to(tl.float32)
    s = tl.load(SIN + t_off, mask=r2, other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    own = xf
    other = y
    if FAULT == "rope_halves_swapped":
        own = y
        other = xf
    xc = own * c
    ys = other * s
    return tl.where(rot[None, :], tl.where(first[None, :], xc - ys, xc + ys), xf)


@triton.jit
def append_rows_kernel(
    SRC,
    DST,
    CACHE_SEQLENS,
    CACHE_BATCH_IDX,
    BLOCK_TABLE,
    COS,
    SIN,
    stride_sb,
    stride_sh,
    stride_ss,
    stride_db,
    stride_dh,
    stride_ds,
    stride_btb,
    stride_tab,
    nrows,
    nhead,
    page_size,
    HDIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ROTARY_DIM: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PER_ROW: tl.constexpr,
    DST_MODE: tl.constexpr,
    HAS_CBI: tl.constexpr,
    FAULT: tl.constexpr = "",
):
    """One program = BLOCK_S rows of one (batch, head): load, rotate (ROTARY_DIM > 0), store (module table).
    Long because a ``@triton.jit`` kernel's argument list (tensors, strides, the fault switch) is one signature and
    its body one program: splitting it would mean a second launch or a device function taking the same list."""
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // nhead
    h = pid_bh % nhead
    offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    smask = offs_s < nrows
    dmask = offs_d < HDIM
    m2 = smask[:, None] & dmask[None, :]
    cache = tl.load(CACHE_SEQLENS + b)
    src_row = SRC + b.to(tl.int64) * stride_sb + h.to(tl.int64) * stride_sh + offs_s.to(tl.int64)[:, None] * stride_ss
    x = tl.load(src_row + offs_d[None, :], mask=m2, other=0.0)
    if ROTARY_DIM > 0:
        x = _rope(
            x,
            src_row,
            offs_s,
            offs_d,
            smask,
            cache,
            COS,
            SIN,
            stride_tab,
            ROTARY_DIM,
            INTERLEAVED,
            PER_ROW,
            HDIM,
            FAULT,
        )
    x = x.to(DST.dtype.element_ty)
    if DST_MODE == 0:
        dst_off = b.to(tl.int64) * stride_db + offs_s.to(tl.int64) * stride_ds
    elif DST_MODE == 1:
        brow = b
        if HAS_CBI:
            brow = tl.load(CACHE_BATCH_IDX + b)
        dst_off = brow.to(tl.int64) * stride_db + (cache + offs_s).to(tl.int64) * stride_ds
    else:
        key = cache + offs_s
        page = tl.load(BLOCK_TABLE + b.to(tl.int64) * stride_btb + key // page_size, mask=smask, other=0).to(tl.int64)
        dst_off = page * stride_db + (key % page_size).to(tl.int64) * stride_ds
    dst = DST + h.to(tl.int64) * stride_dh + dst_off[:, None] + offs_d[None, :]
    tl.store(dst, x, mask=m2)
