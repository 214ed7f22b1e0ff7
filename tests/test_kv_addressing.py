"""The backends' K/V addressing (ckfmha.backends.common.kv): a paged addressing without pool layouts is refused
with a message naming the fields, and the page checks name the offending table entry."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha import make_inputs
from ckfmha.backends.common.kv import KVAddressing, PoolLayout, sequence_kv
from ckfmha.backends.cpu.errors import KernelInputError
from ckfmha.kernel import KVLookupTable, KVMemoryLayout
from ckfmha.problem import Problem


def _paged() -> Problem:
    return Problem(family="fwd_pagedkv", batch=2, seqlen_q=4, seqlen_k=200, page_block_size=128)


def test_paged_addressing_without_pool_layouts_is_refused() -> None:
    p = _paged()
    addressing = KVAddressing(128, KVLookupTable.VLLM, None, PoolLayout.HEAD_MAJOR, False)
    with pytest.raises(ValueError) as e:
        sequence_kv(p, make_inputs(p, 0), addressing)
    assert str(e.value) == (
        "addressing: k_pool=None, v_pool=PoolLayout.HEAD_MAJOR: paged K/V (page_block_size=128) needs both pool "
        "layouts (build it with KVAddressing.of)"
    )


def test_paged_addressing_of_reads_both_pools() -> None:
    p = _paged()
    x = make_inputs(p, 0)
    kv = sequence_kv(p, x, KVAddressing.of(p, lookup=KVLookupTable.NONE, kv_layout=KVMemoryLayout.NONE))
    assert len(kv) == 2
    k_src, v_src = kv[1]
    assert k_src.read(0, 200).shape == (1, 200, 64)
    assert v_src.read(0, 200).shape == (1, 200, 64)


def test_bad_block_table_entry_is_named() -> None:
    p = _paged()
    x = make_inputs(p, 0)
    x["block_table"] = np.array(x["block_table"])
    x["block_table"][1, 1] = 999
    addressing = KVAddressing.of(p, lookup=KVLookupTable.NONE, kv_layout=KVMemoryLayout.NONE)
    with pytest.raises(KernelInputError, match=r"^block_table\[1, 1\]: 999 \(sequence 1, logical block 1\)"):
        sequence_kv(p, x, addressing)


def test_bad_sglang_page_index_is_named() -> None:
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=2,
        seqlens_q=(3, 5),
        seqlens_k=(130, 260),
        page_block_size=128,
        kv_lookup="sglang",
        kv_layout="linear",
    )
    x = make_inputs(p, 0)
    x["kv_page_indices"] = np.array(x["kv_page_indices"])
    x["kv_page_indices"][3] = -1  # sequence 1 owns entries 2..4: its logical block 1
    addressing = KVAddressing.of(p, lookup=p.kv_lookup, kv_layout=p.kv_layout)
    with pytest.raises(KernelInputError, match=r"^kv_page_indices\[3\]: -1 \(sequence 1, logical block 1\)"):
        sequence_kv(p, x, addressing)
