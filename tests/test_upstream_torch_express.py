"""Which problems each torch backend can express, and why not (pure logic: runs without torch and without a GPU)."""

from __future__ import annotations

import pytest

from ckfmha.problem import Problem
from ckfmha.upstream.torch_express import BACKENDS, express, has_empty_rows, parse_backend

BASE = Problem(batch=2, nhead_q=4, seqlen_q=128, seqlen_k=128, hdim_q=64)


def test_parse_backend():
    assert parse_backend("torch") == "math" and parse_backend("torch:flex") == "flex"
    assert parse_backend("cudnn") == "cudnn"
    with pytest.raises(ValueError, match="allowed"):
        parse_backend("torch:xla")


@pytest.mark.parametrize("b", BACKENDS)
def test_plain_problem_everywhere(b):
    e = express(BASE, b)
    assert e.ok and e.mask == "none" and e.compare == ("o",) and e.gqa == "none"


@pytest.mark.parametrize("b", BACKENDS)
def test_never_expressible(b):
    for p, why in (
        (BASE.replace(p_drop=0.1), "dropout"),
        (BASE.replace(dtype="fp8", qscale="pertensor"), "fp8"),
        (Problem(family="fwd_splitkv", num_splits=2, seqlen_q=4, seqlen_k=256), "fwd_splitkv"),
    ):
        e = express(p, b)
        assert not e.ok and why in e.reason and f"torch:{b}" in e.reason


def test_dtypes():
    p = BASE.replace(dtype="fp32")
    assert {b: express(p, b).ok for b in BACKENDS} == {
        "math": True,
        "efficient": True,
        "flash": False,
        "cudnn": False,
        "flex": True,
    }


def test_masks():
    causal_sq = BASE.replace(mask="t")
    assert express(causal_sq, "flash").mask == "is_causal"
    rect = BASE.replace(seqlen_q=64, seqlen_k=256)
    assert not express(rect.replace(mask="t"), "flash").ok  # torch's flash refuses non-square is_causal
    assert "non-square" in express(rect.replace(mask="t"), "flash").reason
    assert express(rect.replace(mask="t"), "efficient").mask == "is_causal"
    assert express(rect.replace(mask="b"), "flash").mask == "causal_lower_right"
    assert express(rect.replace(mask="b"), "efficient").mask == "causal_lower_right"
    assert express(rect.replace(mask="b"), "math").mask == "dense"
    assert express(BASE.replace(mask="b"), "math").mask == "is_causal"  # square: both corners coincide
    win = BASE.replace(mask="t:16,4")
    assert not express(win, "flash").ok and "window" in express(win, "flash").reason
    assert express(win, "efficient").mask == "dense" and express(win, "flex").mask == "mask_mod"
    gen = BASE.replace(mask="g:5,7")
    assert express(gen, "math").ok and not express(gen, "flash").ok


def test_fully_masked_rows():
    p = BASE.replace(seqlen_q=256, seqlen_k=64, mask="b")  # rows 0..191 see no key
    assert has_empty_rows(p)
    for b in ("math", "efficient", "flash", "cudnn"):
        assert not express(p, b).ok and "no allowed key" in express(p, b).reason
    assert express(p, "flex").ok and express(p, "flex").mask == "mask_mod"
    assert not has_empty_rows(BASE.replace(seqlen_q=256, seqlen_k=64, mask="t"))
    assert has_empty_rows(Problem(mode="group", batch=2, seqlens_q=(3, 4), seqlens_k=(0, 5)))


def test_bias_alibi_softcap_sink():
    eb = BASE.replace(bias="elementwise")
    assert not express(eb, "flash").ok and express(eb, "math").additive == ("bias:attn_mask",)
    assert express(eb, "flex").additive == ("bias:score_mod",)
    al = BASE.replace(bias="alibi")
    for b in ("math", "efficient", "cudnn"):
        assert not express(al, b).ok and "ALiBi" in express(al, b).reason  # rounding of the fp16 mask
    assert express(al.replace(dtype="fp32"), "math").ok
    assert express(al, "flex").additive == ("alibi:score_mod",)
    sc = BASE.replace(logits_soft_cap=30.0)
    for b in ("math", "efficient", "flash", "cudnn"):
        assert not express(sc, b).ok and "soft-cap" in express(sc, b).reason
    assert express(sc, "flex").ok
    sk = BASE.replace(sink=True)
    e = express(sk, "flex")
    assert e.ok and e.virtual_sink_key and e.mask == "mask_mod"
    assert not express(sk, "math").ok and express(sk.replace(dtype="fp32"), "math").virtual_sink_key
    assert not express(sk.replace(dtype="fp32"), "flash").ok


def test_gqa_and_group_mode():
    g = BASE.replace(nhead_k=2)
    assert {b: express(g, b).gqa for b in BACKENDS} == {
        "math": "enable_gqa",
        "efficient": "repeat_interleave",
        "flash": "enable_gqa",
        "cudnn": "repeat_interleave",
        "flex": "enable_gqa",
    }
    grp = Problem(mode="group", batch=2, nhead_q=2, seqlens_q=(5, 9), seqlens_k=(7, 11), hdim_q=64)
    assert any("one call per sequence" in n for n in express(grp, "math").notes)


def test_lse_and_dbias_comparisons():
    p = BASE.replace(lse=True)
    e = express(p, "efficient")
    assert e.ok and e.compare == ("o",) and any("lse not compared" in n for n in e.notes)
    assert express(p, "flex").compare == ("o", "lse")
    bw = Problem(family="bwd", batch=1, nhead_q=2, seqlen_q=64, hdim_q=64, bias="elementwise", dbias=True, dtype="fp32")
    assert express(bw, "math").compare == ("dq", "dk", "dv", "dbias")
    e = express(bw, "efficient")
    assert e.compare == ("dq", "dk", "dv") and any("dbias not compared" in n for n in e.notes)


def test_flash_head_dims():
    p = BASE.replace(hdim_v=32)
    assert not express(p, "flash").ok and express(p, "efficient").ok
