"""The tile loops of the CPU emulation: forward (online softmax) and backward (dq_dk_dv) of one sequence.

Both work on one sequence with every head at once, in float32 (the kernels' accumulator type):
``q`` (hq, sq, dq), ``k`` (hk, sk, dq), ``v`` (hk, sk, dv); GQA is a reshape of the q heads into
(hk, group * rows) -- K/V are never copied per q-head. Bias rows, ALiBi slopes, sink and stored random values come
in a :class:`ckfmha.backends.cpu.sequences.SequenceExtras` (built by the backend's own ``sequence_extras``); the
ALiBi term of each score tile is CK's ``Alibi`` (:class:`ckfmha.backends.cpu.bias.Alibi`). Nothing here comes from
the references (:mod:`ckfmha.reference`): a bug there cannot pass both sides.

Forward (:func:`attend_tiled`), as CK's ``qr``/``qr_async`` pipelines: for each query tile of ``bm0`` rows the key
tiles of ``bn0`` keys the mask leaves (CK's ``GetTileRangeAlongX``, tile-aligned), intersected with the split's key
range (:func:`split_key_ranges`: ``max(1, ceil(sk / num_splits))`` keys per split, not tile-aligned), are visited
in order, starting at the first key of that intersection. Per key tile: ``s = (q k^T) * scale`` -> soft-cap
``cap * tanh(s / cap)`` -> ``+ bias`` (elementwise or ALiBi) -> mask (-inf) ; running row max ``m`` and sum ``l``
with rescaling of the accumulator by ``exp(m_old - m_new)``; ``l`` sums the fp32 probabilities; dropout zeroes
the dropped ones (same Philox mapping and keep threshold as the reference, :mod:`ckfmha.rng`); the kept
probabilities are rounded to the kernel's P type (fp16/bf16 through ml_dtypes) before ``P V``. At the end
``o = acc / l`` (times ``1 / (1 - p_drop)``) and ``lse = m + log(l)``; a sink logit starts the running state at
``m = sink, l = 1``. Rows with no allowed key give o = 0, lse = -inf.

Backward (:func:`backward_tiled`), as CK's dq_dk_dv kernel: each key tile (``bn0`` keys, one work-group per head
in CK) loops over the query tiles (``bm0``) it can see, recomputes ``P = exp(s - LSE)``, and accumulates
``dV += (P Z / pk)^T dO`` (P rounded to the input type), ``dP = dO V^T`` (dropout-masked and scaled),
``dS = P (dP - D)``, ``dK += scale dS^T Q`` and adds ``scale dS K`` to the fp32 dQ accumulator -- into the key
tile's own slice when deterministic, else into slice 0 (CK's atomics). dS is rounded to the input type before the
two GEMMs. dK/dV (and dBias) are produced per q-head, CK's raw layout; the reduction over a K/V head's group of
q-heads (GQA) is the runner's host step, not the kernel's.

Fault hooks (:func:`ckfmha.faults.perturb`, docs/faults.md): mask bounds, key-tile loop ends, GQA heads, dropout
keep mask / seed / rescale, softmax start and finish, ALiBi slopes and the backward's LSE guard, D term, scales, dQ
update and per-sequence dK/dV pass through named hook points; each returns its value unless a fault is active.
"""

from __future__ import annotations

import numpy as np

from ckfmha import rng  # the engine's binding: benchmarks/parity_torch.py's dropout injection replaces it
from ckfmha.backends.cpu.bias import Alibi, alibi_mode
from ckfmha.backends.cpu.sequences import SequenceExtras
from ckfmha.faults import perturb  # the fault hooks (docs/faults.md): each returns its value unless a fault is active
from ckfmha.masking import MaskKind
from ckfmha.problem import Problem

F32 = np.float32
NEG_INF = F32(-np.inf)


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """Round float32 ``x`` to ``dtype`` (fp16/bf16) and back; identity for float32/None."""
    if dtype is None or np.dtype(dtype) == np.dtype(F32):
        return x
    return x.astype(dtype).astype(F32)


def mask_key_range(p: Problem, sq: int, sk: int, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The mask's allowed keys ``[start, end)`` of each query row (every row when ``rows`` is None)."""
    bounds = p.mask.key_range(sq, sk) if rows is None else p.mask.key_range(sq, sk, rows)
    return perturb("mask.key_range", bounds, sk=sk)


def tile_key_range(p: Problem, sq: int, sk: int, rows: np.ndarray, bn0: int) -> tuple[int, int]:
    """Key range ``[lo, hi)`` a query tile visits: the mask's extent rounded out to whole ``bn0`` tiles."""
    if p.mask.kind is MaskKind.NONE:
        return 0, sk
    start, end = mask_key_range(p, sq, sk, rows)
    live = end > start
    if not live.any():
        return 0, 0
    lo = int(start[live].min()) // bn0 * bn0
    hi = min(sk, -(-int(end[live].max()) // bn0) * bn0)
    return lo, hi


def split_key_ranges(sk: int, num_splits: int) -> list[tuple[int, int]]:
    """Split-KV: the keys ``[lo, hi)`` of each split, as CK's ``GetTileRangeAlongX(i_y, ..., num_splits,
    i_split)`` (block_masking.hpp): ``x_per_split = max(1, ceil(sk / num_splits))`` keys -- not rounded to the
    key tile -- split ``i`` from ``x_per_split * i`` to ``min(sk, x_per_split * (i + 1))`` (trailing splits may
    be empty). The split-KV pipeline then walks ``bn0``-key tiles from the split's first key and masks the keys
    past its last one (kHasUnevenSplits, block_fmha_fwd_splitkv_pipeline_qr_ks_vs.hpp)."""
    if num_splits < 1:
        raise ValueError(f"split_key_ranges: num_splits must be >= 1, got {num_splits}")
    per = max(1, -(-sk // num_splits))
    ranges = []
    for i in range(num_splits):
        lo = min(sk, per * i)
        ranges.append((lo, min(sk, lo + per)))
    return ranges


def _gqa_matmul(a: np.ndarray, b: np.ndarray, hk: int) -> np.ndarray:
    """(hq, R, x) @ (hk, x, n) with q-head h using kv-head h // group -> (hq, R, n)."""
    hq, r, x = a.shape
    heads = perturb("gqa.heads", None, hq=hq, hk=hk)  # None: CK's h // g
    if heads is not None:
        return np.matmul(a, b[heads])
    g = hq // hk
    return np.matmul(a.reshape(hk, g * r, x), b).reshape(hq, r, b.shape[-1])


def _randval(p: Problem, ex: SequenceExtras, hq: int, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
    if ex.randval is not None:
        return ex.randval[:, rows[0] : rows[-1] + 1, c0:c1]
    seed, offset = perturb("dropout.seed", (p.drop_seed, p.drop_offset))
    return rng.dropout_randval(seed, offset, ex.batch, np.arange(hq), p.nhead_q, rows, np.arange(c0, c1))


def _keep(p: Problem, ex: SequenceExtras, hq: int, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """The dropout keep mask of one score tile."""
    randval = _randval(p, ex, hq, rows, c0, c1)
    return perturb("dropout.keep", rng.dropout_keep(randval, p.p_drop), randval=randval, p_drop=p.p_drop)


def _alibi(p: Problem, ex: SequenceExtras, sq: int, sk: int) -> Alibi | None:
    """CK's Alibi of this sequence, or None without ALiBi slopes."""
    if ex.alibi is None:
        return None
    return Alibi(perturb("alibi.slopes", np.asarray(ex.alibi, dtype=F32)), alibi_mode(p.mask), sq, sk)


def _logits(
    p: Problem, s: np.ndarray, ex: SequenceExtras, alibi: Alibi | None, r0: int, r1: int, c0: int, c1: int, start, end
) -> np.ndarray:
    """Soft-cap, bias, ALiBi and mask of one (hq, R, n) score tile (already scaled), in CK's order."""
    cap = p.logits_soft_cap
    if cap > 0:
        s = F32(cap) * np.tanh(s / F32(cap))
    if ex.bias is not None:
        s = s + ex.bias[:, r0:r1, c0:c1].astype(F32)
    if alibi is not None:
        s = s + alibi.tile(np.arange(r0, r1), np.arange(c0, c1))
    if start is not None:
        cols = np.arange(c0, c1)[None, :]
        allowed = (cols >= start[:, None]) & (cols < end[:, None])
        s = np.where(allowed[None], s, NEG_INF)
    return s


def _softmax_start(sink: np.ndarray | None, hq: int, rows: int, dv: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A query tile's running state before its first key tile: row max ``m`` and sum ``l`` (hq, rows) -- ``m =
    sink, l = 1`` with a sink logit, else ``m = -inf, l = 0`` -- and the zero accumulator (hq, rows, dv)."""
    if sink is not None:
        m = np.repeat(sink[:, None], rows, axis=1)
        l = np.ones((hq, rows), dtype=F32)
    else:
        m = np.full((hq, rows), NEG_INF, dtype=F32)
        l = np.zeros((hq, rows), dtype=F32)
    m, l = perturb("softmax.start", (m, l), sink=sink)
    return m, l, np.zeros((hq, rows, dv), dtype=F32)


def _softmax_finish(m: np.ndarray, l: np.ndarray, acc: np.ndarray, p_drop: float) -> tuple[np.ndarray, np.ndarray]:
    """A query tile's ``o = acc / l`` (times ``1 / (1 - p_drop)`` with dropout) and ``lse = m + log(l)``; rows with
    no allowed key (``l == 0``) give o = 0, lse = -inf."""
    empty = l == 0
    l_safe = np.where(empty, F32(1), l)
    m_safe = np.where(np.isfinite(m), m, F32(0))
    ot = acc / l_safe[..., None]
    if p_drop > 0:
        ot = ot * perturb("dropout.rescale", F32(1.0 / (1.0 - p_drop)))
    return perturb("softmax.finish", (ot, np.where(empty, NEG_INF, m_safe + np.log(l_safe))), empty=empty)


def attend_tiled(
    p: Problem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    ex: SequenceExtras,
    *,
    bm0: int,
    bn0: int,
    p_dtype,
    key_lo: int = 0,
    key_hi: int | None = None,
    use_sink: bool = True,
    stats: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Tiled forward of one sequence over keys ``[key_lo, key_hi)``; returns normalised ``o`` (hq, sq, dv) and
    ``lse`` (hq, sq), float32. ``stats`` (optional dict) counts visited tiles."""
    hq, sq, dq = q.shape
    hk, sk, _ = k.shape
    dv = v.shape[2]
    key_hi = sk if key_hi is None else key_hi
    scale = F32(p.softmax_scale)
    o = np.zeros((hq, sq, dv), dtype=F32)
    lse = np.full((hq, sq), NEG_INF, dtype=F32)
    has_mask = p.mask.kind is not MaskKind.NONE
    alibi = _alibi(p, ex, sq, sk)
    sink = ex.sink.astype(F32) if (ex.sink is not None and use_sink) else None
    dropout = p.p_drop > 0
    kT = k.transpose(0, 2, 1)  # (hk, dq, sk)
    for r0 in range(0, sq, bm0):
        r1 = min(sq, r0 + bm0)
        rows = np.arange(r0, r1)
        R = r1 - r0
        t_lo, t_hi = tile_key_range(p, sq, sk, rows, bn0)
        lo, hi = max(t_lo, key_lo), min(t_hi, key_hi)
        m, l, acc = _softmax_start(sink, hq, R, dv)
        start = end = None
        if has_mask:
            start, end = mask_key_range(p, sq, sk, rows)
        qt = q[:, r0:r1]
        for c0 in range(lo, perturb("tiles.key_end", hi, lo=lo, bn0=bn0), bn0):
            c1 = min(c0 + bn0, hi)
            if stats is not None:
                stats["tiles"] = stats.get("tiles", 0) + 1
            s = _gqa_matmul(qt, kT[:, :, c0:c1], hk) * scale
            s = _logits(p, s, ex, alibi, r0, r1, c0, c1, start, end)
            m_new = np.maximum(m, s.max(axis=-1))
            m_safe = np.where(np.isfinite(m_new), m_new, F32(0))
            alpha = np.exp(m - m_safe)
            pt = np.exp(s - m_safe[..., None])
            l = alpha * l + pt.sum(axis=-1)
            if dropout:
                pt = np.where(_keep(p, ex, hq, rows, c0, c1), pt, F32(0))
            pr = round_to(pt, p_dtype)
            acc = alpha[..., None] * acc + _gqa_matmul(pr, v[:, c0:c1], hk)
            m = m_new
        o[:, r0:r1], lse[:, r0:r1] = _softmax_finish(m, l, acc, p.p_drop)
    return o, lse


def backward_tiled(
    p: Problem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    do: np.ndarray,
    lse: np.ndarray,
    d: np.ndarray,
    ex: SequenceExtras,
    *,
    bm0: int,
    bn0: int,
    p_dtype,
    deterministic: bool,
    dq_acc: np.ndarray,
    want_dbias: bool = False,
):
    """Tiled dq_dk_dv of one sequence. ``q``/``do`` (hq, sq, *), ``k``/``v`` (hk, sk, *), ``lse``/``d`` (hq, sq),
    all float32. ``dq_acc`` (nsplits, hq, sq, dq) float32 is accumulated into (slice = key tile index when
    deterministic, else 0). Returns ``dk`` (hq, sk, dq), ``dv`` (hq, sk, dv) per q-head and ``dbias``
    (hq, sq, sk) or None.

    Long because it is the kernel's tile loop nest, kept in CK's order of operations (P, dV, dP, dS, dK, dQ): the
    inner body reads a dozen per-key-tile and per-query-tile arrays and adds into the key tile's dK/dV
    accumulators, the dQ slot and dBias, so a helper would take and return most of the loop's locals on every
    tile."""
    hq, sq, dq = q.shape
    hk, sk, _ = k.shape
    dv = v.shape[2]
    scale = F32(p.softmax_scale)
    dk_out = np.zeros((hq, sk, dq), dtype=F32)
    dv_out = np.zeros((hq, sk, dv), dtype=F32)
    dbias = np.zeros((hq, sq, sk), dtype=F32) if want_dbias else None
    has_mask = p.mask.kind is not MaskKind.NONE
    alibi = _alibi(p, ex, sq, sk)
    dropout = p.p_drop > 0
    rp = perturb("dropout.rescale", F32(1.0 / (1.0 - p.p_drop))) if dropout else F32(1)
    g = hq // hk
    heads = perturb("gqa.heads", None, hq=hq, hk=hk)  # None: CK's h // g
    dk_scale, dq_scale = perturb("bwd.dk_scale", scale), perturb("bwd.dq_scale", scale)
    accumulate = perturb("bwd.dq_update", "add") == "add"
    if has_mask:
        start_all, end_all = mask_key_range(p, sq, sk)
    # a fully masked row: P = exp(-inf - inf) = 0
    lse_safe = perturb("bwd.lse", np.where(np.isfinite(lse), lse, F32(np.inf)), lse=lse)
    for it, c0 in enumerate(range(0, perturb("tiles.key_end", sk, lo=0, bn0=bn0), bn0)):
        c1 = min(sk, c0 + bn0)
        n = c1 - c0
        kt, vt = k[:, c0:c1], v[:, c0:c1]
        ktT = kt.transpose(0, 2, 1)
        vtT = vt.transpose(0, 2, 1)
        dk_acc = np.zeros((hq, n, dq), dtype=F32)
        dv_acc = np.zeros((hq, n, dv), dtype=F32)
        slot = it if deterministic else 0
        for r0 in range(0, sq, bm0):
            r1 = min(sq, r0 + bm0)
            rows = np.arange(r0, r1)
            start = end = None
            if has_mask:
                start, end = start_all[r0:r1], end_all[r0:r1]
                if not np.any((start < c1) & (end > c0) & (end > start)):
                    continue  # CK's GetTileRangeAlongY: this query tile sees none of the key tile
            qt, dot = q[:, r0:r1], do[:, r0:r1]
            s = _gqa_matmul(qt, ktT, hk) * scale
            s = _logits(p, s, ex, alibi, r0, r1, c0, c1, start, end)
            pt = np.exp(s - lse_safe[:, r0:r1, None])
            dp = _gqa_matmul(dot, vtT, hk)
            if dropout:
                keep = _keep(p, ex, hq, rows, c0, c1)
                pd = np.where(keep, pt * rp, F32(0))
                dp = np.where(keep, dp * rp, F32(0))
            else:
                pd = pt
            dv_acc += np.matmul(round_to(pd, p_dtype).transpose(0, 2, 1), dot)
            ds = pt * (dp - perturb("bwd.d_term", d[:, r0:r1, None]))
            if dbias is not None:
                dbias[:, r0:r1, c0:c1] = ds
            ds_r = round_to(ds, p_dtype)
            dk_acc += np.matmul(ds_r.transpose(0, 2, 1), qt) * dk_scale
            if heads is None:
                dq_t = np.matmul(ds_r.reshape(hk, g, r1 - r0, n), kt[:, None]).reshape(hq, r1 - r0, dq) * dq_scale
            else:
                dq_t = np.matmul(ds_r, kt[heads]) * dq_scale
            if accumulate:
                dq_acc[slot, :, r0:r1] += dq_t
            else:
                dq_acc[slot, :, r0:r1] = dq_t
        dk_out[:, c0:c1] = dk_acc
        dv_out[:, c0:c1] = dv_acc
    dk_out, dv_out = perturb("bwd.sequence_out", (dk_out, dv_out), sq=sq)
    return dk_out, dv_out, dbias
