"""ckfmha.run / ckfmha.explain: selection, NaN-poisoned outputs, unwritten-output detection, inputs untouched."""

from __future__ import annotations

import numpy as np
import pytest

import ckfmha
from ckfmha import backends
from ckfmha.backends.cpu import CpuBackend
from ckfmha.dispatcher import Explanation, NoKernelError, StageRole
from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from ckfmha.runner import RunResult, UnwrittenOutputError, output_specs, run
from tests.test_cpu_backend import cpu_registry, golden_configs


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


def test_run_and_explain_are_exported() -> None:
    assert ckfmha.run is run
    p = Problem(batch=1, nhead_q=2, seqlen_q=40, hdim_q=64, mask="t")
    exp = ckfmha.explain(p, registry=cpu_registry())
    assert isinstance(exp, Explanation) and exp.stages[0].chosen is not None
    res = ckfmha.run(p, make_inputs(p, 0), registry=cpu_registry())
    assert isinstance(res, RunResult) and res.plan.stages[0].kernel == exp.stages[0].chosen
    assert res.device_ms is None and res.stage_ms == [None]
    assert set(res.outputs) == {"o"}  # the chosen kernel has no LSE, so none is written


def test_timing_reports_per_stage_and_total() -> None:
    p = Problem(family="bwd", batch=1, nhead_q=2, seqlen_q=40, hdim_q=64)
    res = run(p, make_inputs(p, 0), registry=cpu_registry(), timing=True)
    assert [s.role for s in res.plan.stages] == [StageRole.DOT_DO_O, StageRole.DQ_DK_DV, StageRole.CONVERT_DQ]
    assert len(res.stage_ms) == 3 and all(ms is not None and ms >= 0 for ms in res.stage_ms)
    assert res.device_ms == pytest.approx(sum(res.stage_ms))
    assert {"d", "dq_acc", "dq", "dk", "dv", "dk_raw", "dv_raw"} <= set(res.outputs)


def test_no_kernel_error_shows_the_explanation() -> None:
    reg = Registry("gfx942", golden_configs("fwd", "_d128_", "_fp16_"))
    p = Problem(batch=1, nhead_q=1, seqlen_q=40, hdim_q=64, dtype="bf16")
    with pytest.raises(NoKernelError) as ei:
        run(p, make_inputs(p, 0), registry=reg)
    assert "stage fwd" in str(ei.value) and "dtype: kernel is fp16, problem is bf16" in str(ei.value)


def test_inputs_are_not_modified_by_appendkv() -> None:
    p = Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=4,
        seqlen_k=100,
        seqlen_knew=8,
        rotary_dim=16,
        rope="interleaved",
        hdim_q=64,
        mask="b",
    )
    inp = make_inputs(p, 0)
    before = {k: v.copy() for k, v in inp.items()}
    res = run(p, inp, registry=cpu_registry())
    for k, v in inp.items():
        assert np.array_equal(v.view(np.uint8), before[k].view(np.uint8)), k
    assert not np.array_equal(res.outputs["q"].view(np.uint16), inp["q"].view(np.uint16))  # rotated copy
    assert {"q", "k", "v", "o"} <= set(res.outputs)


class _LazyBackend(CpuBackend):
    """Writes only the first half of the query rows of ``o`` (the other half keeps the caller's poison)."""

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        res = super().run_stage(kernel, stage, problem, inputs, timing=timing, context=context)
        res.outputs["o"][:, :, problem.seqlen_q // 2 :] = stage.output("o").allocate()[:, :, problem.seqlen_q // 2 :]
        return res


class _NanBackend(CpuBackend):
    """Writes every element of ``o``, three of them a computed NaN."""

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        res = super().run_stage(kernel, stage, problem, inputs, timing=timing, context=context)
        res.outputs["o"][0, 1, 3, :3] = np.float16("nan")  # the canonical NaN arithmetic produces
        return res


def test_unwritten_outputs_are_detected(monkeypatch) -> None:
    monkeypatch.setitem(backends.instances(), "cpu", _LazyBackend())
    p = Problem(batch=1, nhead_q=2, seqlen_q=40, hdim_q=64)
    with pytest.raises(
        UnwrittenOutputError,
        match=r"output 'o': 2560 of 5120 element\(s\) left unwritten \(still "
        r"the poison NaN\), first at \(0, 0, 20, 0\)",
    ) as err:
        run(p, make_inputs(p, 0), registry=cpu_registry())
    assert "computed" not in str(err.value)


def test_computed_nans_are_called_nan_not_unwritten(monkeypatch) -> None:
    monkeypatch.setitem(backends.instances(), "cpu", _NanBackend())
    p = Problem(batch=1, nhead_q=2, seqlen_q=40, hdim_q=64)
    with pytest.raises(
        UnwrittenOutputError,
        match=r"output 'o': 3 of 5120 element\(s\) are NaN where the reference "
        r"is finite \(a NaN the kernel computed\), first at \(0, 1, 3, 0\)",
    ) as err:
        run(p, make_inputs(p, 0), registry=cpu_registry())
    assert "unwritten" not in str(err.value).split("\n")[0]


def test_backward_uses_given_forward_outputs() -> None:
    p = Problem(family="bwd", batch=1, nhead_q=1, seqlen_q=32, hdim_q=64)
    inp = make_inputs(p, 0)
    base = run(p, inp, registry=cpu_registry())
    inp2 = dict(inp, o=np.zeros((1, 1, 32, 64), np.float16), lse=np.zeros((1, 1, 32), np.float32))
    other = run(p, inp2, registry=cpu_registry())
    assert np.all(other.outputs["d"] == 0)
    assert not np.array_equal(base.outputs["dq"], other.outputs["dq"])


def test_backward_output_specs_hold_the_raw_and_the_reduced_gradients() -> None:
    p = Problem(
        family="bwd",
        batch=2,
        nhead_q=4,
        nhead_k=2,
        seqlen_q=40,
        seqlen_k=70,
        hdim_q=64,
        input_layout="bshd",
        output_layout="bshd",
        bias="elementwise",
        bias_rank=1,
        dbias=True,
    )
    inp = make_inputs(p, 0)
    before = {k: v.copy() for k, v in inp.items()}
    res = run(p, inp, registry=cpu_registry())
    specs = output_specs(p, res.plan)
    f16 = np.dtype(np.float16)
    assert specs["dk_raw"] == ((2, 70, 4, 64), f16) and specs["dv_raw"] == ((2, 70, 4, 64), f16)  # per q-head
    assert specs["dk"] == (inp["k"].shape, f16) and specs["dk"][0] == (2, 70, 2, 64)
    assert specs["dq"] == (inp["q"].shape, f16)
    assert specs["dbias_raw"][0] == (2, 40, 4, 70) and specs["dbias"][0] == inp["bias"].shape == (1, 4, 40, 70)
    for n, (shape, _) in specs.items():
        assert res.outputs[n].shape == shape, n
    # the host reduction: q-heads 2 and 3 share K/V head 1; dBias (rank 1) sums the batches
    dk_raw = res.outputs["dk_raw"].astype(np.float32)
    np.testing.assert_array_equal(res.outputs["dk"][:, :, 1], (dk_raw[:, :, 2] + dk_raw[:, :, 3]).astype(f16))
    dbias_raw = res.outputs["dbias_raw"].astype(np.float32).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(res.outputs["dbias"], dbias_raw.sum(axis=0, keepdims=True).astype(f16))
    for k, v in inp.items():
        assert np.array_equal(v.view(np.uint8), before[k].view(np.uint8)), k


class _PerKvHeadBackend(CpuBackend):
    """A dq_dk_dv kernel that writes dK only for the first nhead_k q-heads (as if dK were per K/V head)."""

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        res = super().run_stage(kernel, stage, problem, inputs, timing=timing, context=context)
        if stage.role is StageRole.DQ_DK_DV:
            res.outputs["dk_raw"][:, problem.nhead_k :] = stage.output("dk_raw").allocate()[:, problem.nhead_k :]
        return res


def test_unwritten_raw_gradient_heads_are_detected(monkeypatch) -> None:
    monkeypatch.setitem(backends.instances(), "cpu", _PerKvHeadBackend())
    p = Problem(family="bwd", batch=1, nhead_q=4, nhead_k=2, seqlen_q=32, hdim_q=64)
    with pytest.raises(
        UnwrittenOutputError,
        match=r"output 'dk_raw': 4096 of 8192 element\(s\) left unwritten "
        r"\(still the poison NaN\), first at \(0, 2, 0, 0\)",
    ):
        run(p, make_inputs(p, 0), registry=cpu_registry())


class _CompileAtLaunchBackend(CpuBackend):
    """Reports half a second of compiling inside each stage (as Triton's first launch of a specialization)."""

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        res = super().run_stage(kernel, stage, problem, inputs, timing=timing, context=context)
        res.compile_seconds = 0.5
        return res


def test_compile_at_launch_is_counted_as_the_build_not_the_run() -> None:
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.runner import execute, prepare_tensors

    p = Problem(batch=1, nhead_q=2, seqlen_q=40, hdim_q=64)
    plan = Dispatcher(cpu_registry(), backend=_CompileAtLaunchBackend()).select(p)
    built = {s.kernel.kernel_id: CpuBackend().build(s.kernel) for s in plan.stages}  # built ahead: no build here
    tensors, _ = prepare_tensors(p, plan, make_inputs(p, 0), None)
    ex = execute(_CompileAtLaunchBackend(), plan, tensors, built=dict(built))
    assert ex.cold and ex.build_seconds == pytest.approx(0.5 * len(plan.stages))
    assert all(0 <= s.wall_ms < 500 for s in ex.stages)  # the compile left the run's time
    again = execute(CpuBackend(), plan, prepare_tensors(p, plan, make_inputs(p, 0), None)[0], built=dict(built))
    assert not again.cold and again.build_seconds == 0.0
