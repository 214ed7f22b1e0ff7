"""The one execution loop (ckfmha.runner.execute), the one list of compared outputs (ckfmha.outputs), the census and
the dq accumulator shape in its neutral home (ckfmha.workspace)."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends.base import Availability, Backend, BuiltKernel, StageResult
from ckfmha.family_records import stage_outputs
from ckfmha.inputs import make_inputs
from ckfmha.outputs import compared_outputs
from ckfmha.plan import Plan, Stage, StageRole
from ckfmha.poison import poisoned
from ckfmha.problem import Problem
from ckfmha.runner import StageContractError, StageCrash, execute, prepare_tensors, unwritten_census
from ckfmha.workspace import dq_acc_shape
from tests.test_rules import P64, fwd_kernel


class FakeBackend(Backend):
    """Returns o = 1 as a new array, reports 2.5 ms of device time, can raise in build or stage, or break the stage
    contract (``fault``: write into an input, return o of the wrong shape, an undeclared output, or nothing)."""

    name = "fake"

    def __init__(self, *, fail: str = "", fault: str = "", cached: bool = False) -> None:
        self.fail, self.fault, self.cached, self.builds = fail, fault, cached, 0

    def available(self):
        return Availability.yes()

    def supports(self, config):
        return None

    def build(self, config):
        self.builds += 1
        if self.fail == "build":
            raise OSError("disk full")
        return BuiltKernel(config, self.name, build_seconds=0.75, cached=self.cached)

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        if self.fail == "stage":
            raise RuntimeError("boom: illegal memory access")
        if self.fail == "skip":
            raise KeyError("passed through")
        assert context is not None and isinstance(context.state(self.name), dict)
        o = np.ones_like(stage.output("o").allocate())
        if self.fault == "mutate":
            inputs["q"][...] = 0  # the runner's read-only views refuse this
        if self.fault == "shape":
            o = o[..., :-1]
        if self.fault == "undeclared":
            return StageResult({"o": o, "scratch": np.zeros(3)}, 2.5)
        if self.fault == "nothing":
            return StageResult({}, 2.5)
        return StageResult({"o": o}, 2.5)


def _plan_and_tensors(problem=P64):
    c = fwd_kernel()
    plan = Plan(problem, (Stage(StageRole.FWD, c, outputs=stage_outputs(problem, StageRole.FWD, c)),))
    return plan, prepare_tensors(problem, plan, make_inputs(problem, 0))[0]


def test_execute_records_cold_builds_once_and_the_stage_times() -> None:
    be, built = FakeBackend(), {}
    plan, tensors = _plan_and_tensors()
    ex = execute(be, plan, tensors, timing=True, built=built)
    assert (ex.cold, ex.build_seconds, ex.stage_ms, ex.total_ms) == (True, 0.75, [2.5], 2.5)
    assert np.all(tensors["o"].astype(np.float32) == 1)
    again = execute(be, plan, _plan_and_tensors()[1], timing=False, built=built)
    assert (be.builds, again.cold, again.build_seconds) == (1, False, 0.0)
    assert again.stage_ms == [again.stages[0].wall_ms] and again.stages[0].device_ms == 2.5
    warm = execute(FakeBackend(cached=True), plan, _plan_and_tensors()[1])
    assert (warm.cold, warm.build_seconds) == (False, 0.0)


def test_execute_stores_the_arrays_a_stage_returns() -> None:
    plan, tensors = _plan_and_tensors()
    q = tensors["q"]
    execute(FakeBackend(), plan, tensors)
    assert np.all(tensors["o"].astype(np.float32) == 1) and tensors["q"] is q


@pytest.mark.parametrize(
    "fault, match",
    [
        ("mutate", "read-only"),
        ("shape", r"output o: shape \(1, 1, 128, 63\) dtype float16, the stage declares shape \(1, 1, 128, 64\)"),
        ("undeclared", "scratch: not an output of this plan"),
        ("nothing", r"no stage returned o \(declared by stage fwd, "),
    ],
)
def test_a_stage_that_breaks_the_contract_is_caught(fault, match) -> None:
    """The runner alone stores results: a stage that writes into its inputs, returns an array of another shape,
    an output the plan does not declare, or nothing, fails with a message that says so."""
    plan, tensors = _plan_and_tensors()
    q_before = tensors["q"].copy()
    with pytest.raises((StageContractError, ValueError), match=match):
        execute(FakeBackend(fault=fault), plan, tensors)
    with pytest.raises(StageCrash, match=match):
        execute(FakeBackend(fault=fault), plan, tensors, contain=True)
    assert np.array_equal(tensors["q"], q_before) and "o" not in tensors


@pytest.mark.parametrize(
    "fail, what, error",
    [
        ("build", "build of {kid} crashed: OSError: disk full (at ", OSError),
        ("stage", "stage fwd ({kid}) crashed: RuntimeError: boom: illegal memory access (at ", RuntimeError),
    ],
)
def test_contained_crashes_name_the_build_or_stage_and_uncontained_ones_propagate(fail, what, error) -> None:
    plan, tensors = _plan_and_tensors()
    kid = plan.stages[0].kernel.kernel_id
    with pytest.raises(StageCrash) as ei:
        execute(FakeBackend(fail=fail), plan, tensors, contain=True)
    assert str(ei.value).startswith(what.format(kid=kid)) and "test_execution.py:" in str(ei.value)
    assert isinstance(ei.value.error, error)
    with pytest.raises(error):
        execute(FakeBackend(fail=fail), plan, tensors)
    with pytest.raises(KeyError, match="passed through"):
        execute(FakeBackend(fail="skip"), plan, tensors, contain=True, passthrough=(KeyError,))


@pytest.mark.parametrize(
    "problem, plan_item, kernel_item",
    [
        (P64, ("o",), ("o",)),
        (P64.replace(lse=True), ("o", "lse"), ("o", "lse")),
        (
            Problem(family="fwd_appendkv", seqlen_q=4, seqlen_k=256, seqlen_knew=10, hdim_q=64),
            ("o", "k", "v"),
            ("o", "k", "v"),
        ),
        (
            Problem(family="fwd_appendkv", seqlen_q=4, seqlen_k=256, seqlen_knew=10, hdim_q=64, page_block_size=128),
            ("o", "k_cache", "v_cache"),
            ("o", "k_cache", "v_cache"),
        ),
        (Problem(family="bwd", hdim_q=64), ("dq", "dk", "dv"), ("dq", "dk_raw", "dv_raw")),
        (
            Problem(family="bwd", hdim_q=64, bias="elementwise", dbias=True),
            ("dq", "dk", "dv", "dbias"),
            ("dq", "dk_raw", "dv_raw", "dbias_raw"),
        ),
    ],
)
def test_compared_outputs_is_the_one_list(problem, plan_item, kernel_item) -> None:
    from pytest_ckfmha.execute import output_names

    assert compared_outputs(problem) == plan_item
    assert compared_outputs(problem, kernel_item=True) == kernel_item
    assert output_names(problem, None, kernel_item=True) == list(kernel_item)


def test_census_counts_only_where_the_reference_has_a_value_and_the_kernel_must_write() -> None:
    p = P64
    o = np.zeros((1, 1, 128, 64), np.float16)
    o.flat[3] = poisoned((1,), np.float16)[0]
    o.flat[5] = np.nan
    ref = np.zeros(o.shape, np.float32)
    (c,) = unwritten_census(p, {"o": o}, ["o"])
    assert (c.unwritten, c.computed_nan) == (1, 1)
    ref.flat[5] = np.nan
    (c,) = unwritten_census(p, {"o": o}, ["o"], {"o": ref})
    assert (c.unwritten, c.computed_nan) == (1, 0)
    assert unwritten_census(p, {"o": o}, ["o"], {"o": ref[..., :32]}) == []  # the validator reports the shape


def test_dq_acc_shape_lives_in_the_workspace_module() -> None:
    p = Problem(family="bwd", batch=2, nhead_q=4, seqlen_q=100, seqlen_k=300, hdim_q=64, deterministic=True)
    assert dq_acc_shape(p, 128) == (3, 2, 4, 100, 64)
    assert dq_acc_shape(p.replace(deterministic=False), 128) == (1, 2, 4, 100, 64)
    g = Problem(
        family="bwd",
        mode="group",
        batch=2,
        nhead_q=4,
        seqlens_q=(10, 20),
        seqlens_k=(64, 200),
        hdim_q=64,
        deterministic=True,
    )
    assert dq_acc_shape(g, 64) == (4, 1, 4, 30, 64)
    from ckfmha.backends.cpu import stages  # the emulation allocates the same array

    assert all(stages.dq_acc_shape(q, bn0) == dq_acc_shape(q, bn0) for q in (p, g) for bn0 in (16, 64, 128))


def test_a_shape_s_inputs_are_made_once_per_process_read_only_and_the_last_shapes_are_kept(monkeypatch) -> None:
    import ckfmha.inputs
    from pytest_ckfmha import execute as ex

    made: list[str] = []

    def counting(problem, seed=0, fp8_format="ocp"):
        made.append(repr(problem))
        return make_inputs(problem, seed, fp8_format=fp8_format)

    monkeypatch.setattr(ckfmha.inputs, "make_inputs", counting)
    ex.forget_shape_inputs()
    other = Problem(batch=1, nhead_q=2, seqlen_q=16, hdim_q=64)
    third = Problem(batch=1, nhead_q=2, seqlen_q=24, hdim_q=64)
    first = ex.shape_inputs(P64, 0, "ocp")
    assert ex.shape_inputs(P64, 0, "ocp") is first and len(made) == 1  # the next kernel of the shape: no draw
    assert all(not a.flags.writeable for a in first.values())
    with pytest.raises(ValueError, match="read-only"):
        first["q"][...] = 0  # a stage writing into an input would change the next item's
    np.testing.assert_array_equal(first["q"], make_inputs(P64, 0)["q"])
    ex.shape_inputs(other, 0, "ocp")
    assert ex.shape_inputs(P64, 0, "ocp") is first and len(made) == 2  # two shapes kept: one between is no loss
    ex.shape_inputs(third, 0, "ocp")  # P64 used last but one: other (the oldest) goes
    assert ex.shape_inputs(P64, 0, "ocp") is first and len(made) == 3
    ex.shape_inputs(other, 0, "ocp")
    assert len(made) == 4
    assert ex.shape_inputs(P64, 1, "ocp") is not first and len(made) == 5  # another seed: other inputs
    ex.forget_shape_inputs()


def test_a_per_shape_memo_keeps_two_shapes_and_an_older_one_only_while_it_is_small() -> None:
    from collections import OrderedDict

    from pytest_ckfmha.refcache import OLDER_SHAPES_BYTES, SHAPES_KEPT, keep_within

    def entry(nbytes: int) -> dict:
        return {"q": np.empty(nbytes, dtype=np.uint8)}

    assert SHAPES_KEPT == 2
    memo = OrderedDict(a=entry(10), b=entry(10), c=entry(10))
    keep_within(memo)
    assert list(memo) == ["b", "c"]  # the oldest goes
    keep_within(memo, newcomer=True)
    assert list(memo) == ["c"]  # room for the next shape's entry
    memo["d"] = entry(OLDER_SHAPES_BYTES + 1)
    keep_within(memo)
    assert list(memo) == ["c", "d"]  # the newest may be large
    memo.move_to_end("c")
    keep_within(memo)
    assert list(memo) == ["c"]  # a large older shape goes
    memo["big"] = entry(OLDER_SHAPES_BYTES + 1)
    keep_within(memo, newcomer=True)
    assert list(memo) == []  # nothing larger is kept beside a new shape's data
