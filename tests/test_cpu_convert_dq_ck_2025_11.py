"""The older CK's two-entry convert_dq tiles (``b64x0`` / ``b64x128`` of the amd-aiter 0.1.7.post2.dev18 tree,
naming scheme ``ck-2025-11``) on the cpu backend: ``kN0`` is the dq_dk_dv kernel's ``bn0`` when deterministic
(codegen/ops/fmha_bwd.py ``convert_dq_bn0``) and the kernel sums ``ceil(seqlen_k / kN0)`` dq_acc slices per
sequence (fmha_bwd_kernel.hpp ``FmhaBwdConvertQGradKernel``).  The kernel names are that tree's generator output
(gfx942, receipt 0)."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends.base import BackendError
from ckfmha.backends.cpu import make_backend
from ckfmha.backends.cpu.backend import make_plan
from ckfmha.inputs import make_inputs
from ckfmha.kernel import Family
from ckfmha.naming import parse_ck_instance_name
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.registry import Registry
from ckfmha.rules import RoleRules
from ckfmha.runner import run
from ckfmha.validator import validate

_DQ_DK_DV = (
    "fmha_bwd_d64_fp16_{mode}_b32x128x64x32x64x32x32x64x64_r1x4x1_r4x1x1_r1x4x1_w16x16x32_w16x16x16_o1_maxq0_"
    "{pad}_nbias_ndbias_nmask_ndropout_{det}_ntrload_gfx9"
)
NAMES = [
    "fmha_bwd_dot_do_o_d64_fp16_b64_batch_o2_npad_gfx9",
    "fmha_bwd_dot_do_o_d64_fp16_b64_group_o2_ps_gfx9",
    "fmha_bwd_convert_dq_d64_fp16_b64x0_batch_o2_npad_ndeterministic_gfx9",
    "fmha_bwd_convert_dq_d64_fp16_b64x128_batch_o2_npad_deterministic_gfx9",
    "fmha_bwd_convert_dq_d64_fp16_b64x0_group_o2_ps_ndeterministic_gfx9",
    "fmha_bwd_convert_dq_d64_fp16_b64x128_group_o2_ps_deterministic_gfx9",
] + [
    _DQ_DK_DV.format(mode=mode, pad="npad", det=det)
    for mode in ("batch", "group")
    for det in ("deterministic", "ndeterministic")
]
CONFIGS = [parse_ck_instance_name(n) for n in NAMES]
CONVERT = {(c.mode.value, c.deterministic): c for c in CONFIGS if c.family is Family.BWD_CONVERT_DQ}


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


def test_the_older_tiles_parse_as_two_entries_and_are_supported():
    assert CONVERT["batch", False].tile == (64, 0) and CONVERT["batch", True].tile == (64, 128)
    cpu = make_backend()
    for c in CONVERT.values():
        assert cpu.supports(c) is None, c.kernel_id
    assert make_plan(CONVERT["batch", True])["loop"] == {"row_tile": 64, "split_key_tile": 128}
    assert make_plan(CONVERT["batch", False])["loop"] == {"row_tile": 64}


def test_unusable_convert_tiles_are_refused_with_the_rule():
    cpu = make_backend()
    det = CONVERT["batch", True]
    assert cpu.supports(det.replace(tile=(64, 0))) == (
        "tile [64, 0]: a deterministic convert_dq divides seqlen_k by its kN0 = 0 (fmha_bwd_kernel.hpp), which "
        "must be positive"
    )
    assert cpu.supports(det.replace(tile=(64, 128, 2))) == (
        "tile [64, 128, 2] has 3 entries, bwd_convert_dq needs 1 (bm0) or 2 (bm0, bn0)"
    )
    assert cpu.supports(det.replace(tile=(0, 128))) == "tile [0, 128]: the loop tiles must be positive"


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize(
    "shape",
    [
        dict(batch=2, seqlen_q=128, seqlen_k=384),
        dict(mode="group", batch=3, seqlens_q=(64, 17, 100), seqlens_k=(384, 130, 0)),
    ],
    ids=["batch", "group"],
)
def test_backward_with_the_older_convert_dq_matches_the_reference(shape, deterministic):
    p = Problem(family="bwd", nhead_q=2, hdim_q=64, deterministic=deterministic, **shape)
    inp = make_inputs(p, 0)
    res = run(p, inp, registry=Registry("gfx942", CONFIGS, source="amd-aiter 0.1.7.post2.dev18 names"))
    convert = res.plan.stages[-1].kernel
    assert convert == CONVERT[p.mode.value, deterministic]
    if deterministic:
        assert res.outputs["dq_acc"].shape[0] == 3  # ceil(384 / 128) key-tile slices
    checks = validate(p, res.outputs, reference(p, inp))
    assert set(checks) == {"dq", "dk", "dv"} and all(checks.values()), [str(c) for c in checks.values()]


def test_a_convert_dq_summing_too_few_slices_is_caught(monkeypatch):
    # the dispatcher pairs kN0 with the dq_dk_dv kernel's bn0 (rules.py convert_dq_bn0): inject the fault past it
    monkeypatch.setattr(RoleRules, "_pairing_misfit", lambda self, c: None)
    # injected fault: a kN0 twice the dq_dk_dv kernel's bn0 sums half the slices -- dQ is wrong and the
    # comparison must say so
    p = Problem(family="bwd", nhead_q=2, hdim_q=64, batch=1, seqlen_q=128, seqlen_k=512, deterministic=True)
    wide = CONVERT["batch", True].replace(tile=(64, 256))
    cs = [c for c in CONFIGS if c.family is not Family.BWD_CONVERT_DQ] + [wide]
    inp = make_inputs(p, 0)
    res = run(p, inp, registry=Registry("gfx942", cs, source="fault"))
    assert res.plan.stages[-1].kernel == wide
    assert not validate(p, res.outputs, reference(p, inp), names=["dq"])["dq"]
    np.testing.assert_allclose(  # the first two of four slices: keys 0..255
        res.outputs["dq"].astype(np.float32),
        res.outputs["dq_acc"][:2].sum(axis=0).astype(np.float16).astype(np.float32),
    )


def test_a_convert_dq_needing_more_slices_than_the_accumulator_holds_is_an_error(monkeypatch):
    # the dispatcher pairs kN0 with the dq_dk_dv kernel's bn0 (rules.py convert_dq_bn0): inject the fault past it
    monkeypatch.setattr(RoleRules, "_pairing_misfit", lambda self, c: None)
    p = Problem(family="bwd", nhead_q=2, hdim_q=64, batch=1, seqlen_q=128, seqlen_k=512, deterministic=True)
    narrow = CONVERT["batch", True].replace(tile=(64, 64))
    cs = [c for c in CONFIGS if c.family is not Family.BWD_CONVERT_DQ] + [narrow]
    with pytest.raises(
        BackendError, match=r"ceil\(512 / 64\) = 8 dq_acc slices for sequence 0, the accumulator holds 4"
    ):
        run(p, make_inputs(p, 0), registry=Registry("gfx942", cs, source="fault"))
