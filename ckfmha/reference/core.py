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
    """Sequence ``b`` of a (B, h, S, d) tensor as (h, s_b, d); ``which`` is 'q' or 'k'.  ``s_b`` is the logical
    length: group mode from the (padded) ``seqstart``, batch mode the first ``q_eff_lens[b]`` / ``kv_eff_lens[b]``
    rows of the batch when the problem gives effective lengths (fmha_fwd_runner.hpp ``cu_seqlen_q_ptr``)."""
    if p.mode is Mode.GROUP:
        starts = p.seqstart_q if which == "q" else p.seqstart_k
        n = p.seqlens_q_list[b] if which == "q" else p.seqlens_k_list[b]
        return x_hsd[0, :, starts[b] : starts[b] + n]
    n = p.seqlens_q_list[b] if which == "q" else p.seqlens_k_list[b]  # batch mode: q_eff_lens / kv_eff_lens
    return x_hsd[b, :, :n]


def q_rows(p: Problem, b: int) -> slice:
    if p.mode is Mode.GROUP:
        return slice(p.seqstart_q[b], p.seqstart_q[b] + p.seqlens_q_list[b])
    return slice(0, p.seqlens_q_list[b])


def k_rows(p: Problem, b: int) -> slice:
    """Key rows of sequence ``b`` in a (B, h, S, d) tensor (group mode: logical lengths, padding excluded)."""
    if p.mode is Mode.GROUP:
        return slice(p.seqstart_k[b], p.seqstart_k[b] + p.seqlens_k_list[b])
    return slice(0, p.seqlens_k_list[b])


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
    o = np.zeros((hq, sq, dv), dtype=accum)
    lse = np.full((hq, sq), -np.inf, dtype=accum)
    randval_out = np.zeros((hq, sq, sk), dtype=np.uint8) if want_randval else None
    if sq == 0:
        if backward is not None:  # no query row: every gradient is empty or 0
            _no_query_gradients(backward, q, sk, dv, accum)
        return o, lse, randval_out
    kT = np.ascontiguousarray(k[:, key_lo:key_hi].transpose(0, 2, 1))[:, None]  # (hk, 1, dq, nk)
    vv4 = v[:, key_lo:key_hi][:, None]  # (hk, 1, nk, dv)
    grads = None if backward is None else _Gradients(backward, p, q, k, v, key_lo, key_hi, accum)
    rows_per = max(1, int(CHUNK_BYTES // max(1, hq * max(nk, 1) * np.dtype(accum).itemsize)))
    for r0 in range(0, sq, rows_per):
        r1 = min(sq, r0 + rows_per)
        rows = np.arange(r0, r1)
        qc = q[:, r0:r1].reshape(hk, g, r1 - r0, dq)
        s = np.matmul(qc * scale, kT).reshape(hq, r1 - r0, nk)  # (hq, R, nk)
        s, t = _chunk_logits(p, ex, s, rows, sq, sk, key_lo, key_hi, accum)
        l_safe, lse_rows = _chunk_softmax(s, ex, accum)  # s now holds unnormalised probabilities
        lse[:, r0:r1] = lse_rows
        if p.p_drop == 0 and backward is None:  # fast path: normalise the (small) output, not P
            o[:, r0:r1] = np.matmul(s.reshape(hk, g, r1 - r0, nk), vv4).reshape(hq, r1 - r0, dv) / l_safe[..., None]
            continue
        s /= l_safe[..., None]  # normalised P
        pd, keep = _chunk_dropout(p, ex, s, rows, key_lo, key_hi, randval_out, accum)
        oc = np.matmul(pd.reshape(hk, g, r1 - r0, nk), vv4).reshape(hq, r1 - r0, dv)
        o[:, r0:r1] = oc
        if grads is not None:
            grads.add_chunk(r0, r1, qc, s, pd, keep, oc, t)
    if grads is not None:
        grads.finish()
    return o, lse, randval_out


def _no_query_gradients(backward: dict, q: np.ndarray, sk: int, dv: int, accum) -> None:
    """:func:`attend`'s gradients for a sequence without query rows: every one empty or 0."""
    hq, _, dq = q.shape
    backward.update(
        dq=np.zeros_like(q),
        dk_heads=np.zeros((hq, sk, dq), dtype=accum),
        dv_heads=np.zeros((hq, sk, dv), dtype=accum),
        d=np.zeros((hq, 0), dtype=accum),
        ds=np.zeros((hq, 0, sk), dtype=accum) if backward.get("want_ds") else None,
    )


def _chunk_logits(
    p: Problem, ex: Extras, s: np.ndarray, rows: np.ndarray, sq: int, sk: int, key_lo: int, key_hi: int, accum
) -> tuple[np.ndarray, np.ndarray | None]:
    """A chunk's scaled scores ``s`` (hq, R, nk) for query ``rows`` through soft-cap, bias, ALiBi and mask, in CK's
    order (module doc); returns ``(s, t)``, ``t = tanh(s / cap)`` for the soft-cap's gradient (None without)."""
    r0, r1 = int(rows[0]), int(rows[-1]) + 1
    cap = p.logits_soft_cap
    t = None
    if cap > 0:
        t = np.tanh(s / accum(cap))
        s = accum(cap) * t
    if ex.bias is not None:
        s += ex.bias[:, r0:r1, key_lo:key_hi].astype(accum)
    if ex.alibi is not None:
        s += alibi_bias(ex.alibi, p.mask.alibi_mode(), rows, sq, sk, accum)[:, :, key_lo:key_hi]
    if p.mask.kind.value != "none" or key_lo > 0 or key_hi < sk:
        start, end = p.mask.key_range(sq, sk, rows)
        cols = np.arange(key_lo, key_hi)[None, :]
        allowed = (cols >= start[:, None]) & (cols < end[:, None])  # (R, nk)
        s = np.where(allowed[None], s, accum(-np.inf))
    return s, t


def _chunk_softmax(s: np.ndarray, ex: Extras, accum) -> tuple[np.ndarray, np.ndarray]:
    """Exponentiate a chunk's logits ``s`` (hq, R, nk) in place, less the row max (the sink logit included);
    returns the row sums ``l`` (sink included; 1 for a row with nothing to sum) and the rows' LSE ``m + log(l)``
    (-inf for such a row)."""
    m = s.max(axis=-1) if s.shape[-1] else np.full(s.shape[:2], -np.inf, dtype=accum)
    if ex.sink is not None:
        m = np.maximum(m, ex.sink.astype(accum)[:, None])
    m_safe = np.where(np.isfinite(m), m, accum(0))
    s -= m_safe[..., None]
    np.exp(s, out=s)
    l = s.sum(axis=-1)
    if ex.sink is not None:
        l = l + np.exp(ex.sink.astype(accum)[:, None] - m_safe)
    empty = l == 0
    l_safe = np.where(empty, accum(1), l)
    return l_safe, np.where(empty, accum(-np.inf), m_safe + np.log(l_safe))


def _chunk_dropout(
    p: Problem,
    ex: Extras,
    s: np.ndarray,
    rows: np.ndarray,
    key_lo: int,
    key_hi: int,
    randval_out: np.ndarray | None,
    accum,
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(pd, keep)``: a chunk's normalised probabilities ``s`` with dropout (kept ones scaled by ``1 / (1 -
    p_drop)``) and the keep mask, or ``(s, None)`` without dropout.  The random values are the stored ones or the
    Philox stream's; they are copied into ``randval_out`` when given."""
    if not p.p_drop > 0:
        return s, None
    r0, r1 = int(rows[0]), int(rows[-1]) + 1
    if ex.randval is not None:
        rv = ex.randval[:, r0:r1, key_lo:key_hi]
    else:
        rv = _rng.dropout_randval(
            p.drop_seed, p.drop_offset, ex.batch, np.arange(s.shape[0]), p.nhead_q, rows, np.arange(key_lo, key_hi)
        )
    if randval_out is not None:
        randval_out[:, r0:r1, key_lo:key_hi] = rv
    keep = _rng.dropout_keep(rv, p.p_drop)
    return np.where(keep, s * accum(1.0 / (1.0 - p.p_drop)), accum(0)), keep


class _Gradients:
    """:func:`attend`'s backward for one sequence: accumulators filled chunk by chunk of query rows from the
    forward's intermediates (:meth:`add_chunk`), then written into the caller's ``backward`` dict
    (:meth:`finish`).  ``backward``'s optional keys: ``want_ds`` (keep dS), ``o_dtype`` (the dtype O is stored in,
    which D = rowsum(dO * O) reads) and ``lp_dtype`` (the input precision P and dS enter the gradient GEMMs in)."""

    def __init__(
        self, backward: dict, p: Problem, q: np.ndarray, k: np.ndarray, v: np.ndarray, key_lo: int, key_hi: int, accum
    ) -> None:
        hq, sq, dq = q.shape
        hk, sk, _ = k.shape
        self.backward, self.accum, self.key_lo, self.key_hi, self.sk = backward, accum, key_lo, key_hi, sk
        self.scale = accum(p.softmax_scale)
        self.cap = p.logits_soft_cap
        self.p_keep = 1.0 - p.p_drop
        self.kk = k[:, key_lo:key_hi]
        self.vv4 = v[:, key_lo:key_hi][:, None]  # (hk, 1, nk, dv)
        nk, dv = self.kk.shape[1], v.shape[2]
        self.do_all = backward["do"]
        self.dq_out = np.zeros_like(q)
        self.dk_acc = np.zeros((hk, hq // hk, nk, dq), dtype=accum)
        self.dv_acc = np.zeros((hk, hq // hk, nk, dv), dtype=accum)
        self.d_out = np.zeros((hq, sq), dtype=accum)
        self.ds_full = np.zeros((hq, sq, sk), dtype=accum) if backward.get("want_ds") else None

    def add_chunk(self, r0: int, r1: int, qc, s, pd, keep, oc, t) -> None:
        """Query rows ``[r0, r1)``: ``qc`` (hk, g, R, dq), the normalised ``s`` = P and the dropped ``pd``
        (hq, R, nk), the dropout ``keep`` mask (or None), the chunk's output ``oc`` and the soft-cap's ``t``."""
        accum, backward = self.accum, self.backward
        hk, g, rows, _ = qc.shape
        hq, _, nk = s.shape
        dq, dv = self.dq_out.shape[2], oc.shape[2]
        doc = self.do_all[:, r0:r1]
        # D = rowsum(dO * O), with O as the backward receives it: stored in the output dtype
        o_for_d = oc if backward.get("o_dtype") is None else oc.astype(backward["o_dtype"]).astype(accum)
        dd = np.sum(doc * o_for_d, axis=-1)
        self.d_out[:, r0:r1] = dd
        dp = np.matmul(doc.reshape(hk, g, rows, dv), self.vv4.transpose(0, 1, 3, 2)).reshape(hq, rows, nk)
        if keep is not None:
            dp = np.where(keep, dp * accum(1.0 / self.p_keep), accum(0))
        ds = s * (dp - dd[..., None])  # gradient w.r.t. the biased logits
        if self.ds_full is not None:
            self.ds_full[:, r0:r1, self.key_lo : self.key_hi] = ds
        ds_x = ds * (1 - t * t) if self.cap > 0 else ds
        lp = backward.get("lp_dtype")
        if lp is not None:  # CK's reference: P and dS enter the gradient GEMMs in the input precision
            ds_x = ds_x.astype(lp).astype(accum)
            pd = pd.astype(lp).astype(accum)
        ds4 = ds_x.reshape(hk, g, rows, nk)
        self.dq_out[:, r0:r1] = np.matmul(ds4, self.kk[:, None]).reshape(hq, rows, dq) * self.scale
        self.dk_acc += np.matmul(ds4.transpose(0, 1, 3, 2), qc) * self.scale
        self.dv_acc += np.matmul(pd.reshape(hk, g, rows, nk).transpose(0, 1, 3, 2), doc.reshape(hk, g, rows, dv))

    def finish(self) -> None:
        """Write the gradients into ``backward``: dK/dV per q-head over all ``sk`` keys (0 outside the key range)."""
        hq, dq = self.dq_out.shape[0], self.dq_out.shape[2]
        nk, dv = self.kk.shape[1], self.dv_acc.shape[3]
        dk_heads = np.zeros((hq, self.sk, dq), dtype=self.accum)
        dv_heads = np.zeros((hq, self.sk, dv), dtype=self.accum)
        dk_heads[:, self.key_lo : self.key_hi] = self.dk_acc.reshape(
            hq, nk, dq
        )  # (hk, g) -> q-head hk_index * g + g_index
        dv_heads[:, self.key_lo : self.key_hi] = self.dv_acc.reshape(hq, nk, dv)
        self.backward.update(dq=self.dq_out, dk_heads=dk_heads, dv_heads=dv_heads, d=self.d_out, ds=self.ds_full)


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
