"""CK's raw backward layouts (per-q-head dK/dV, CK's dBias buffer) next to the reduced, user-facing ones.

The reference returns both; the cpu backend's dq_dk_dv stage writes the raw ones as a CK kernel does; the runner's
host step reduces them; a kernel item of the pytest plugin compares raw against raw, a plan item reduced against
reduced."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ckfmha import backends
from ckfmha.backends.cpu import CpuBackend
from ckfmha.dispatcher import Dispatcher, StageRole
from ckfmha.inputs import dbias_raw_shape, dk_raw_shape, dv_raw_shape, make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.reference.backward import RawLayoutError, reduce_raw_gradients
from ckfmha.runner import reduce_gradients, run
from ckfmha.validator import validate
from pytest_ckfmha.execute import Runtime, output_names, run_item
from tests.test_cpu_backend import cpu_registry

RAW = ("dk_raw", "dv_raw", "dbias_raw")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


GQA_DBIAS = Problem(
    family="bwd",
    batch=2,
    nhead_q=4,
    nhead_k=2,
    seqlen_q=40,
    seqlen_k=70,
    hdim_q=64,
    mask="b",
    bias="elementwise",
    bias_rank=0,
    dbias=True,
)


# ------------------------------------------------------------------------------------------- shapes
def test_raw_shapes_follow_cks_runner_buffers() -> None:
    # fmha_bwd_runner.hpp: dk/dv with nhead (q-heads), dbias (shape_batch, nhead, shape_seqlen_q, max_seqlen_k)
    # in the input layout (i_perm)
    p = Problem(
        family="bwd",
        batch=3,
        nhead_q=6,
        nhead_k=2,
        seqlen_q=5,
        seqlen_k=7,
        hdim_q=32,
        hdim_v=16,
        bias="elementwise",
        dbias=True,
    )
    assert dk_raw_shape(p) == (3, 6, 7, 32) and dv_raw_shape(p) == (3, 6, 7, 16)
    assert dbias_raw_shape(p) == (3, 6, 5, 7)
    bshd = p.replace(input_layout="bshd", output_layout="bshd")
    assert dk_raw_shape(bshd) == (3, 7, 6, 32) and dbias_raw_shape(bshd) == (3, 5, 6, 7)
    g = Problem(
        family="bwd",
        mode="group",
        batch=2,
        nhead_q=4,
        nhead_k=1,
        seqlens_q=(3, 4),
        seqlens_k=(5, 9),
        s_kpad=(6, 10),
        hdim_q=32,
        bias="elementwise",
        dbias=True,
    )
    assert dk_raw_shape(g) == (1, 4, 16, 32)  # sum(s_kpad) physical key rows
    assert dbias_raw_shape(g) == (1, 4, 7, 9)  # total_q rows, max_seqlen_k columns


def test_reference_returns_both_forms_in_their_shapes() -> None:
    inp = make_inputs(GQA_DBIAS, 0)
    ref = reference(GQA_DBIAS, inp)
    assert ref["dk"].shape == inp["k"].shape == (2, 2, 70, 64) and ref["dv"].shape == inp["v"].shape
    assert ref["dk_raw"].shape == ref["dv_raw"].shape == (2, 4, 70, 64)
    assert ref["dbias"].shape == inp["bias"].shape == (1, 1, 40, 70) and ref["dbias_raw"].shape == (2, 4, 40, 70)


# ------------------------------------------------------------------------------------------- raw vs reduced
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_reduced_dk_dv_is_the_group_sum_of_the_raw_heads(layout: str) -> None:
    p = GQA_DBIAS.replace(input_layout=layout, output_layout=layout, dbias=False, bias="none")
    ref = reference(p, make_inputs(p, 1))
    hax = 1 if layout == "bhsd" else 2
    for n in ("dk", "dv"):
        # the host sums what the kernel stored: the fp16 slices (CK's KGradDataType / VGradDataType)
        raw = np.moveaxis(_stored(ref[n + "_raw"]), hax, 1)  # (b, hq, s, d)
        red = np.moveaxis(ref[n], hax, 1)  # (b, hk, s, d)
        np.testing.assert_array_equal(red[:, 0], raw[:, 0] + raw[:, 1])
        np.testing.assert_array_equal(red[:, 1], raw[:, 2] + raw[:, 3])
        assert not np.allclose(raw[:, 0], raw[:, 1], atol=1e-3)  # the heads of a group really differ


def _stored(a: np.ndarray) -> np.ndarray:
    """A float32 raw gradient as the fp16 kernel stores it, back in float32."""
    return a.astype(np.float16).astype(np.float32)


def test_reduced_sums_unrounded_slices_for_fp32_and_float64() -> None:
    p = GQA_DBIAS.replace(dtype="fp32", hdim_q=32)
    x = make_inputs(p, 4)
    for accum in (np.float32, np.float64):
        ref = reference(p, x, accum)
        np.testing.assert_allclose(ref["dk"][:, 1], ref["dk_raw"][:, 2] + ref["dk_raw"][:, 3], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ref["dbias"][0, 0], ref["dbias_raw"].sum(axis=(0, 1)), rtol=1e-5, atol=1e-6)
    x16 = make_inputs(GQA_DBIAS, 4)
    ref16 = reference(GQA_DBIAS, x16)  # fp16: the stored slices are summed, not the float32 ones
    exact = ref16["dk_raw"][:, 2] + ref16["dk_raw"][:, 3]
    assert not np.array_equal(ref16["dk"][:, 1], exact)
    np.testing.assert_allclose(ref16["dk"][:, 1], exact, rtol=2e-3, atol=2e-3)


def test_raw_dk_of_a_q_head_is_the_gradient_through_its_own_copy_of_k() -> None:
    # GQA == MHA with K/V repeated per q-head; the MHA dK of q-head h is GQA's raw dK slice h
    p = Problem(family="bwd", dtype="fp32", batch=1, nhead_q=4, nhead_k=2, seqlen_q=9, seqlen_k=11, hdim_q=16, mask="t")
    x = make_inputs(p, 3)
    mha = p.replace(nhead_k=4)
    xm = dict(x, k=np.repeat(x["k"], 2, axis=1), v=np.repeat(x["v"], 2, axis=1))
    g, gm = reference(p, x, np.float64), reference(mha, xm, np.float64)
    np.testing.assert_allclose(g["dk_raw"], gm["dk"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["dv_raw"], gm["dv"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_dbias_reduction_over_the_bias_broadcast_axes(rank: int) -> None:
    p = GQA_DBIAS.replace(nhead_k=4, bias_rank=rank)
    ref = reference(p, make_inputs(p, 2))
    raw = ref["dbias_raw"]  # (b, hq, sq, sk) for every rank
    assert raw.shape == (2, 4, 40, 70)
    raw = _stored(raw)  # as the kernel stores it: the bias's dtype (BiasGradDataType)
    want = {0: raw.sum(axis=(0, 1), keepdims=True), 1: raw.sum(axis=0, keepdims=True), 2: raw}[rank]
    np.testing.assert_allclose(ref["dbias"], want, rtol=1e-6, atol=1e-6)


def test_group_mode_dbias_raw_leaves_columns_past_seqlen_k_zero() -> None:
    p = Problem(
        family="bwd",
        dtype="fp32",
        mode="group",
        batch=2,
        nhead_q=2,
        nhead_k=1,
        seqlens_q=(3, 4),
        seqlens_k=(5, 9),
        hdim_q=16,
        bias="elementwise",
        bias_rank=1,
        dbias=True,
    )
    ref = reference(p, make_inputs(p, 0))
    raw = ref["dbias_raw"]  # (1, hq, total_q, max_sk)
    assert raw.shape == (1, 2, 7, 9)
    assert np.all(raw[0, :, :3, 5:] == 0) and np.any(raw[0, :, :3, :5] != 0)  # sequence 0: 5 keys of 9
    assert np.any(raw[0, :, 3:, 8] != 0)
    np.testing.assert_array_equal(ref["dbias"], raw)  # rank 1 in group mode: (1, hq, total_q, max_sk), no sum


def test_reduce_raw_gradients_rejects_wrong_shapes_by_name() -> None:
    p = GQA_DBIAS
    ref = reference(p, make_inputs(p, 0))
    with pytest.raises(
        RawLayoutError,
        match=r"dk_raw: shape \(2, 2, 70, 64\) is not CK's raw layout "
        r"\(2, 4, 70, 64\)",
    ):
        reduce_raw_gradients(p, dict(ref, dk_raw=ref["dk"]), (1, 1, 40, 70))
    with pytest.raises(RawLayoutError, match=r"bias: shape \(1, 3, 40, 70\) cannot receive dBias"):
        reduce_raw_gradients(p, ref, (1, 3, 40, 70))
    with pytest.raises(RawLayoutError, match="bias: its shape is needed"):
        reduce_raw_gradients(p, ref, None)


# ------------------------------------------------------------------------------------------- cpu backend
CPU_CASES = {
    "gqa-dbias": GQA_DBIAS,
    "gqa-bshd-dbias-rank1": GQA_DBIAS.replace(input_layout="bshd", output_layout="bshd", bias_rank=1, nhead_k=1),
    "group-gqa-dbias": Problem(
        family="bwd",
        mode="group",
        batch=3,
        nhead_q=4,
        nhead_k=2,
        seqlens_q=(10, 0, 33),
        seqlens_k=(50, 31, 70),
        hdim_q=64,
        mask="b",
        bias="elementwise",
        dbias=True,
    ),
    "mqa-det-bf16": Problem(
        family="bwd",
        dtype="bf16",
        batch=1,
        nhead_q=3,
        nhead_k=1,
        seqlen_q=30,
        seqlen_k=140,
        hdim_q=64,
        deterministic=True,
    ),
}


@pytest.mark.parametrize("name", list(CPU_CASES))
def test_cpu_backend_raw_equals_reference_raw(name: str) -> None:
    p = CPU_CASES[name]
    inp = make_inputs(p, 0)
    res = run(p, inp, registry=cpu_registry())
    ref = reference(p, inp)
    raw = [n for n in RAW if n in ref]
    assert raw == ["dk_raw", "dv_raw"] + (["dbias_raw"] if p.dbias else [])
    checks = validate(p, res.outputs, ref, names=raw + ["dq", "dk", "dv"] + (["dbias"] if p.dbias else []))
    assert all(checks.values()), "\n".join(str(c) for c in checks.values())
    for n in raw:  # the kernel's buffers: storage (bias) dtype, CK's shapes
        assert res.outputs[n].shape == ref[n].shape and res.outputs[n].dtype == inp["q"].dtype
    # the host step: reduced = the raw buffers summed in float32, rounded once
    again = reduce_raw_gradients(
        p,
        res.outputs,
        inp["bias"].shape if p.dbias else None,
        {"dk": inp["k"].dtype, "dv": inp["v"].dtype, "dbias": inp["q"].dtype},
    )
    for n, a in again.items():
        assert np.array_equal(res.outputs[n], a, equal_nan=False), n


def test_reduce_gradients_names_the_missing_raw_output() -> None:
    p = GQA_DBIAS
    inp = make_inputs(p, 0)
    with pytest.raises(RawLayoutError, match=r"dbias_raw: no such output to reduce"):
        reduce_gradients(p, dict(inp, dk_raw=np.zeros(dk_raw_shape(p)), dv_raw=np.zeros(dv_raw_shape(p))))


# ------------------------------------------------------------------------------------------- fault injection
FAULT = Problem(family="bwd", batch=1, nhead_q=4, nhead_k=2, seqlen_q=40, seqlen_k=64, hdim_q=64, mask="t")


class _CompensatedFaultBackend(CpuBackend):
    """A dq_dk_dv kernel that writes q-head 0's dK element (0, 0, 5, 7) 0.5 too high and q-head 1's -- the same
    K/V head's group -- 0.5 too low: the group sum (the reduced dK) stays right."""

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        res = super().run_stage(kernel, stage, problem, inputs, timing=timing, context=context)
        if stage.role is StageRole.DQ_DK_DV:
            dk = res.outputs["dk_raw"]
            dk[0, 0, 5, 7] += np.float16(0.5)
            dk[0, 1, 5, 7] -= np.float16(0.5)
        return res


def test_raw_comparison_catches_a_fault_the_reduced_one_hides(monkeypatch) -> None:
    monkeypatch.setitem(backends.instances(), "cpu", _CompensatedFaultBackend())
    inp = make_inputs(FAULT, 0)
    res = run(FAULT, inp, registry=cpu_registry())
    ref = reference(FAULT, inp)
    plan_names = output_names(FAULT, res.plan)
    kernel_names = output_names(FAULT, res.plan, kernel_item=True)
    assert plan_names == ["dq", "dk", "dv"] and kernel_names == ["dq", "dk_raw", "dv_raw"]
    reduced = validate(FAULT, res.outputs, ref, names=plan_names)
    assert all(reduced.values()), "\n".join(str(c) for c in reduced.values())  # hidden in the sum
    raw = validate(FAULT, res.outputs, ref, names=kernel_names)
    assert raw["dq"] and raw["dv_raw"] and not raw["dk_raw"]
    assert raw["dk_raw"].mismatch_count == 2 and raw["dk_raw"].first_mismatch == (0, 0, 5, 7)


def _runtime(backend, tmp_path) -> Runtime:
    hook = SimpleNamespace(pytest_ckfmha_backend=lambda config, name: backend)
    settings = SimpleNamespace(
        backend="cpu",
        arch="gfx942",
        seed=0,
        cache_dir=tmp_path / "refs",
        bench=False,
        cpu_max_flops=1e12,
        heuristics=None,
        reference="numpy",
    )
    return Runtime(SimpleNamespace(hook=hook), settings, cpu_registry())


def test_plugin_kernel_item_judges_raw_and_plan_item_reduced(tmp_path) -> None:
    be = _CompensatedFaultBackend()
    rt = _runtime(be, tmp_path)
    shape = SimpleNamespace(problem=FAULT)
    plan = Dispatcher(cpu_registry(), be).select(FAULT)
    kernel = next(st.kernel for st in plan.stages if st.role is StageRole.DQ_DK_DV)
    as_kernel = run_item(rt, shape, kernel, {})
    assert list(as_kernel.checks) == ["dq", "dk_raw", "dv_raw"]
    assert not as_kernel.checks["dk_raw"].passed and as_kernel.checks["dk_raw"].first_mismatch == (0, 0, 5, 7)
    as_plan = run_item(rt, shape, None, {})
    assert list(as_plan.checks) == ["dq", "dk", "dv"] and all(c.passed for c in as_plan.checks.values())
