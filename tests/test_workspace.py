"""Backward workspace: the allocate-once bound never undercounts and is exact for full-length batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckfmha.problem import Problem
from ckfmha.workspace import bwd_workspace_bytes, bwd_workspace_upper_bound


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 300), st.integers(0, 300)), min_size=1, max_size=6),
    st.sampled_from([32, 64, 96, 128, 256]),
    st.integers(1, 8),
    st.booleans(),
    st.sampled_from([16, 64, 128]),
)
def test_bound_covers_random_group_problems(lens, hdim, nhead, det, bn0) -> None:
    qs, ks = zip(*lens)
    p = Problem(
        family="bwd",
        mode="group",
        batch=len(lens),
        nhead_q=nhead,
        hdim_q=hdim,
        seqlens_q=qs,
        seqlens_k=ks,
        deterministic=det,
    )
    exact = bwd_workspace_bytes(p, bn0=bn0)
    bound = bwd_workspace_upper_bound(len(lens), hdim, nhead, max(qs), max(ks), deterministic=det, bn0=bn0)
    assert bound >= exact
    full = Problem(
        family="bwd",
        mode="group",
        batch=len(lens),
        nhead_q=nhead,
        hdim_q=hdim,
        seqlens_q=(max(qs),) * len(lens),
        seqlens_k=(max(ks),) * len(lens),
        deterministic=det,
    )
    assert bwd_workspace_bytes(full, bn0=bn0) == bound


def test_exact_values() -> None:
    p = Problem(family="bwd", batch=2, nhead_q=4, seqlen_q=100, seqlen_k=300, hdim_q=64)
    # dq_acc: 2*100 rows * 4 heads * 64 * 4 B = 204800 (256-aligned); D: 4*200*4 = 3200 -> 3328
    assert bwd_workspace_bytes(p) == 204800 + 3328
    det = p.replace(deterministic=True)
    # 300 keys / bn0 128 -> 3 splits of the accumulator
    assert bwd_workspace_bytes(det, bn0=128) == 3 * 204800 + 3328


def test_bound_rejects_bad_numbers() -> None:
    with pytest.raises(ValueError, match="max_batch: expected a positive int"):
        bwd_workspace_upper_bound(0, 64, 1, 1, 1)
