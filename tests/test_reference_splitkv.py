import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import reference, split_ranges, splitkv_combine


def test_split_ranges_ck():
    assert split_ranges(10, 3) == [(0, 4), (4, 8), (8, 10)]
    assert split_ranges(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert split_ranges(0, 2) == [(0, 0), (0, 0)]


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(mask="t"),
        dict(mask="b:3,0", sink=True),
        dict(cache_batch_idx=True, num_splits=1),
        dict(input_layout="bshd", output_layout="bshd", nhead_k=1),
    ],
)
def test_splits_combine_to_full(kw):
    base = dict(family="fwd_splitkv", batch=2, nhead_q=2, seqlen_q=5, seqlen_k=23, hdim_q=8, num_splits=4, dtype="fp32")
    base.update(kw)
    p = Problem(**base)
    r = reference(p, make_inputs(p, 2), accum=np.float64)
    np.testing.assert_allclose(r["o"], r["o_full"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["lse"], r["lse_full"], rtol=1e-12)
    assert r["o_acc"].shape[0] == p.num_splits


def test_empty_split_is_neutral():
    o = np.array([[[1.0, 2.0]], [[0.0, 0.0]]])
    lse = np.array([[0.5], [-np.inf]])
    oc, lc = splitkv_combine(o, lse)
    np.testing.assert_allclose(oc, [[1.0, 2.0]])
    np.testing.assert_allclose(lc, [0.5])
    oc, lc = splitkv_combine(np.zeros((2, 1, 2)), np.full((2, 1), -np.inf))
    assert np.all(oc == 0) and np.isneginf(lc).all()


def test_cache_batch_idx_selects_cache_rows():
    p = Problem(
        family="fwd_splitkv",
        batch=3,
        seqlen_q=4,
        seqlen_k=9,
        hdim_q=8,
        cache_batch_idx=True,
        num_splits=2,
        dtype="fp32",
    )
    x = make_inputs(p, 0)
    r = reference(p, x, accum=np.float64)
    idx = x["cache_batch_idx"]
    plain = Problem(batch=3, seqlen_q=4, seqlen_k=9, hdim_q=8, dtype="fp32")
    r2 = reference(plain, dict(q=x["q"], k=x["k"][idx], v=x["v"][idx]), accum=np.float64)
    np.testing.assert_allclose(r["o"], r2["o"], rtol=1e-12)
