"""Triton kernels of the forward family: attention (batch/group, contiguous/paged K/V, whole/split key range)
and the split-KV combine. Imported only by the triton backend (this module imports triton).

Numerics follow ckfmha's reference (ckfmha/reference/core.py) term by term:
``s = scale * q.k`` -> soft-cap ``cap * tanh(s / cap)`` -> ``+ bias`` / ALiBi -> mask -> online softmax in the
base-2 domain (the optional sink logit seeds the running max and sum) -> dropout on the normalised
probabilities with CK's Philox mapping (ckfmha/rng.py: bit-exact keep/drop; the launch passes the integer keep
threshold of rng.p_undrop_u8) -> P (rounded to the input type) @ V. LSE is natural-log and includes the sink; a
row with no key gives O = 0 and LSE = -inf.

``FAULT`` (a constexpr, ``""`` unless the fault catalogue's Triton hook ``triton.kernel.fault`` names a fault; the
launchers pass it only then, so no production launch compiles or runs anything else): the in-kernel bug classes
of docs/faults.md that no launch argument can express -- ``gqa_head_map`` (K/V head ``h % nhead_k``, not with
packed GQA rows), ``sink_every_split``, ``masked_rows_nan`` (``o = acc / l`` unguarded), ``lse_base2``.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): base-2 softmax; a constexpr so jit functions may read it


@triton.jit
def philox_randval(seed_lo, seed_hi, off_lo, off_hi, bh, rows, cols, ROUNDS: tl.constexpr):
    """uint8-valued randvals (as int32) for rows x cols of sequence-relative positions (ckfmha/rng.py).
    Lane and byte inside the 32x32 tile: CK's order (rng.tile_lane_byte; block_dropout.hpp,
    reference_batched_dropout_randval.hpp)."""
    r = rows % 32
    c = cols % 32
    lane = c + 32 * ((r // 8) % 2)
    byte = 8 * (r // 16) + r % 8
    add = (bh * 64 + lane).to(tl.uint32)
    # the scalar words may arrive as compile-time ints (Triton specializes 1) or int64 tensors: widen, then cut
    zero = tl.zeros_like(lane).to(tl.int64)
    c0 = (off_lo + zero).to(tl.uint32) + add
    carry = (c0 < add).to(tl.uint32)
    c1 = (off_hi + zero).to(tl.uint32) + carry
    c2 = (rows // 32 + zero).to(tl.uint32)
    c3 = (cols // 32 + zero).to(tl.uint32)
    k0 = (seed_lo + zero).to(tl.uint32)
    k1 = (seed_hi + zero).to(tl.uint32)
    M0: tl.constexpr = 0xD2511F53
    M1: tl.constexpr = 0xCD9E8D57
    for i in tl.static_range(ROUNDS):
        if i > 0:
            k0 = k0 + 0x9E3779B9
            k1 = k1 + 0xBB67AE85
        m0 = tl.full(c0.shape, M0, tl.uint32)
        m1 = tl.full(c0.shape, M1, tl.uint32)
        hi0 = tl.umulhi(m0, c0)
        lo0 = m0 * c0
        hi1 = tl.umulhi(m1, c2)
        lo1 = m1 * c2
        n0 = hi1 ^ c1 ^ k0
        n2 = hi0 ^ c3 ^ k1
        c0 = n0
        c1 = lo1
        c2 = n2
        c3 = lo0
    word = byte // 4
    w = tl.where(word == 0, c0, tl.where(word == 1, c1, tl.where(word == 2, c2, c3)))
    return ((w >> ((byte % 4) * 8).to(tl.uint32)) & 0xFF).to(tl.int32)


@triton.jit
def mask_window_yx(mask_kind, mask_left, mask_right, mask_y, mask_x, sq, sk, HAS_MASK: tl.constexpr):
    """CK's (y, x) window of a sequence (mask.hpp, make_generic_attention_mask_from_lr_window): row i sees keys
    ``[i + 1 - y, i + x)``.  ``mask_kind`` 1 / 2: a top-left / bottom-right window (left, right; -1 = unbounded:
    device.mask_args); otherwise the raw coordinates ``mask_y`` / ``mask_x``; no mask: every key (y = sq,
    x = sk).  The forward and the backward kernels both read the window here."""
    if HAS_MASK:
        y = tl.where(
            mask_kind == 1,
            tl.where(mask_left < 0, sq, 1 + mask_left),
            tl.where(mask_kind == 2, tl.where(mask_left < 0, sq, 1 + mask_left + sq - sk), mask_y),
        )
        x = tl.where(
            mask_kind == 1,
            tl.where(mask_right < 0, sk, 1 + mask_right),
            tl.where(mask_kind == 2, tl.where(mask_right < 0, sk, 1 + mask_right + sk - sq), mask_x),
        )
    else:
        y = sq
        x = sk
    return y, x


@triton.jit
def _mask_scores(
    s, offs_n, n0, row_lo, row_hi, sk, MASKED: tl.constexpr, EVEN_N: tl.constexpr, MASK_TAIL: tl.constexpr, mask_from
):
    """-inf where a key block's logits are masked: MASKED, every block by the rows' windows; MASK_TAIL, the
    blocks from ``mask_from`` on (a uniform branch); else the key bound where not EVEN_N."""
    if MASKED:
        allowed = (offs_n[None, :] >= row_lo[:, None]) & (offs_n[None, :] < row_hi[:, None])
        s = tl.where(allowed, s, float("-inf"))
    elif MASK_TAIL:
        if n0 >= mask_from:
            allowed = (offs_n[None, :] >= row_lo[:, None]) & (offs_n[None, :] < row_hi[:, None])
            s = tl.where(allowed, s, float("-inf"))
    elif not EVEN_N:
        s = tl.where((offs_n < sk)[None, :], s, float("-inf"))
    return s


@triton.jit
def _online_softmax(s, m_i, l_i, acc):
    """One key block into the running softmax (base 2): the new row maxima, P = exp2(s - max) (a row with no
    key yet keeps max -inf and P = 0), the running sum and the accumulator rescaled."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    return p, m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None]


@triton.jit
def _attn_block(
    acc,
    m_i,
    l_i,
    q,
    qrow_scale,
    n_lo,
    n_hi,
    K_DESC,
    V_DESC,
    tma_row0,
    K,
    V,
    k_row_base,
    v_row_base,
    stride_kn,
    stride_vn,
    offs_dq,
    offs_dv,
    k_dmask,
    v_dmask,
    BLOCK_TABLE,
    bt_row,
    page_size,
    stride_kpage,
    stride_vpage,
    offs_m,
    row_lo,
    row_hi,
    sk,
    sq,
    qk_scale,
    softcap,
    BIAS,
    bias_base,
    stride_bm,
    stride_bn,
    alibi_slope,
    alibi_mode,
    KDESC,
    kdesc_base,
    VDESC,
    vdesc_base,
    RANDVAL,
    rv_base,
    stride_rm,
    stride_rn,
    seed_lo,
    seed_hi,
    off_lo,
    off_hi,
    bh,
    p_undrop,
    rp_keep,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    EVEN_N: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    BIAS_KIND: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    STORE_RANDVAL: tl.constexpr,
    IS_PAGED: tl.constexpr,
    QSCALE: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
    DROPOUT_ROUNDS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    WARP_SPEC: tl.constexpr = False,
    USE_TMA: tl.constexpr = False,
    MASK_TAIL: tl.constexpr = False,
    mask_from=0,
    KV_VEC: tl.constexpr = 0,
    kd_page_stride=0,
    vd_page_stride=0,
):
    """Key blocks [n_lo, n_hi) into the running softmax state. MASKED: every block is masked (rows' windows and
    the key bound); MASK_TAIL: one pipelined loop whose blocks from ``mask_from`` on are masked (a uniform branch),
    so the diagonal blocks' loads are prefetched with the rest; else no mask (a bound mask where not EVEN_N).

    Long because it is the inner loop of the kernel: Triton inlines it into one device function, and its loads,
    masking, soft-cap, bias, dropout and online-softmax update share the loop's registers (the running ``acc``,
    ``m_i``, ``l_i`` and the prefetched tiles), which further ``@triton.jit`` helpers could only pass around as
    long argument lists; it is kept whole so it reads as the pipeline it compiles to."""
    LOG2E_C: tl.constexpr = 1.4426950408889634
    offs_n0 = tl.arange(0, BLOCK_N)
    for n0 in tl.range(n_lo, n_hi, BLOCK_N, num_stages=NUM_STAGES, warp_specialize=WARP_SPEC):
        offs_n = n0 + offs_n0
        if IS_PAGED:
            page = tl.load(BLOCK_TABLE + bt_row + offs_n // page_size, mask=offs_n < sk, other=0).to(tl.int64)
            local = (offs_n % page_size).to(tl.int64)
            if KV_VEC > 0:
                # vectorized K pool: a key's vec elements at local * vec (stride_kn = vec); V pool (pages, hk,
                # page / vec, d, vec): key -> (key // vec, key % vec), runs of vec keys contiguous from multiples
                # of vec (page % vec == 0 by the pool's shape, blocks start at multiples of BLOCK_N >= vec)
                k_rows = page * stride_kpage + local * KV_VEC
                v_rows = page * stride_vpage + (local // KV_VEC) * stride_vn + local % KV_VEC
                v_rows = tl.max_contiguous(tl.multiple_of(v_rows, KV_VEC), KV_VEC)
            else:
                k_rows = page * stride_kpage + local * stride_kn
                v_rows = page * stride_vpage + local * stride_vn
        else:
            k_rows = offs_n.to(tl.int64) * stride_kn
            v_rows = offs_n.to(tl.int64) * stride_vn
        k_ptrs = K + k_row_base + k_rows[None, :] + offs_dq[:, None]
        v_ptrs = V + v_row_base + v_rows[:, None] + offs_dv[None, :]
        if USE_TMA:
            # bulk tensor copies of whole [BLOCK_N, D] tiles; rows past this head's keys are masked in s
            k = tl.trans(K_DESC.load([tma_row0 + n0, 0]))
            v = V_DESC.load([tma_row0 + n0, 0])
        elif EVEN_N and not MASKED:
            k = tl.load(k_ptrs, mask=k_dmask[:, None], other=0.0)
            v = tl.load(v_ptrs, mask=v_dmask[None, :], other=0.0)
        else:
            nmask = offs_n < sk
            k = tl.load(k_ptrs, mask=k_dmask[:, None] & nmask[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=v_dmask[None, :] & nmask[:, None], other=0.0)
        k = k.to(ELEM)
        v = v.to(ELEM)
        qk = tl.dot(q, k, input_precision=DOT_PREC)
        if QSCALE == 2:
            kd = tl.load(KDESC + kdesc_base + offs_n // 128, mask=offs_n < sk, other=0.0)
            qk = qk * qrow_scale[:, None] * kd[None, :]
        elif QSCALE == 3:  # kv_blockscale (batch prefill): the K descale of each key's (page, kv-head)
            kd = tl.load(KDESC + kdesc_base + page * kd_page_stride, mask=offs_n < sk, other=0.0)
            qk = qk * kd[None, :]
        if HAS_SOFTCAP:
            sn = qk * qk_scale
            t = 2.0 / (tl.exp2(sn * (2.0 * LOG2E_C / softcap)) + 1.0)
            s = (softcap * (1.0 - t)) * LOG2E_C
        else:
            s = qk * (qk_scale * LOG2E_C)
        if BIAS_KIND == 1:
            b_ptrs = (
                BIAS + bias_base + offs_m.to(tl.int64)[:, None] * stride_bm + offs_n.to(tl.int64)[None, :] * stride_bn
            )
            bias = tl.load(b_ptrs, mask=(offs_m[:, None] < sq) & (offs_n[None, :] < sk), other=0.0)
            s += bias.to(tl.float32) * LOG2E_C
        elif BIAS_KIND == 2:
            # vertical (causal masks): +slope*j; top-left: -slope*|i-j|; bottom-right: -slope*|i+sk-sq-j|
            vert = offs_n[None, :] + tl.zeros_like(offs_m)[:, None]
            tlp = tl.abs(offs_m[:, None] - offs_n[None, :])
            brp = tl.abs(offs_m[:, None] + (sk - sq) - offs_n[None, :])
            term = tl.where(alibi_mode == 0, vert, -tl.where(alibi_mode == 1, tlp, brp))
            s += (alibi_slope * LOG2E_C) * term.to(tl.float32)
        s = _mask_scores(s, offs_n, n0, row_lo, row_hi, sk, MASKED, EVEN_N, MASK_TAIL, mask_from)
        p, m_new, l_i, acc = _online_softmax(s, m_i, l_i, acc)
        if HAS_DROPOUT:
            rv = philox_randval(seed_lo, seed_hi, off_lo, off_hi, bh, offs_m[:, None], offs_n[None, :], DROPOUT_ROUNDS)
            if STORE_RANDVAL:
                rv_ptrs = (
                    RANDVAL
                    + rv_base
                    + offs_m.to(tl.int64)[:, None] * stride_rm
                    + offs_n.to(tl.int64)[None, :] * stride_rn
                )
                # stride_rn == 0: the launch wants no random values (a one-byte sink; launch.py says why the
                # store is compiled anyway) and no column passes; a stored buffer's stride is a compile-time 1
                keep = (offs_m[:, None] < sq) & (offs_n[None, :] * stride_rn < sk * stride_rn)
                tl.store(rv_ptrs, rv.to(tl.uint8), mask=keep)
            p = tl.where(rv <= p_undrop, p * rp_keep, 0.0)
        if QSCALE == 2:
            vd = tl.load(VDESC + vdesc_base + offs_n // 128, mask=offs_n < sk, other=0.0)
            p = p * vd[None, :]
        elif QSCALE == 3:
            vd = tl.load(VDESC + vdesc_base + page * vd_page_stride, mask=offs_n < sk, other=0.0)
            p = p * vd[None, :]
        acc = tl.dot(p.to(ELEM), v, acc, input_precision=DOT_PREC)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _k_tile(K_DESC, K, k_row_base, stride_kn, n0, offs_n0, offs_dq, k_dmask, tma_row0, sk, USE_TMA: tl.constexpr):
    """K of the key block at ``n0`` as [D, BLOCK_N]: a TMA tile, or a load masked past the head dim and the keys."""
    if USE_TMA:
        k = tl.trans(K_DESC.load([tma_row0 + n0, 0]))
    else:
        offs_n = n0 + offs_n0
        k = tl.load(
            K + k_row_base + (offs_n.to(tl.int64) * stride_kn)[None, :] + offs_dq[:, None],
            mask=k_dmask[:, None] & (offs_n < sk)[None, :],
            other=0.0,
        )
    return k


@triton.jit
def _v_tile(V_DESC, V, v_row_base, stride_vn, n0, offs_n0, offs_dv, v_dmask, tma_row0, sk, USE_TMA: tl.constexpr):
    """V of the key block at ``n0`` as [BLOCK_N, D], as :func:`_k_tile`."""
    if USE_TMA:
        v = V_DESC.load([tma_row0 + n0, 0])
    else:
        offs_n = n0 + offs_n0
        v = tl.load(
            V + v_row_base + (offs_n.to(tl.int64) * stride_vn)[:, None] + offs_dv[None, :],
            mask=v_dmask[None, :] & (offs_n < sk)[:, None],
            other=0.0,
        )
    return v


@triton.jit
def _softmax_pv(
    qk,
    v,
    acc,
    m_i,
    l_i,
    n0,
    offs_n0,
    row_lo,
    row_hi,
    sk,
    qk_scale,
    mask_from,
    EVEN_N: tl.constexpr,
    MASK_TAIL: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """One key block's Q.K (``qk``) through the mask and the running softmax into ``acc`` (P.V)."""
    s = _mask_scores(qk * (qk_scale * LOG2E), n0 + offs_n0, n0, row_lo, row_hi, sk, False, EVEN_N, MASK_TAIL, mask_from)
    p, m_i, l_i, acc = _online_softmax(s, m_i, l_i, acc)
    acc = tl.dot(p.to(ELEM), v.to(ELEM), acc, input_precision=DOT_PREC)
    return acc, m_i, l_i


@triton.jit
def _attn_block_ahead(
    acc,
    m_i,
    l_i,
    q,
    n_lo,
    n_hi,
    K_DESC,
    V_DESC,
    tma_row0,
    K,
    V,
    k_row_base,
    v_row_base,
    stride_kn,
    stride_vn,
    offs_dq,
    offs_dv,
    k_dmask,
    v_dmask,
    row_lo,
    row_hi,
    sk,
    qk_scale,
    BLOCK_N: tl.constexpr,
    EVEN_N: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    USE_TMA: tl.constexpr,
    MASK_TAIL: tl.constexpr,
    mask_from,
    WARP_SPEC: tl.constexpr = False,
):
    """The unmasked key loop of :func:`_attn_block` with Q.K issued one block ahead (FlashAttention-3's
    intra-warpgroup overlap): each iteration starts the next block's Q.K before the softmax and P.V of the
    current one. Plain problems only (no paging, bias, soft-cap, dropout or per-block scales: launch.py decides);
    same numerics as :func:`_attn_block`. (On an H100 Triton 3.6 still waits for the Q.K before the softmax:
    docs/hopper_forward.md.)

    Long because its signature is the thirty-odd pointers, strides and constexprs of the key loop, one a line, and
    the body (prologue Q.K, the loop, the last block) calls :func:`_softmax_pv` twice with sixteen arguments the
    formatter writes one a line; the logic is a dozen lines."""
    offs_n0 = tl.arange(0, BLOCK_N)
    nblk = tl.cdiv(n_hi - n_lo, BLOCK_N)
    if nblk > 0:
        k = _k_tile(K_DESC, K, k_row_base, stride_kn, n_lo, offs_n0, offs_dq, k_dmask, tma_row0, sk, USE_TMA)
        qk = tl.dot(q, k.to(ELEM), input_precision=DOT_PREC)
        for i in tl.range(0, nblk - 1, num_stages=NUM_STAGES, warp_specialize=WARP_SPEC):
            n0 = n_lo + i * BLOCK_N
            k1 = _k_tile(
                K_DESC, K, k_row_base, stride_kn, n0 + BLOCK_N, offs_n0, offs_dq, k_dmask, tma_row0, sk, USE_TMA
            )
            v = _v_tile(V_DESC, V, v_row_base, stride_vn, n0, offs_n0, offs_dv, v_dmask, tma_row0, sk, USE_TMA)
            qk_next = tl.dot(q, k1.to(ELEM), input_precision=DOT_PREC)
            acc, m_i, l_i = _softmax_pv(
                qk,
                v,
                acc,
                m_i,
                l_i,
                n0,
                offs_n0,
                row_lo,
                row_hi,
                sk,
                qk_scale,
                mask_from,
                EVEN_N,
                MASK_TAIL,
                ELEM,
                DOT_PREC,
            )
            qk = qk_next
        n0 = n_lo + (nblk - 1) * BLOCK_N
        v = _v_tile(V_DESC, V, v_row_base, stride_vn, n0, offs_n0, offs_dv, v_dmask, tma_row0, sk, USE_TMA)
        acc, m_i, l_i = _softmax_pv(
            qk,
            v,
            acc,
            m_i,
            l_i,
            n0,
            offs_n0,
            row_lo,
            row_hi,
            sk,
            qk_scale,
            mask_from,
            EVEN_N,
            MASK_TAIL,
            ELEM,
            DOT_PREC,
        )
    return acc, m_i, l_i


#: the forward kernel's runtime scalars that vary from problem to problem of one kernel (lengths, heads, mask
#: window, seeds, the LSE and random-value strides): not specialized on (Triton would compile a variant per value
#: class -- equal to 1, divisible by 16 -- so items of one kernel would compile several times); the Q/K/V/O and
#: bias strides stay specialized (their divisibility lets loads vectorize)
FWD_NOT_SPECIALIZED = (
    "stride_ls", "stride_lb", "stride_lh", "stride_rb", "stride_rh", "stride_rm",
    "seqlen_q", "seqlen_k", "nhead_q", "group", "num_splits",
    "mask_kind", "mask_left", "mask_right", "mask_y", "mask_x", "alibi_mode", "min_seqlen_q",
    "seed_lo", "seed_hi", "off_lo", "off_hi",
)  # fmt: skip


@triton.jit(do_not_specialize=FWD_NOT_SPECIALIZED)
def attn_fwd_kernel(
    Q,
    K,
    V,
    O,
    LSE,
    BIAS,
    ALIBI,
    SINK,
    RANDVAL,
    BLOCK_TABLE,
    SEQSTART_Q,
    SEQSTART_K,
    SEQLENS_K,
    QDESC,
    KDESC,
    VDESC,
    K_TMA,
    V_TMA,
    CACHE_BATCH_IDX,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_os,
    stride_ob,
    stride_oh,
    stride_om,
    stride_ls,
    stride_lb,
    stride_lh,
    stride_lm,
    stride_bb,
    stride_bh,
    stride_bm,
    stride_bn,
    stride_alb,
    stride_rb,
    stride_rh,
    stride_rm,
    stride_rn,
    stride_btb,
    stride_qdb,
    stride_qdh,
    stride_kdb,
    stride_kdh,
    stride_vdb,
    stride_vdh,
    seqlen_q,
    seqlen_k,
    nhead_q,
    group,
    num_splits,
    page_size,
    qk_scale,
    softcap,
    q_descale,
    k_descale,
    v_descale,
    mask_kind,
    mask_left,
    mask_right,
    mask_y,
    mask_x,
    alibi_mode,
    min_seqlen_q,
    seed_lo,
    seed_hi,
    off_lo,
    off_hi,
    p_undrop,
    rp_keep,
    KV_INDPTR,
    KV_LAST,
    stride_kvec,
    stride_vd,
    HDIM_Q: tl.constexpr,
    HDIM_V: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DQ: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BIAS_KIND: tl.constexpr,
    HAS_LSE: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    STORE_RANDVAL: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SINK: tl.constexpr,
    IS_GROUP: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    IS_PAGED: tl.constexpr,
    HAS_SEQLENS_K: tl.constexpr,
    QSCALE: tl.constexpr,
    EVEN_M: tl.constexpr,
    EVEN_N: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
    DROPOUT_ROUNDS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    PACK_GQA: tl.constexpr,
    REVERSE_M: tl.constexpr,
    WARP_SPEC: tl.constexpr,
    USE_TMA: tl.constexpr,
    TMA_EDGES: tl.constexpr,
    HAS_CBI: tl.constexpr,
    SKIP_MIN_SEQLEN_Q: tl.constexpr,
    FUSE_TAIL: tl.constexpr,
    KV_TABLE: tl.constexpr = 0,
    KV_VEC: tl.constexpr = 0,
    QK_AHEAD: tl.constexpr = False,
    LPT_HEADS: tl.constexpr = 0,
    FAULT: tl.constexpr = "",
):
    """One program = BLOCK_M query rows of one (batch, q-head[, split]).

    Output ``O`` is the final output, or with IS_SPLIT the fp32 partial ``o_acc[split]`` (then ``LSE`` is
    ``lse_acc``), addressed as O + split*stride_os + b*stride_ob + h*stride_oh + row*stride_om + d.

    Long because a Triton JIT kernel is one device function: its signature alone lists every pointer, stride,
    scalar and constexpr the launcher passes (about a hundred), and its body -- program ids, row and head
    addressing, the key-block range of the mask and split, the calls into :func:`_attn_block` and the epilogue
    that stores O and LSE -- shares those values and the per-program registers.
    """
    if LPT_HEADS > 0:
        # one-dimensional grid in longest-first order (batch mode, one query row per head): LPT_HEADS (batch,
        # head) pairs at a time, within them the heaviest query blocks of every pair first, then the next
        # heaviest; a group's programs run together, so its heads' K/V (shared by GQA heads) stay in L2 meanwhile
        num_m = tl.cdiv(seqlen_q, BLOCK_M)
        num_bh = tl.num_programs(0) // num_m
        t = tl.program_id(0)
        g0 = (t // (LPT_HEADS * num_m)) * LPT_HEADS
        nh = tl.minimum(num_bh - g0, LPT_HEADS)
        r = t - g0 * num_m
        pid_m = num_m - 1 - r // nh
        pid_bh = g0 + r % nh
    else:
        pid_m = tl.program_id(0)
        if REVERSE_M:  # causal: the heaviest query blocks first, for a better tail
            pid_m = tl.num_programs(0) - 1 - pid_m
        pid_bh = tl.program_id(1)
    pid_s = tl.program_id(2)
    if PACK_GQA:  # one program serves all q-heads of a kv-head: rows are (query, head-in-group) pairs
        nhead_k = nhead_q // group
        b = pid_bh // nhead_k
        hk = pid_bh % nhead_k
        h = hk * group
    else:
        b = pid_bh // nhead_q
        h = pid_bh % nhead_q
        hk = h // group
        if FAULT == "gqa_head_map":
            hk = h % (nhead_q // group)
    if IS_GROUP:
        q_start = tl.load(SEQSTART_Q + b)
        sq = tl.load(SEQSTART_Q + b + 1) - q_start
        k_start = tl.load(SEQSTART_K + b)
        if KV_TABLE == 1:  # SGLang: CK's (num_page_blocks - 1) * page_block_size + kv_last_page_lens[b], or 0
            npg = tl.load(KV_INDPTR + b + 1) - tl.load(KV_INDPTR + b)
            sk = tl.where(npg > 0, (npg - 1) * page_size + tl.load(KV_LAST + b), 0)
        elif HAS_SEQLENS_K:
            sk = tl.load(SEQLENS_K + b)
        else:
            sk = tl.load(SEQSTART_K + b + 1) - k_start
        bq = b * 0
        if SKIP_MIN_SEQLEN_Q:  # CK's kSkipMinSeqlenQ: short sequences are left untouched
            if sq <= min_seqlen_q:
                return
    else:
        q_start = b * 0
        k_start = b * 0
        sq = seqlen_q
        if HAS_SEQLENS_K:
            sk = tl.load(SEQLENS_K + b)
        else:
            sk = seqlen_k
        bq = b
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    if PACK_GQA:
        nrows = sq * group
        qpos = offs_m // group
        hrow = h + offs_m % group
        q_first = m0 // group
        q_last = tl.minimum((m0 + BLOCK_M - 1) // group, sq - 1)
    else:
        nrows = sq
        qpos = offs_m
        hrow = h + offs_m * 0
        q_first = m0
        q_last = tl.minimum(m0 + BLOCK_M, sq) - 1
    if m0 >= nrows:
        return
    offs_dq = tl.arange(0, BLOCK_DQ)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_doff = offs_dq
    v_doff = offs_dv
    if KV_VEC > 0:  # vectorized pools: K (pages, hk, d / vec, page, vec), V (pages, hk, page / vec, d, vec)
        # runs of vec head-dim elements are contiguous and start at multiples of vec (the pool's shape makes
        # stride_kvec = page * vec and stride_vd = vec): said so, the loads move vec elements at a time
        k_doff = tl.max_contiguous(tl.multiple_of((offs_dq // KV_VEC) * stride_kvec + offs_dq % KV_VEC, KV_VEC), KV_VEC)
        v_doff = offs_dv * KV_VEC
    q_dmask = offs_dq < HDIM_Q
    v_dmask = offs_dv < HDIM_V
    mrow = offs_m < nrows

    # ---- mask coordinates (CK's generic (y, x)) and this program's key range; kind 1/2 = top-left/bottom-right
    # window (a g:y,x mask arrives as the bottom-right window left=y, right=x, as CK's kernels read it; kind 3,
    # raw coordinates mask_y/mask_x, is not launched)
    y, x = mask_window_yx(mask_kind, mask_left, mask_right, mask_y, mask_x, sq, sk, HAS_MASK)
    row_lo = tl.minimum(tl.maximum(qpos + 1 - y, 0), sk)
    row_hi = tl.maximum(tl.minimum(tl.maximum(qpos + x, 0), sk), row_lo)
    lo = tl.minimum(tl.maximum(q_first + 1 - y, 0), sk)
    hi = tl.minimum(tl.maximum(q_last + x, 0), sk)
    if not HAS_MASK:
        lo = b * 0
        hi = sk + b * 0
    if IS_SPLIT:
        per = tl.maximum((sk + num_splits - 1) // num_splits, 1)
        s_lo = tl.minimum(pid_s * per, sk)
        s_hi = tl.minimum(s_lo + per, sk)
        lo = tl.maximum(lo, s_lo)
        hi = tl.minimum(hi, s_hi)
        row_lo = tl.maximum(row_lo, s_lo)
        row_hi = tl.maximum(tl.minimum(row_hi, s_hi), row_lo)
    hi = tl.maximum(hi, lo)

    # ---- Q tile
    q_ptrs = (
        Q
        + bq.to(tl.int64) * stride_qb
        + hrow.to(tl.int64)[:, None] * stride_qh
        + (q_start + qpos).to(tl.int64)[:, None] * stride_qm
        + offs_dq[None, :]
    )
    if EVEN_M:
        q = tl.load(q_ptrs, mask=q_dmask[None, :], other=0.0)
    else:
        q = tl.load(q_ptrs, mask=mrow[:, None] & q_dmask[None, :], other=0.0)
    q = q.to(ELEM)

    qk_s = qk_scale
    if QSCALE == 1:
        qk_s = qk_scale * q_descale * k_descale
    if QSCALE == 3:  # kv_blockscale: a scalar q descale, K/V descales per key (_attn_block)
        qk_s = qk_scale * q_descale
    qrow_scale = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    if QSCALE == 2:
        qrow_scale = tl.load(
            QDESC + b.to(tl.int64) * stride_qdb + hrow * stride_qdh + qpos // 128, mask=mrow, other=0.0
        )

    # ---- running softmax state; the sink seeds it (counted once: split 0)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    if HAS_SINK:
        sink = tl.load(SINK + hrow).to(tl.float32) * 1.4426950408889634
        use_sink = True
        if IS_SPLIT and FAULT != "sink_every_split":
            use_sink = pid_s == 0
        m_i = tl.where(use_sink, sink, float("-inf")) + tl.zeros([BLOCK_M], dtype=tl.float32)
        l_i = tl.where(use_sink, 1.0, 0.0) + tl.zeros([BLOCK_M], dtype=tl.float32)
    else:
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)

    # ---- pointers of this (batch, kv-head)
    if IS_PAGED:
        k_row_base = hk.to(tl.int64) * stride_kh
        v_row_base = hk.to(tl.int64) * stride_vh
        if KV_TABLE == 1:  # SGLang: this sequence's pages start at kv_page_indices[kv_indptr[b]]
            bt_row = tl.load(KV_INDPTR + b).to(tl.int64)
        else:
            bt_row = b.to(tl.int64) * stride_btb
    else:
        bk = bq
        if HAS_CBI:  # KV-cache rows of this batch entry come from cache row cache_batch_idx[b]
            bk = tl.load(CACHE_BATCH_IDX + b)
        k_row_base = bk.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh + k_start.to(tl.int64) * stride_kn
        v_row_base = bk.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh + k_start.to(tl.int64) * stride_vn
        bt_row = 0
    bias_base = bq.to(tl.int64) * stride_bb + h.to(tl.int64) * stride_bh + q_start.to(tl.int64) * stride_bm
    alibi_slope = 0.0
    if BIAS_KIND == 2:
        alibi_slope = tl.load(ALIBI + b * stride_alb + h).to(tl.float32)
    rv_base = bq.to(tl.int64) * stride_rb + h.to(tl.int64) * stride_rh + q_start.to(tl.int64) * stride_rm
    kdesc_base = b.to(tl.int64) * stride_kdb + hk * stride_kdh
    vdesc_base = b.to(tl.int64) * stride_vdb + hk * stride_vdh
    if QSCALE == 3:  # kv_blockscale: descales (pages, hk); the page term (stride_kdb / stride_vdb) is per key
        kdesc_base = hk.to(tl.int64) * stride_kdh
        vdesc_base = hk.to(tl.int64) * stride_vdh
    bh = b * nhead_q + h
    tma_row0 = (bq * (nhead_q // group) + hk) * seqlen_k  # batch-mode bhsd: rows of K/V viewed as [B*Hk*S, D]

    # ---- key blocks: [lo, full_lo) masked, [full_lo, full_hi) unmasked, [full_hi, hi) masked (with FUSE_TAIL the
    # last two in one pipelined loop)
    lo_blk = (lo // BLOCK_N) * BLOCK_N
    if not HAS_MASK and not IS_SPLIT:
        full_lo = lo_blk
        full_hi = (hi // BLOCK_N) * BLOCK_N
        if EVEN_N:
            full_hi = hi
    else:
        first_hi = tl.minimum(tl.maximum(q_first + x, 0), sk)  # end of the first row (smallest end)
        last_lo = tl.minimum(tl.maximum(q_last + 1 - y, 0), sk)  # start of the last row (largest start)
        if IS_SPLIT:
            first_hi = tl.minimum(first_hi, s_hi)
            last_lo = tl.maximum(last_lo, s_lo)
        full_lo = tl.maximum(((last_lo + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, lo_blk)
        full_hi = (first_hi // BLOCK_N) * BLOCK_N
        full_lo = tl.minimum(full_lo, hi)
        full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
        if not EVEN_N:
            full_hi = tl.maximum(tl.minimum(full_hi, (sk // BLOCK_N) * BLOCK_N), full_lo)
    # three phases, one call site (a static loop: each phase compiles to its own loop, as three calls would):
    # 0 the leading masked blocks [lo_blk, full_lo); 1 the unmasked blocks [full_lo, mid_hi), pipelined (with
    # FUSE_TAIL they take the trailing masked blocks too, masked from full_hi on; QK_AHEAD runs them in the
    # look-ahead loop); 2 the trailing masked blocks [full_hi, hi), unless FUSE_TAIL took them
    mid_hi = full_hi
    if FUSE_TAIL:
        mid_hi = hi
    for PHASE in tl.static_range(3):
        if PHASE == 1 and QK_AHEAD:
            acc, m_i, l_i = _attn_block_ahead(
                acc,
                m_i,
                l_i,
                q,
                full_lo,
                mid_hi,
                K_TMA,
                V_TMA,
                tma_row0,
                K,
                V,
                k_row_base,
                v_row_base,
                stride_kn,
                stride_vn,
                k_doff,
                v_doff,
                q_dmask,
                v_dmask,
                row_lo,
                row_hi,
                sk,
                qk_s,
                BLOCK_N,
                EVEN_N or not FUSE_TAIL,
                ELEM,
                DOT_PREC,
                NUM_STAGES,
                USE_TMA,
                FUSE_TAIL,
                full_hi,
                WARP_SPEC,
            )
        elif PHASE < 2 or not FUSE_TAIL:
            n_lo = lo_blk if PHASE == 0 else (full_lo if PHASE == 1 else full_hi)
            n_hi = full_lo if PHASE == 0 else (mid_hi if PHASE == 1 else hi)
            acc, m_i, l_i = _attn_block(
                acc,
                m_i,
                l_i,
                q,
                qrow_scale,
                n_lo,
                n_hi,
                K_TMA,
                V_TMA,
                tma_row0,
                K,
                V,
                k_row_base,
                v_row_base,
                stride_kn,
                stride_vn,
                k_doff,
                v_doff,
                q_dmask,
                v_dmask,
                BLOCK_TABLE,
                bt_row,
                page_size,
                stride_kb,
                stride_vb,
                qpos,
                row_lo,
                row_hi,
                sk,
                sq,
                qk_s,
                softcap,
                BIAS,
                bias_base,
                stride_bm,
                stride_bn,
                alibi_slope,
                alibi_mode,
                KDESC,
                kdesc_base,
                VDESC,
                vdesc_base,
                RANDVAL,
                rv_base,
                stride_rm,
                stride_rn,
                seed_lo,
                seed_hi,
                off_lo,
                off_hi,
                bh,
                p_undrop,
                rp_keep,
                BLOCK_N,
                PHASE != 1,  # the edge phases mask every block
                (EVEN_N or not FUSE_TAIL) if PHASE == 1 else False,
                HAS_SOFTCAP,
                BIAS_KIND,
                HAS_DROPOUT,
                STORE_RANDVAL,
                IS_PAGED,
                QSCALE,
                ELEM,
                DOT_PREC,
                DROPOUT_ROUNDS,
                NUM_STAGES if PHASE == 1 else 1,
                WARP_SPEC and PHASE == 1,
                USE_TMA if PHASE == 1 else (USE_TMA and TMA_EDGES),
                FUSE_TAIL and PHASE == 1,
                full_hi,
                KV_VEC=KV_VEC,
                kd_page_stride=stride_kdb,
                vd_page_stride=stride_vdb,
            )

    # ---- epilogue
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    if FAULT == "masked_rows_nan":
        o = acc / l_i[:, None]
    else:
        o = acc / l_safe[:, None]
    if QSCALE == 1:
        o = o * v_descale
    if FAULT == "lse_base2":
        lse = tl.where(empty, float("-inf"), m_i + tl.log2(l_safe))
    else:
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(l_safe)) / 1.4426950408889634)
    rows64 = (q_start + qpos).to(tl.int64)
    o_ptrs = (
        O
        + pid_s.to(tl.int64) * stride_os
        + bq.to(tl.int64) * stride_ob
        + hrow.to(tl.int64)[:, None] * stride_oh
        + rows64[:, None] * stride_om
        + offs_dv[None, :]
    )
    tl.store(o_ptrs, o.to(O.dtype.element_ty), mask=mrow[:, None] & v_dmask[None, :])
    if HAS_LSE or IS_SPLIT:
        l_ptrs = (
            LSE
            + pid_s.to(tl.int64) * stride_ls
            + bq.to(tl.int64) * stride_lb
            + hrow.to(tl.int64) * stride_lh
            + rows64 * stride_lm
        )
        tl.store(l_ptrs, lse, mask=mrow)


@triton.jit
def splitkv_combine_kernel(
    OACC,
    LSEACC,
    O,
    LSE,
    stride_as,
    stride_ab,
    stride_ah,
    stride_am,
    stride_ls,
    stride_lb,
    stride_lh,
    stride_lm,
    stride_ob,
    stride_oh,
    stride_om,
    stride_Lb,
    stride_Lh,
    stride_Lm,
    total_rows,
    nhead_q,
    num_splits,
    HDIM_V: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
    HAS_LSE: tl.constexpr,
):
    """o = sum_i exp(lse_i - lse) o_i, lse = log(sum_i exp(lse_i)); rows with lse = -inf give o = 0.

    Long because a Triton JIT kernel is one device function: its signature lists the strides of the four tensors
    it addresses, and the two passes over the splits (the LSE reduction, then the weighted sum of the partial
    outputs) share the per-program rows and registers."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // nhead_q
    h = pid_bh % nhead_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_s = tl.arange(0, MAX_SPLITS)
    offs_d = tl.arange(0, BLOCK_DV)
    mrow = offs_m < total_rows
    smask = offs_s < num_splits
    l_ptrs = (
        LSEACC
        + offs_s.to(tl.int64)[None, :] * stride_ls
        + b.to(tl.int64) * stride_lb
        + h.to(tl.int64) * stride_lh
        + offs_m.to(tl.int64)[:, None] * stride_lm
    )
    lse_i = tl.load(l_ptrs, mask=mrow[:, None] & smask[None, :], other=float("-inf"))
    mx = tl.max(lse_i, 1)
    mx_safe = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp(lse_i - mx_safe[:, None])
    tot = tl.sum(w, 1)
    empty = tot == 0.0
    tot_safe = tl.where(empty, 1.0, tot)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    dmask = offs_d < HDIM_V
    for s in range(0, num_splits):
        ws = tl.sum(tl.where(offs_s[None, :] == s, w, 0.0), 1)
        o_ptrs = (
            OACC
            + s * stride_as
            + b.to(tl.int64) * stride_ab
            + h.to(tl.int64) * stride_ah
            + offs_m.to(tl.int64)[:, None] * stride_am
            + offs_d[None, :]
        )
        o_s = tl.load(o_ptrs, mask=mrow[:, None] & dmask[None, :], other=0.0)
        acc += ws[:, None] * o_s
    o = acc / tot_safe[:, None]
    out_ptrs = (
        O
        + b.to(tl.int64) * stride_ob
        + h.to(tl.int64) * stride_oh
        + offs_m.to(tl.int64)[:, None] * stride_om
        + offs_d[None, :]
    )
    tl.store(out_ptrs, o.to(O.dtype.element_ty), mask=mrow[:, None] & dmask[None, :])
    if HAS_LSE:
        lse = tl.where(empty, float("-inf"), mx_safe + tl.log(tot_safe))
        tl.store(
            LSE + b.to(tl.int64) * stride_Lb + h.to(tl.int64) * stride_Lh + offs_m.to(tl.int64) * stride_Lm,
            lse,
            mask=mrow,
        )
