"""The family records (ckfmha.family_records): one record per problem family and per stage role, and the tables
that derive from them (plan roles, compared outputs, the plan families, every stage's declared outputs)."""

from __future__ import annotations

import numpy as np
import pytest

import ckfmha.reference
from ckfmha.dispatcher import Dispatcher
from ckfmha.families import PROBLEM_FAMILIES, plan_families
from ckfmha.family_records import (
    FAMILY_RECORDS,
    FAMILY_ROLE,
    MAIN_ROLE,
    PAIRED_ROLE,
    ROLE_FAMILY,
    ROLE_RECORDS,
    StageRole,
    compared_outputs,
    family_record,
    stage_outputs,
)
from ckfmha.inputs import make_inputs
from ckfmha.kernel import FAMILY_API, Family
from ckfmha.matrix import default_matrix_dir, load_matrix_file
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from ckfmha.runner import plan_outputs, run

#: one small problem per family (every plan structure the dispatcher makes for it is checked against the record)
PROBLEMS = {
    "fwd": Problem(batch=1, nhead_q=2, seqlen_q=64, seqlen_k=64, hdim_q=64, lse=True),
    "fwd_splitkv": Problem(family="fwd_splitkv", seqlen_q=16, seqlen_k=256, hdim_q=64, num_splits=3, lse=True),
    "fwd_pagedkv": Problem(family="fwd_pagedkv", seqlen_q=1, seqlen_k=300, hdim_q=128, page_block_size=128),
    "fwd_appendkv": Problem(
        family="fwd_appendkv", seqlen_q=4, seqlen_k=256, seqlen_knew=10, hdim_q=64, page_block_size=128, rotary_dim=32,
        rope="interleaved",
    ),
    "batch_prefill": Problem(
        family="batch_prefill", mode="group", batch=2, seqlens_q=(16, 9), seqlens_k=(40, 70), hdim_q=128,
        page_block_size=16, kv_lookup="sglang", kv_layout="linear",
    ),
    "bwd": Problem(family="bwd", batch=1, nhead_q=4, nhead_k=2, seqlen_q=32, hdim_q=64, bias="elementwise", dbias=True),
}  # fmt: skip


def test_every_role_and_problem_family_has_one_record() -> None:
    assert set(ROLE_RECORDS) == set(StageRole)
    assert len(set(ROLE_FAMILY.values())) == len(ROLE_FAMILY) == len(Family)  # one-to-one over every kernel family
    assert all(FAMILY_ROLE[ROLE_FAMILY[r]] is r for r in StageRole)
    assert tuple(FAMILY_RECORDS) == PROBLEM_FAMILIES
    for name, rec in FAMILY_RECORDS.items():
        assert rec.api is FAMILY_API[rec.problem_family], name
        assert rec.main_role in rec.roles and MAIN_ROLE[rec.problem_family] is rec.main_role
        assert plan_families(name) == tuple(ROLE_FAMILY[r] for r in rec.roles)
        assert callable(getattr(ckfmha.reference, rec.reference)), rec.reference
    assert PAIRED_ROLE == {StageRole.COMBINE: StageRole.SPLITKV, StageRole.CONVERT_DQ: StageRole.DQ_DK_DV}
    with pytest.raises(KeyError, match="'nope' is not a problem family; known: fwd, fwd_splitkv"):
        family_record("nope")


@pytest.mark.parametrize("name", PROBLEM_FAMILIES)
def test_the_matrix_file_of_a_record_declares_its_family(name: str) -> None:
    rec = FAMILY_RECORDS[name]
    shapes = load_matrix_file(default_matrix_dir() / rec.matrix)
    assert shapes and {s.family for s in shapes} == {name}


@pytest.mark.parametrize("name", PROBLEM_FAMILIES)
def test_plans_use_the_records_roles_and_declare_the_records_outputs(name: str) -> None:
    p = PROBLEMS[name]
    assert family_record(p).name == name
    disp = Dispatcher(Registry.from_enumeration("gfx942"))
    for structure in disp.structures(p):
        assert set(structure) <= set(family_record(p).roles), structure
    plan = disp.select(p)
    for st in plan.stages:
        assert st.outputs == stage_outputs(p, st.role, st.kernel, st.launch.num_splits), st
        assert all(spec.required or spec.name == "randval" for spec in st.outputs)
    # the plan writes every output the problem is judged on, as a plan and as one pinned kernel
    written = set(plan_outputs(plan))
    assert set(compared_outputs(p)) <= written and set(compared_outputs(p, kernel_item=True)) <= written


@pytest.mark.parametrize("name", PROBLEM_FAMILIES)
def test_the_cpu_backend_returns_exactly_the_declared_outputs(name: str) -> None:
    """Through ckfmha.run (the runner checks every array against its spec): the outputs are those the family
    record declares, and the record's reference gives the same outputs as ckfmha.reference()."""
    p = PROBLEMS[name]
    inputs = make_inputs(p, 0)
    res = run(p, inputs, backend="cpu")
    specs = plan_outputs(res.plan)
    assert set(res.outputs) == {n for n, s in specs.items() if s.required}
    for n, a in res.outputs.items():
        assert specs[n].mismatch(a) is None
    by_record = getattr(ckfmha.reference, family_record(p).reference)(p, inputs, np.float32)
    by_dispatch = ckfmha.reference(p, inputs)
    assert set(by_record) == set(by_dispatch)
    assert all(np.array_equal(by_record[k], by_dispatch[k], equal_nan=True) for k in by_record)


def test_an_updated_input_takes_the_inputs_shape() -> None:
    """Append-KV returns its updated page pool: the spec is bound to the pool the caller passed (any page count)."""
    from ckfmha.family_records import bind_to_inputs

    p = PROBLEMS["fwd_appendkv"]
    c = Dispatcher(Registry.from_enumeration("gfx942")).select(p).stages[0].kernel
    specs = stage_outputs(p, StageRole.APPENDKV, c)
    pool = np.zeros((9, p.nhead_k, p.page_block_size, p.hdim_q), np.float16)
    bound = {s.name: s for s in bind_to_inputs(specs, {"k_cache": pool})}
    assert bound["k_cache"].shape == pool.shape and bound["k_cache"].updates == "k_cache"
    assert bound["v_cache"] == {s.name: s for s in specs}["v_cache"]
