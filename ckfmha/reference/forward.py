"""Forward reference (``fwd``): every feature of the problem model, GQA, group mode, both layouts.

With ``min_seqlen_q`` (group mode), the rows of every sequence with ``seqlen_q <= min_seqlen_q`` are NaN: CK's
skip kernels do not write them, so a NaN-poisoned output keeps its poison exactly there.  The same holds for the
padding rows of a padded query layout (group mode ``s_qpad``: the rows between a sequence's logical end and the
next ``seqstart_q``; batch mode ``q_eff_lens``: rows ``q_eff_lens[b]..seqlen_q`` of batch ``b``; keys past
``kv_eff_lens[b]`` take no part): O and LSE are NaN there.

Returns ``{"o", "lse"}`` (accumulation dtype; ``o`` in the output layout, ``lse`` (b, hq, sq) or, in group
mode, (1, hq, total_q)), plus ``"randval"`` (uint8, same row/col layout as an elementwise bias of rank 2, i.e.
(b, hq, sq, sk) or (1, hq, total_q, max_sk)) when ``return_randval`` and dropout is on.  If ``inputs`` holds a
``"randval"`` tensor (a kernel's stored random values) it replaces the generator, so ``store_randval`` kernels are
checked exactly whatever element order they use.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ckfmha.inputs import lse_shape
from ckfmha.kernel import Mode
from ckfmha.problem import Problem
from ckfmha.reference.core import attend, dequant_rows, from_hsd, q_rows, seq_slice, sequence_extras, to_hsd


def sequences(p: Problem, inputs: dict, accum, k_override=None, v_override=None):
    """Yield ``(b, q (hq,sq,dq), k (hk,sk,dq), v (hk,sk,dv))`` per sequence, dequantized to ``accum``.
    ``k_override(b)`` / ``v_override(b)`` give gathered (hk, sk, d) storage-dtype K/V (paged/caches)."""
    q_hsd = to_hsd(inputs["q"], p.input_layout)
    k_hsd = None if k_override else to_hsd(inputs["k"], p.input_layout)
    v_hsd = None if v_override else to_hsd(inputs["v"], p.input_layout)
    for b in range(p.batch):
        qb = seq_slice(p, q_hsd, b, "q")
        kb = seq_slice(p, k_hsd, b, "k") if k_hsd is not None else k_override(b)
        vb = seq_slice(p, v_hsd, b, "k") if v_hsd is not None else v_override(b)
        yield (
            b,
            dequant_rows(qb, inputs.get("q_descale"), p, b, p.nhead_q, accum),
            dequant_rows(kb, inputs.get("k_descale"), p, b, p.nhead_k, accum),
            dequant_rows(vb, inputs.get("v_descale"), p, b, p.nhead_k, accum),
        )


def run_sequences(
    p: Problem,
    inputs: dict,
    accum=np.float32,
    return_randval: bool = False,
    seqs=None,
    key_ranges=None,
    *,
    attend_fn=attend,
) -> dict:
    """Shared driver: attention over every sequence, assembled into CK's output shapes.
    ``key_ranges(b, sk)`` -> list of (lo, hi) splits: then per-split partial results are returned too.
    ``attend_fn`` computes one sequence (:func:`ckfmha.reference.core.attend`'s signature and results; the torch
    twin passes its own)."""
    nb, ns = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    # query rows outside every sequence's logical length (s_qpad / q_eff_lens padding) are never written: NaN
    unwritten = np.nan if p.qpad_list != p.seqlens_q_list else None
    o_hsd = np.full((nb, p.nhead_q, ns, p.hdim_v), 0.0 if unwritten is None else unwritten, dtype=accum)
    lse = np.full(lse_shape(p), -np.inf if unwritten is None else unwritten, dtype=accum)
    want_rv = return_randval and p.p_drop > 0
    randval = np.zeros(lse_shape(p) + (p.seqlen_k,), dtype=np.uint8) if want_rv else None
    splits: tuple[np.ndarray, np.ndarray] | None = None  # (o_acc, lse_acc) with key_ranges
    for b, qb, kb, vb in seqs if seqs is not None else sequences(p, inputs, accum):
        sq, sk = qb.shape[1], kb.shape[1]
        bi = 0 if p.mode is Mode.GROUP else b
        rows = q_rows(p, b)
        if p.min_seqlen_q and sq <= p.min_seqlen_q:
            # CK's skip_min_seqlen_q: the kernel returns before touching this sequence, so its rows stay whatever
            # the output buffer held; NaN here means "not written" (a poisoned output must still be NaN there)
            o_hsd[bi, :, rows] = np.nan
            lse[bi, :, rows] = np.nan
            continue
        ex = sequence_extras(p, inputs, b, sq, sk, accum)
        if key_ranges is not None:
            ranges = key_ranges(b, sk)
            if splits is None:
                splits = (
                    np.zeros((len(ranges),) + o_hsd.shape, dtype=accum),
                    np.full((len(ranges),) + lse.shape, -np.inf, dtype=accum),
                )
            splits_o, splits_lse = splits
            for i, (lo, hi) in enumerate(ranges):
                ex_i = ex if i == 0 else dataclasses.replace(ex, sink=None)  # the sink counts once, in split 0
                so, sl, _ = attend_fn(p, qb, kb, vb, ex_i, accum, key_lo=lo, key_hi=hi)
                splits_o[i, bi, :, rows] = so
                splits_lse[i, bi, :, rows] = sl
        ob, lb, rv = attend_fn(p, qb, kb, vb, ex, accum, want_randval=want_rv)
        o_hsd[bi, :, rows] = ob
        lse[bi, :, rows] = lb
        if randval is not None:  # want_rv
            randval[bi, :, rows, :sk] = rv
    out = {"o": from_hsd(o_hsd, p.output_layout), "lse": lse}
    if randval is not None:
        out["randval"] = randval
    if splits is not None:
        out["o_acc"], out["lse_acc"] = splits
    return out


def reference_forward(
    p: Problem, inputs: dict, accum=np.float32, return_randval: bool = False, *, attend_fn=attend
) -> dict:
    return run_sequences(p, inputs, accum, return_randval, attend_fn=attend_fn)
