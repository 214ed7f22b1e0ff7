"""Forward reference vs a naive per-(batch, head) float64 implementation written from the documented rules."""

import numpy as np
import pytest

from ckfmha import rng
from ckfmha.inputs import alibi_slopes, make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import reference


def _hsd(x, layout):
    return x if layout == "bhsd" else x.transpose(0, 2, 1, 3)


def naive_forward(p: Problem, x: dict):
    """Dense float64 reference, one (sequence, head) at a time."""
    q = _hsd(x["q"].astype(np.float64), p.input_layout.value)
    k = _hsd(x["k"].astype(np.float64), p.input_layout.value)
    v = _hsd(x["v"].astype(np.float64), p.input_layout.value)
    for n in ("q", "k", "v"):
        if f"{n}_descale" in x and p.qscale.value == "pertensor":
            s = float(x[f"{n}_descale"][0])
            if n == "q":
                q = q * s
            elif n == "k":
                k = k * s
            else:
                v = v * s
    outs, lses = [], []
    group = p.mode.value == "group"
    for b in range(p.batch):
        sq, sk = p.seqlens_q_list[b], p.seqlens_k_list[b]
        q0 = p.seqstart_q[b] if group else 0
        k0 = p.seqstart_k[b] if group else 0
        bi = 0 if group else b
        ob = np.zeros((p.nhead_q, sq, p.hdim_v))
        lb = np.full((p.nhead_q, sq), -np.inf)
        allowed = p.mask.allowed(sq, sk)
        for h in range(p.nhead_q):
            hk = h // (p.nhead_q // p.nhead_k)
            qq = q[bi, h, q0 : q0 + sq]
            kk = k[bi, hk, k0 : k0 + sk]
            vv = v[bi, hk, k0 : k0 + sk]
            s = p.softmax_scale * qq @ kk.T
            if p.logits_soft_cap:
                s = p.logits_soft_cap * np.tanh(s / p.logits_soft_cap)
            if p.bias.value == "elementwise":
                bias = x["bias"].astype(np.float64)
                hb = h if bias.shape[1] > 1 else 0
                if group:
                    s = s + bias[0, hb, q0 : q0 + sq, :sk]
                else:
                    s = s + bias[b if bias.shape[0] > 1 else 0, hb, :sq, :sk]
            if p.bias.value == "alibi":
                sl = x["alibi_slopes"][b if x["alibi_slopes"].shape[0] > 1 else 0, h]
                i = np.arange(sq)[:, None]
                j = np.arange(sk)[None, :]
                if p.mask.is_causal:
                    s = s + sl * j
                elif p.mask.kind.value == "top_left":
                    s = s - sl * np.abs(i - j)
                else:
                    s = s - sl * np.abs(i + sk - sq - j)
            s = np.where(allowed, s, -np.inf)
            cols = [s]
            if p.sink:
                cols.append(np.full((sq, 1), float(x["sink"][h])))
            full = np.concatenate(cols, axis=1)
            for i in range(sq):
                row = full[i]
                if not np.isfinite(row).any():
                    continue
                m = row.max()
                e = np.exp(row - m)
                lb[h, i] = m + np.log(e.sum())
                pr = e[:sk] / e.sum()
                if p.p_drop:
                    rv = rng.dropout_randval(p.drop_seed, p.drop_offset, b, h, p.nhead_q, [i], np.arange(sk))[0]
                    pr = np.where(rv <= rng.p_undrop_u8(p.p_drop), pr / (1 - p.p_drop), 0)
                ob[h, i] = pr @ vv
        outs.append(ob)
        lses.append(lb)
    if group:
        o = np.concatenate(outs, axis=1)[None]
        lse = np.concatenate(lses, axis=1)[None]
    else:
        o, lse = np.stack(outs), np.stack(lses)
    return (o if p.output_layout.value == "bhsd" else o.transpose(0, 2, 1, 3)), lse


CASES = [
    dict(),
    dict(nhead_q=4, nhead_k=2, mask="t"),
    dict(nhead_q=4, nhead_k=1, mask="b", seqlen_q=9, seqlen_k=5),  # first rows fully masked
    dict(mask="t:2,1", bias="elementwise", bias_rank=1, nhead_q=2),
    dict(mask="b:3,0", bias="elementwise", bias_rank=2, batch=3),
    dict(bias="alibi", nhead_q=6, mask="t:2,3"),
    dict(bias="alibi", bias_rank=1, nhead_q=4, mask="b"),
    dict(bias="alibi", nhead_q=4),
    dict(logits_soft_cap=2.5, mask="g:3,4"),
    dict(sink=True, mask="b:1,0", seqlen_q=8, seqlen_k=4),
    dict(p_drop=0.3, drop_seed=7, drop_offset=11, nhead_q=2, seqlen_q=40, seqlen_k=37),
    dict(input_layout="bshd", output_layout="bshd", nhead_q=4, nhead_k=2),
    dict(input_layout="bshd", output_layout="bhsd", scale=0.3),
    dict(mode="group", batch=3, seqlens_q=(3, 0, 6), seqlens_k=(5, 4, 2), s_kpad=(8, 4, 3), mask="b", nhead_q=2),
    dict(
        mode="group",
        batch=2,
        seqlens_q=(4, 6),
        seqlens_k=(5, 9),
        bias="elementwise",
        bias_rank=1,
        nhead_q=2,
        input_layout="bshd",
    ),
    dict(dtype="fp8bf16", qscale="pertensor"),
    dict(seqlen_k=0),
]


@pytest.mark.parametrize("kw", CASES, ids=[str(i) for i in range(len(CASES))])
def test_forward_matches_naive(kw):
    base = dict(batch=2, nhead_q=2, seqlen_q=6, seqlen_k=7, hdim_q=8, hdim_v=12, dtype="fp32")
    base.update(kw)
    p = Problem(**base)
    x = make_inputs(p, seed=5)
    r = reference(p, x, accum=np.float64)
    o, lse = naive_forward(p, x)
    np.testing.assert_allclose(r["o"], o, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(r["lse"]), np.isinf(lse))
    fin = np.isfinite(lse)
    np.testing.assert_allclose(r["lse"][fin], lse[fin], rtol=1e-10)
    r32 = reference(p, x)
    assert r32["o"].dtype == np.float32
    np.testing.assert_allclose(r32["o"], o, rtol=1e-4, atol=1e-5)


def test_fully_masked_rows_zero_output_and_neg_inf_lse():
    p = Problem(seqlen_q=6, seqlen_k=3, hdim_q=8, mask="b", dtype="fp16")
    r = reference(p, make_inputs(p, 0))
    assert np.all(r["o"][0, 0, :3] == 0) and np.all(np.isneginf(r["lse"][0, 0, :3]))
    assert np.all(np.isfinite(r["lse"][0, 0, 3:]))


def test_alibi_slopes_ck_formula():
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)], rtol=1e-6)
    s6 = alibi_slopes(6)  # 4 power-of-2 slopes then every other slope of the 8-head set
    np.testing.assert_allclose(s6, [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3], rtol=1e-6)


def test_stored_randval_overrides_generator():
    p = Problem(seqlen_q=8, seqlen_k=8, hdim_q=8, p_drop=0.5, dtype="fp32")
    x = make_inputs(p, 1)
    from ckfmha.reference import reference_forward

    r = reference_forward(p, x, return_randval=True)
    x2 = dict(x, randval=255 - r["randval"])
    r2 = reference_forward(p, x2)
    assert not np.allclose(r["o"], r2["o"])
    np.testing.assert_array_equal(r["lse"], r2["lse"])  # LSE does not see dropout


def test_memory_is_chunked():
    import tracemalloc

    from ckfmha.reference import core

    p = Problem(nhead_q=2, seqlen_q=512, seqlen_k=512, hdim_q=16, dtype="fp32")
    x = make_inputs(p, 0)
    old = core.CHUNK_BYTES
    core.CHUNK_BYTES = 64 * 512 * 4 * 2  # 64 rows per chunk
    try:
        tracemalloc.start()
        r = reference(p, x)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        core.CHUNK_BYTES = old
    assert peak < 2 * 512 * 512 * 4  # less than one full score matrix
    np.testing.assert_allclose(r["o"], reference(p, x)["o"], rtol=1e-5, atol=1e-6)


def test_skip_min_seqlen_q_leaves_short_sequences_unwritten():
    p = Problem(
        mode="group",
        batch=3,
        nhead_q=2,
        seqlens_q=(1, 20, 7),
        seqlens_k=(5, 33, 9),
        hdim_q=32,
        min_seqlen_q=7,
        lse=True,
    )
    x = make_inputs(p, 0)
    r = reference(p, x)
    full = reference(p.replace(min_seqlen_q=0), x)
    o, lse = r["o"][0], r["lse"][0]  # (h, total_q, d), (h, total_q)
    assert np.isnan(o[:, :1]).all() and np.isnan(o[:, 21:]).all() and np.isnan(lse[:, 21:]).all()
    np.testing.assert_array_equal(o[:, 1:21], full["o"][0][:, 1:21])  # the long sequence is computed as usual
