"""CK kernel findings (ckfmha.ck_findings, data/ck_findings.yaml): the ALiBi 16-bit SAD of the fwd, paged-KV,
batch-prefill and bwd kernels.  The dispatcher refuses an affected kernel for a problem that triggers the finding
and names it; a forward problem is served by split-KV (32-bit positions); the reference stays exact."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.ck_args import problem_from_ck_args
from ckfmha.ck_findings import finding_misfit, load_findings, triggered_findings
from ckfmha.datafile import DataFileError
from ckfmha.dispatcher import Dispatcher, NoKernelError
from ckfmha.inputs import make_inputs
from ckfmha.kernel import Family
from ckfmha.plan import StageRole
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.registry import Registry
from ckfmha.runner import run
from ckfmha.validator import validate

REPRO = "-prec=fp16 -b=1 -h=2 -s=2 -s_k=70000 -d=32 -bias=a -mask=0 -lse=1"  # the finding's reproduction line


@pytest.fixture(scope="module")
def gfx942() -> Dispatcher:
    return Dispatcher(Registry.from_enumeration("gfx942"))


def test_the_finding_is_data_with_its_sources() -> None:
    (f,) = [f for f in load_findings() if f.id == "alibi_sad_u16"]
    assert f.operand_limit == 1 << 16
    assert {a.family for a in f.affected} == {
        Family.FWD,
        Family.FWD_PAGEDKV,
        Family.BATCH_PREFILL,
        Family.BWD_DQ_DK_DV,
    }
    assert any("block_position_encoding.hpp" in s for s in f.sources)
    assert dict(f.reproduction)["line"] == REPRO


@pytest.mark.parametrize(
    "seqlen_q, seqlen_k, mask, fwd, bwd",
    [
        (2, 65536, "0", False, False),  # largest operand 65535
        (2, 65537, "0", True, True),  # 65536 wraps
        (65537, 16, "0", True, True),
        (32769, 32768, "t", False, False),  # bwd causal (vertical): row + col at most 65535
        (32769, 32769, "t", False, True),  # row + col reaches 65536: only the column-major bwd kernel wraps
        (32768, 32768, "t", False, False),  # row + col at most 65534
    ],
)
def test_the_trigger_is_the_largest_position_operand(seqlen_q, seqlen_k, mask, fwd, bwd) -> None:
    p = Problem(batch=1, nhead_q=1, seqlen_q=seqlen_q, seqlen_k=seqlen_k, hdim_q=32, bias="alibi", mask=mask)
    assert bool(triggered_findings(p, Family.FWD)) is fwd
    assert bool(triggered_findings(p, Family.BWD_DQ_DK_DV)) is (bwd or fwd)
    assert not triggered_findings(p.replace(bias="none"), Family.FWD)  # only ALiBi


def test_the_dispatcher_refuses_the_fwd_kernels_naming_the_finding_and_plans_split_kv(gfx942) -> None:
    p = problem_from_ck_args(REPRO)
    ex = gfx942.explain(p)
    assert [s.role for s in ex.stages] == [StageRole.SPLITKV, StageRole.COMBINE]
    plan = gfx942.select(p)
    assert [st.role for st in plan.stages] == [StageRole.SPLITKV, StageRole.COMBINE]
    fwd = next(c for c in gfx942.registry.candidates(Family.FWD, p.dtype, p.mode) if c.bias.value == "alibi")
    assert finding_misfit(p, fwd) is not None and "ck_finding alibi_sad_u16" in finding_misfit(p, fwd)
    # below the limit nothing changes: the fwd kernel serves it
    short = p.replace(seqlen_k=4096)
    assert [st.role for st in gfx942.select(short).stages] == [StageRole.FWD]


def test_the_split_kv_plan_matches_the_exact_reference() -> None:
    """The reference keeps exact positions; the plan the dispatcher chooses (split-KV, 32-bit) matches it."""
    p = problem_from_ck_args(REPRO)
    inputs = make_inputs(p, 0)
    res = run(p, inputs, backend="cpu", arch="gfx942")
    assert [st.role for st in res.plan.stages] == [StageRole.SPLITKV, StageRole.COMBINE]
    checks = validate(p, res.outputs, reference(p, inputs), names=["o", "lse"])
    assert all(checks.values()), "\n".join(str(c) for c in checks.values())


def test_a_bwd_problem_that_triggers_it_has_no_kernel_and_the_explanation_names_the_finding(gfx942) -> None:
    p = Problem(family="bwd", batch=1, nhead_q=1, seqlen_q=32769, seqlen_k=32769, hdim_q=32, bias="alibi", mask="t")
    with pytest.raises(NoKernelError) as ei:
        gfx942.select(p)
    assert "ck_finding alibi_sad_u16" in str(ei.value.explanation)


def test_triton_kernels_are_not_affected() -> None:
    p = problem_from_ck_args(REPRO)
    plan = Dispatcher(Registry.from_enumeration("sm90", backend="triton")).select(p)
    assert [st.role for st in plan.stages] == [StageRole.FWD]


def test_a_findings_file_with_an_unknown_family_is_refused(tmp_path) -> None:
    bad = tmp_path / "f.yaml"
    src = (
        "schema: 1\nfindings:\n  - {id: x, title: t, summary: s, sources: [a.hpp:1], "
        "trigger: {bias: alibi, operand_limit: 8}, affected: [{family: fwd_nope, order: row_major}]}\n"
    )
    bad.write_text(src)
    with pytest.raises(DataFileError, match=r"findings\[0\].affected\[0\].family: 'fwd_nope' is not a ckfmha family"):
        load_findings(str(bad))
    bad.write_text(src.replace("operand_limit: 8", "operand_limit: -1").replace("fwd_nope", "fwd"))
    with pytest.raises(DataFileError, match="operand_limit"):
        load_findings(str(bad))


def test_the_finding_changes_results_where_it_triggers() -> None:
    """The finding matters: at s_k = 70000 the exact ALiBi positions and the 16-bit wrapped ones give different
    outputs (so refusing the affected kernel is not a formality).  The wrap is emulated here from the finding's
    definition: positions taken modulo 2^16 before the absolute difference."""
    p = problem_from_ck_args(REPRO)
    inputs = make_inputs(p, 0)
    exact = reference(p, inputs)["o"].astype(np.float32)
    q = inputs["q"].astype(np.float32)[0]
    k = inputs["k"].astype(np.float32)[0]
    v = inputs["v"].astype(np.float32)[0]
    slopes = np.asarray(inputs["alibi_slopes"], np.float32).reshape(-1)[: p.nhead_q]
    rows = np.arange(p.seqlen_q)[:, None] + (p.seqlen_k - p.seqlen_q)  # bottom-right zero point, as CK's
    cols = np.arange(p.seqlen_k)[None, :]
    wrapped = np.abs((rows % 65536) - (cols % 65536)).astype(np.float32)
    s = np.einsum("hqd,hkd->hqk", q, k) * p.softmax_scale - slopes[:, None, None] * wrapped[None]
    w = np.exp(s - s.max(-1, keepdims=True))
    o16 = np.einsum("hqk,hkd->hqd", w / w.sum(-1, keepdims=True), v)
    assert np.abs(o16 - exact[0]).max() > 0.05
