"""User-supplied index arrays (page tables, cache_batch_idx) are checked before the references read them: each
error names the array, the offending index and value, and the rule (ckfmha/reference/pagedkv.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import PageTableError, reference
from ckfmha.reference.pagedkv import check_kv_lookup


def _sglang(seqlens_k=(10, 0, 5), page=4):
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=len(seqlens_k),
        seqlens_q=(1,) * len(seqlens_k),
        seqlens_k=seqlens_k,
        hdim_q=8,
        page_block_size=page,
        kv_lookup="sglang",
        kv_layout="linear",
        dtype="fp16",
    )
    return p, make_inputs(p, 1)


def _raises(p, x, message):
    with pytest.raises(PageTableError) as e:
        reference(p, x)
    assert str(e.value) == message
    return e


def test_generated_tables_pass_and_empty_sequences_ignore_the_last_page_length():
    p, x = _sglang()
    assert x["kv_last_page_lens"].tolist() == [2, 0, 1]
    check_kv_lookup(p, x)
    x["kv_last_page_lens"] = np.array([2, 77, 1], dtype=np.int32)  # CK never reads it for a page-less sequence
    check_kv_lookup(p, x)


def test_last_page_length_larger_than_the_page_is_an_error():
    # 10 keys in 2 pages of 4 with a "last page" of 6 used to be accepted: (2 - 1) * 4 + 6 == 10
    p, x = _sglang()
    ind = x["kv_indptr"]
    x["kv_page_indices"] = np.concatenate([x["kv_page_indices"][ind[0] : ind[0] + 2], x["kv_page_indices"][ind[2] :]])
    x["kv_indptr"] = np.array([0, 2, 2, 4], dtype=np.int32)
    x["kv_last_page_lens"] = np.array([6, 0, 1], dtype=np.int32)
    _raises(
        p,
        x,
        "kv_last_page_lens[0]: 6 must be in 1..page_block_size=4 (sequence 0 has 2 page(s); its last "
        "page holds 1..4 keys)",
    )


def test_last_page_length_zero_for_a_sequence_with_pages_is_an_error():
    p, x = _sglang()
    x["kv_last_page_lens"] = np.array([2, 0, 0], dtype=np.int32)
    _raises(
        p,
        x,
        "kv_last_page_lens[2]: 0 must be in 1..page_block_size=4 (sequence 2 has 2 page(s); its last "
        "page holds 1..4 keys)",
    )


def test_last_page_length_must_give_the_sequence_length():
    p, x = _sglang()
    x["kv_last_page_lens"] = np.array([3, 0, 1], dtype=np.int32)
    _raises(p, x, "kv_last_page_lens[0]: sequence 0 describes 11 keys with 3 page(s), seqlens_k[0] = 10")


@pytest.mark.parametrize(
    "indptr, message",
    [
        (
            [0, 3, 3, 6],
            "kv_indptr[2], kv_indptr[3]: (3, 6) must satisfy 0 <= kv_indptr[b] <= kv_indptr[b + 1] <= "
            "len(kv_page_indices) = 5",
        ),
        (
            [-1, 3, 3, 5],
            "kv_indptr[0], kv_indptr[1]: (-1, 3) must satisfy 0 <= kv_indptr[b] <= kv_indptr[b + 1] <= "
            "len(kv_page_indices) = 5",
        ),
        (
            [0, 3, 2, 5],
            "kv_indptr[1], kv_indptr[2]: (3, 2) must satisfy 0 <= kv_indptr[b] <= kv_indptr[b + 1] <= "
            "len(kv_page_indices) = 5",
        ),
    ],
)
def test_indptr_must_be_ordered_and_in_range(indptr, message):
    p, x = _sglang()
    x["kv_indptr"] = np.array(indptr, dtype=np.int32)
    _raises(p, x, message)


def test_page_indices_must_be_pages_of_the_pools():
    p, x = _sglang()
    npages = x["k_cache"].shape[0]
    x["kv_page_indices"] = x["kv_page_indices"].copy()
    x["kv_page_indices"][3] = npages
    _raises(p, x, f"kv_page_indices[3]: {npages} (sequence 2) is not a page of the K/V pools; allowed 0..{npages - 1}")
    x["kv_page_indices"][3] = -1
    _raises(p, x, f"kv_page_indices[3]: -1 (sequence 2) is not a page of the K/V pools; allowed 0..{npages - 1}")


def test_block_table_entries_must_be_pages():
    p = Problem(
        family="fwd_pagedkv", batch=2, nhead_q=2, seqlen_q=3, seqlen_k=200, hdim_q=8, page_block_size=128, dtype="fp32"
    )
    x = make_inputs(p, 4)
    x["block_table"] = x["block_table"].copy()
    x["block_table"][1, 1] = -3
    n = x["k_cache"].shape[0]
    _raises(p, x, f"block_table[1, 1]: -3 (sequence 1) is not a page of the K/V pools; allowed 0..{n - 1}")
    x["block_table"] = x["block_table"].astype(np.float32)
    _raises(p, x, "block_table: dtype float32 is not an integer type")
    del x["block_table"]
    with pytest.raises(PageTableError, match="kv_indptr: missing from the inputs"):
        reference(p, x)


def _splitkv():
    p = Problem(
        family="fwd_splitkv", batch=2, nhead_q=2, seqlen_q=3, seqlen_k=16, hdim_q=8, cache_batch_idx=True, dtype="fp32"
    )
    return p, make_inputs(p, 2)


@pytest.mark.parametrize(
    "bad, message",
    [
        (-1, "cache_batch_idx[1]: -1 is not a row of the K/V cache; allowed 0..1"),
        (2, "cache_batch_idx[1]: 2 is not a row of the K/V cache; allowed 0..1"),
    ],
)
def test_cache_batch_idx_must_be_a_cache_row(bad, message):
    p, x = _splitkv()
    reference(p, x)
    x["cache_batch_idx"] = np.array([0, bad], dtype=np.int32)  # -1 used to read the last row silently
    _raises(p, x, message)


def test_cache_batch_idx_shape_and_row_length():
    p, x = _splitkv()
    x["cache_batch_idx"] = np.array([0, 1, 1], dtype=np.int32)
    _raises(p, x, "cache_batch_idx: shape (3,) must be (2,)")
    x["cache_batch_idx"] = np.array([1, 0], dtype=np.int32)
    x["k"], x["v"] = x["k"][:, :, :10], x["v"][:, :, :10]  # rows shorter than seqlen_k were sliced silently
    _raises(p, x, "cache_batch_idx[0]: row 1 of the K/V cache holds 10 keys, seqlens_k[0] = 16")


def test_appendkv_checks_before_writing_the_cache():
    p = Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=4,
        seqlen_k=12,
        seqlen_knew=4,
        hdim_q=16,
        cache_batch_idx=True,
    )
    x = make_inputs(p, 5)
    k_before = x["k"].copy()
    x["cache_batch_idx"] = np.array([0, -1], dtype=np.int32)
    _raises(p, x, "cache_batch_idx[1]: -1 is not a row of the K/V cache; allowed 0..1")
    np.testing.assert_array_equal(x["k"], k_before)


def test_appendkv_paged_block_table_checked():
    p = Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=4,
        seqlen_k=130,
        seqlen_knew=4,
        hdim_q=16,
        page_block_size=128,
    )
    x = make_inputs(p, 5)
    x["block_table"] = x["block_table"].copy()
    x["block_table"][0, 1] = 99
    n = x["k_cache"].shape[0]
    _raises(p, x, f"block_table[0, 1]: 99 (sequence 0) is not a page of the K/V pools; allowed 0..{n - 1}")
