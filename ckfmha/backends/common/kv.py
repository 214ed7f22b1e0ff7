"""K/V addressing of the backends (the cpu stages, the triton append-KV checks), written from CK's kernels (not
shared with :mod:`ckfmha.reference`).

Every sequence ``b`` of a problem gets a K source and a V source (:func:`sequence_kv`), each with
``read(lo, hi)`` -> (hk, hi - lo, d) for its keys ``[lo, hi)`` and ``write(lo, values)`` (append-KV):

* **contiguous** K/V (:class:`ContiguousRows`; fmha_fwd_kernel.hpp, fmha_fwd_splitkv_kernel.hpp,
  fmha_fwd_appendkv_kernel.hpp): batch mode reads batch row ``b`` -- or row ``cache_batch_idx[b]`` when the
  problem has ``cache_batch_idx`` (the kernels' ``i_cache_batch``) -- from key 0; group mode reads batch 0 from
  key ``seqstart_k[b]`` (``key_start * stride_k``; ``seqstart_k`` counts ``s_kpad``).
* **paged** K/V (:class:`PageBlockNavigator`, CK's ``PageBlockNavigator`` of
  include/ck_tile/ops/fmha/block/page_block_navigator.hpp): the sequence owns ``num_blocks`` physical block
  indices; key ``j`` lives in logical block ``j // page_block_size`` (``get_block_index``,
  ``integer_divide_floor``) at in-page offset ``j - page_block_size * (j // page_block_size)``
  (``to_local_window_origin``), i.e. in pool page ``physical_block_indices[j // page_block_size]``
  (``get_block_ptr``).  The block indices come from

  - a vLLM block table (fwd paged-KV, split-KV and append-KV kernels; batch prefill ``VLLM_BLOCK_TABLE_2D``):
    row ``b`` of ``block_table``, ``num_blocks = ceil(seqlen_k / page_block_size)``
    (fmha_fwd_pagedkv_kernel.hpp / fmha_fwd_appendkv_kernel.hpp: ``integer_divide_ceil``);
  - an SGLang page table (batch prefill ``SGLANG_PAGE_TABLE_1D``, fmha_batch_prefill_kernel.hpp):
    ``kv_page_indices[kv_indptr[b] : kv_indptr[b + 1]]``; the kernel derives the sequence's key count as
    ``num_page_blocks > 0 ? (num_page_blocks - 1) * page_block_size + kv_last_page_lens[b] : 0``.

  Pool layouts (:class:`PoolLayout`): fwd paged caches ``(pages, hk, page, d)`` for bhsd inputs and
  ``(pages, page, hk, d)`` for bshd; batch-prefill pools per CK's BlockAttentionKVCacheMemoryLayoutEnum:
  ``LINEAR_LAYOUT`` ``(pages, page, hk, d)``, ``VECTORIZED_LAYOUT`` K ``(pages, hk, d / vec, page, vec)`` and V
  ``(pages, hk, page / vec, d, vec)`` (the kernel's merge transforms of (page, d/vec, S, vec) and
  (page, S/vec, d, vec)).

Checks (:class:`~ckfmha.backends.common.errors.KernelInputError`, raised by :func:`sequence_kv` for every sequence
before a stage reads or writes anything; the kernels check none of this and would read or write out of bounds):
index tensors present, integer, of their shape; ``block_table`` wide enough for every sequence; each used page
index a page of both pools; ``0 <= kv_indptr[b] <= kv_indptr[b + 1] <= len(kv_page_indices)``;
``kv_last_page_lens[b]`` in ``1..page_block_size`` for a sequence with pages and the derived key count equal to the
problem's ``seqlens_k[b]``; pools of the layout's rank whose page axis holds ``page_block_size`` keys;
``cache_batch_idx[b]`` a row of K and V; contiguous K/V holding every key a sequence reads.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ckfmha.backends.common.errors import KernelInputError
from ckfmha.kernel import KVLookupTable, KVMemoryLayout, Mode
from ckfmha.problem import Layout, Problem


def as_bhsd(x: np.ndarray, layout: Layout) -> np.ndarray:
    """(b, h, s, d) view of a 4-D tensor stored in ``layout`` (no copy; the backends' layout views are their own)."""
    return x if layout is Layout.BHSD else x.transpose(0, 2, 1, 3)


class PoolLayout(enum.Enum):
    """How a page pool stores (page, head, key in page, feature)."""

    HEAD_MAJOR = "(pages, hk, page, d)"
    TOKEN_MAJOR = "(pages, page, hk, d)"
    VECTORIZED_K = "(pages, hk, d/vec, page, vec)"
    VECTORIZED_V = "(pages, hk, page/vec, d, vec)"

    @property
    def ndim(self) -> int:
        return 5 if self in (PoolLayout.VECTORIZED_K, PoolLayout.VECTORIZED_V) else 4

    def keys_per_page(self, shape: tuple[int, ...]) -> int:
        """The number of keys a page of a pool of ``shape`` holds."""
        if self is PoolLayout.HEAD_MAJOR:
            return shape[2]
        if self is PoolLayout.TOKEN_MAJOR:
            return shape[1]
        if self is PoolLayout.VECTORIZED_K:
            return shape[3]
        return shape[2] * shape[4]


@dataclass(frozen=True)
class PageBlockNavigator:
    """One sequence's keys in a page pool, addressed as CK's ``PageBlockNavigator`` (module doc)."""

    name: str  # the pool's tensor name, for messages
    pool: np.ndarray
    physical_blocks: np.ndarray  # (num_blocks,) intp: the sequence's page indices, in logical order
    page_block_size: int
    layout: PoolLayout

    @property
    def num_blocks(self) -> int:
        return int(self.physical_blocks.size)

    def locate(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(physical page, in-page offset) of each key index (``get_block_index`` / ``to_local_window_origin``)."""
        block_index = keys // self.page_block_size
        local = keys - self.page_block_size * block_index
        if keys.size and int(block_index.max()) >= self.num_blocks:
            raise KernelInputError(
                f"{self.name}: key {int(keys.max())} lies in logical block "
                f"{int(block_index.max())}, the sequence has {self.num_blocks} block(s)"
            )
        return self.physical_blocks[block_index], local

    def _index(self, keys: np.ndarray) -> tuple:
        page, off = self.locate(keys)
        whole = slice(None)
        if self.layout is PoolLayout.HEAD_MAJOR:
            return page, whole, off  # -> (n, hk, d)
        if self.layout is PoolLayout.TOKEN_MAJOR:
            return page, off  # -> (n, hk, d)
        if self.layout is PoolLayout.VECTORIZED_K:
            return page, whole, whole, off  # -> (n, hk, d/vec, vec)
        vec = self.pool.shape[4]
        return page, whole, off // vec, whole, off % vec  # -> (n, hk, d)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Keys ``[lo, hi)`` as (hk, hi - lo, d), in the pool's dtype."""
        keys = np.arange(lo, hi, dtype=np.int64)
        g = self.pool[self._index(keys)]  # (n, hk, ...features)
        return g.reshape(g.shape[0], g.shape[1], int(np.prod(g.shape[2:]))).transpose(1, 0, 2)

    def write(self, lo: int, values: np.ndarray) -> None:
        """Store (hk, n, d) ``values`` at keys ``[lo, lo + n)`` of the pool, in place."""
        keys = np.arange(lo, lo + values.shape[1], dtype=np.int64)
        idx = self._index(keys)
        dst_shape = self.pool[idx].shape
        self.pool[idx] = values.transpose(1, 0, 2).reshape(dst_shape)


@dataclass(frozen=True)
class ContiguousRows:
    """One sequence's keys in a contiguous K or V tensor: batch row ``row`` from key ``start``."""

    name: str
    tensor: np.ndarray  # stored in ``layout``
    row: int
    start: int
    layout: Layout

    def read(self, lo: int, hi: int) -> np.ndarray:
        return as_bhsd(self.tensor, self.layout)[self.row, :, self.start + lo : self.start + hi]

    def write(self, lo: int, values: np.ndarray) -> None:
        s = self.start + lo
        as_bhsd(self.tensor, self.layout)[self.row, :, s : s + values.shape[1]] = values


KVSource = PageBlockNavigator | ContiguousRows


@dataclass(frozen=True)
class KVAddressing:
    """How a kernel finds K/V: contiguous (``page_block_size == 0``, optionally through ``cache_batch_idx``) or
    paged through ``lookup`` with pools laid out as ``k_pool`` / ``v_pool``."""

    page_block_size: int
    lookup: KVLookupTable
    k_pool: PoolLayout | None
    v_pool: PoolLayout | None
    cache_batch_idx: bool

    @classmethod
    def of(cls, p: Problem, *, lookup: KVLookupTable, kv_layout: KVMemoryLayout) -> KVAddressing:
        """The addressing of a kernel with page-table trait ``lookup`` and pool layout ``kv_layout`` (a batch-prefill
        kernel's traits; ``none`` for the fwd paged / split-KV / append-KV kernels, which take a vLLM block table
        and caches laid out like the inputs) running problem ``p``."""
        if not p.page_block_size:
            return cls(0, KVLookupTable.NONE, None, None, bool(p.cache_batch_idx))
        if kv_layout is KVMemoryLayout.VECTORIZED:
            k_pool, v_pool = PoolLayout.VECTORIZED_K, PoolLayout.VECTORIZED_V
        elif kv_layout is KVMemoryLayout.LINEAR or p.input_layout is Layout.BSHD:
            k_pool = v_pool = PoolLayout.TOKEN_MAJOR
        else:
            k_pool = v_pool = PoolLayout.HEAD_MAJOR
        table = KVLookupTable.VLLM if lookup is KVLookupTable.NONE else lookup
        return cls(p.page_block_size, table, k_pool, v_pool, False)


def _tensor(tensors: Mapping[str, Any], name: str, why: str) -> np.ndarray:
    if name not in tensors:
        raise KernelInputError(f"{name}: missing from the tensors ({why}; have: {', '.join(sorted(tensors))})")
    return np.asarray(tensors[name])


def _index_tensor(tensors: Mapping[str, Any], name: str, shape: tuple, why: str) -> np.ndarray:
    """An int index tensor of ``shape`` (None entries: any length)."""
    a = _tensor(tensors, name, why)
    if not np.issubdtype(a.dtype, np.integer):
        raise KernelInputError(f"{name}: dtype {a.dtype} is not an integer type (the kernel reads int32 indices)")
    if a.ndim != len(shape) or any(w is not None and n != w for n, w in zip(a.shape, shape)):
        want = "(" + ", ".join("any" if w is None else str(w) for w in shape) + ")"
        raise KernelInputError(f"{name}: shape {a.shape} must be {want}")
    return a


def _block_table_entry(b: int, j: int) -> str:
    return f"block_table[{b}, {j}]"


def _page_indices_entry(first: int, j: int) -> str:
    return f"kv_page_indices[{first + j}]"


def _check_pages(pages: np.ndarray, num_pages: int, where: Callable[[int], str], b: int) -> np.ndarray:
    bad = np.flatnonzero((pages < 0) | (pages >= num_pages))
    if bad.size:
        j = int(bad[0])
        raise KernelInputError(
            f"{where(j)}: {int(pages[j])} (sequence {b}, logical block {j}) is not a page of the "
            f"K/V pools; allowed 0..{num_pages - 1}"
        )
    return pages.astype(np.intp)


def _vllm_blocks(p: Problem, tensors: Mapping[str, Any], num_pages: int) -> list[np.ndarray]:
    page = p.page_block_size
    bt = _index_tensor(tensors, "block_table", (p.batch, None), "paged K/V read through a vLLM block table")
    out = []
    for b, sk in enumerate(p.seqlens_k_list):
        n = -(-sk // page)
        if n > bt.shape[1]:
            raise KernelInputError(
                f"block_table: sequence {b} has {sk} keys in {n} page(s) of {page}, the table "
                f"has {bt.shape[1]} column(s)"
            )
        out.append(_check_pages(bt[b, :n], num_pages, partial(_block_table_entry, b), b))
    return out


def _sglang_blocks(p: Problem, tensors: Mapping[str, Any], num_pages: int) -> list[np.ndarray]:
    page = p.page_block_size
    why = "batch prefill with an SGLang page table"
    indptr = _index_tensor(tensors, "kv_indptr", (p.batch + 1,), why)
    indices = _index_tensor(tensors, "kv_page_indices", (None,), why)
    last = _index_tensor(tensors, "kv_last_page_lens", (p.batch,), why)
    out = []
    for b, sk in enumerate(p.seqlens_k_list):
        first, end = int(indptr[b]), int(indptr[b + 1])
        if not 0 <= first <= end <= indices.size:
            raise KernelInputError(
                f"kv_indptr[{b}], kv_indptr[{b + 1}]: ({first}, {end}) must satisfy 0 <= "
                f"kv_indptr[b] <= kv_indptr[b + 1] <= len(kv_page_indices) = {indices.size}"
            )
        n = end - first
        keys = 0  # CK: num_page_blocks > 0 ? (num_page_blocks - 1) * page_block_size + last_page_len : 0
        if n:
            last_len = int(last[b])
            if not 1 <= last_len <= page:
                raise KernelInputError(
                    f"kv_last_page_lens[{b}]: {last_len} must be in 1..page_block_size={page} "
                    f"(sequence {b} has {n} page(s))"
                )
            keys = (n - 1) * page + last_len
        if keys != sk:
            raise KernelInputError(
                f"kv_indptr, kv_last_page_lens: sequence {b}'s page table holds {keys} keys "
                f"((pages - 1) * page_block_size + last page length), seqlens_k[{b}] = {sk}"
            )
        out.append(_check_pages(indices[first:end], num_pages, partial(_page_indices_entry, first), b))
    return out


def _pool(tensors: Mapping[str, Any], name: str, layout: PoolLayout, page: int) -> np.ndarray:
    a = _tensor(tensors, name, f"paged K/V: a pool laid out {layout.value}")
    if a.ndim != layout.ndim:
        raise KernelInputError(f"{name}: shape {a.shape} must have {layout.ndim} axes {layout.value}")
    held = layout.keys_per_page(a.shape)
    if held != page:
        raise KernelInputError(
            f"{name}: shape {a.shape} holds {held} keys per page {layout.value}, page_block_size = {page}"
        )
    return a


def _contiguous(p: Problem, tensors: Mapping[str, Any], name: str) -> list[ContiguousRows]:
    x = _tensor(tensors, name, "contiguous K/V")
    if x.ndim != 4:
        raise KernelInputError(f"{name}: shape {x.shape} must have 4 axes ({p.input_layout.value})")
    view = as_bhsd(x, p.input_layout)
    rows_held, keys_held = view.shape[0], view.shape[2]
    if p.cache_batch_idx:
        idx = _index_tensor(tensors, "cache_batch_idx", (p.batch,), "K/V rows chosen by cache_batch_idx")
        rows = [int(r) for r in idx]
        for b, r in enumerate(rows):
            if not 0 <= r < rows_held:
                raise KernelInputError(f"cache_batch_idx[{b}]: {r} is not a row of {name}; allowed 0..{rows_held - 1}")
        starts = [0] * p.batch
    elif p.mode is Mode.GROUP:
        rows, starts = [0] * p.batch, list(p.seqstart_k[:-1])
    else:
        rows, starts = list(range(p.batch)), [0] * p.batch
    out = []
    for b, (r, s, sk) in enumerate(zip(rows, starts, p.seqlens_k_list)):
        if r >= rows_held or s + sk > keys_held:
            raise KernelInputError(
                f"{name}: shape {x.shape} ({p.input_layout.value}) holds {rows_held} row(s) of "
                f"{keys_held} keys; sequence {b} reads row {r}, keys {s}..{s + sk - 1}"
            )
        out.append(ContiguousRows(name, x, r, s, p.input_layout))
    return out


def sequence_kv(p: Problem, tensors: Mapping[str, Any], addressing: KVAddressing) -> list[tuple[KVSource, KVSource]]:
    """Per sequence ``b`` of ``p``: its (K, V) sources over ``seqlens_k[b]`` keys (append-KV: the cache and the
    appended keys), every index checked first (module doc)."""
    page = addressing.page_block_size
    if not page:
        return list(zip(_contiguous(p, tensors, "k"), _contiguous(p, tensors, "v")))
    k_layout, v_layout = addressing.k_pool, addressing.v_pool
    if k_layout is None or v_layout is None:  # KVAddressing.of always sets both for paged K/V
        raise ValueError(
            f"addressing: k_pool={k_layout}, v_pool={v_layout}: paged K/V (page_block_size={page}) needs both pool "
            "layouts (build it with KVAddressing.of)"
        )
    k_pool = _pool(tensors, "k_cache", k_layout, page)
    v_pool = _pool(tensors, "v_cache", v_layout, page)
    num_pages = min(k_pool.shape[0], v_pool.shape[0])
    if addressing.lookup is KVLookupTable.SGLANG:
        blocks = _sglang_blocks(p, tensors, num_pages)
    else:
        blocks = _vllm_blocks(p, tensors, num_pages)
    return [
        (
            PageBlockNavigator("k_cache", k_pool, blk, page, k_layout),
            PageBlockNavigator("v_cache", v_pool, blk, page, v_layout),
        )
        for blk in blocks
    ]
