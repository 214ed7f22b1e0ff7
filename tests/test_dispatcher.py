"""Dispatcher: selection rules case by case, explanations, plans per family, heuristics.

The registries are real CK kernels: names from the golden gfx942 receipt-0 lists, parsed into configs, so these
tests do not depend on our own enumeration.
"""

from __future__ import annotations

import gzip
from functools import cache

import pytest

from ckfmha.dispatcher import (
    Dispatcher,
    NoKernelError,
    StageRole,
    decode_num_splits,
    heuristic_priority,
    num_splits_heuristic,
)
from ckfmha.kernel import Dropout, KernelConfig, MaskImpl
from ckfmha.naming import parse_ck_instance_name
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from tests.golden import LOCAL_GOLDEN


@cache
def golden(mask_mode: str, api: str, *tokens: str) -> tuple[KernelConfig, ...]:
    with gzip.open(LOCAL_GOLDEN / mask_mode / api / "gfx942" / "r0.txt.gz", "rt") as fh:
        names = fh.read().split()
    return tuple(parse_ck_instance_name(n) for n in names if all(t in n for t in tokens))


@cache
def disp(mask_mode: str = "simplified") -> Dispatcher:
    cs: list[KernelConfig] = []
    for api in ("fwd", "fwd_splitkv", "pagedkv_prefill", "fwd_appendkv", "batch_prefill", "bwd"):
        cs += golden(mask_mode, api, "_fp16_")
    return Dispatcher(Registry("gfx942", cs))


def chosen(p: Problem, mask_mode: str = "simplified") -> KernelConfig:
    return disp(mask_mode).select(p).stages[0].kernel


# ----------------------------------------------------------------------------------------------- padding
def test_aligned_shape_gets_a_no_pad_kernel_and_unaligned_a_padded_one() -> None:
    aligned = Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=256, seqlen_k=512, hdim_q=128, bias="elementwise")
    k = chosen(aligned)
    assert (k.pad_s, k.pad_sk, k.pad_d, k.pad_dv) == (0, 0, 0, 0)
    unaligned = aligned.replace(seqlen_q=200, seqlen_k=300)
    k2 = chosen(unaligned)
    assert k2.pad_s == 1 and k2.pad_sk == 1


def test_no_pad_kernel_is_rejected_on_unaligned_lengths_with_a_reason() -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=1, seqlen_q=200, seqlen_k=512, hdim_q=128, bias="elementwise")
    exp = disp().explain(p).stages[0]
    npad = [v for v in exp.verdicts if (v.config.pad_s, v.config.pad_sk) == (0, 0)]
    assert npad and all(not v.ok for v in npad)
    assert any("seqlen_q=200 is not a multiple of the kernel's tile" in v.reason for v in npad)


def test_group_mode_needs_seqlen_pads() -> None:
    p = Problem(
        dtype="fp16", mode="group", batch=3, nhead_q=4, seqlens_q=(64, 128, 7), seqlens_k=(64, 300, 9), hdim_q=64
    )
    k = chosen(p)
    assert k.mode == "group" and k.pad_s == 1 and k.pad_sk == 1


# ----------------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize(
    "mask, simplified, generic",
    [
        ("0", MaskImpl.NONE, MaskImpl.NONE),
        ("t", MaskImpl.ANY, MaskImpl.CAUSAL),
        ("b", MaskImpl.ANY, MaskImpl.CAUSAL),
        ("t:64,0", MaskImpl.ANY, MaskImpl.GENERIC),
        ("b:10,10", MaskImpl.ANY, MaskImpl.GENERIC),
        ("g:5,9", MaskImpl.ANY, MaskImpl.GENERIC),
    ],
)
def test_masks_as_ck_serves_them(mask: str, simplified: MaskImpl, generic: MaskImpl) -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128, mask=mask)
    assert chosen(p, "simplified").mask is simplified
    assert chosen(p, "generic").mask is generic


# ----------------------------------------------------------------------------------------------- head dims
@pytest.mark.parametrize(
    "hq, hv, kernel_hq, kernel_hv",
    [
        (80, 80, 80, 96),  # CK's (80, 96) kernels serve hdim_v 80 with the hdim_v pad
        (96, 96, 96, 128),
        (160, 160, 192, 192),  # no 160 kernels on gfx942: the 192 bucket with hdim pads
        (192, 128, 192, 128),
        (48, 48, 64, 64),
    ],
)
def test_head_dims_equal_or_larger_with_pads(hq: int, hv: int, kernel_hq: int, kernel_hv: int) -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=100, seqlen_k=100, hdim_q=hq, hdim_v=hv)
    k = chosen(p)
    assert (k.hdim_q, k.hdim_v) == (kernel_hq, kernel_hv)
    if kernel_hq != hq:
        assert k.pad_d
    if kernel_hv != hv:
        assert k.pad_dv


def test_smallest_head_dim_bucket_wins() -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=100, seqlen_k=100, hdim_q=64)
    assert chosen(p).hdim_q == 64


# ----------------------------------------------------------------------------------------------- features
@pytest.mark.parametrize(
    "kw, field, value",
    [
        (dict(lse=True), "lse", True),
        (dict(p_drop=0.1), "dropout", Dropout.ENABLED),
        (dict(bias="alibi"), "bias", "alibi"),
        (dict(logits_soft_cap=20.0), "logits_soft_cap", True),
        (dict(sink=True), "sink", True),
    ],
)
def test_exact_feature_match(kw, field: str, value) -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128, **kw)
    assert getattr(chosen(p), field) == value
    plain = chosen(Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128))
    assert getattr(plain, field) != value


def test_gqa_problems_select_like_mha() -> None:
    p = Problem(dtype="fp16", batch=2, nhead_q=8, nhead_k=2, seqlen_q=256, seqlen_k=256, hdim_q=128)
    assert chosen(p) == chosen(p.replace(nhead_k=8))


def test_explain_names_the_first_failed_rule_in_plain_words() -> None:
    p = Problem(dtype="bf16", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128, lse=True)
    with pytest.raises(NoKernelError) as e:
        disp().select(p)  # the registry holds fp16 kernels only
    text = str(e.value)
    assert "no kernel can serve stage(s) fwd" in text
    assert "dtype: kernel is fp16, problem is bf16" in text
    p16 = p.replace(dtype="fp16")
    exp = disp().explain(p16).stages[0]
    reasons = {v.reason for v in exp.verdicts if not v.ok}
    assert any(r.startswith("lse: problem needs LSE output, kernel has lse=False") for r in reasons)
    assert exp.chosen is not None and exp.verdicts[0].ok


# ----------------------------------------------------------------------------------------------- plans
def test_plans_per_family() -> None:
    d = disp()
    assert [s.role for s in d.select(Problem(dtype="fp16", seqlen_q=64, hdim_q=64)).stages] == [StageRole.FWD]
    sp = d.select(
        Problem(
            family="fwd_splitkv",
            dtype="fp16",
            batch=2,
            nhead_q=4,
            seqlen_q=1,
            seqlen_k=1000,
            hdim_q=128,
            num_splits=4,
            lse=True,
        )
    )
    assert [s.role for s in sp.stages] == [StageRole.SPLITKV, StageRole.COMBINE]
    assert all(s.launch.num_splits == 4 for s in sp.stages)
    main, comb = sp.kernels
    assert (comb.pad_s, comb.pad_dv) == (main.pad_s, main.pad_dv)  # combine reuses the split kernel's pads
    pk = d.select(
        Problem(
            family="fwd_pagedkv",
            dtype="fp16",
            batch=2,
            nhead_q=4,
            seqlen_q=64,
            seqlen_k=512,
            hdim_q=128,
            page_block_size=128,
        )
    )
    assert [s.role for s in pk.stages] == [StageRole.PAGEDKV]
    bp = d.select(
        Problem(
            family="batch_prefill",
            dtype="fp16",
            mode="group",
            batch=2,
            nhead_q=4,
            seqlens_q=(10, 20),
            seqlens_k=(100, 50),
            hdim_q=128,
            page_block_size=16,
            kv_lookup="vllm",
            kv_layout="vectorized",
        )
    )
    assert [s.role for s in bp.stages] == [StageRole.BATCH_PREFILL]
    bw = d.select(Problem(family="bwd", dtype="fp16", batch=2, nhead_q=4, seqlen_q=128, seqlen_k=128, hdim_q=64))
    assert [s.role for s in bw.stages] == [StageRole.DOT_DO_O, StageRole.DQ_DK_DV, StageRole.CONVERT_DQ]
    assert bw.stages[1].launch.workspace_bytes > 0


def test_kv_cache_decode_plan_appends_then_attends() -> None:
    p = Problem(
        family="fwd_appendkv",
        dtype="fp16",
        batch=2,
        nhead_q=8,
        nhead_k=2,
        seqlen_q=1,
        seqlen_k=4096,
        hdim_q=128,
        seqlen_knew=1,
        rotary_dim=128,
        rope="interleaved",
        page_block_size=128,
    )
    plan = disp().select(p)
    assert plan.stages[0].role is StageRole.APPENDKV
    assert plan.stages[0].kernel.rope == "interleaved" and plan.stages[0].kernel.paged_kv
    assert [s.role for s in plan.stages[1:]] in ([StageRole.PAGEDKV], [StageRole.SPLITKV, StageRole.COMBINE])


def test_attention_after_appendkv_needs_the_seqlen_k_pad() -> None:
    """The cache holds 256 keys before the append, 266 after; the attention reads the post-append seqlen_k per
    batch (CK's seqlen_k_ptr), so only kernels with the seqlen_k pad qualify (fmha_fwd_splitkv.py skcheck)."""
    p = Problem(
        family="fwd_appendkv", dtype="fp16", seqlen_q=4, seqlen_k=266, seqlen_knew=10, hdim_q=32, page_block_size=128
    )
    exp = disp().explain(p)
    attention = [s for s in exp.stages if s.role in (StageRole.FWD, StageRole.PAGEDKV, StageRole.SPLITKV)]
    assert attention and all(s.chosen is not None and s.chosen.pad_sk for s in attention)
    rejected = [v for s in attention for v in s.verdicts if v.config.pad_sk == 0]
    assert rejected and all(
        v.reason.startswith("padding: after append-KV the attention reads seqlen_k per batch")
        for v in rejected
        if v.reason and v.reason.startswith("padding")
    )
    assert any(v.reason and "CK's seqlen_k_ptr" in v.reason for v in rejected)
    # an aligned post-append length changes nothing: still the pad
    aligned = p.replace(seqlen_k=256 + 128, seqlen_knew=128)
    assert all(
        s.kernel.pad_sk
        for s in disp().select(aligned).stages
        if s.role is not StageRole.APPENDKV and s.role is not StageRole.COMBINE
    )


def test_fp32_backward_has_no_convert_stage_unless_deterministic() -> None:
    from ckfmha.dispatcher import Dispatcher as D

    d = D(Registry("gfx942", []))
    p = Problem(family="bwd", dtype="fp32", batch=1, nhead_q=1, seqlen_q=16, hdim_q=32)
    assert StageRole.CONVERT_DQ not in d.roles(p)
    assert StageRole.CONVERT_DQ in d.roles(p.replace(deterministic=True))
    assert StageRole.CONVERT_DQ in d.roles(p.replace(dtype="fp16"))


def test_empty_registry_error_says_so() -> None:
    d = Dispatcher(Registry("gfx942", []))
    with pytest.raises(NoKernelError, match="the registry holds no fwd kernels"):
        d.select(Problem(dtype="fp16", seqlen_q=64, hdim_q=64))


# ----------------------------------------------------------------------------------------------- heuristics
def test_heuristics_table_prefers_async_pipelines() -> None:
    qr = golden("simplified", "fwd", "_qr_vr_")[0]
    qa = golden("simplified", "fwd", "_qr_async_vr_")[0]
    assert heuristic_priority(qa) < heuristic_priority(qr)


def test_split_heuristics() -> None:
    # a full grid gets no split; a decode grid gets several
    assert num_splits_heuristic(8, 32, 4096, 4096, 128, 128, num_cus=304) == 1
    assert num_splits_heuristic(1, 8, 1, 65536, 64, 128, num_cus=304) > 1
    assert decode_num_splits(32, 8, 8192, 128, num_cus=132) == 2
    assert decode_num_splits(512, 8, 8192, 128, num_cus=132) == 1
    assert decode_num_splits(1, 1, 256, 128, num_cus=132) == 1  # too few key blocks to split


def test_unknown_and_unshipped_backends_are_clear_errors() -> None:
    from ckfmha.backends import BackendError, get_backend

    with pytest.raises(BackendError, match="unknown backend 'cuda'; known: cpu, triton, hip"):
        get_backend("cuda")
    assert get_backend("hip").name == "hip"  # shipped: CK's own kernels from a checkout (docs/hip_backend.md)


def test_min_seqlen_q_needs_a_skip_kernel() -> None:
    p = Problem(dtype="fp16", mode="group", batch=2, nhead_q=2, seqlens_q=(3, 100), seqlens_k=(3, 100), hdim_q=64)
    assert not chosen(p).skip_min_seqlen_q
    k = chosen(p.replace(min_seqlen_q=8))
    assert k.skip_min_seqlen_q and k.mode == "group"
