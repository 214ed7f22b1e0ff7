"""Split-KV reference (``fwd_splitkv``): per-split partial O and LSE, and the combine.

CK splits the key axis of every sequence into ``num_splits`` equal chunks of ``max(1, ceil(sk / num_splits))``
keys (split ``i`` covers ``[i * n, min(sk, (i + 1) * n))``; trailing splits may be empty; not rounded to the key
tile: ``GetTileRangeAlongX(i_y, ..., num_splits, i_split)`` of block_masking.hpp).  Each split computes
its own normalised partial output ``o_acc[i]`` and ``lse_acc[i]`` over its keys (mask positions use the whole
sequence; an empty or fully masked split gives o = 0, lse = -inf; a sink logit counts in split 0 only).  The
combine is ``lse = log(sum_i exp(lse_i))`` and ``o = sum_i exp(lse_i - lse) * o_i`` (o = 0 where lse = -inf).

Partials are returned as ``o_acc`` (num_splits, B, hq, S, dv) and ``lse_acc`` (num_splits, B, hq, S) with
(B, S) = (batch, seqlen_q), or (1, total_q) in group mode, whatever the output layout.
"""

from __future__ import annotations

import numpy as np

from ckfmha.reference.core import attend, from_hsd
from ckfmha.reference.forward import run_sequences, sequences
from ckfmha.reference.pagedkv import kv_sources


def split_ranges(sk: int, num_splits: int) -> list[tuple[int, int]]:
    """The key range ``[lo, hi)`` of each split (see the module doc)."""
    n = max(1, -(-sk // num_splits))
    return [(min(sk, i * n), min(sk, (i + 1) * n)) for i in range(num_splits)]


def splitkv_combine(o_acc: np.ndarray, lse_acc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Combine partials along axis 0: ``o_acc`` (n, ..., dv), ``lse_acc`` (n, ...)."""
    lse_max = np.max(lse_acc, axis=0)
    safe = np.where(np.isfinite(lse_max), lse_max, 0)
    w = np.exp(lse_acc - safe[None])  # exp(-inf) = 0 for empty splits
    tot = w.sum(axis=0)
    empty = tot == 0
    lse = np.where(empty, -np.inf, safe + np.log(np.where(empty, 1, tot)))
    o = (w[..., None] * o_acc).sum(axis=0) / np.where(empty, 1, tot)[..., None]
    return o.astype(o_acc.dtype), lse.astype(lse_acc.dtype)


def reference_splitkv(p, inputs: dict, accum=np.float32, *, attend_fn=attend) -> dict:
    """``o_acc``/``lse_acc`` per split, ``o``/``lse`` from the combine (and ``o_full``/``lse_full`` from plain
    attention over all keys, which the combine must equal)."""
    k_src, v_src = kv_sources(p, inputs)
    seqs = sequences(p, inputs, accum, k_src, v_src)
    out = run_sequences(
        p, inputs, accum, seqs=seqs, key_ranges=lambda b, sk: split_ranges(sk, p.num_splits), attend_fn=attend_fn
    )
    o, lse = splitkv_combine(out["o_acc"], out["lse_acc"])
    out["o_full"], out["lse_full"] = out["o"], out["lse"]
    out["o"] = from_hsd(o, p.output_layout)
    out["lse"] = lse
    return out
