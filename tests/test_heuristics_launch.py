"""``launch_variants`` of data/heuristics.yaml: how the Triton backend launches a forward kernel (Q.K ahead, the
longest-first grid), chosen per kernel by the first matching rule; a malformed entry names itself."""

from __future__ import annotations

import pytest

from ckfmha.heuristics import HeuristicsError, LaunchVariant, load_heuristics
from ckfmha.kernel import KernelConfig


def triton_fwd(hdim: int, mask: str, family: str = "fwd") -> KernelConfig:
    return KernelConfig.make(
        family=family,
        dtype="bf16",
        mode="batch",
        hdim_q=hdim,
        hdim_v=hdim,
        arch_tag="sm90",
        pipeline="triton",
        tile=(128, 64),
        warps=((8, 1, 1), (8, 1, 1)),
        mask=mask,
        num_stages=2,
    )


def test_packaged_table_gives_masked_hdim256_both_variants_and_nothing_else() -> None:
    h = load_heuristics()
    assert h.launch_variant(triton_fwd(256, "causal")) == LaunchVariant(qk_ahead=True, lpt_heads=8)
    assert h.launch_variant(triton_fwd(256, "none")) == LaunchVariant()
    assert h.launch_variant(triton_fwd(128, "causal")) == LaunchVariant()
    assert h.launch_variant(triton_fwd(256, "causal", family="fwd_splitkv")) == LaunchVariant()


def test_first_matching_rule_wins(tmp_path) -> None:
    (tmp_path / "h.yaml").write_text(
        "schema: 1\nrules: []\nlaunch_variants:\n"
        '  - {when: "c.hdim_q >= 256", lpt_heads: 4}\n'
        '  - {when: "c.hdim_q >= 128", qk_ahead: true, lpt_heads: 16}\n'
    )
    h = load_heuristics(tmp_path / "h.yaml")
    assert h.launch_variant(triton_fwd(256, "causal")) == LaunchVariant(qk_ahead=False, lpt_heads=4)
    assert h.launch_variant(triton_fwd(128, "none")) == LaunchVariant(qk_ahead=True, lpt_heads=16)
    assert h.launch_variant(triton_fwd(64, "none")) == LaunchVariant()


@pytest.mark.parametrize(
    "entry, words",
    [
        ('{when: "c.hdim_q >= 256", lpt_heads: -1}', "launch_variants[0].lpt_heads"),
        ('{when: "c.hdim_q >= 256", qk_ahead: "yes"}', "launch_variants[0].qk_ahead"),
        ('{when: "c.hdim_q >=", qk_ahead: true}', "launch_variants[0].when"),
        ('{when: "c.hdim_q >= 256", persistent: true}', "launch_variants[0]: unknown key(s) 'persistent'"),
    ],
)
def test_malformed_launch_variant_names_the_entry(tmp_path, entry: str, words: str) -> None:
    (tmp_path / "heuristics.yaml").write_text(f"schema: 1\nrules: []\nlaunch_variants:\n  - {entry}\n")
    with pytest.raises(HeuristicsError) as err:
        load_heuristics(tmp_path / "heuristics.yaml")
    assert words in str(err.value) and "heuristics.yaml" in str(err.value)


def test_the_plan_carries_the_dispatchers_variants() -> None:
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.heuristics import Heuristics
    from ckfmha.plan import Launch
    from ckfmha.problem import Problem
    from ckfmha.registry import Registry

    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    p = Problem(dtype="bf16", batch=2, nhead_q=4, seqlen_q=512, seqlen_k=512, hdim_q=256, mask="b")
    plan = Dispatcher(reg, num_cus=132).select(p)
    assert plan.stages[0].launch == Launch(variant=LaunchVariant(True, 8))
    assert str(plan).endswith(" qk_ahead=True lpt_heads=8")
    real = load_heuristics()
    bare = Heuristics("test: no launch_variants", real.rules, real.short_query_tiles)
    assert Dispatcher(reg, num_cus=132, heuristics=bare).select(p).stages[0].launch == Launch()
    unmasked = Problem(dtype="bf16", batch=2, nhead_q=4, seqlen_q=512, seqlen_k=512, hdim_q=256)
    assert Dispatcher(reg, num_cus=132).select(unmasked).stages[0].launch.as_args() == {}
    assert LaunchVariant().as_stage_args() == {} and LaunchVariant.from_stage_args({}) == LaunchVariant()
