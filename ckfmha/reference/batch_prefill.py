"""Batch-prefill reference: ragged (group-mode) queries over a paged KV pool.

Pools follow CK's BlockAttentionKVCacheMemoryLayoutEnum with ``vec = 16 / sizeof(element)``:
vectorized K (pages, hk, dq/vec, page, vec), V (pages, hk, page/vec, dv, vec); linear K/V (pages, page, hk, d).
Lookup: vLLM ``block_table`` (batch, max_pages) or SGLang ``kv_indptr`` (batch+1) / ``kv_page_indices`` /
``kv_last_page_lens`` (keys of sequence b = (pages_b - 1) * page + last_b, which must equal ``seqlens_k[b]``, with
last_b in 1..page for a sequence with pages; a sequence without pages is empty).  Every index is checked against
the pools before anything is read (:func:`ckfmha.reference.pagedkv.check_kv_lookup`).
fp8 ``kv_blockscale``: ``k_descale`` / ``v_descale`` (pages, hk) scale each page of each head; ``q_descale`` (1,).
"""

from __future__ import annotations

import numpy as np

from ckfmha.kernel import KVMemoryLayout, QScale
from ckfmha.problem import Problem
from ckfmha.reference.core import attend
from ckfmha.reference.forward import run_sequences, sequences
from ckfmha.reference.pagedkv import kv_sources


def _page_descaled(p: Problem, pool: np.ndarray, descale: np.ndarray, accum) -> np.ndarray:
    d = np.asarray(descale, dtype=accum)
    if p.kv_layout is KVMemoryLayout.LINEAR:
        return pool.astype(accum) * d[:, None, :, None]
    return pool.astype(accum) * d[:, :, None, None, None]


def reference_batch_prefill(p: Problem, inputs: dict, accum=np.float32, *, attend_fn=attend) -> dict:
    inp = dict(inputs)
    if p.qscale is QScale.KV_BLOCKSCALE:
        inp["k_cache"] = _page_descaled(p, inputs["k_cache"], inputs["k_descale"], accum)
        inp["v_cache"] = _page_descaled(p, inputs["v_cache"], inputs["v_descale"], accum)
        inp.pop("k_descale")
        inp.pop("v_descale")
    k_src, v_src = kv_sources(p, inp)
    return run_sequences(p, inp, accum, seqs=sequences(p, inp, accum, k_src, v_src), attend_fn=attend_fn)
