"""ckfmha.families: the one vocabulary of problem families, aliases and the kernel families they run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ckfmha.families import (
    BWD_STAGES,
    PROBLEM_FAMILIES,
    STAGE_ONLY,
    FamilyError,
    kernel_families,
    plan_families,
    problem_family,
    problem_family_of,
)
from ckfmha.kernel import API_FAMILIES, Api, Family

F = Family


def test_problem_families_agree_with_the_problem_model() -> None:
    from ckfmha.problem import PROBLEM_FAMILIES as PROBLEM_MODEL_FAMILIES

    assert PROBLEM_FAMILIES == ("fwd", "fwd_splitkv", "fwd_pagedkv", "fwd_appendkv", "batch_prefill", "bwd")
    assert {problem_family(f) for f in PROBLEM_MODEL_FAMILIES} == set(PROBLEM_FAMILIES)
    assert set(PROBLEM_FAMILIES) <= {f.value for f in Family} | {"bwd"}


def test_matrices_and_plugin_use_this_vocabulary(tmp_path) -> None:
    import ckfmha.matrix as matrix
    import pytest_ckfmha.options as options

    assert not hasattr(matrix, "FAMILY_ORDER") and not hasattr(options, "FAMILY_ALIASES")
    # a folder's matrix files: those named after a family (or an alias) in the family order, then the rest by name
    for name in ("zz", "bwd", "aa", "splitkv", "fwd"):
        (tmp_path / f"{name}.yaml").write_text("")
    assert [f.stem for f in matrix.matrix_files([tmp_path])] == ["fwd", "splitkv", "bwd", "aa", "zz"]


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("fwd", "fwd"),
        ("fwd_splitkv", "fwd_splitkv"),
        ("splitkv", "fwd_splitkv"),
        ("pagedkv", "fwd_pagedkv"),
        ("appendkv", "fwd_appendkv"),
        ("batch_prefill", "batch_prefill"),
        ("bwd", "bwd"),
        ("bwd_dq_dk_dv", "bwd"),
        (F.BWD_DQ_DK_DV, "bwd"),
        (F.FWD_PAGEDKV, "fwd_pagedkv"),
        (" fwd ", "fwd"),
    ],
)
def test_problem_family_canonical_tokens(name, canonical: str) -> None:
    assert problem_family(name) == canonical


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "fwd_splitkv_combine",
            "family: 'fwd_splitkv_combine' is not a problem family; allowed: fwd, fwd_splitkv, "
            "fwd_pagedkv, fwd_appendkv, batch_prefill, bwd (aliases: splitkv = fwd_splitkv, "
            "pagedkv = fwd_pagedkv, appendkv = fwd_appendkv, bwd_dq_dk_dv = bwd)",
        ),
        ("backward", "family: 'backward' is not a problem family"),
        (3, "family: 3 is a int, expected a family name"),
    ],
)
def test_problem_family_errors_name_value_and_allowed(name, message: str) -> None:
    with pytest.raises(FamilyError) as e:
        problem_family(name)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_problem_family_of_a_problem() -> None:
    from ckfmha.problem import Problem

    assert problem_family_of(Problem(family="bwd", hdim_q=64, seqlen_q=64)) == "bwd"
    assert problem_family_of(Problem(family="fwd_splitkv", hdim_q=64, seqlen_q=64, num_splits=2)) == "fwd_splitkv"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("fwd", (F.FWD,)),
        ("fwd_splitkv", (F.FWD_SPLITKV, F.FWD_SPLITKV_COMBINE)),
        ("splitkv", (F.FWD_SPLITKV, F.FWD_SPLITKV_COMBINE)),
        ("pagedkv", (F.FWD_PAGEDKV,)),
        ("fwd_appendkv", (F.FWD_APPENDKV,)),
        ("batch_prefill", (F.BATCH_PREFILL,)),
        ("bwd", (F.BWD_DOT_DO_O, F.BWD_DQ_DK_DV, F.BWD_CONVERT_DQ)),
        ("bwd_dq_dk_dv", (F.BWD_DOT_DO_O, F.BWD_DQ_DK_DV, F.BWD_CONVERT_DQ)),
        ("fwd_splitkv_combine", (F.FWD_SPLITKV_COMBINE,)),
        ("bwd_dot_do_o", (F.BWD_DOT_DO_O,)),
        ("bwd_convert_dq", (F.BWD_CONVERT_DQ,)),
        (F.BWD_CONVERT_DQ, (F.BWD_CONVERT_DQ,)),
    ],
)
def test_kernel_families(name, expected) -> None:
    assert kernel_families(name) == expected


def test_kernel_families_follow_the_generator_apis() -> None:
    assert BWD_STAGES == API_FAMILIES[Api.BWD]
    assert set(STAGE_ONLY) == {F.FWD_SPLITKV_COMBINE, F.BWD_DOT_DO_O, F.BWD_CONVERT_DQ}
    covered = {f for name in PROBLEM_FAMILIES for f in kernel_families(name)}
    assert covered == set(Family)  # every kernel family belongs to some problem family


def test_kernel_families_error_lists_stages_too() -> None:
    with pytest.raises(
        FamilyError,
        match=r"family: 'bwd_dq' is not a family; allowed: fwd, .*aliases: .*"
        r"single kernel stages: fwd_splitkv_combine, bwd_dot_do_o, bwd_convert_dq",
    ):
        kernel_families("bwd_dq")


def test_plan_families_cover_every_plan_the_dispatcher_builds() -> None:
    from ckfmha.dispatcher import ROLE_FAMILY, Dispatcher
    from ckfmha.problem import Problem
    from ckfmha.registry import Registry

    disp = Dispatcher(Registry("gfx942", []))
    problems = [
        Problem(family="fwd", hdim_q=64, seqlen_q=64),
        Problem(family="fwd_splitkv", hdim_q=64, seqlen_q=64, num_splits=2),
        Problem(family="fwd_pagedkv", hdim_q=64, seqlen_q=64, seqlen_k=256, page_block_size=128),
        Problem(
            family="batch_prefill",
            mode="group",
            batch=2,
            hdim_q=128,
            seqlens_q=(64, 32),
            seqlens_k=(256, 128),
            page_block_size=16,
            kv_lookup="vllm",
            kv_layout="linear",
        ),
        Problem(family="bwd", hdim_q=64, seqlen_q=64),
        Problem(family="bwd", hdim_q=64, seqlen_q=64, dtype="fp32"),
        Problem(family="fwd_appendkv", hdim_q=64, seqlen_q=1, seqlen_k=256, seqlen_knew=1),
        Problem(family="fwd_appendkv", hdim_q=64, seqlen_q=1, seqlen_k=256, seqlen_knew=1, num_splits=2),
        Problem(family="fwd_appendkv", hdim_q=64, seqlen_q=1, seqlen_k=256, seqlen_knew=1, page_block_size=128),
    ]
    for p in problems:
        used = {ROLE_FAMILY[r] for roles in disp.structures(p) for r in roles}
        assert used <= set(plan_families(p.family)), (p, used)
    assert plan_families("appendkv") == (F.FWD_APPENDKV, F.FWD, F.FWD_SPLITKV, F.FWD_SPLITKV_COMBINE, F.FWD_PAGEDKV)
    assert plan_families("bwd") == BWD_STAGES
    with pytest.raises(FamilyError, match="not a problem family"):
        plan_families("bwd_convert_dq")


def test_module_imports_no_numpy() -> None:
    code = "import sys, ckfmha.families; sys.exit(1 if 'numpy' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
