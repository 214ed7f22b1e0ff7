"""The dispatcher pairs an older CK's convert_dq kernel with the dq_dk_dv kernel it belongs to.

In the amd-aiter 0.1.7.post2.dev18 tree (naming scheme ``ck-2025-11``) a convert_dq tile has two entries,
``b64x0`` / ``b64x128`` / ``b64x192``: the second is the bn0 (kN0) of the deterministic dq_dk_dv kernel it belongs
to (codegen/ops/fmha_bwd.py ``convert_dq_bn0``), 0 when non-deterministic; the deterministic convert kernel sums
``ceil(seqlen_k / kN0)`` dq_acc slices per sequence (fmha_bwd_kernel.hpp ``FmhaBwdConvertQGradKernel``) and CK's
api pairs the two per trait. ckfmha's rule ``convert_dq_bn0`` (ckfmha/rules.py) and the dispatcher, which passes
the chosen dq_dk_dv kernel when it ranks convert candidates (ckfmha.plan.PAIRED_ROLE), do the same.

The hand-built registry's names are that tree's generator output for gfx950 (receipt 0); the checkout tests use
the tree itself (the ``ck_tree`` fixture; skipped with its reason when the wheel cannot be downloaded).
"""

from __future__ import annotations

import pytest

from ckfmha.backends.base import BackendError
from ckfmha.dispatcher import Dispatcher, NoKernelError, PinnedRegistry
from ckfmha.inputs import make_inputs
from ckfmha.kernel import KernelConfig
from ckfmha.naming import parse_ck_instance_name
from ckfmha.plan import PAIRED_ROLE, StageRole
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.registry import Registry
from ckfmha.rules import RoleRules, fits, misfit
from ckfmha.runner import run
from ckfmha.validator import validate
from tests.ck_tree import ck_tree  # noqa: F401  (fixture)

_TAIL = "_nbias_ndbias_nmask_ndropout_deterministic"
DOT_DO_O = parse_ck_instance_name("fmha_bwd_dot_do_o_d128_fp16_b64_batch_o2_npad_gfx950")
DQ_DK_DV_BN0_192 = parse_ck_instance_name(
    "fmha_bwd_d128_fp16_batch_b16x192x128x16x128x16x32x128x128_r1x4x1_r4x1x1_r1x4x1_w16x16x32_w16x16x16_o1_maxq0_"
    f"npad{_TAIL}_trload_gfx950"
)
DQ_DK_DV_BN0_128 = parse_ck_instance_name(
    "fmha_bwd_d128_fp16_batch_b16x128x128x16x128x16x32x128x128_r1x4x1_r4x1x1_r1x4x1_w16x16x32_w16x16x16_o1_maxq0_"
    f"npad{_TAIL}_ntrload_gfx950"
)
CONVERT_KN0_128 = parse_ck_instance_name("fmha_bwd_convert_dq_d128_fp16_b64x128_batch_o2_npad_deterministic_gfx950")
CONVERT_KN0_192 = parse_ck_instance_name("fmha_bwd_convert_dq_d128_fp16_b64x192_batch_o2_npad_deterministic_gfx950")
CONVERT_NDET = parse_ck_instance_name("fmha_bwd_convert_dq_d128_fp16_b64x0_batch_o2_npad_ndeterministic_gfx950")

MISMATCH_128_VS_192 = (
    "convert_dq_bn0: a deterministic convert_dq kernel sums dq_acc slices of kN0=128 keys, the paired dq_dk_dv "
    "kernel writes one per bn0=192 keys (CK pairs them: kN0 == bn0, codegen/ops/fmha_bwd.py convert_dq_bn0)"
)


def _problem(**kw) -> Problem:
    shape = dict(family="bwd", nhead_q=1, hdim_q=128, batch=1, seqlen_q=64, seqlen_k=384, deterministic=True)
    return Problem(**{**shape, **kw})


def _registry(*configs: KernelConfig) -> Registry:
    return Registry("gfx950", configs, source="amd-aiter 0.1.7.post2.dev18 names (gfx950)")


def _pinned(base: Registry, kernel: KernelConfig) -> Dispatcher:
    """A dispatcher that plans around ``kernel`` (the pytest plugin's kernel items, pytest_ckfmha/execute.py)."""
    # Dispatcher is annotated with Registry but reads only .arch and .candidates(), which the view provides
    return Dispatcher(PinnedRegistry(base, kernel))  # type: ignore[arg-type]


def _disable_pairing(monkeypatch) -> None:
    monkeypatch.setattr(RoleRules, "_pairing_misfit", lambda self, c: None)


@pytest.fixture
def cpu_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


# ------------------------------------------------------------------------------------- the rule
def test_the_names_parse_as_the_tiles_the_rule_compares():
    assert DQ_DK_DV_BN0_192.tile[1] == 192 and DQ_DK_DV_BN0_128.tile[1] == 128
    assert CONVERT_KN0_128.tile == (64, 128) and CONVERT_KN0_192.tile == (64, 192) and CONVERT_NDET.tile == (64, 0)
    assert PAIRED_ROLE[StageRole.CONVERT_DQ] is StageRole.DQ_DK_DV


def test_fits_and_misfit_name_the_pairing_rule():
    p = _problem()
    assert fits(p, StageRole.CONVERT_DQ, CONVERT_KN0_128, paired=DQ_DK_DV_BN0_192) == MISMATCH_128_VS_192
    m = misfit(p, StageRole.CONVERT_DQ, CONVERT_KN0_128, paired=DQ_DK_DV_BN0_192)
    assert m is not None and m.reason == MISMATCH_128_VS_192
    assert not m.launch_check  # a feature rule: the kernels would compute something else, no argument is at fault
    assert fits(p, StageRole.CONVERT_DQ, CONVERT_KN0_192, paired=DQ_DK_DV_BN0_192) is None
    assert fits(p, StageRole.CONVERT_DQ, CONVERT_KN0_128, paired=DQ_DK_DV_BN0_128) is None
    assert fits(p, StageRole.CONVERT_DQ, CONVERT_KN0_192, paired=DQ_DK_DV_BN0_128) == (
        "convert_dq_bn0: a deterministic convert_dq kernel sums dq_acc slices of kN0=192 keys, the paired dq_dk_dv "
        "kernel writes one per bn0=128 keys (CK pairs them: kN0 == bn0, codegen/ops/fmha_bwd.py convert_dq_bn0)"
    )


def test_the_rule_holds_only_for_deterministic_two_entry_tiles_with_a_paired_kernel():
    det = _problem()
    # without a paired dq_dk_dv kernel there is nothing to compare with
    assert fits(det, StageRole.CONVERT_DQ, CONVERT_KN0_128) is None
    # the current CK's one-entry tile carries no kN0
    assert fits(det, StageRole.CONVERT_DQ, CONVERT_KN0_128.replace(tile=(64,)), paired=DQ_DK_DV_BN0_192) is None
    # non-deterministic: one dq_acc, kN0 is 0 whatever the dq_dk_dv kernel's bn0
    ndet = _problem(deterministic=False)
    assert fits(ndet, StageRole.CONVERT_DQ, CONVERT_NDET, paired=DQ_DK_DV_BN0_192.replace(deterministic=False)) is None
    # the deterministic requirement comes first: a deterministic kernel on a non-deterministic problem
    assert fits(ndet, StageRole.CONVERT_DQ, CONVERT_KN0_128, paired=DQ_DK_DV_BN0_192) == (
        "deterministic: problem needs non-deterministic, kernel has deterministic=True"
    )


# ------------------------------------------------------------------------------------- the dispatcher
HAND_BUILT = (DOT_DO_O, DQ_DK_DV_BN0_192, CONVERT_KN0_128, CONVERT_KN0_192)


def test_the_dispatcher_skips_a_mismatched_convert_kernel_that_ranks_first():
    p = _problem()
    d = Dispatcher(_registry(*HAND_BUILT))
    # unpaired, the kN0=128 kernel ranks first (kernel id b64x128 < b64x192)
    assert d.ranked_candidates(p, StageRole.CONVERT_DQ) == [CONVERT_KN0_128, CONVERT_KN0_192]
    assert d.ranked_candidates(p, StageRole.CONVERT_DQ, paired=DQ_DK_DV_BN0_192) == [CONVERT_KN0_192]
    plan = d.select(p)
    assert [s.kernel for s in plan.stages] == [DOT_DO_O, DQ_DK_DV_BN0_192, CONVERT_KN0_192]
    stage = d.explain(p).stages[-1]
    assert stage.role is StageRole.CONVERT_DQ and stage.chosen == CONVERT_KN0_192
    assert [(v.config, v.reason) for v in stage.verdicts] == [
        (CONVERT_KN0_192, None),
        (CONVERT_KN0_128, MISMATCH_128_VS_192),
    ]
    assert f"NO    1 x {MISMATCH_128_VS_192}" in stage.summary()


def test_no_paired_convert_kernel_is_no_plan_and_explain_says_why():
    p = _problem()
    d = Dispatcher(_registry(DOT_DO_O, DQ_DK_DV_BN0_192, CONVERT_KN0_128))
    with pytest.raises(NoKernelError, match=r"no kernel can serve stage\(s\) convert_dq") as e:
        d.select(p)
    assert MISMATCH_128_VS_192 in str(e.value)


def test_a_pinned_dq_dk_dv_kernel_gets_its_own_convert_kernel():
    p = _problem()
    base = _registry(DOT_DO_O, DQ_DK_DV_BN0_128, DQ_DK_DV_BN0_192, CONVERT_KN0_128, CONVERT_KN0_192)
    for dq_dk_dv, convert in ((DQ_DK_DV_BN0_128, CONVERT_KN0_128), (DQ_DK_DV_BN0_192, CONVERT_KN0_192)):
        plan = _pinned(base, dq_dk_dv).select(p)
        assert plan.stages[1].kernel == dq_dk_dv and plan.stages[2].kernel == convert


def test_the_paired_plan_runs_on_the_cpu_backend_and_matches_the_reference(cpu_cache):
    p = _problem()
    inp = make_inputs(p, 0)
    res = run(p, inp, backend="cpu", registry=_registry(*HAND_BUILT))
    assert res.plan.stages[-1].kernel == CONVERT_KN0_192
    assert res.outputs["dq_acc"].shape[0] == 2  # ceil(384 / 192) key-tile slices
    checks = validate(p, res.outputs, reference(p, inp))
    assert set(checks) == {"dq", "dk", "dv"} and all(checks.values()), [str(c) for c in checks.values()]


def test_without_the_pairing_rule_the_cpu_run_of_that_plan_fails(cpu_cache, monkeypatch):
    # injected fault: the rule disabled, the dispatcher takes the first-ranked kN0=128 kernel after a bn0=192
    # dq_dk_dv kernel; its convert needs ceil(384 / 128) = 3 slices of an accumulator that holds 2
    _disable_pairing(monkeypatch)
    p = _problem()
    assert Dispatcher(_registry(*HAND_BUILT)).select(p).stages[-1].kernel == CONVERT_KN0_128
    with pytest.raises(
        BackendError, match=r"ceil\(384 / 128\) = 3 dq_acc slices for sequence 0, the accumulator holds 2"
    ):
        run(p, make_inputs(p, 0), backend="cpu", registry=_registry(*HAND_BUILT))


# ------------------------------------------------------------------------------------- the checkout
CHECKOUT_PROBLEMS = [
    dict(hdim_q=128, seqlen_q=128, seqlen_k=384),
    dict(hdim_q=128, seqlen_q=200, seqlen_k=1000, mask="causal"),
    dict(hdim_q=64, seqlen_q=96, seqlen_k=300),
    dict(hdim_q=64, mode="group", batch=2, seqlens_q=(64, 33), seqlens_k=(200, 129)),
]


def _pinned_plans(registry: Registry, p: Problem) -> list:
    """The plan around every dq_dk_dv kernel that can serve ``p`` (the pytest plugin's kernel items)."""
    dq_dk_dvs = Dispatcher(registry).ranked_candidates(p, StageRole.DQ_DK_DV)
    assert dq_dk_dvs
    return [_pinned(registry, c).select(p) for c in dq_dk_dvs]


@pytest.fixture(scope="module")
def gfx950_bwd(ck_tree):  # noqa: F811  (the fixture)
    return Registry.from_checkout(ck_tree, "gfx950", families=["bwd"])


@pytest.mark.parametrize("shape", CHECKOUT_PROBLEMS, ids=lambda s: f"d{s['hdim_q']}-{s.get('mode', 'batch')}")
def test_every_deterministic_checkout_plan_pairs_kn0_with_bn0(gfx950_bwd, shape):
    p = _problem(nhead_q=2, **{"batch": 2, **shape})
    bn0s = set()
    plans = [Dispatcher(gfx950_bwd).select(p), *_pinned_plans(gfx950_bwd, p)]
    for plan in plans:
        roles = [s.role for s in plan.stages]
        assert roles == [StageRole.DOT_DO_O, StageRole.DQ_DK_DV, StageRole.CONVERT_DQ], str(plan)
        dq_dk_dv, convert = plan.stages[1].kernel, plan.stages[2].kernel
        assert len(convert.tile) == 2 and convert.tile[1] == dq_dk_dv.tile[1], str(plan)
        bn0s.add(dq_dk_dv.tile[1])
    if p.hdim_q == 128:
        # the tree's d128 kernels have bn0 128 and 192, its d256 ones (hdim-padded, they serve d128 too) 64
        assert bn0s == {64, 128, 192}


def test_without_the_pairing_rule_some_checkout_plan_mismatches(gfx950_bwd, monkeypatch):
    # injected fault: the test above must be able to fail on the real kernel space
    _disable_pairing(monkeypatch)
    p = _problem(nhead_q=2, batch=2, **CHECKOUT_PROBLEMS[0])
    mismatched = [
        plan for plan in _pinned_plans(gfx950_bwd, p) if plan.stages[2].kernel.tile[1] != plan.stages[1].kernel.tile[1]
    ]
    assert mismatched and {plan.stages[1].kernel.tile[1] for plan in mismatched} == {64, 192}
