"""Paged-KV reference (``fwd_pagedkv``; also the K/V gather used by split-KV, append-KV and batch prefill).

Fwd paged caches (CK's split-KV/paged-KV kernels): ``k_cache`` (num_blocks, hk, page, dq) for bhsd input layout
or (num_blocks, page, hk, dq) for bshd; ``block_table`` (batch, max_blocks) int32 (vLLM 2-D table); sequence
``b`` reads its first ``ceil(sk_b / page)`` table entries.  ``cache_batch_idx`` (batch,) maps a batch to a row of
a contiguous cache.  Batch-prefill pools follow CK's BlockAttentionKVCacheMemoryLayoutEnum (see batch_prefill).

User-supplied index arrays are checked before anything is read (:func:`check_kv_lookup`, called by
:func:`kv_sources` and the append-KV reference); a :class:`PageTableError` names the array, the offending index,
its value and the rule:

* every index array has an integer dtype and its documented shape;
* ``block_table[b, j]`` for the pages sequence ``b`` uses, and ``kv_page_indices[i]`` for
  ``kv_indptr[b] <= i < kv_indptr[b + 1]``, are pages of the pools: ``0..num_pages - 1``;
* ``0 <= kv_indptr[b] <= kv_indptr[b + 1] <= len(kv_page_indices)``;
* ``kv_last_page_lens[b]`` is in ``1..page_block_size`` for a sequence with pages, and
  ``(pages_b - 1) * page_block_size + kv_last_page_lens[b] == seqlens_k[b]``; for a sequence without pages
  CK reads no last-page length and the sequence is empty (``num_page_blocks > 0 ? ... : 0`` in
  include/ck_tile/ops/fmha/kernel/fmha_batch_prefill_kernel.hpp);
* ``cache_batch_idx[b]`` is a row of the K/V cache: ``0..rows - 1``, and a row holds at least ``seqlens_k[b]`` keys.
"""

from __future__ import annotations

import numpy as np

from ckfmha.kernel import KVMemoryLayout
from ckfmha.problem import Layout, Problem
from ckfmha.reference.core import attend, to_hsd


class PageTableError(ValueError):
    """A page table or cache index (``block_table``, ``kv_indptr``, ``kv_page_indices``, ``kv_last_page_lens``,
    ``cache_batch_idx``) that does not describe the problem's sequences; the message names the array, the index,
    the value and the rule."""


def _index_array(inputs: dict, name: str, ndim: int, shape: tuple | None = None) -> np.ndarray:
    """An index array of the inputs: present, integer-typed, ``ndim``-dimensional (and of ``shape``)."""
    if name not in inputs:
        raise PageTableError(
            f"{name}: missing from the inputs (paged K/V needs block_table, or kv_indptr + "
            "kv_page_indices + kv_last_page_lens)"
        )
    a = np.asarray(inputs[name])
    if not np.issubdtype(a.dtype, np.integer):
        raise PageTableError(f"{name}: dtype {a.dtype} is not an integer type")
    if a.ndim != ndim or (shape is not None and a.shape != shape):
        want = shape if shape is not None else f"{ndim} dimension(s)"
        raise PageTableError(f"{name}: shape {a.shape} must be {want}")
    return a


def page_list(p: Problem, inputs: dict, b: int, sk: int) -> np.ndarray:
    """Physical page indices of sequence ``b`` (vLLM block table or SGLang page table), checked (module doc)."""
    page = p.page_block_size
    num_pages = min(np.shape(inputs["k_cache"])[0], np.shape(inputs["v_cache"])[0])
    if "block_table" in inputs:
        bt = _index_array(inputs, "block_table", 2)
        if bt.shape[0] != p.batch:
            raise PageTableError(f"block_table: shape {bt.shape} must be (batch={p.batch}, max_blocks)")
        n = -(-sk // page)
        if n > bt.shape[1]:
            raise PageTableError(f"block_table: sequence {b} needs {n} blocks, table has {bt.shape[1]}")
        pages = bt[b, :n]
        first, name = 0, f"block_table[{b}, {{}}]"
    else:
        indptr = _index_array(inputs, "kv_indptr", 1, (p.batch + 1,))
        idx = _index_array(inputs, "kv_page_indices", 1)
        last = _index_array(inputs, "kv_last_page_lens", 1, (p.batch,))
        start, end = int(indptr[b]), int(indptr[b + 1])
        if not 0 <= start <= end <= idx.size:
            raise PageTableError(
                f"kv_indptr[{b}], kv_indptr[{b + 1}]: ({start}, {end}) must satisfy 0 <= "
                f"kv_indptr[b] <= kv_indptr[b + 1] <= len(kv_page_indices) = {idx.size}"
            )
        pages = idx[start:end]
        length = 0  # a sequence without pages is empty; CK reads no last-page length for it
        if pages.size:
            last_len = int(last[b])
            if not 1 <= last_len <= page:
                raise PageTableError(
                    f"kv_last_page_lens[{b}]: {last_len} must be in 1..page_block_size={page} "
                    f"(sequence {b} has {pages.size} page(s); its last page holds 1..{page} keys)"
                )
            length = (pages.size - 1) * page + last_len
        if length != sk:
            raise PageTableError(
                f"kv_last_page_lens[{b}]: sequence {b} describes {length} keys with "
                f"{pages.size} page(s), seqlens_k[{b}] = {sk}"
            )
        first, name = start, "kv_page_indices[{}]"
    bad = np.flatnonzero((pages < 0) | (pages >= num_pages))
    if bad.size:
        j = int(bad[0])
        raise PageTableError(
            f"{name.format(first + j)}: {int(pages[j])} (sequence {b}) is not a page of the K/V "
            f"pools; allowed 0..{num_pages - 1}"
        )
    return pages.astype(np.intp)


def cache_row(p: Problem, inputs: dict, b: int) -> int:
    """The K/V cache row of batch ``b`` through ``cache_batch_idx``, checked (module doc)."""
    idx = _index_array(inputs, "cache_batch_idx", 1, (p.batch,))
    k, v = np.shape(inputs["k"]), np.shape(inputs["v"])
    rows = min(k[0], v[0])
    row = int(idx[b])
    if not 0 <= row < rows:
        raise PageTableError(f"cache_batch_idx[{b}]: {row} is not a row of the K/V cache; allowed 0..{rows - 1}")
    seq_axis = 2 if p.input_layout is Layout.BHSD else 1
    keys = min(k[seq_axis], v[seq_axis])
    if keys < p.seqlens_k_list[b]:
        raise PageTableError(
            f"cache_batch_idx[{b}]: row {row} of the K/V cache holds {keys} keys, "
            f"seqlens_k[{b}] = {p.seqlens_k_list[b]}"
        )
    return row


def check_kv_lookup(p: Problem, inputs: dict) -> None:
    """Check every page table / cache index of ``inputs`` against the problem, for every sequence (module doc)."""
    if "k_cache" in inputs:
        for b, sk in enumerate(p.seqlens_k_list):
            page_list(p, inputs, b, sk)
    elif "cache_batch_idx" in inputs:
        for b in range(p.batch):
            cache_row(p, inputs, b)


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
    check_kv_lookup(p, inputs)
    if "k_cache" in inputs:

        def make(kind):
            pool = inputs["k_cache" if kind == "k" else "v_cache"]

            def of(b):
                sk = p.seqlens_k_list[b]
                return gather_pages(p, pool, page_list(p, inputs, b, sk), sk, kind)

            return of

        return make("k"), make("v")
    if "cache_batch_idx" in inputs:
        rows = [cache_row(p, inputs, b) for b in range(p.batch)]
        kh, vh = to_hsd(inputs["k"], p.input_layout), to_hsd(inputs["v"], p.input_layout)
        return (lambda b: kh[rows[b], :, : p.seqlens_k_list[b]]), (lambda b: vh[rows[b], :, : p.seqlens_k_list[b]])
    return None, None


def reference_pagedkv(p: Problem, inputs: dict, accum=np.float32, *, attend_fn=attend) -> dict:
    from ckfmha.reference.forward import run_sequences, sequences

    k_src, v_src = kv_sources(p, inputs)
    return run_sequences(p, inputs, accum, seqs=sequences(p, inputs, accum, k_src, v_src), attend_fn=attend_fn)
