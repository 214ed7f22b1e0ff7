"""ckfmha.compat.flash_attn: FlashAttention's ``flash_attn_2_cuda`` entry points on CPU tensors (cpu backend),
against a plain torch attention written here from FA's own test reference (tests/test_flash_attn_ck.py
``attention_ref``: bottom-right windows, ALiBi ``-slope * |i + sk - sq - j|``, dropout kept where
``randval <= floor(255 (1 - p))`` and scaled by ``1 / (1 - p)``)."""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")

from ckfmha.compat import calllog  # noqa: E402
from ckfmha.compat import fa_rules as rules  # noqa: E402
from ckfmha.compat import flash_attn as fa  # noqa: E402

TOL = 2e-3  # fp16 output vs an fp32 reference on these sizes


def attention_ref(q, k, v, *, causal=False, window=(-1, -1), alibi=None, keep=None, p=0.0, seqlens_k=None):
    """(out float32 (b, sq, h, d), lse (b, h, sq)); ``keep`` (b, h, sq, sk) bool dropout mask; ``seqlens_k``: keys
    used per batch (KV cache), the window aligned to each batch's last key."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k = k.float().repeat_interleave(h // hk, 2)
    v = v.float().repeat_interleave(h // hk, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k) / math.sqrt(d)
    lens = torch.full((b,), sk) if seqlens_k is None else torch.as_tensor(seqlens_k)
    i = torch.arange(sq)[None, :, None]
    j = torch.arange(sk)[None, None, :]
    off = (lens - sq)[:, None, None]
    left, right = window
    if causal:
        right = 0
    masked = j >= lens[:, None, None]
    if left >= 0:
        masked = masked | (j < i + off - left)
    if right >= 0:
        masked = masked | (j > i + off + right)
    if alibi is not None:
        slopes = alibi if alibi.dim() == 2 else alibi[None].expand(b, h)
        s = s - slopes[:, :, None, None] * (i + off - j).abs()[:, None].float()
    s = s.masked_fill(masked[:, None], float("-inf"))
    lse = torch.logsumexp(s, -1)
    pr = torch.softmax(s, -1).nan_to_num(0.0)  # a fully masked row gives 0 (FA's attention_ref masked_fill)
    if keep is not None:
        pr = pr * keep / (1 - p)
    return torch.einsum("bhqk,bkhd->bqhd", pr, v), lse


def fwd_call(q, k, v, *, p=0.0, causal=False, window=(-1, -1), alibi=None, ret=False):
    scale = q.shape[-1] ** -0.5
    return fa.fwd(q, k, v, None, alibi, p, scale, causal, window[0], window[1], 0.0, ret, None)


def rand(*shape, dtype=torch.float16):
    return torch.randn(*shape, dtype=dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    calllog.clear()
    fa.configure(backend="auto", arch=None, num_cus=None)
    yield


@pytest.mark.parametrize(
    "causal,window,hk,sq,sk",
    [
        (False, (-1, -1), 4, 40, 72),
        (True, (-1, -1), 2, 64, 96),
        (False, (16, 8), 1, 72, 48),
        (True, (24, -1), 4, 33, 33),
    ],
)
def test_fwd_masks_and_gqa(causal, window, hk, sq, sk):
    q, k, v = rand(2, sq, 4, 64), rand(2, sk, hk, 64), rand(2, sk, hk, 64)
    out, lse, p, rng_state = fwd_call(q, k, v, causal=causal, window=window)
    o_ref, lse_ref = attention_ref(q, k, v, causal=causal, window=window)
    assert (out.float() - o_ref).abs().max() < TOL
    seen = lse_ref.isfinite()
    assert (lse - lse_ref)[seen].abs().max() < 1e-3
    assert p.numel() == 0 and rng_state.shape == (2,)
    rec = calllog.calls()[-1]
    assert rec.entry == "fwd" and rec.fa_path == "fmha_fwd" and rec.stages[0]["role"] == "fwd"
    assert rec.stages[0]["ck_name"].startswith("fmha_fwd_d64_fp16_batch")
    assert rec.features["gqa"] == (hk != 4)


def test_fwd_alibi_bf16():
    q, k, v = rand(2, 48, 4, 32, dtype=torch.bfloat16), rand(2, 64, 4, 32, dtype=torch.bfloat16), None
    v = rand(2, 64, 4, 32, dtype=torch.bfloat16)
    slopes = torch.rand(2, 4) * 0.3
    for causal in (False, True):
        out, lse, _, _ = fwd_call(q, k, v, causal=causal, alibi=slopes)
        o_ref, _ = attention_ref(q, k, v, causal=causal, alibi=slopes)
        assert out.dtype == torch.bfloat16
        assert (out.float() - o_ref).abs().max() < 2e-2
    assert calllog.calls()[-1].features["alibi"]


def test_fwd_dropout_returns_s_dmask_and_rng_state():
    q, k, v = rand(1, 40, 2, 32), rand(1, 50, 2, 32), rand(1, 50, 2, 32)
    pd = 0.17
    out, lse, s_dmask, rng_state = fwd_call(q, k, v, p=pd, ret=True)
    assert s_dmask.dtype == torch.uint8 and s_dmask.shape == (1, 2, 40, 50)
    keep = s_dmask.int() <= math.floor(255 * (1 - pd))
    assert 0.7 < keep.float().mean() < 0.95
    o_ref, lse_ref = attention_ref(q, k, v, keep=keep, p=pd)
    assert (out.float() - o_ref).abs().max() < 5e-3
    assert (lse - lse_ref).abs().max() < 1e-3
    # the generator moved as FA's philox_cuda_state(counter_offset) moves it: a second call gets a new offset
    _, _, _, rng2 = fwd_call(q, k, v, p=pd)
    step = rules.philox_increment(rules.counter_offset(1, 2, rules.warp_size("gfx942")))
    assert int(rng2[1]) - int(rng_state[1]) == step and int(rng2[0]) == int(rng_state[0])
    with pytest.raises(RuntimeError, match="requires p_dropout > 0"):
        fwd_call(q, k, v, p=0.0, ret=True)


def test_fwd_decode_gqa_swap():
    q, k, v = rand(2, 1, 6, 64), rand(2, 30, 2, 64), rand(2, 30, 2, 64)
    out, lse, _, _ = fwd_call(q, k, v, causal=True)
    o_ref, lse_ref = attention_ref(q, k, v)
    assert (out.float() - o_ref).abs().max() < TOL
    assert lse.shape == (2, 6, 1)  # mha_fwd.cpp:369
    assert (lse.reshape(2, 6) - lse_ref[..., 0]).abs().max() < 1e-3
    assert calllog.calls()[-1].features["ngroups_swapped"]


def test_varlen_fwd_and_bwd_against_autograd():
    lens_q, lens_k = [7, 0, 19], [11, 5, 23]
    h, hk, d = 4, 2, 32
    cu_q = torch.tensor([0, 7, 7, 26], dtype=torch.int32)
    cu_k = torch.tensor([0, 11, 16, 39], dtype=torch.int32)
    q, k, v = rand(26, h, d), rand(39, hk, d), rand(39, hk, d)
    scale = d**-0.5
    out, lse, _, rng = fa.varlen_fwd(q, k, v, None, cu_q, cu_k, None, None, None, None, 19, 23, 0.0, scale, False,
                                     True, -1, -1, 0.0, False, None, 0)  # fmt: skip
    assert lse.shape == (h, 26)
    dout = rand(26, h, d)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    res = fa.varlen_bwd(dout, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, None, 19, 23, 0.0, scale, False, True, -1,
                        -1, 0.0, True, None, None)  # fmt: skip
    assert res[0] is dq and res[1] is dk and res[2] is dv  # written in place
    assert res[3].shape == (3, h, 19)
    for i, (sq, sk) in enumerate(zip(lens_q, lens_k)):
        q0, k0 = int(cu_q[i]), int(cu_k[i])
        qs = q[q0 : q0 + sq][None].float().requires_grad_()
        ks = k[k0 : k0 + sk][None].float().requires_grad_()
        vs = v[k0 : k0 + sk][None].float().requires_grad_()
        o_ref, lse_ref = attention_ref(qs, ks, vs, causal=True)
        if sq:
            assert (out[q0 : q0 + sq].float() - o_ref[0]).abs().max() < TOL
            o_ref.backward(dout[q0 : q0 + sq][None].float())
            assert (dq[q0 : q0 + sq].float() - qs.grad[0]).abs().max() < 1e-2
            assert (dk[k0 : k0 + sk].float() - ks.grad[0]).abs().max() < 1e-2
            assert (dv[k0 : k0 + sk].float() - vs.grad[0]).abs().max() < 1e-2
        else:  # no query: no gradient reaches these keys
            assert dk[k0 : k0 + sk].abs().max() == 0 and dv[k0 : k0 + sk].abs().max() == 0
    rec = calllog.calls()[-1]
    assert rec.entry == "varlen_bwd" and rec.features["deterministic"] and rec.features["padding"]
    assert [s["role"] for s in rec.stages] == ["dot_do_o", "dq_dk_dv", "convert_dq"]


@pytest.mark.parametrize("pd", [0.0, 0.2])
def test_bwd_dropout_and_window(pd):
    q, k, v = rand(2, 24, 2, 32), rand(2, 40, 2, 32), rand(2, 40, 2, 32)
    window = (8, 4)
    out, lse, s_dmask, rng_state = fwd_call(q, k, v, p=pd, window=window, ret=pd > 0)
    dout = rand(*out.shape)
    dq, dk, dv, d = fa.bwd(dout, q, k, v, out, lse, None, None, None, None, pd, 32**-0.5, False, window[0],
                           window[1], 0.0, False, None, rng_state if pd else None)  # fmt: skip
    keep = (s_dmask.int() <= math.floor(255 * (1 - pd))) if pd else None
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    o_ref, _ = attention_ref(qf, kf, vf, window=window, keep=keep, p=pd)
    o_ref.backward(dout.float())
    for got, want in ((dq, qf.grad), (dk, kf.grad), (dv, vf.grad)):
        assert (got.float() - want).abs().max() < 2e-2
    assert d.shape == (2, 2, 24)
    assert torch.allclose(d, (dout.float() * out.float()).sum(-1).transpose(1, 2), atol=1e-2)


def rotary(x, cos, sin, pos, interleaved):
    """Rotate the first 2*cos.shape[1] channels of x (b, s, h, d) at positions pos (b, s)."""
    rd = cos.shape[1] * 2
    c, s = cos[pos].float()[:, :, None], sin[pos].float()[:, :, None]
    xf = x.float()
    x1, x2 = (xf[..., 0:rd:2], xf[..., 1:rd:2]) if interleaved else (xf[..., : rd // 2], xf[..., rd // 2 : rd])
    o1, o2 = x1 * c - x2 * s, x1 * s + x2 * c
    rot = torch.stack((o1, o2), -1).flatten(-2) if interleaved else torch.cat((o1, o2), -1)
    return torch.cat((rot, xf[..., rd:]), -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_kvcache_paged_append_rotary(interleaved):
    b, sq, h, hk, d, page = 2, 3, 4, 2, 64, 128
    blocks = 2
    cache_lens = torch.tensor([40, 150], dtype=torch.int32)
    knew = 3
    pool_k, pool_v = rand(5, page, hk, d), rand(5, page, hk, d)
    block_table = torch.tensor([[3, 0], [1, 4]], dtype=torch.int32)
    q, k_new, v_new = rand(b, sq, h, d), rand(b, knew, hk, d), rand(b, knew, hk, d)
    rd = 32
    ang = torch.arange(blocks * page)[:, None] * 10000 ** (-torch.arange(0, rd, 2) / rd)
    cos, sin = ang.cos().half(), ang.sin().half()
    # the reference: contiguous caches, the new keys rotated and appended at cache_lens[b]
    flat_k = pool_k[block_table.long()].reshape(b, blocks * page, hk, d).clone()
    flat_v = pool_v[block_table.long()].reshape(b, blocks * page, hk, d).clone()
    pos_new = cache_lens[:, None].long() + torch.arange(knew)[None]
    k_ro = rotary(k_new, cos, sin, pos_new, interleaved).half()
    for i in range(b):
        flat_k[i, cache_lens[i] : cache_lens[i] + knew] = k_ro[i]
        flat_v[i, cache_lens[i] : cache_lens[i] + knew] = v_new[i]
    q_ro = rotary(q, cos, sin, pos_new, interleaved).half()  # causal: q row i at cache_len + i
    q_in = q.clone()
    out, lse = fa.fwd_kvcache(q_in, pool_k, pool_v, k_new, v_new, cache_lens, cos, sin, None, None, block_table,
                              None, None, d**-0.5, True, -1, -1, 0.0, interleaved, 0)  # fmt: skip
    o_ref, lse_ref = attention_ref(q_ro, flat_k, flat_v, causal=True, seqlens_k=cache_lens + knew)
    assert (out.float() - o_ref).abs().max() < 5e-3
    assert (lse - lse_ref).abs().max() < 1e-2
    got_k = pool_k[block_table.long()].reshape(b, blocks * page, hk, d)
    assert (got_k.float() - flat_k.float()).abs().max() < 2e-3  # appended in place, rotated
    assert (q_in.float() - q_ro.float()).abs().max() < 2e-3  # CK rotates q in place
    rec = calllog.calls()[-1]
    assert rec.fa_path == "fmha_fwd_appendkv+fmha_fwd_splitkv"
    assert [s["role"] for s in rec.stages] == ["appendkv", "splitkv", "combine"]
    assert rec.features["num_splits"] == 1 and rec.features["paged_kv"]
    assert rec.features["rope"] == ("interleaved" if interleaved else "half_rotated")


def test_kvcache_batch_idx_splits_and_alibi():
    b, sq, h, hk, d = 2, 4, 2, 2, 40  # d=40: zero-padded to 40 (a multiple of 8 already); splits 3
    kc, vc = rand(3, 96, hk, d), rand(3, 96, hk, d)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    lens = torch.tensor([50, 96], dtype=torch.int32)
    q = rand(b, sq, h, d)
    slopes = torch.rand(h) * 0.2
    out, lse = fa.fwd_kvcache(q, kc, vc, None, None, lens, None, None, idx, None, None, slopes, None, d**-0.5,
                              False, -1, -1, 0.0, False, 3)  # fmt: skip
    o_ref, _ = attention_ref(q, kc[idx.long()], vc[idx.long()], alibi=slopes, seqlens_k=lens)
    assert (out.float() - o_ref).abs().max() < 5e-3
    rec = calllog.calls()[-1]
    assert rec.family == "fwd_splitkv" and rec.stages[0]["num_splits"] == 3 and rec.features["cache_batch_idx"]


def test_kvcache_head_size_padded():
    q, kc, vc = rand(1, 2, 2, 20), rand(1, 64, 2, 20), rand(1, 64, 2, 20)
    lens = torch.tensor([33], dtype=torch.int32)
    out, _ = fa.fwd_kvcache(q, kc, vc, None, None, lens, None, None, None, None, None, None, None, 20**-0.5,
                            False, -1, -1, 0.0, False, 1)  # fmt: skip
    o_ref, _ = attention_ref(q, kc, vc, seqlens_k=lens)
    assert out.shape == q.shape and (out.float() - o_ref).abs().max() < 5e-3
    assert calllog.calls()[-1].problem.count("-d=24")


def test_rules_window_to_mask():
    m = rules.fa_mask(True, -1, -1, 8, 8, has_alibi=False)
    assert m.text == "b:-1,0" and m.spec.is_causal
    assert rules.fa_mask(True, -1, -1, 1, 8, has_alibi=False).text == "0"  # seqlen_q == 1: not causal
    assert rules.fa_mask(True, -1, -1, 1, 8, has_alibi=True).text == "b:-1,0"
    assert rules.fa_mask(False, 9, 3, 4, 8, has_alibi=False).text == "b:-1,3"  # left >= seqlen_k -> -1
    assert rules.fa_mask(False, 9, 3, 4, 8, has_alibi=False, clamp_first=False).text == "b:9,3"
    assert rules.fa_mask(False, 100, 100, 4, 8, has_alibi=False).text == "0"
    # FA's heuristic: num_n_blocks is always 1, so it always answers 1 (flash-attention#2901)
    assert rules.override_num_splits(1, 1, 1, 128, 0.0, 0, 304) == 1
    assert rules.override_num_splits(1, 1, 1, 128, 0.0, 4, 304) == 4
    assert rules.num_splits_heuristic_ck(4, 608, 16, 128) > 1


def test_argument_errors_name_the_rule():
    q, k = rand(1, 4, 2, 12), rand(1, 4, 2, 12)
    with pytest.raises(RuntimeError, match="head_size: 12 is not a multiple of 8"):
        fwd_call(q, k, k)
    with pytest.raises(RuntimeError, match="fp16 and bf16"):
        fwd_call(q.float(), k.float(), k.float())


def test_install_registers_module():
    try:
        mod = fa.install(backend="cpu")
        import flash_attn_2_cuda  # noqa: F401

        assert sys.modules["flash_attn_2_cuda"] is mod and all(callable(getattr(mod, n)) for n in fa.ENTRY_POINTS)
    finally:
        fa.uninstall()
        fa.configure(backend="auto")
    assert "flash_attn_2_cuda" not in sys.modules


def test_call_log_written(tmp_path):
    q, k = rand(1, 8, 2, 32), rand(1, 8, 2, 32)
    fwd_call(q, k, k)
    path = calllog.write_log(tmp_path / "calls.json", {"arch": "gfx942"})
    import json

    doc = json.loads(path.read_text())
    assert doc["schema"] == calllog.LOG_SCHEMA and doc["calls"][0]["stages"][0]["kernel_id"].startswith("fwd.fp16")
    assert doc["calls"][0]["nodeid"].endswith("test_call_log_written")


def test_varlen_fwd_dropout_s_dmask_matches_out():
    cu_q = torch.tensor([0, 9, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 17, 29], dtype=torch.int32)
    h, d, pd = 2, 32, 0.25
    q, k, v = rand(30, h, d), rand(29, h, d), rand(29, h, d)
    out, lse, s_dmask, rng = fa.varlen_fwd(q, k, v, None, cu_q, cu_k, None, None, None, None, 21, 17, pd, d**-0.5,
                                           False, False, -1, -1, 0.0, True, None, 0)  # fmt: skip
    assert s_dmask.shape == (h, 30, 17) and s_dmask.dtype == torch.uint8
    for i in range(2):
        q0, q1, k0, k1 = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        keep = s_dmask[:, q0:q1, : k1 - k0].int() <= math.floor(255 * (1 - pd))
        o_ref, _ = attention_ref(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], keep=keep[None], p=pd)
        assert (out[q0:q1].float() - o_ref[0]).abs().max() < 5e-3
    assert s_dmask[:, 9:, 12:].abs().max() == 0  # the second sequence has 12 keys: nothing past them


def test_kvcache_decode_swap_append_no_rope_and_local_window():
    b, h, hk, d = 2, 4, 2, 32
    kc, vc = rand(b, 160, hk, d), rand(b, 160, hk, d)
    lens = torch.tensor([100, 37], dtype=torch.int32)
    k_new, v_new = rand(b, 1, hk, d), rand(b, 1, hk, d)
    q = rand(b, 1, h, d)
    kc0, vc0 = kc.clone(), vc.clone()
    out, lse = fa.fwd_kvcache(q, kc, vc, k_new, v_new, lens, None, None, None, None, None, None, None, d**-0.5,
                              True, -1, -1, 0.0, False, 0)  # fmt: skip
    ref_k, ref_v = kc0.clone(), vc0.clone()
    for i in range(b):
        ref_k[i, lens[i]], ref_v[i, lens[i]] = k_new[i, 0], v_new[i, 0]
    assert torch.equal(kc, ref_k) and torch.equal(vc, ref_v)  # appended in place, nothing else touched
    o_ref, lse_ref = attention_ref(q, ref_k, ref_v, seqlens_k=lens + 1)
    assert (out.float() - o_ref).abs().max() < 5e-3
    assert lse.shape == (b, h, 1) and (lse.reshape(b, h) - lse_ref[..., 0]).abs().max() < 1e-2
    rec = calllog.calls()[-1]
    assert rec.features["ngroups_swapped"] and rec.features["num_splits"] == 1
    # a local window: sq=4 queries, each sees keys within (8 left, 0 right) of its bottom-right-aligned position
    q4 = rand(b, 4, h, d)
    out, _ = fa.fwd_kvcache(q4, kc, vc, None, None, lens, None, None, None, None, None, None, None, d**-0.5,
                            False, 8, 0, 0.0, False, 1)  # fmt: skip
    o_ref, _ = attention_ref(q4, kc, vc, window=(8, 0), seqlens_k=lens)
    assert (out.float() - o_ref).abs().max() < 5e-3
    assert calllog.calls()[-1].features["mask"] == "b:8,0"


@pytest.mark.parametrize("causal", [False, True])
def test_bwd_alibi_gqa(causal):
    q, k, v = rand(2, 20, 4, 32), rand(2, 28, 2, 32), rand(2, 28, 2, 32)
    slopes = torch.rand(4) * 0.3
    out, lse, _, _ = fwd_call(q, k, v, causal=causal, alibi=slopes)
    dout = rand(*out.shape)
    dq, dk, dv, _ = fa.bwd(dout, q, k, v, out, lse, None, None, None, slopes, 0.0, 32**-0.5, causal, -1, -1, 0.0,
                           False, None, None)  # fmt: skip
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    o_ref, _ = attention_ref(qf, kf, vf, causal=causal, alibi=slopes)
    o_ref.backward(dout.float())
    for got, want in ((dq, qf.grad), (dk, kf.grad), (dv, vf.grad)):
        assert (got.float() - want).abs().max() < 1e-2
    assert calllog.calls()[-1].features["alibi"] and calllog.calls()[-1].features["gqa"]
