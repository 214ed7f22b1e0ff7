"""Backward reference: central finite differences on tiny float64 problems."""

import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import reference


def _loss(p, x):
    fp = p.replace(family="fwd", dbias=False, deterministic=False)
    fx = {k: v for k, v in x.items() if k != "do"}
    o = reference(fp, fx, accum=np.float64)["o"]
    return float(np.sum(o * x["do"]))


def _fd(p, x, name, idx, eps=1e-6):
    xp = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in x.items()}
    xm = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in x.items()}
    xp[name][idx] += eps
    xm[name][idx] -= eps
    return (_loss(p, xp) - _loss(p, xm)) / (2 * eps)


def _f64(x):
    return {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v) for k, v in x.items()}


CASES = [
    dict(),
    dict(nhead_q=4, nhead_k=2, mask="t"),  # GQA reduction of dK/dV
    dict(nhead_q=2, nhead_k=1, mask="b:2,0", bias="elementwise", bias_rank=1, dbias=True),
    dict(bias="elementwise", bias_rank=0, dbias=True, batch=2, nhead_q=2),
    dict(bias="alibi", nhead_q=2, mask="t:1,1"),
    dict(p_drop=0.4, drop_seed=3),
    dict(mode="group", batch=2, seqlens_q=(3, 2), seqlens_k=(4, 5), s_kpad=(6, 5), mask="b"),
    dict(input_layout="bshd", output_layout="bshd", nhead_q=2, nhead_k=1),
    dict(seqlen_q=5, seqlen_k=3, mask="b"),  # fully masked rows
    dict(
        mode="group",
        batch=2,
        seqlens_q=(3, 0),
        seqlens_k=(4, 5),
        nhead_q=2,
        nhead_k=1,  # empty query sequence
        bias="elementwise",
        dbias=True,
    ),
]


@pytest.mark.parametrize("kw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_backward_matches_finite_differences(kw):
    base = dict(family="bwd", batch=1, nhead_q=1, seqlen_q=4, seqlen_k=5, hdim_q=4, hdim_v=3, dtype="fp32")
    base.update(kw)
    p = Problem(**base)
    x = _f64(make_inputs(p, seed=11))
    g = reference(p, x, accum=np.float64)
    rs = np.random.default_rng(0)
    names = ["q", "k", "v"] + (["bias"] if p.dbias else [])
    for name in names:
        arr = x[name]
        grad = g["d" + name if name != "bias" else "dbias"]
        assert grad.shape == arr.shape
        for _ in range(4):
            idx = tuple(int(rs.integers(0, s)) for s in arr.shape)
            fd = _fd(p, x, name, idx)
            assert abs(grad[idx] - fd) <= 1e-6 + 1e-5 * abs(fd), (name, idx, grad[idx], fd)


def test_dot_do_o_and_deterministic_no_effect():
    p = Problem(family="bwd", nhead_q=2, seqlen_q=6, seqlen_k=6, hdim_q=8, dtype="bf16", mask="t")
    x = make_inputs(p, 2)
    g = reference(p, x)
    # D reads O as stored (bf16), like CK's dot_do_o
    o_stored = g["o"].astype(x["q"].dtype).astype(np.float32)
    np.testing.assert_allclose(g["d"], np.sum(o_stored * x["do"].astype(np.float32), axis=-1), rtol=1e-6)
    g2 = reference(p.replace(deterministic=True), x)
    for n in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(g[n], g2[n])


def test_group_padding_rows_of_dk_stay_zero():
    p = Problem(
        family="bwd", mode="group", batch=2, seqlens_q=(2, 3), seqlens_k=(3, 2), s_kpad=(5, 4), hdim_q=8, dtype="fp16"
    )
    g = reference(p, make_inputs(p, 0))
    assert np.all(g["dk"][0, :, 3:5] == 0) and np.all(g["dv"][0, :, 7:9] == 0)


def test_empty_query_sequence_gives_zero_dk_dv_for_its_keys():
    # regression: group mode with seqlen_q = 0 raised KeyError: 'd'. CK's pipeline stores its cleared dK/dV
    # accumulators for a key tile no query tile reaches (block_fmha_bwd_dq_dk_dv_pipeline_kr_ktr_vr.hpp)
    p = Problem(
        family="bwd", dtype="fp32", mode="group", batch=2, nhead_q=1, seqlens_q=(3, 0), seqlens_k=(4, 5), hdim_q=16
    )
    g = reference(p, make_inputs(p, 0))
    assert g["dq"].shape == (1, 1, 3, 16) and g["d"].shape == (1, 1, 3) and g["dk"].shape == (1, 1, 9, 16)
    for n in ("dk", "dv", "dk_raw", "dv_raw"):
        assert np.all(g[n][0, 0, 4:] == 0), n  # the keys of sequence 1
        assert np.any(g[n][0, 0, :4] != 0), n
    assert np.all(np.isfinite(g["lse"])) and np.all(np.isfinite(g["o"]))
