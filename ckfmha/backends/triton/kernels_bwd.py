"""Triton kernels of the backward family: ``bwd_dot_do_o``, ``bwd_dq_dk_dv`` and ``bwd_convert_dq``.
Imported only by the triton backend (this module imports triton).

Numerics follow ckfmha's reference (ckfmha/reference/core.py ``_Gradients``) and the cpu stages
(ckfmha/backends/cpu/stages.py, engine.backward_tiled) term by term:

=================  =============================================================================================
kernel             computes
=================  =============================================================================================
dot_do_o           ``D = rowsum(dO * O)`` in fp32 from O as the forward stored it (output dtype); one program per
                   BLOCK_M rows of one (batch, q-head); group mode runs over the packed tokens (no per-sequence
                   work: D has the LSE's layout)
dq_dk_dv           one program per BLOCK_N keys of one (batch/sequence, *q*-head) -- FlashAttention-2's key-block
                   loop -- iterating over the query blocks that see the keys (CK's (y, x) window per row):
                   ``s = scale * q.k`` (+ bias / ALiBi, masked), ``P = exp(s - LSE)`` (the forward's LSE),
                   ``dV += (P * Z / pk)^T dO``, ``dP = (dO V^T) * Z / pk``, ``dS = P * (dP - D)``,
                   ``dK += scale * dS^T Q``, ``dQ += scale * dS K``; P and dS are rounded to the input type before
                   their GEMMs (CK's reference); ``Z`` is the dropout keep mask of ckfmha's Philox mapping
                   (:func:`ckfmha.backends.triton.kernels.philox_randval`, the forward's own, bit-exact with
                   ckfmha/rng.py); dK/dV are stored per q-head (CK's raw layout, fmha_bwd_kernel.hpp), dBias = dS
                   per q-head and batch; dQ: ``atomic_add`` into ``dq_acc[0]`` (non-deterministic), or a plain
                   store into the key block's own slice ``dq_acc[key block]`` (deterministic: no atomics, one
                   writer per element)
convert_dq         ``dQ = sum_i dq_acc[i]`` in slice order (fp32), cast to the input type; bitwise reproducible
=================  =============================================================================================

Group mode reads per-sequence offsets and lengths on the device (seqstart_q, seqstart_k, seqlen_k); the grids come
from the problem's upper bounds (batch, max seqlen), programs past their sequence return at once.

``FAULT`` (dq_dk_dv's constexpr, ``""`` unless the fault catalogue's Triton hook ``triton.kernel.fault`` names a
fault; the launcher passes it only then, so no production launch compiles or runs anything else): the in-kernel
bug classes of docs/faults.md no launch argument can express -- ``gqa_head_map``, ``empty_seqlen_q_nan_dkdv``,
``dk_scale_missing``, ``dq_scale_missing``, ``dq_stored_not_accumulated`` (a store where the non-deterministic
kernel adds).  (``masked_rows_nan`` has no backward half here: P is masked after its exponential, so an unguarded
``lse = -inf`` gives no NaN.)
"""

from __future__ import annotations

import triton
import triton.language as tl

from ckfmha.backends.triton.kernels import mask_window_yx, philox_randval

#: the backward kernels' integer arguments that vary from problem to problem (lengths, heads, the GQA group, the mask
#: window, seeds, and the strides of the per-row LSE / D buffers, which are the lengths): not specialized on, as the
#: forward's (kernels.FWD_NOT_SPECIALIZED) -- Triton would compile a variant per value class (equal to 1, divisible
#: by 16), so the items of one kernel compiled up to ten times in a nightly; the Q/K/V/dO/dQ/dK/dV and bias strides
#: stay specialized (their divisibility lets loads vectorize)
BWD_NOT_SPECIALIZED = (
    "seqlen_q", "seqlen_k", "nhead_q", "group", "stride_lb", "stride_lh",
    "mask_kind", "mask_left", "mask_right", "alibi_mode", "seed_lo", "seed_hi", "off_lo", "off_hi",
)  # fmt: skip
#: the same for the dot_do_o kernel (rows, heads, D's strides) and the convert_dq kernel (rows, heads, splits)
DOT_DO_O_NOT_SPECIALIZED = ("rows", "nhead_q", "stride_db", "stride_dh")
CONVERT_DQ_NOT_SPECIALIZED = ("rows", "nhead_q", "nsplits")


@triton.jit(do_not_specialize=DOT_DO_O_NOT_SPECIALIZED)
def bwd_dot_do_o_kernel(
    O,
    DO,
    D,
    stride_ob,
    stride_oh,
    stride_om,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_db,
    stride_dh,
    stride_dm,
    rows,
    nhead_q,
    HDIM_V: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """D[b, h, r] = sum_d dO[b, h, r, d] * O[b, h, r, d] for BLOCK_M rows ``r < rows`` of one (b, h)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // nhead_q
    h = pid_bh % nhead_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DV)
    mrow = offs_m < rows
    m2 = mrow[:, None] & (offs_d < HDIM_V)[None, :]
    rows64 = offs_m.to(tl.int64)[:, None]
    o = tl.load(
        O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh + rows64 * stride_om + offs_d[None, :],
        m2,
        other=0.0,
    )
    do = tl.load(
        DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh + rows64 * stride_dom + offs_d[None, :],
        m2,
        other=0.0,
    )
    d = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(D + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh + offs_m.to(tl.int64) * stride_dm, d, mrow)


@triton.jit(do_not_specialize=CONVERT_DQ_NOT_SPECIALIZED)
def bwd_convert_dq_kernel(
    DQ_ACC,
    DQ,
    stride_as,
    stride_ab,
    stride_ah,
    stride_am,
    stride_qb,
    stride_qh,
    stride_qm,
    rows,
    nhead_q,
    nsplits,
    HDIM_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_DQ: tl.constexpr,
):
    """dQ[b, h, r] = (dq_acc[0] + dq_acc[1] + ... + dq_acc[nsplits - 1])[b, h, r] in this order, in fp32, then cast
    to dQ's type (the cpu stage's order, so deterministic kernels are bitwise reproducible)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // nhead_q
    h = pid_bh % nhead_q
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DQ)
    m2 = (offs_m < rows)[:, None] & (offs_d < HDIM_Q)[None, :]
    rows64 = offs_m.to(tl.int64)[:, None]
    src = DQ_ACC + b.to(tl.int64) * stride_ab + h.to(tl.int64) * stride_ah + rows64 * stride_am + offs_d[None, :]
    acc = tl.load(src, m2, other=0.0)
    for s in range(1, nsplits):
        acc += tl.load(src + s * stride_as, m2, other=0.0)
    dst = DQ + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh + rows64 * stride_qm + offs_d[None, :]
    tl.store(dst, acc.to(DQ.dtype.element_ty), m2)


@triton.jit
def _bwd_query_blocks(
    dk_acc,
    dv_acc,
    k,
    v,
    m_lo,
    m_hi,
    q_base,
    do_base,
    LSE,
    D,
    l_base,
    acc_base,
    bias_base,
    dbias_base,
    Q_DESC,
    DO_DESC,
    DQ_DESC,
    desc_bh,
    stride_qm,
    stride_dom,
    stride_lm,
    stride_am,
    stride_bm,
    stride_bn,
    stride_dbm,
    q_start,
    sq,
    sk,
    y,
    x,
    offs_n,
    nmask,
    offs_dq,
    offs_dv,
    qk_scale2,
    scale,
    alibi_slope,
    alibi_mode,
    bh,
    seed_lo,
    seed_hi,
    off_lo,
    off_hi,
    p_undrop,
    rp_keep,
    HDIM_Q: tl.constexpr,
    HDIM_V: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BIAS_KIND: tl.constexpr,
    HAS_DBIAS: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    DETERMINISTIC: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
    DROPOUT_ROUNDS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    USE_TMA: tl.constexpr,
    DQ_TMA_ADD: tl.constexpr,
    FAULT: tl.constexpr = "",
):
    """Query blocks ``[m_lo, m_hi)`` into the key block's dK/dV accumulators (the module table's dq_dk_dv terms).
    ``MASKED``: the blocks may hold rows or keys outside the sequence or outside a row's window -- every load and
    P are masked; otherwise every (row, key) pair of every block is inside (no masks: the loop the kernel spends
    its time in).  ``USE_TMA``: Q and dO tiles through tensor descriptors (rows past the sequence read as 0);
    ``DQ_TMA_ADD``: dQ added into ``dq_acc[0]`` by the descriptor's reduce-add (non-deterministic only).

    Long because it is the backward's inner loop: one device function whose body (loads, scores, bias, mask, P,
    dropout, dV, dP, dS, dBias, dK, dQ) shares the program's registers; splitting it would only move the
    argument list."""
    LOG2E: tl.constexpr = 1.4426950408889634
    for m0 in tl.range(m_lo, m_hi, BLOCK_M, num_stages=NUM_STAGES):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mrow = offs_m < sq
        rows64 = (q_start + offs_m).to(tl.int64)
        if USE_TMA:
            q = Q_DESC.load([desc_bh, m0, 0]).reshape(BLOCK_M, HDIM_Q).to(ELEM)
            do = DO_DESC.load([desc_bh, m0, 0]).reshape(BLOCK_M, HDIM_V).to(ELEM)
        elif MASKED:
            q = tl.load(
                q_base + rows64[:, None] * stride_qm + offs_dq[None, :],
                mrow[:, None] & (offs_dq < HDIM_Q)[None, :],
                other=0.0,
            ).to(ELEM)
            do = tl.load(
                do_base + rows64[:, None] * stride_dom + offs_dv[None, :],
                mrow[:, None] & (offs_dv < HDIM_V)[None, :],
                other=0.0,
            ).to(ELEM)
        else:
            q = tl.load(
                q_base + rows64[:, None] * stride_qm + offs_dq[None, :], (offs_dq < HDIM_Q)[None, :], other=0.0
            ).to(ELEM)
            do = tl.load(
                do_base + rows64[:, None] * stride_dom + offs_dv[None, :], (offs_dv < HDIM_V)[None, :], other=0.0
            ).to(ELEM)
        if MASKED:
            lse = tl.load(LSE + l_base + rows64 * stride_lm, mrow, other=float("inf"))
            dd = tl.load(D + l_base + rows64 * stride_lm, mrow, other=0.0)
        else:
            lse = tl.load(LSE + l_base + rows64 * stride_lm)
            dd = tl.load(D + l_base + rows64 * stride_lm)
        lse = tl.where(lse == float("-inf"), float("inf"), lse)  # a row without keys: P = 0
        # transposed tiles [BLOCK_N keys, BLOCK_M queries] (the Triton tutorial's dK/dV loop): P^T and dS^T are
        # the register operands of the dV and dK GEMMs, so only dQ's GEMM transposes a register tile
        qkt = tl.dot(k, tl.trans(q), input_precision=DOT_PREC)
        if BIAS_KIND == 0:
            pt = tl.exp2(qkt * qk_scale2 - (lse * LOG2E)[None, :])  # scale * log2(e) folded into one multiply
        else:
            st = qkt * scale
            if BIAS_KIND == 1:
                if MASKED:
                    bias = tl.load(
                        bias_base + rows64[None, :] * stride_bm + offs_n.to(tl.int64)[:, None] * stride_bn,
                        nmask[:, None] & mrow[None, :],
                        other=0.0,
                    )
                else:
                    bias = tl.load(bias_base + rows64[None, :] * stride_bm + offs_n.to(tl.int64)[:, None] * stride_bn)
                st += bias.to(tl.float32)
            else:
                # vertical (causal masks): +slope*j; top-left: -slope*|i-j|; bottom-right: -slope*|i+sk-sq-j|
                vert = offs_n[:, None] + tl.zeros_like(offs_m)[None, :]
                tlp = tl.abs(offs_m[None, :] - offs_n[:, None])
                brp = tl.abs(offs_m[None, :] + (sk - sq) - offs_n[:, None])
                term = tl.where(alibi_mode == 0, vert, -tl.where(alibi_mode == 1, tlp, brp))
                st += alibi_slope * term.to(tl.float32)
            pt = tl.exp2(st * LOG2E - (lse * LOG2E)[None, :])
        if MASKED:
            allowed = nmask[:, None] & mrow[None, :]
            if HAS_MASK:
                row_lo = tl.minimum(tl.maximum(offs_m + 1 - y, 0), sk)
                row_hi = tl.minimum(tl.maximum(offs_m + x, 0), sk)
                allowed = allowed & (offs_n[:, None] >= row_lo[None, :]) & (offs_n[:, None] < row_hi[None, :])
            pt = tl.where(allowed, pt, 0.0)
        dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)
        if HAS_DROPOUT:
            rv = philox_randval(seed_lo, seed_hi, off_lo, off_hi, bh, offs_m[None, :], offs_n[:, None], DROPOUT_ROUNDS)
            keep = rv <= p_undrop
            pdt = tl.where(keep, pt * rp_keep, 0.0)
            dpt = tl.where(keep, dpt * rp_keep, 0.0)
        else:
            pdt = pt
        dv_acc = tl.dot(pdt.to(ELEM), do, dv_acc, input_precision=DOT_PREC)
        dst = pt * (dpt - dd[None, :])
        if HAS_DBIAS:
            tl.store(
                dbias_base + rows64[None, :] * stride_dbm + offs_n[:, None],
                dst.to(dbias_base.dtype.element_ty),
                nmask[:, None] & mrow[None, :],
            )
        dst_r = dst.to(ELEM)
        dk_acc = tl.dot(dst_r, q, dk_acc, input_precision=DOT_PREC)
        dq = tl.dot(tl.trans(dst_r), k, input_precision=DOT_PREC)
        if FAULT != "dq_scale_missing":
            dq = dq * scale
        if DQ_TMA_ADD:
            if FAULT == "dq_stored_not_accumulated":
                DQ_DESC.store([desc_bh, m0, 0], dq.reshape(1, BLOCK_M, HDIM_Q))
            else:
                DQ_DESC.atomic_add([desc_bh, m0, 0], dq.reshape(1, BLOCK_M, HDIM_Q))
        else:
            dq_ptrs = acc_base + rows64[:, None] * stride_am + offs_dq[None, :]
            if MASKED:
                dq_mask = mrow[:, None] & (offs_dq < HDIM_Q)[None, :]
            else:
                dq_mask = (offs_dq < HDIM_Q)[None, :]
            if DETERMINISTIC:
                tl.store(dq_ptrs, dq, dq_mask)  # this key block's own slice: one writer per element
            elif FAULT == "dq_stored_not_accumulated":
                tl.store(dq_ptrs, dq, dq_mask)
            else:
                tl.atomic_add(dq_ptrs, dq, dq_mask, sem="relaxed")
    return dk_acc, dv_acc


@triton.jit(do_not_specialize=BWD_NOT_SPECIALIZED)
def bwd_dq_dk_dv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    D,
    DQ_ACC,
    DK,
    DV,
    BIAS,
    DBIAS,
    ALIBI,
    Q_DESC,
    DO_DESC,
    DQ_DESC,
    SEQSTART_Q,
    SEQSTART_K,
    SEQLENS_K,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_dob,
    stride_doh,
    stride_dom,
    stride_lb,
    stride_lh,
    stride_lm,
    stride_as,
    stride_ab,
    stride_ah,
    stride_am,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_bb,
    stride_bh,
    stride_bm,
    stride_bn,
    stride_dbb,
    stride_dbh,
    stride_dbm,
    stride_alb,
    seqlen_q,
    seqlen_k,
    nhead_q,
    group,
    scale,
    mask_kind,
    mask_left,
    mask_right,
    alibi_mode,
    seed_lo,
    seed_hi,
    off_lo,
    off_hi,
    p_undrop,
    rp_keep,
    HDIM_Q: tl.constexpr,
    HDIM_V: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DQ: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BIAS_KIND: tl.constexpr,
    HAS_DBIAS: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    IS_GROUP: tl.constexpr,
    DETERMINISTIC: tl.constexpr,
    ELEM: tl.constexpr,
    DOT_PREC: tl.constexpr,
    DROPOUT_ROUNDS: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    USE_TMA: tl.constexpr = False,
    DQ_TMA_ADD: tl.constexpr = False,
    FAULT: tl.constexpr = "",
):
    """One program = BLOCK_N keys of one (batch or sequence, q-head); see the module table.

    Long because a Triton JIT kernel is one device function: its signature lists every pointer, stride, scalar
    and constexpr the launcher passes, and its body -- sequence addressing, the window's query range, the query
    loop (scores, bias, mask, P, dropout, dV, dP, dS, dBias, dK, dQ) and the epilogue storing dK/dV -- shares the
    program's registers (the K/V tiles and the dK/dV accumulators)."""
    LOG2E: tl.constexpr = 1.4426950408889634
    tl.static_assert(not (DQ_TMA_ADD and DETERMINISTIC), "deterministic kernels add no dQ atomically")
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // nhead_q
    h = pid_bh % nhead_q
    hk = h // group
    if FAULT == "gqa_head_map":
        hk = h % (nhead_q // group)
    if IS_GROUP:
        q_start = tl.load(SEQSTART_Q + b)
        sq = tl.load(SEQSTART_Q + b + 1) - q_start
        k_start = tl.load(SEQSTART_K + b)
        sk = tl.load(SEQLENS_K + b)
        bq = b * 0
    else:
        q_start = b * 0
        k_start = b * 0
        sq = seqlen_q + b * 0
        sk = seqlen_k + b * 0
        bq = b
    n0 = pid_n * BLOCK_N
    if n0 >= sk:
        return
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_dq = tl.arange(0, BLOCK_DQ)
    offs_dv = tl.arange(0, BLOCK_DV)
    nmask = offs_n < sk
    kmask = nmask[:, None] & (offs_dq < HDIM_Q)[None, :]
    vmask = nmask[:, None] & (offs_dv < HDIM_V)[None, :]
    keys64 = (k_start + offs_n).to(tl.int64)[:, None]
    k = tl.load(
        K + bq.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh + keys64 * stride_kn + offs_dq[None, :],
        kmask,
        other=0.0,
    ).to(ELEM)
    v = tl.load(
        V + bq.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh + keys64 * stride_vn + offs_dv[None, :],
        vmask,
        other=0.0,
    ).to(ELEM)
    dk_acc = tl.zeros([BLOCK_N, BLOCK_DQ], dtype=tl.float32)
    dv_acc = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)

    # query rows that see keys [n0, last]: row i sees [i + 1 - y, i + x), so i in (n0 - x, last + y)
    y, x = mask_window_yx(mask_kind, mask_left, mask_right, sq, sk, sq, sk, HAS_MASK)
    last = tl.minimum(n0 + BLOCK_N, sk) - 1
    m_lo = tl.maximum(n0 - x + 1, 0)
    m_hi = tl.minimum(last + y, sq)
    if not HAS_MASK:
        m_lo = b * 0
        m_hi = sq
    m_lo = (m_lo // BLOCK_M) * BLOCK_M
    m_hi = tl.maximum(m_hi, m_lo)  # no row sees the block (e.g. keys past a top-left window's last row): empty
    # rows that see every key of a full key block: i + 1 - y <= n0 and last < i + x, i.e. i in
    # [last + 1 - x, n0 + y - 1]; the whole query blocks inside it (and inside the sequence) need no mask.
    # Every division below has a non-negative numerator: a GPU's integer division truncates, the interpreter's
    # (NumPy's) floors, and the two differ below zero.
    if n0 + BLOCK_N <= sk:
        first_full = tl.maximum(last + 1 - x, m_lo)
        mid_lo = tl.minimum(((first_full + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, m_hi)
        end_full = tl.minimum(tl.maximum(tl.minimum(n0 + y, sq), m_lo), m_hi)
        mid_hi = tl.maximum(((end_full - m_lo) // BLOCK_M) * BLOCK_M + m_lo, mid_lo)
        if not HAS_MASK:
            mid_lo = m_lo
            mid_hi = (sq // BLOCK_M) * BLOCK_M
    else:  # the sequence's last, partial key block: every query block is masked
        mid_lo = m_hi
        mid_hi = m_hi

    q_base = Q + bq.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_base = DO + bq.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
    l_base = bq.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh
    acc_base = DQ_ACC + bq.to(tl.int64) * stride_ab + h.to(tl.int64) * stride_ah
    if DETERMINISTIC:
        acc_base += pid_n.to(tl.int64) * stride_as
    bias_base = BIAS + bq.to(tl.int64) * stride_bb + h.to(tl.int64) * stride_bh
    dbias_base = DBIAS + bq.to(tl.int64) * stride_dbb + h.to(tl.int64) * stride_dbh
    alibi_slope = 0.0
    if BIAS_KIND == 2:
        alibi_slope = tl.load(ALIBI + b * stride_alb + h).to(tl.float32)
    bh = b * nhead_q + h
    qk_scale2 = scale * LOG2E
    for part in tl.static_range(3):  # masked blocks before the window's full rows, the full rows, masked after
        if part == 0:
            lo = m_lo
            hi = mid_lo
        elif part == 1:
            lo = mid_lo
            hi = mid_hi
        else:
            lo = mid_hi
            hi = m_hi
        dk_acc, dv_acc = _bwd_query_blocks(
            dk_acc,
            dv_acc,
            k,
            v,
            lo,
            hi,
            q_base,
            do_base,
            LSE,
            D,
            l_base,
            acc_base,
            bias_base,
            dbias_base,
            Q_DESC,
            DO_DESC,
            DQ_DESC,
            bh,
            stride_qm,
            stride_dom,
            stride_lm,
            stride_am,
            stride_bm,
            stride_bn,
            stride_dbm,
            q_start,
            sq,
            sk,
            y,
            x,
            offs_n,
            nmask,
            offs_dq,
            offs_dv,
            qk_scale2,
            scale,
            alibi_slope,
            alibi_mode,
            bh,
            seed_lo,
            seed_hi,
            off_lo,
            off_hi,
            p_undrop,
            rp_keep,
            HDIM_Q,
            HDIM_V,
            BLOCK_M,
            BLOCK_N,
            part != 1,
            HAS_MASK,
            BIAS_KIND,
            HAS_DBIAS,
            HAS_DROPOUT,
            DETERMINISTIC,
            ELEM,
            DOT_PREC,
            DROPOUT_ROUNDS,
            NUM_STAGES,
            USE_TMA,
            DQ_TMA_ADD,
            FAULT,
        )
    if FAULT == "empty_seqlen_q_nan_dkdv":
        dk_acc = tl.where(sq == 0, float("nan"), dk_acc)
        dv_acc = tl.where(sq == 0, float("nan"), dv_acc)
    dk_ptrs = DK + bq.to(tl.int64) * stride_dkb + h.to(tl.int64) * stride_dkh + keys64 * stride_dkn + offs_dq[None, :]
    if FAULT == "dk_scale_missing":
        tl.store(dk_ptrs, dk_acc.to(DK.dtype.element_ty), kmask)
    else:
        tl.store(dk_ptrs, (dk_acc * scale).to(DK.dtype.element_ty), kmask)
    dv_ptrs = DV + bq.to(tl.int64) * stride_dvb + h.to(tl.int64) * stride_dvh + keys64 * stride_dvn + offs_dv[None, :]
    tl.store(dv_ptrs, dv_acc.to(DV.dtype.element_ty), vmask)


__all__ = ["bwd_convert_dq_kernel", "bwd_dot_do_o_kernel", "bwd_dq_dk_dv_kernel"]
