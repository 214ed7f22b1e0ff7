import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import apply_rope, reference
from ckfmha.reference.pagedkv import kv_sources


def test_rope_rotation_formulas():
    x = np.arange(1, 17, dtype=np.float64).reshape(1, 1, 16)
    cos = np.cos(np.arange(8) * 0.1)[None]
    sin = np.sin(np.arange(8) * 0.1)[None]
    yi = apply_rope(x, cos, sin, np.array([0]), "interleaved", 16)
    assert np.isclose(yi[0, 0, 2], x[0, 0, 2] * cos[0, 1] - x[0, 0, 3] * sin[0, 1])
    assert np.isclose(yi[0, 0, 3], x[0, 0, 3] * cos[0, 1] + x[0, 0, 2] * sin[0, 1])
    yh = apply_rope(x, cos, sin, np.array([0]), "half_rotated", 16)
    assert np.isclose(yh[0, 0, 1], x[0, 0, 1] * cos[0, 1] - x[0, 0, 9] * sin[0, 1])
    assert np.isclose(yh[0, 0, 9], x[0, 0, 9] * cos[0, 1] + x[0, 0, 1] * sin[0, 1])
    # rotation keeps norms of each pair
    np.testing.assert_allclose(np.linalg.norm(yi), np.linalg.norm(x))


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(input_layout="bshd", output_layout="bshd"),
        dict(cache_batch_idx=True),
        dict(page_block_size=128, seqlen_k=140),
    ],
)
def test_append_writes_cache_then_attends(kw):
    base = dict(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=12,
        seqlen_knew=5,
        hdim_q=16,
        dtype="fp16",
        mask="b",
    )
    base.update(kw)
    p = Problem(**base)
    x = make_inputs(p, 3)
    r = reference(p, x, accum=np.float64)
    upd = dict(x)
    for n in ("k", "v", "k_cache", "v_cache"):
        if n in r:
            upd[n] = r[n]
    k_of, v_of = kv_sources(p, upd)
    if k_of is None:
        kh = upd["k"] if p.input_layout.value == "bhsd" else upd["k"].transpose(0, 2, 1, 3)
        k_of = lambda b: kh[b]  # noqa: E731
    kn = x["knew"] if p.input_layout.value == "bhsd" else x["knew"].transpose(0, 2, 1, 3)
    c = p.cache_seqlens[0]
    np.testing.assert_array_equal(k_of(1)[:, c : c + 5], kn[1])  # no RoPE: raw append
    # the untouched prefix of the cache is unchanged
    old_of, _ = kv_sources(p, x)
    if old_of is not None:
        np.testing.assert_array_equal(old_of(0)[:, :c], k_of(0)[:, :c])


def test_rope_positions_q_and_knew():
    p = Problem(
        family="fwd_appendkv",
        batch=1,
        seqlen_q=2,
        seqlen_k=6,
        seqlen_knew=2,
        hdim_q=16,
        rotary_dim=16,
        rope="interleaved",
        dtype="fp16",
        mask="b",
    )
    x = make_inputs(p, 0)
    r = reference(p, x)
    c = p.cache_seqlens[0]
    want_k = apply_rope(x["knew"][0], x["rotary_cos"], x["rotary_sin"], c + np.arange(2), "interleaved", 16)
    np.testing.assert_array_equal(r["k"][0, :, c : c + 2], want_k.astype(np.float16))
    want_q = apply_rope(x["q"][0], x["rotary_cos"], x["rotary_sin"], c + np.arange(2), "interleaved", 16)
    np.testing.assert_array_equal(r["q"][0], want_q.astype(np.float16))
    # without a mask every q row is rotated at the cache length
    p2 = p.replace(mask="0")
    r2 = reference(p2, x)
    want_q2 = apply_rope(x["q"][0], x["rotary_cos"], x["rotary_sin"], np.full(2, c), "interleaved", 16)
    np.testing.assert_array_equal(r2["q"][0], want_q2.astype(np.float16))
