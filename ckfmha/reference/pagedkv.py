"""Paged-KV reference (``fwd_pagedkv``; also the K/V gather used by split-KV, append-KV and batch prefill).

Fwd paged caches (CK's split-KV/paged-KV kernels): ``k_cache`` (num_blocks, hk, page, dq) for bhsd input layout
or (num_blocks, page, hk, dq) for bshd; ``block_table`` (batch, max_blocks) int32 (vLLM 2-D table); sequence
``b`` reads its first ``ceil(sk_b / page)`` table entries.  ``cache_batch_idx`` (batch,) maps a batch to a row of
a contiguous cache.  Batch-prefill pools follow CK's BlockAttentionKVCacheMemoryLayoutEnum (see batch_prefill).
"""

from __future__ import annotations

import numpy as np

from ckfmha.kernel import KVLookupTable, KVMemoryLayout, Mode
from ckfmha.problem import Layout, Problem
from ckfmha.reference._core import seq_slice, to_hsd


class PageTableError(ValueError):
    """A lookup table that does not describe the problem's sequences."""


def page_list(p: Problem, inputs: dict, b: int, sk: int) -> np.ndarray:
    """Physical page indices of sequence ``b`` (vLLM block table or SGLang page table)."""
    page = p.page_block_size
    n = -(-sk // page)
    if "block_table" in inputs:
        bt = np.asarray(inputs["block_table"])
        if bt.ndim != 2 or bt.shape[0] != p.batch:
            raise PageTableError(f"block_table: shape {bt.shape} must be (batch={p.batch}, max_blocks)")
        if n > bt.shape[1]:
            raise PageTableError(f"block_table: sequence {b} needs {n} blocks, table has {bt.shape[1]}")
        pages = bt[b, :n]
    else:
        indptr = np.asarray(inputs["kv_indptr"])
        idx = np.asarray(inputs["kv_page_indices"])
        last = np.asarray(inputs["kv_last_page_lens"])
        if indptr.shape != (p.batch + 1,):
            raise PageTableError(f"kv_indptr: shape {indptr.shape} must be (batch + 1,) = ({p.batch + 1},)")
        pages = idx[indptr[b]:indptr[b + 1]]
        length = 0 if pages.size == 0 else (pages.size - 1) * page + int(last[b])
        if length != sk:
            raise PageTableError(f"kv_last_page_lens: sequence {b} describes {length} keys, seqlens_k[{b}] = {sk}")
    num_pages = inputs["k_cache"].shape[0]
    if pages.size and (pages.min() < 0 or pages.max() >= num_pages):
        raise PageTableError(f"page table: sequence {b} refers to a page outside 0..{num_pages - 1}")
    return pages.astype(np.intp)


def gather_pages(p: Problem, pool: np.ndarray, pages: np.ndarray, sk: int, kind: str) -> np.ndarray:
    """(hk, sk, d) view of a sequence stored in ``pool`` pages."""
    g = pool[pages]
    if p.kv_layout is KVMemoryLayout.VECTORIZED:
        if kind == "k":  # (n, hk, d/vec, page, vec) -> (n, hk, page, d)
            n, h, dv_, pg, vec = g.shape
            g = g.transpose(0, 1, 3, 2, 4).reshape(n, h, pg, dv_ * vec)
        else:  # (n, hk, page/vec, d, vec) -> (n, hk, page, d)
            n, h, pv, d, vec = g.shape
            g = g.transpose(0, 1, 2, 4, 3).reshape(n, h, pv * vec, d)
    elif p.kv_layout is KVMemoryLayout.LINEAR or p.input_layout is Layout.BSHD:
        g = g.transpose(0, 2, 1, 3)  # (n, page, hk, d) -> (n, hk, page, d)
    n, h, pg, d = g.shape
    return g.transpose(1, 0, 2, 3).reshape(h, n * pg, d)[:, :sk]


def kv_sources(p: Problem, inputs: dict):
    """``(k_of(b), v_of(b))`` giving (hk, sk, d) K/V of sequence ``b``, or ``(None, None)`` for plain K/V."""
    if "k_cache" in inputs:
        def make(kind):
            pool = inputs["k_cache" if kind == "k" else "v_cache"]

            def of(b):
                sk = p.seqlens_k_list[b]
                return gather_pages(p, pool, page_list(p, inputs, b, sk), sk, kind)
            return of
        return make("k"), make("v")
    if "cache_batch_idx" in inputs:
        idx = np.asarray(inputs["cache_batch_idx"])
        kh, vh = to_hsd(inputs["k"], p.input_layout), to_hsd(inputs["v"], p.input_layout)
        return (lambda b: kh[idx[b], :, :p.seqlens_k_list[b]]), (lambda b: vh[idx[b], :, :p.seqlens_k_list[b]])
    return None, None


def reference_pagedkv(p: Problem, inputs: dict, accum=np.float32) -> dict:
    from ckfmha.reference.forward import run_sequences, sequences

    k_src, v_src = kv_sources(p, inputs)
    return run_sequences(p, inputs, accum, seqs=sequences(p, inputs, accum, k_src, v_src))
