"""Shared pieces of the references: layout views, dequantization, and the chunked attention core.

The core works on one sequence with every head at once: ``q`` (hq, sq, dq), ``k`` (hk, sk, dq), ``v`` (hk, sk,
dv) in the accumulation dtype.  GQA is a broadcast matmul over (hk, group) -- K/V are never copied per q-head.
Query rows are processed in chunks so the score block (hq, rows, sk) stays under ``CHUNK_BYTES``.

Logit pipeline (CK's order): ``s = scale * q.k`` -> soft-cap ``cap * tanh(s / cap)`` -> ``+ bias`` (elementwise
or ALiBi) -> mask (-inf outside ``[start, end)``) -> softmax with the optional per-head sink logit in the
denominator -> dropout on the normalised probabilities (kept ones scaled by 1/(1-p)) -> ``P @ V``.
LSE is the natural-log ``m + log(l)`` of the un-dropped softmax (sink included).  A row with no allowed key
gives O = 0 and LSE = -inf (with a sink: O = 0 and LSE = sink).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ckfmha import rng as _rng
from ckfmha.kernel import Bias, Mode, QScale
from ckfmha.problem import BLOCK_SCALE_SIZE, Layout, Problem

CHUNK_BYTES = 64 << 20  # score-block budget per chunk (a few such blocks are live at once)


# ------------------------------------------------------------------------- layout helpers
def to_hsd(x: np.ndarray, layout: Layout) -> np.ndarray:
    """(b, h, s, d) view of a tensor stored in ``layout``."""
    return x if layout is Layout.BHSD else x.transpose(0, 2, 1, 3)


def from_hsd(x: np.ndarray, layout: Layout) -> np.ndarray:
    return x if layout is Layout.BHSD else np.ascontiguousarray(x.transpose(0, 2, 1, 3))


def seq_slice(p: Problem, x_hsd: np.ndarray, b: int, which: str) -> np.ndarray:
    """Sequence ``b`` of a (B, h, S, d) tensor as (h, s_b, d); ``which`` is 'q' or 'k'."""
    if p.mode is Mode.GROUP:
        starts = p.seqstart_q if which == "q" else p.seqstart_k
        n = p.seqlens_q_list[b] if which == "q" else p.seqlens_k_list[b]
        return x_hsd[0, :, starts[b] : starts[b] + n]
    n = p.seqlen_q if which == "q" else p.seqlen_k
    return x_hsd[b, :, :n]


def q_rows(p: Problem, b: int) -> slice:
    if p.mode is Mode.GROUP:
        return slice(p.seqstart_q[b], p.seqstart_q[b] + p.seqlens_q_list[b])
    return slice(0, p.seqlen_q)


def k_rows(p: Problem, b: int) -> slice:
    """Key rows of sequence ``b`` in a (B, h, S, d) tensor (group mode: logical lengths, padding excluded)."""
    if p.mode is Mode.GROUP:
        return slice(p.seqstart_k[b], p.seqstart_k[b] + p.seqlens_k_list[b])
    return slice(0, p.seqlen_k)


def dequant_rows(x: np.ndarray, descale, p: Problem, b: int, heads: int, accum) -> np.ndarray:
    """Upcast (h, s, d) to ``accum`` and apply the fp8 descale (per-tensor scalar or per 128-row block)."""
    y = x.astype(accum)
    if descale is None:
        return y
    d = np.asarray(descale, dtype=accum)
    if p.qscale is QScale.PERTENSOR or d.size == 1:
        return y * d.reshape(())
    if p.qscale is QScale.BLOCKSCALE:
        rows = np.arange(y.shape[1]) // BLOCK_SCALE_SIZE
        return y * d[b][:heads][:, rows][:, :, None]
    raise ValueError(f"qscale: {p.qscale.value} descales must be applied by the caller")


@dataclass
class Extras:
    """Per-sequence logit extras for the core."""

    bias: np.ndarray | None = None  # (1|hq, sq, sk) elementwise bias rows of this sequence
    alibi: np.ndarray | None = None  # (hq,) slopes
    sink: np.ndarray | None = None  # (hq,) sink logits
    randval: np.ndarray | None = None  # (hq, sq, sk) uint8, overrides the generator
    batch: int = 0  # index used by the dropout generator


def alibi_bias(slopes: np.ndarray, mode: str, rows: np.ndarray, sq: int, sk: int, accum) -> np.ndarray:
    """ALiBi term (hq, len(rows), sk) per CK's Alibi: vertical ``+slope * j``; top-left ``-slope * |i - j|``;
    bottom-right ``-slope * |i + sk - sq - j|``."""
    j = np.arange(sk, dtype=np.int64)[None, :]
    i = rows.astype(np.int64)[:, None]
    if mode == "vertical":
        pos = np.broadcast_to(j, (rows.size, sk))
        sign = 1.0
    elif mode == "top_left":
        pos = np.abs(i - j)
        sign = -1.0
    else:
        pos = np.abs(i + (sk - sq) - j)
        sign = -1.0
    return (sign * slopes.astype(accum))[:, None, None] * pos.astype(accum)[None]


def attend(
    p: Problem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    ex: Extras,
    accum=np.float32,
    key_lo: int = 0,
    key_hi: int | None = None,
    want_randval: bool = False,
    backward=None,
):
    """Attention of one sequence.  ``q`` (hq, sq, dq), ``k`` (hk, sk, dq), ``v`` (hk, sk, dv), already in
    ``accum`` and dequantized.  Only keys ``[key_lo, key_hi)`` take part (split-KV); mask and ALiBi positions use
    the full ``sk``.  Returns ``(o (hq, sq, dv), lse (hq, sq), randval or None)``.

    ``backward``: optional dict with ``do`` (hq, sq, dv); then the gradients ``dq`` (hq, sq, dq), ``dk_heads``
    (hq, sk, dq) and ``dv_heads`` (hq, sk, dv) -- per *q*-head, as CK's dq_dk_dv kernel writes them; q-head ``h``
    reads K/V head ``h // (hq // hk)`` -- ``ds`` (hq, sq, sk; with ``want_ds``, else None) and ``d`` (hq, sq) are
    added to it.  Keys no query row attends to (an empty query sequence included) get dK = dV = 0, as CK's
    pipeline stores its cleared accumulators (block_fmha_bwd_dq_dk_dv_pipeline_kr_ktr_vr.hpp, early exit).
    """
    hq, sq, dq = q.shape
    hk, sk, _ = k.shape
    dv = v.shape[2]
    g = hq // hk
    key_hi = sk if key_hi is None else key_hi
    nk = max(key_hi - key_lo, 0)
    scale = accum(p.softmax_scale)
    cap = p.logits_soft_cap
    o = np.zeros((hq, sq, dv), dtype=accum)
    lse = np.full((hq, sq), -np.inf, dtype=accum)
    randval_out = np.zeros((hq, sq, sk), dtype=np.uint8) if want_randval else None
    if sq == 0:
        if backward is not None:  # no query row: every gradient is empty or 0
            backward.update(
                dq=np.zeros_like(q),
                dk_heads=np.zeros((hq, sk, dq), dtype=accum),
                dv_heads=np.zeros((hq, sk, dv), dtype=accum),
                d=np.zeros((hq, 0), dtype=accum),
                ds=np.zeros((hq, 0, sk), dtype=accum) if backward.get("want_ds") else None,
            )
        return o, lse, randval_out
    kk = k[:, key_lo:key_hi]
    vv = v[:, key_lo:key_hi]
    kT = np.ascontiguousarray(kk.transpose(0, 2, 1))[:, None]  # (hk, 1, dq, nk)
    vv4 = vv[:, None]  # (hk, 1, nk, dv)
    has_mask = p.mask.kind.value != "none"
    alibi_mode = p.mask.alibi_mode() if ex.alibi is not None else None
    p_keep = 1.0 - p.p_drop
    if backward is not None:
        do_all = backward["do"]
        dq_out = np.zeros_like(q)
        dk_acc = np.zeros((hk, g, nk, dq), dtype=accum)
        dv_acc = np.zeros((hk, g, nk, dv), dtype=accum)
        d_out = np.zeros((hq, sq), dtype=accum)
        ds_full = np.zeros((hq, sq, sk), dtype=accum) if backward.get("want_ds") else None
    rows_per = max(1, int(CHUNK_BYTES // max(1, hq * max(nk, 1) * np.dtype(accum).itemsize)))
    for r0 in range(0, sq, rows_per):
        r1 = min(sq, r0 + rows_per)
        rows = np.arange(r0, r1)
        qc = q[:, r0:r1].reshape(hk, g, r1 - r0, dq)
        s = np.matmul(qc * scale, kT).reshape(hq, r1 - r0, nk)  # (hq, R, nk)
        if cap > 0:
            t = np.tanh(s / accum(cap))
            s = accum(cap) * t
        if ex.bias is not None:
            s += ex.bias[:, r0:r1, key_lo:key_hi].astype(accum)
        if alibi_mode is not None and ex.alibi is not None:  # alibi_mode is set exactly when ex.alibi is
            s += alibi_bias(ex.alibi, alibi_mode, rows, sq, sk, accum)[:, :, key_lo:key_hi]
        allowed = None
        if has_mask or key_lo > 0 or key_hi < sk:
            start, end = p.mask.key_range(sq, sk, rows)
            cols = np.arange(key_lo, key_hi)[None, :]
            allowed = (cols >= start[:, None]) & (cols < end[:, None])  # (R, nk)
            s = np.where(allowed[None], s, accum(-np.inf))
        m = s.max(axis=-1) if nk else np.full((hq, r1 - r0), -np.inf, dtype=accum)
        if ex.sink is not None:
            m = np.maximum(m, ex.sink.astype(accum)[:, None])
        m_safe = np.where(np.isfinite(m), m, accum(0))
        s -= m_safe[..., None]
        np.exp(s, out=s)  # s now holds unnormalised probabilities
        l = s.sum(axis=-1)
        if ex.sink is not None:
            l = l + np.exp(ex.sink.astype(accum)[:, None] - m_safe)
        empty = l == 0
        l_safe = np.where(empty, accum(1), l)
        lse[:, r0:r1] = np.where(empty, accum(-np.inf), m_safe + np.log(l_safe))
        keep = None
        if p.p_drop == 0 and backward is None:  # fast path: normalise the (small) output, not P
            oc = np.matmul(s.reshape(hk, g, r1 - r0, nk), vv4).reshape(hq, r1 - r0, dv) / l_safe[..., None]
            o[:, r0:r1] = oc
            continue
        s /= l_safe[..., None]  # normalised P
        pd = s
        if p.p_drop > 0:
            if ex.randval is not None:
                rv = ex.randval[:, r0:r1, key_lo:key_hi]
            else:
                rv = _rng.dropout_randval(
                    p.drop_seed, p.drop_offset, ex.batch, np.arange(hq), p.nhead_q, rows, np.arange(key_lo, key_hi)
                )
            if randval_out is not None:
                randval_out[:, r0:r1, key_lo:key_hi] = rv
            keep = _rng.dropout_keep(rv, p.p_drop)
            pd = np.where(keep, s * accum(1.0 / p_keep), accum(0))
        oc = np.matmul(pd.reshape(hk, g, r1 - r0, nk), vv4).reshape(hq, r1 - r0, dv)
        o[:, r0:r1] = oc
        if backward is not None:
            doc = do_all[:, r0:r1]
            # D = rowsum(dO * O), with O as the backward receives it: stored in the output dtype
            o_for_d = oc if backward.get("o_dtype") is None else oc.astype(backward["o_dtype"]).astype(accum)
            dd = np.sum(doc * o_for_d, axis=-1)
            d_out[:, r0:r1] = dd
            dp = np.matmul(doc.reshape(hk, g, r1 - r0, dv), vv4.transpose(0, 1, 3, 2)).reshape(hq, r1 - r0, nk)
            if keep is not None:
                dp = np.where(keep, dp * accum(1.0 / p_keep), accum(0))
            ds = s * (dp - dd[..., None])  # gradient w.r.t. the biased logits
            if ds_full is not None:
                ds_full[:, r0:r1, key_lo:key_hi] = ds
            if cap > 0:
                ds_x = ds * (1 - t * t)
            else:
                ds_x = ds
            lp = backward.get("lp_dtype")
            if lp is not None:  # CK's reference: P and dS enter the gradient GEMMs in the input precision
                ds_x = ds_x.astype(lp).astype(accum)
                pd = pd.astype(lp).astype(accum)
            ds4 = ds_x.reshape(hk, g, r1 - r0, nk)
            dq_out[:, r0:r1] = np.matmul(ds4, kk[:, None]).reshape(hq, r1 - r0, dq) * scale
            dk_acc += np.matmul(ds4.transpose(0, 1, 3, 2), qc) * scale
            dv_acc += np.matmul(pd.reshape(hk, g, r1 - r0, nk).transpose(0, 1, 3, 2), doc.reshape(hk, g, r1 - r0, dv))
    if backward is not None:
        dk_heads = np.zeros((hq, sk, dq), dtype=accum)
        dv_heads = np.zeros((hq, sk, dv), dtype=accum)
        dk_heads[:, key_lo:key_hi] = dk_acc.reshape(hq, nk, dq)  # (hk, g) -> q-head hk_index * g + g_index
        dv_heads[:, key_lo:key_hi] = dv_acc.reshape(hq, nk, dv)
        backward.update(dq=dq_out, dk_heads=dk_heads, dv_heads=dv_heads, d=d_out, ds=ds_full)
    return o, lse, randval_out


def sequence_extras(p: Problem, inputs: dict, b: int, sq: int, sk: int, accum) -> Extras:
    """Bias rows, ALiBi slopes, sink and stored random values of sequence ``b``."""
    ex = Extras(batch=b)
    if p.bias is Bias.ELEMENTWISE:
        bias = inputs["bias"]
        if p.mode is Mode.GROUP:
            ex.bias = bias[0, :, q_rows(p, b), :sk]
        else:
            ex.bias = bias[b if bias.shape[0] > 1 else 0, :, :sq, :sk]
    elif p.bias is Bias.ALIBI:
        sl = np.asarray(inputs["alibi_slopes"])
        ex.alibi = sl[b if sl.shape[0] > 1 else 0]
    if p.sink:
        ex.sink = np.asarray(inputs["sink"]).reshape(-1)
    rv = inputs.get("randval")
    if rv is not None and p.p_drop > 0:
        if p.mode is Mode.GROUP:
            ex.randval = rv[0, :, q_rows(p, b), :sk]
        else:
            ex.randval = rv[b, :, :sq, :sk]
    return ex


@dataclass(frozen=True)
class BackwardSequence:
    """One sequence of a backward problem: its operands in the compute dtype and where its results go."""

    b: int
    bi: int  # batch index into the (B, h, S) outputs (0 in group mode)
    rows: slice  # query rows into the outputs
    keys: slice  # key rows into dK / dV
    q: np.ndarray  # (hq, sq, dq)
    k: np.ndarray  # (hk, sk, dq)
    v: np.ndarray  # (hk, sk, dv)
    do: np.ndarray  # (hq, sq, dv)
    extras: Extras


def backward_sequences(
    p: Problem, inputs: dict, q_hsd: np.ndarray, k_hsd: np.ndarray, v_hsd: np.ndarray, do_hsd: np.ndarray, accum
):
    """Yield a ``BackwardSequence`` per sequence of ``p``, operands cast to ``accum``."""
    for b in range(p.batch):
        qb = seq_slice(p, q_hsd, b, "q").astype(accum)
        kb = seq_slice(p, k_hsd, b, "k").astype(accum)
        yield BackwardSequence(
            b=b,
            bi=0 if p.mode is Mode.GROUP else b,
            rows=q_rows(p, b),
            keys=k_rows(p, b),
            q=qb,
            k=kb,
            v=seq_slice(p, v_hsd, b, "k").astype(accum),
            do=seq_slice(p, do_hsd, b, "q").astype(accum),
            extras=sequence_extras(p, inputs, b, qb.shape[1], kb.shape[1], accum),
        )


def put_dbias_raw(dbias_raw_hsd: np.ndarray, ds: np.ndarray, seq: BackwardSequence) -> None:
    """Write one sequence's dS (hq, sq, sk) into CK's raw dBias, viewed (B, hq, S, max_sk): rows ``seq.rows``
    of batch ``seq.bi``, columns ``[0, sk)``; as fmha_bwd_kernel.hpp's dbias window (``seqlen_q x seqlen_k`` at
    ``query_start * stride_dbias`` in group mode), the columns past the sequence's ``seqlen_k`` are not written."""
    dbias_raw_hsd[seq.bi, :, seq.rows, : ds.shape[2]] = ds
