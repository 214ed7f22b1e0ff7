"""CK semantics ckfmha reproduces from CK's sources (each test names the CK file whose rule it encodes):

* the dropout keep threshold in CK's float32 arithmetic (fmha_fwd_kernel.hpp ``init_dropout``);
* the element order of a 32x32 dropout tile (reference_batched_dropout_randval.hpp, block_dropout.hpp);
* split-KV key ranges (block_masking.hpp ``GetTileRangeAlongX`` with splits), cpu backend vs reference;
* ``-mask=g:y,x`` as CK's kernels build it (mask.hpp + ``make_generic_attention_mask_from_lr_window``);
* the seqlen_k pad of the attention after append-KV (fmha_fwd_splitkv.py ``skcheck``).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from ckfmha import rng
from ckfmha.backends.cpu import split_key_ranges
from ckfmha.inputs import make_inputs
from ckfmha.masking import MaskError, MaskKind, MaskSpec
from ckfmha.problem import Problem
from ckfmha.reference import reference, split_ranges
from ckfmha.reference.forward import reference_forward, run_sequences, sequences
from ckfmha.reference.pagedkv import kv_sources
from ckfmha.runner import run
from ckfmha.validator import validate


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


# ============================================================================ 1. dropout keep threshold
def _f32(v: float) -> float:
    """Round a double to the nearest float32 (a C ``(float)`` cast)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _ck_threshold(p: float) -> int:
    """CK: ``float p_undrop = 1.0 - p_drop; uint8_t(std::floor(p_undrop * 255))`` with p_drop a float.  Every
    float result is one IEEE rounding of the exact value (a float x 255 product is exact in a double)."""
    p_drop = _f32(p)
    p_undrop = _f32(1.0 - p_drop)
    return int(math.floor(_f32(p_undrop * 255.0)))


def test_keep_threshold_p06_is_cks_101() -> None:
    assert math.floor((1 - 0.6) * 255) == 102  # the float64 answer ckfmha used to give
    assert rng.p_undrop_u8(0.6) == 101


def test_keep_threshold_matches_ck_float32_for_many_p() -> None:
    # a sweep, and the p where (1 - p) * 255 is (nearly) an integer: there the float32 rounding decides
    ps = (
        [float(x) for x in np.linspace(0.0, 1.0, 4001)]
        + [n / 255 for n in range(256)]
        + [1 - n / 255 for n in range(256)]
        + [0.6, 0.1, 0.2, 0.3, 0.7, 0.9, 1 / 3, 0.05, 0.999]
    )
    got = [rng.p_undrop_u8(p) for p in ps]
    assert got == [_ck_threshold(p) for p in ps]
    # the sweep discriminates: float64 arithmetic differs from CK's for many of these p
    assert sum(g != math.floor((1 - p) * 255) for g, p in zip(got, ps)) > 100
    assert rng.dropout_keep(np.array([101, 102], dtype=np.uint8), 0.6).tolist() == [True, False]


def _dense_attention(p: Problem, inp: dict, keep: np.ndarray) -> np.ndarray:
    """float64 attention of a batch-mode bhsd problem with an explicit keep mask (b, h, sq, sk)."""
    q, k, v = (inp[n].astype(np.float64) for n in ("q", "k", "v"))
    s = np.einsum("bhid,bhjd->bhij", q, k) * p.softmax_scale
    allowed = p.mask.allowed(p.seqlen_q, p.seqlen_k)
    s = np.where(allowed, s, -np.inf)
    pr = np.exp(s - s.max(axis=-1, keepdims=True))
    pr /= pr.sum(axis=-1, keepdims=True)
    pr = np.where(keep, pr / (1 - p.p_drop), 0.0)
    return np.einsum("bhij,bhjd->bhid", pr, v)


def test_p06_elements_with_randval_102_are_dropped() -> None:
    p = Problem(dtype="fp32", seqlen_q=40, seqlen_k=70, nhead_q=2, hdim_q=32, p_drop=0.6, drop_seed=7, drop_offset=3)
    inp = make_inputs(p, 0)
    ref = reference_forward(p, inp, np.float64, return_randval=True)
    rv = ref["randval"]
    # 22 with CK's tile order (23 with the unswizzled order ckfmha used when the difference was found)
    assert rv.size == 5600 and int((rv == 102).sum()) == 22
    ck = _dense_attention(p, inp, rv <= 101)
    old = _dense_attention(p, inp, rv <= 102)
    np.testing.assert_allclose(ref["o"], ck, rtol=1e-9, atol=1e-9)
    assert np.abs(ref["o"] - old).max() > 1e-2  # the 23 elements matter
    # the cpu backend drops the same elements
    res = run(p, inp, backend="cpu", receipt="fp32")
    np.testing.assert_allclose(res.outputs["o"], ck, rtol=2e-5, atol=2e-5)


# ============================================================================ 2. dropout tile order
@pytest.mark.parametrize(
    "r,c,lane,byte",
    [
        (0, 0, 0, 0),
        (7, 5, 5, 7),
        (8, 0, 32, 0),
        (15, 31, 63, 7),
        (16, 3, 3, 8),
        (20, 10, 10, 12),
        (24, 0, 32, 8),
        (31, 31, 63, 15),
        (4, 0, 0, 4),
        (12, 1, 33, 4),
    ],
)
def test_tile_lane_byte_known_answers(r: int, c: int, lane: int, byte: int) -> None:
    # hand-computed from lane = c + 32 * ((r // 8) % 2), byte = 8 * (r // 16) + r % 8; (4, 0) was (32, 0) in the
    # unswizzled order ckfmha used before
    assert rng.tile_lane_byte(r, c) == (lane, byte)


def test_tile_order_inverts_cks_host_reference() -> None:
    # reference_batched_dropout_randval.hpp: byte r of lane l lands at i = (16 * (r / 8) % 32) + 8 * (l / 32) + r % 8,
    # j = l % 32 -- a bijection onto the 32x32 tile
    seen = set()
    for lane in range(64):
        for r in range(16):
            i = (16 * (r // 8) % 32) + 8 * (lane // 32) + (r % 8)
            j = lane % 32
            assert rng.tile_lane_byte(i, j) == (lane, r)
            seen.add((i, j))
    assert len(seen) == 32 * 32


def _philox7(ctr: list[int], key: list[int]) -> list[int]:
    c, k = list(ctr), list(key)
    for rnd in range(7):
        if rnd:
            k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
    return c


def _ck_host_randval(seed: int, offset: int, batch: int, nhead: int, head: int, sq: int, sk: int) -> np.ndarray:
    """CK's reference_batched_dropout_randval for one head, transcribed loop for loop."""
    out = np.zeros((sq, sk), dtype=np.uint8)
    for row in range(-(-sq // 32)):
        for col in range(-(-sk // 32)):
            for lane in range(64):
                sub = offset + (batch * nhead + head) * 64 + lane
                words = _philox7([sub & 0xFFFFFFFF, sub >> 32, row, col], [seed & 0xFFFFFFFF, seed >> 32])
                rand = b"".join(w.to_bytes(4, "little") for w in words)
                for r in range(16):
                    i = (16 * (r // 8) % 32) + 8 * (lane // 32) + (r % 8)
                    m, n = row * 32 + i, col * 32 + lane % 32
                    if m < sq and n < sk:
                        out[m, n] = rand[r]
    return out


def test_reference_randval_follows_cks_host_reference() -> None:
    p = Problem(
        dtype="fp16",
        batch=2,
        nhead_q=2,
        seqlen_q=32,
        seqlen_k=40,
        hdim_q=32,
        p_drop=0.3,
        drop_seed=0x1234_5678_9ABC,
        drop_offset=(1 << 32) - 70,
    )  # the offset carries into the high word
    ref = reference_forward(p, make_inputs(p, 1), return_randval=True)
    for b in range(2):
        for h in range(2):
            want = _ck_host_randval(p.drop_seed, p.drop_offset, b, 2, h, 32, 40)
            assert np.array_equal(ref["randval"][b, h], want), (b, h)


# ============================================================================ 3. split-KV key ranges
def test_split_ranges_follow_cks_get_tile_range_along_x() -> None:
    # x_per_split = max(1, ceil(sk / num_splits)), not rounded to the key tile
    assert split_key_ranges(3, 6) == [(0, 1), (1, 2), (2, 3), (3, 3), (3, 3), (3, 3)]
    assert split_key_ranges(500, 3) == [(0, 167), (167, 334), (334, 500)]
    assert split_key_ranges(0, 2) == [(0, 0), (0, 0)]
    for sk in (0, 1, 2, 63, 64, 65, 129, 1000):
        for n in (1, 2, 3, 5, 6, 16, 128):
            assert split_key_ranges(sk, n) == split_ranges(sk, n), (sk, n)
    with pytest.raises(ValueError, match="num_splits must be >= 1, got 0"):
        split_key_ranges(10, 0)


def test_splitkv_short_keys_many_splits_each_split_sees_its_key() -> None:
    """fwd_splitkv fp16 b=2 h=2 s=4 s_k=3 d=64, 6 splits, LSE and sink: split 1 covers key 1 (the cpu backend
    used to give it no key: -inf)."""
    p = Problem(
        family="fwd_splitkv",
        dtype="fp16",
        batch=2,
        nhead_q=2,
        seqlen_q=4,
        seqlen_k=3,
        hdim_q=64,
        num_splits=6,
        lse=True,
        sink=True,
    )
    inp = make_inputs(p, 0)
    res = run(p, inp, backend="cpu")
    ref = reference(p, inp)
    lse_acc, o_acc = res.outputs["lse_acc"], res.outputs["o_acc"]
    q, k = inp["q"].astype(np.float64), inp["k"].astype(np.float64)
    for i in (1, 2):  # one key each: lse = its logit, o = its value row
        s = np.einsum("bhrd,bhd->bhr", q, k[:, :, i]) * p.softmax_scale
        np.testing.assert_allclose(lse_acc[i], s, rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(
            o_acc[i],
            np.broadcast_to(inp["v"][:, :, i : i + 1].astype(np.float32), o_acc[i].shape),
            rtol=1e-3,
            atol=1e-3,
        )
    assert np.isneginf(lse_acc[3:]).all() and (o_acc[3:] == 0).all()
    np.testing.assert_allclose(lse_acc, ref["lse_acc"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o_acc, ref["o_acc"], rtol=2e-3, atol=2e-3)
    assert all(validate(p, res.outputs, ref).values())


@pytest.mark.parametrize("seqlen_k,seqlen_knew,num_splits", [(266, 10, 3), (70, 7, 4), (9, 2, 6)])
def test_appendkv_with_splits_partials_match_reference(seqlen_k: int, seqlen_knew: int, num_splits: int) -> None:
    p = Problem(
        family="fwd_appendkv",
        dtype="fp16",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=seqlen_k,
        seqlen_knew=seqlen_knew,
        hdim_q=64,
        num_splits=num_splits,
        mask="b",
        lse=True,
    )
    inp = make_inputs(p, 4)
    res = run(p, inp, backend="cpu")
    assert [s.role.value for s in res.plan.stages] == ["appendkv", "splitkv", "combine"]
    assert res.plan.stages[1].launch.num_splits == num_splits
    ref = reference(p, inp)
    assert all(validate(p, res.outputs, ref).values())
    # the reference's partials over the appended cache
    post = dict(inp, q=ref["q"], k=ref["k"], v=ref["v"])
    seqs = sequences(p, post, np.float32, *kv_sources(p, post))
    want = run_sequences(p, post, np.float32, seqs=seqs, key_ranges=lambda b, sk: split_ranges(sk, num_splits))
    np.testing.assert_allclose(res.outputs["lse_acc"], want["lse_acc"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(res.outputs["o_acc"], want["o_acc"], rtol=2e-3, atol=2e-3)


# ============================================================================ 4. -mask=g:y,x
def _ck_kernel_generic_allowed(y: int, x: int, sq: int, sk: int) -> np.ndarray:
    """What CK's kernel masks for ``-mask=g:y,x``: mask_info stores left = y, right = x; the kernel calls
    make_generic_attention_mask_from_lr_window(left, right, sq, sk, is_top_left=False) and IsOutOfBound."""
    left = y if y >= 0 else sk - 1
    right = x if x >= 0 else sq - 1
    cy, cx = 1 + left + (sq - sk), 1 + right + (sk - sq)
    return np.array([[(-cy + i + 1) <= j < min(i + cx, sk) for j in range(sk)] for i in range(sq)], dtype=bool)


def test_generic_mask_example_from_ck_kernel() -> None:
    a = MaskSpec.parse("g:2,1").allowed(4, 4)
    assert np.flatnonzero(a[0]).tolist() == [0, 1]
    assert np.flatnonzero(a[2]).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("spec", ["g:2,1", "g:0,0", "g:5,3", "g:-1,2", "g:3,-1", "g:0,-7", "g:40,70"])
@pytest.mark.parametrize("sq,sk", [(4, 4), (3, 9), (9, 3), (1, 10), (12, 5)])
def test_generic_mask_is_cks_bottom_right_window(spec: str, sq: int, sk: int) -> None:
    m = MaskSpec.parse(spec)
    y, x = m.y, m.x
    want = _ck_kernel_generic_allowed(y, x, sq, sk)
    assert np.array_equal(m.allowed(sq, sk), want)
    assert m.unmasked_area(sq, sk) == int(want.sum())
    assert m.kernel_window() == (y, x, False)
    assert m == MaskSpec.parse(m.to_ck()) and m.ck_printed() == f"g({y}:{x})"


def test_generic_mask_differs_from_cks_host_reference_when_lengths_differ() -> None:
    # CK's host reference reads g:y,x as a top-left window (1 + y, 1 + x); the kernel as a bottom-right one
    m = MaskSpec.parse("g:2,1")
    top_left = MaskSpec.window(2, 1).allowed(3, 9)
    assert np.array_equal(m.allowed(4, 4), MaskSpec.window(2, 1).allowed(4, 4))
    assert not np.array_equal(m.allowed(3, 9), top_left)
    assert np.array_equal(m.allowed(3, 9), MaskSpec.window(2, 1, bottom_right=True).allowed(3, 9))


def test_generic_mask_rules() -> None:
    assert MaskSpec.parse("g:0,1").kind is MaskKind.GENERIC  # valid now: a window, not raw coordinates
    with pytest.raises(MaskError, match=r"generic g:-1,-3 .* unbounded on both sides"):
        MaskSpec.parse("g:-1,-3")


def test_generic_mask_round_trips_through_ck_args() -> None:
    p = Problem.from_ck_args("-prec=fp16 -b=1 -h=2 -s=5 -s_k=9 -d=64 -mask=g:2,1")
    assert p.mask.kind is MaskKind.GENERIC and (p.mask.y, p.mask.x) == (2, 1)
    args = p.to_ck_args()
    assert "-mask=g:2,1" in args
    assert Problem.from_ck_args(args) == p


@pytest.mark.parametrize("sq,sk,spec", [(37, 90, "g:20,5"), (90, 37, "g:3,30"), (50, 50, "g:7,0")])
def test_generic_mask_reference_and_cpu_backend_follow_the_kernel(sq: int, sk: int, spec: str) -> None:
    p = Problem(dtype="fp32", batch=1, nhead_q=2, seqlen_q=sq, seqlen_k=sk, hdim_q=32, mask=spec, lse=True)
    inp = make_inputs(p, 2)
    ref = reference(p, inp, np.float64)
    m = p.mask
    want = _ck_kernel_generic_allowed(m.y, m.x, sq, sk)
    q, k, v = (inp[n].astype(np.float64) for n in ("q", "k", "v"))
    s = np.where(want, np.einsum("bhid,bhjd->bhij", q, k) * p.softmax_scale, -np.inf)
    mx = np.where(want.any(axis=1)[:, None], s.max(axis=-1, keepdims=True), 0)
    e = np.exp(s - mx)
    tot = e.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", e / np.where(tot == 0, 1, tot), v)
    np.testing.assert_allclose(ref["o"], o, rtol=1e-9, atol=1e-9)
    res = run(p, inp, backend="cpu", receipt="fp32")
    assert all(validate(p, res.outputs, reference(p, inp)).values())
    np.testing.assert_allclose(res.outputs["o"], o, rtol=2e-5, atol=2e-5)


# ============================================================================ 5. append-KV padding rule
def test_attention_after_appendkv_gets_a_seqlen_k_padded_kernel() -> None:
    # the cache holds 256 keys before the append (a multiple of 128), 266 after: the unpadded split kernel the
    # dispatcher used to pick then failed its host check
    p = Problem(
        family="fwd_appendkv", dtype="fp16", seqlen_q=4, seqlen_k=266, seqlen_knew=10, hdim_q=32, page_block_size=128
    )
    inp = make_inputs(p, 0)
    res = run(p, inp, backend="cpu")
    attention = [s for s in res.plan.stages if s.role.value in ("fwd", "pagedkv", "splitkv")]
    assert attention and all(s.kernel.pad_sk for s in attention)
    assert all(validate(p, res.outputs, reference(p, inp)).values())
