"""The noise-floor verdict of parity (float64 ground truth + FlashAttention's rule) next to CK's elementwise one: the
rule on synthetic arrays, the sides and parity rows on the CPU backend, injected bugs, reports and the benchmark's
injections."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.parity import Status, compare_one, compare_results, comparison_rule, make_side
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.upstream.judging import judge
from ckfmha.upstream.reference_cache import noise_references
from ckfmha.upstream.result import SideResult, Verdict
from ckfmha.validator import (
    NoiseFloor,
    Rule,
    ground_truth,
    noise_floor_check,
    noise_floor_for,
    same_precision_reference,
    stored_dtype,
    validate_noise_floor,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import parity_torch  # noqa: E402

FWD = Problem(dtype="bf16", batch=1, nhead_q=2, nhead_k=1, seqlen_q=64, seqlen_k=96, hdim_q=64, mask="b", lse=True)
BWD = Problem(family="bwd", dtype="bf16", batch=1, nhead_q=4, nhead_k=2, seqlen_q=64, seqlen_k=80, hdim_q=64, mask="t")
BWD16 = BWD.replace(dtype="fp16")


# ------------------------------------------------------------------------------------------ the rule
def test_rule_passes_at_k_times_the_reference_error_and_fails_just_above():
    truth = np.arange(-50, 51) / 32.0  # dyadic values: every sum below is exact
    same = truth.copy()
    same[7] += 2.0**-7  # the same-precision reference's error
    k, atol = 2.0, 2.0**-10
    limit = k * 2.0**-7 + atol
    out = truth.copy()
    out[50] += limit
    r = noise_floor_check(out, truth, same, k, atol, name="o")
    assert r.passed and r.err == limit and r.ref_err == 2.0**-7 and r.limit == limit
    assert r.ratio == limit / 2.0**-7 and r.where == (50,)
    out[50] += 2.0**-30  # just above
    r = noise_floor_check(out, truth, same, k, atol, name="o")
    assert not r.passed and r.where == (50,)
    assert "o: noise floor FAIL" in str(r) and "worst at (50,)" in r.message
    s = r.summary()
    assert s["noise_passed"] is False and s["error_ratio"] == r.ratio and s["noise_k"] == 2.0
    json.dumps(s, allow_nan=False)


def test_exact_reference_gives_no_ratio_and_atol_is_the_floor():
    truth = np.zeros(8)
    r = noise_floor_check(truth + 5e-6, truth, truth, 3.0, 1e-5)
    assert r.passed and r.ratio is None and r.ref_err == 0.0
    assert not noise_floor_check(truth + 2e-5, truth, truth, 3.0, 1e-5).passed


def test_nonfinite_values():
    truth = np.array([-np.inf, 1.0, 2.0])
    same = np.array([-np.inf, 1.0, 2.0])
    assert noise_floor_check(truth.copy(), truth, same, 2, 0).passed  # -inf LSE of a fully masked row
    r = noise_floor_check(np.array([-np.inf, np.nan, 2.0]), truth, same, 2, 1.0)
    assert not r.passed and r.err == float("inf") and r.ratio is None and "non-finite mismatch at (1,)" in r.message
    assert r.summary()["err_vs_truth"] is None  # JSON-safe
    json.dumps(r.summary(), allow_nan=False)
    # a non-finite same-precision value where the truth is finite never widens the limit
    r = noise_floor_check(truth + np.array([0, 0, 0.5]), truth, np.array([-np.inf, np.inf, 2.0]), 2, 0)
    assert not r.passed and r.ref_err == 0.0


def test_shapes_and_arguments():
    r = noise_floor_check(np.zeros(3), np.zeros(4), np.zeros(4), 2, 0, name="dq")
    assert not r.passed and "out shape (3,) != truth shape (4,)" in r.message
    with pytest.raises(ValueError, match=r"noise floor k: 0.5 must be a finite number >= 1"):
        noise_floor_check(np.zeros(2), np.zeros(2), np.zeros(2), 0.5, 0)
    with pytest.raises(ValueError, match=r"noise floor atol: -1 must be a finite number >= 0"):
        noise_floor_check(np.zeros(2), np.zeros(2), np.zeros(2), 2, -1)


def test_constants_per_direction_come_from_the_table():
    assert noise_floor_for(False) == NoiseFloor(k=2.0, atol=1e-5)
    assert noise_floor_for(True) == NoiseFloor(k=3.0, atol=1e-5)


# ------------------------------------------------------------------------------------------ truth and same precision
def test_ground_truth_is_the_reference_of_float64_upcast_inputs():
    for p in (FWD, BWD):
        x = make_inputs(p, 1)
        up = {n: (a.astype(np.float64) if n in ("q", "k", "v", "do") else a) for n, a in x.items()}
        t, t_up = ground_truth(p, x), reference(p, up, np.float64)
        for n in ("dq", "dk", "dv") if p.is_backward else ("o", "lse"):
            assert t[n].dtype == np.float64 and np.array_equal(t[n], t_up[n]), n


def test_same_precision_reference_is_stored_in_the_problems_precision():
    x = make_inputs(FWD, 0)
    sp = same_precision_reference(FWD, reference(FWD, x))
    assert sp["o"].dtype == stored_dtype(FWD, "o") and str(sp["o"].dtype) == "bfloat16"
    assert sp["lse"].dtype == np.float32
    assert stored_dtype(BWD, "dk") == stored_dtype(BWD, "q") and stored_dtype(BWD, "d") == np.float32
    assert str(stored_dtype(Problem(dtype="fp8bf16", qscale="pertensor"), "o")) == "bfloat16"
    with pytest.raises(ValueError, match="output: 'bogus' has no stored dtype"):
        stored_dtype(FWD, "bogus")
    truth, same = noise_references(FWD, 0)
    assert truth["o"].dtype == np.float64 and same["o"].dtype == sp["o"].dtype and np.array_equal(same["o"], sp["o"])


def test_the_same_precision_reference_itself_passes_with_ratio_one():
    truth, same = noise_references(BWD, 0)
    res = validate_noise_floor(BWD, same, truth, same, names=["dq", "dk", "dv"])
    # the deciding per-row rule's reference error is the rounding bound (>= the observed error): ratio <= 1;
    # the tensor-wide (FlashAttention) figure kept next to it: exactly 1
    assert all(r.passed and 0 < r.ratio <= 1.0 and r.tensor.passed and r.tensor.ratio == 1.0 for r in res.values())
    assert set(validate_noise_floor(BWD, same, truth, same)) == {"dq", "dk", "dv"}  # ckfmha.outputs: the backward
    with pytest.raises(ValueError, match="output 'dq' is missing from outputs"):
        validate_noise_floor(BWD, {}, truth, same, names=["dq"])


def _middle_plus(a: np.ndarray, frac: float) -> np.ndarray:
    flat = a.astype(np.float64).reshape(-1).copy()
    flat[flat.size // 2] += frac * np.max(np.abs(flat))
    return flat.reshape(a.shape).astype(a.dtype)


@pytest.mark.parametrize("p", [BWD16, BWD], ids=["fp16", "bf16"])
def test_injected_gradient_element_is_caught_and_same_precision_noise_is_not(p):
    truth, same = noise_references(p, 0)
    k = noise_floor_for(True, granularity="row", dtype=p.dtype).k
    for g in ("dq", "dk", "dv"):
        # an error at the same-precision level (1.5x the reference's own, at every element) passes ...
        noisy = truth[g] + 1.5 * (same[g].astype(np.float64) - truth[g])
        r = validate_noise_floor(p, {g: noisy}, truth, same, names=[g])[g]
        assert r.passed and r.tensor.passed and r.tensor.ratio == pytest.approx(1.5), str(r)
        # ... one element off by 1% of the tensor's max |value| does not, fp16 and bf16
        bad = _middle_plus(same[g], 0.01)
        r = validate_noise_floor(p, {g: bad}, truth, same, names=[g])[g]
        assert not r.passed and r.ratio > k, str(r)


def test_bf16_resolution_of_the_tensor_wide_rule_and_of_the_deciding_one():
    """docs/parity.md: in bf16 a single element 1% of the max off can stay within FlashAttention's tensor-wide
    k x max|same - truth| -- here dk's same-precision error is ~0.5% of its max (P and dS enter the gradient GEMMs in
    bf16) and k = 3 -- while
    the deciding rule (k x the rounding bound u x max|truth|, bf16 backward k = 2) catches it."""
    truth, same = noise_references(BWD, 0)
    dk = same["dk"].astype(np.float64)
    clean = validate_noise_floor(BWD, {"dk": same["dk"]}, truth, same, names=["dk"])["dk"]
    assert clean.tensor.ref_err > 0.005 * np.abs(dk).max() and clean.passed
    r = validate_noise_floor(BWD, {"dk": _middle_plus(same["dk"], 0.01)}, truth, same, names=["dk"])["dk"]
    assert r.tensor.passed and 1.0 < r.tensor.ratio < noise_floor_for(True).k, str(r.tensor)
    assert not r.passed and r.granularity.value == "row" and r.where == (0, 1, 0, 0), str(r)
    s = r.summary()
    assert (s["noise_passed"], s["tensor_noise_passed"], s["tensor_noise_k"]) == (False, True, 3.0)


# ------------------------------------------------------------------------------------------ sides
def test_ckfmha_side_carries_both_verdicts_and_is_decided_elementwise():
    side = make_side("ckfmha:cpu")
    for p, names in ((FWD, {"o", "lse"}), (BWD, {"dq", "dk", "dv"})):
        r = side.run(p)
        assert r.verdict is Verdict.RAN_VALID and r.rule is Rule.ELEMENTWISE, r.reason
        assert set(r.checks) == names
        for c in r.checks.values():
            assert c["rule"] == "elementwise" and c["elementwise_passed"] and c["noise_passed"]
            assert c["passed"] is c["elementwise_passed"] and c["error_ratio"] is not None
            assert c["err_vs_truth"] <= c["noise_limit"] and c["mismatches"] == 0
        assert r.reason.startswith("elementwise rule decides:") and "noise floor PASS" in r.reason
        assert r.to_dict()["rule"] == "elementwise"


def _one_small_dk_within_the_floor(fraction_of_floor: float) -> dict:
    """The same-precision gradients with one small dK value ``fraction_of_floor`` x the deciding rule's k x ref_err
    off (ref_err: the rounding bound u x max|truth| of bf16, magnitude_floor 1): the pattern of torch's correct
    bf16 gradients that CK's elementwise tolerance failed on an H200 / H100 (few small elements)."""
    truth, same = noise_references(BWD, 0)
    outs = {g: same[g].astype(np.float64) for g in ("dq", "dk", "dv")}
    floor = noise_floor_for(True, granularity="row", dtype="bf16")
    assert floor.magnitude_floor == 1.0
    small = int(np.argmin(np.abs(truth["dk"]).reshape(-1) + (truth["dk"].reshape(-1) == 0)))
    row = np.unravel_index(small, truth["dk"].shape)[:-1]
    ref_err = max(float(np.abs(outs["dk"][row] - truth["dk"][row]).max()), 2.0**-8 * float(np.abs(truth["dk"]).max()))
    outs["dk"].reshape(-1)[small] = truth["dk"].reshape(-1)[small] + fraction_of_floor * floor.k * ref_err
    return outs


def test_judging_by_the_noise_floor_lets_same_precision_noise_pass_where_ck_tolerance_fails():
    outs = _one_small_dk_within_the_floor(0.9)
    by_noise = judge(BWD, 0, outs, ("dq", "dk", "dv"), Rule.NOISE_FLOOR)
    by_ck = judge(BWD, 0, outs, ("dq", "dk", "dv"), "elementwise")
    assert by_noise.verdict is Verdict.RAN_VALID and by_ck.verdict is Verdict.RAN_INVALID
    for j in (by_noise, by_ck):  # both verdicts either way; only "passed" and the words follow the deciding rule
        assert j.checks["dk"]["noise_passed"] is True and j.checks["dk"]["elementwise_passed"] is False
        assert j.checks["dk"]["error_ratio"] == pytest.approx(
            0.9 * noise_floor_for(True, granularity="row", dtype="bf16").k
        )
    assert by_noise.checks["dk"]["passed"] is True and by_ck.checks["dk"]["passed"] is False
    assert by_noise.words.startswith("noise_floor rule decides: dq: row noise floor PASS")
    assert by_ck.words.startswith("elementwise rule decides: dq: PASS") and "dk: FAIL" in by_ck.words
    # just above the floor the noise floor fails it too
    assert judge(BWD, 0, _one_small_dk_within_the_floor(1.1), ("dk",), Rule.NOISE_FLOOR).verdict is Verdict.RAN_INVALID
    with pytest.raises(ValueError, match="decide_by: unknown value 'loose'"):
        judge(BWD, 0, outs, ("dq",), "loose")


def test_side_result_rule_is_a_rule():
    assert SideResult("s", "ran_valid", rule="noise_floor").rule is Rule.NOISE_FLOOR
    with pytest.raises(ValueError, match="rule: unknown value 'strict'; allowed: elementwise, noise_floor"):
        SideResult("s", "ran_valid", rule="strict")


# ------------------------------------------------------------------------------------------ parity rows
class OutputsSide:
    """A side returning given outputs with a given deciding rule (a torch side is decided by the noise floor)."""

    def __init__(self, name, outputs, rule, verdict=Verdict.RAN_VALID):
        self.name, self.outputs, self.rule, self.verdict = name, outputs, rule, verdict

    def run(self, problem, seed=0):
        return SideResult(self.name, self.verdict, "scripted", dict(self.outputs), rule=self.rule)


def _cpu_outputs(p):
    r = make_side("ckfmha:cpu").run(p)
    assert r.verdict is Verdict.RAN_VALID, r.reason
    return r


def test_parity_row_carries_both_verdicts_and_the_noise_floor_decides_for_torch():
    ours = _cpu_outputs(BWD)
    k = noise_floor_for(True, granularity="row", dtype="bf16").k
    # a "torch" side as the H200 run saw them: one small dK value off by 0.9 x the noise floor -- beyond CK's
    # 1e-2 + 1e-2 * |value| there
    noisy = _one_small_dk_within_the_floor(0.9)
    torch_like = OutputsSide("torch:fake", noisy, Rule.NOISE_FLOOR)
    ck = make_side("ckfmha:cpu")
    row = compare_one(BWD, torch_like, ck)
    assert comparison_rule(row.left, row.right) is Rule.NOISE_FLOOR
    assert row.status is Status.AGREE and row.passed and row.rule is Rule.NOISE_FLOOR, row.detail
    assert row.noise_passed is True and row.error_ratio == pytest.approx(0.9 * k)
    assert row.elementwise_passed is False and row.output_checks["dk"]["elementwise_passed"] is False
    for n, c in row.output_checks.items():
        assert c["rule"] == "noise_floor" and c["passed"] is c["noise_passed"] is True
        if n == "dk":
            assert c["left_error_ratio"] == pytest.approx(0.9 * k)
        else:  # the same-precision output: at most its rounding bound
            assert 0 < c["left_error_ratio"] <= 1.0
        assert c["right_error_ratio"] and c["tensor_noise_passed"] is True and c["tensor_noise_k"] == 3.0
        assert c["noise_granularity"] == "row" and c["tensor_error_ratio"] >= 1.0
        assert c["noise_message"].startswith(f"torch:fake: {n}: row noise floor PASS")
        assert f" || ckfmha:cpu: {n}: row noise floor PASS" in c["noise_message"]
    assert "outputs agree under the noise_floor rule" in row.detail
    # the same outputs between two CK kernels are compared elementwise, and disagree
    st, _, detail, _ = compare_results(
        BWD, OutputsSide("ckfmha:x", noisy, Rule.ELEMENTWISE).run(BWD), ck.run(BWD), seed=0
    )
    assert st is Status.DISAGREE and detail.startswith("outputs differ between the sides: dk: FAIL")
    d = row.to_dict()
    assert d["rule"] == "noise_floor" and d["noise_passed"] is True and d["error_ratio"] == row.error_ratio
    json.dumps(d, allow_nan=False, default=str)
    # one element of dk off by 3% of its max |value| (bf16: 1% can be within the floor, see below): the row
    # disagrees under the noise floor
    bad = dict(noisy)
    bad["dk"] = _middle_plus(ours.outputs["dk"], 0.03)
    row = compare_one(BWD, OutputsSide("torch:fake", bad, Rule.NOISE_FLOOR), ck)
    assert row.status is Status.DISAGREE and row.noise_passed is False, row.detail
    assert "outputs differ from the float64 truth beyond the noise floor" in row.detail and "dk" in row.detail
    assert row.output_checks["dk"]["noise_passed"] is False and row.output_checks["dk"]["error_ratio"] > k


def test_two_ck_kernels_are_compared_elementwise():
    ours = _cpu_outputs(FWD)
    left = OutputsSide("ckfmha:other", ours.outputs, Rule.ELEMENTWISE)
    row = compare_one(FWD, left, make_side("ckfmha:cpu"))
    assert row.rule is Rule.ELEMENTWISE and row.status is Status.AGREE and row.elementwise_passed is True
    assert row.noise_passed is True and row.output_checks["o"]["passed"] is True
    # outputs 0.05 apart everywhere: within neither rule; elementwise decides and says so
    shifted = {
        "o": (ours.outputs["o"].astype(np.float64) + 0.05).astype(ours.outputs["o"].dtype),
        "lse": ours.outputs["lse"],
    }
    st, comp, detail, checks = compare_results(
        FWD, OutputsSide("a", shifted, Rule.ELEMENTWISE).run(FWD), make_side("ckfmha:cpu").run(FWD), seed=0
    )
    assert st is Status.DISAGREE and detail.startswith("outputs differ between the sides: o: FAIL")
    assert checks["o"]["elementwise_passed"] is False and checks["o"]["noise_passed"] is False


def test_noise_floor_compares_with_the_truth_of_the_seed_the_sides_ran_on():
    side = make_side("ckfmha:cpu")
    a, b = side.run(FWD, 3), side.run(FWD, 3)
    a.rule = Rule.NOISE_FLOOR
    assert compare_results(FWD, a, b, seed=3)[0] is Status.AGREE
    st, _, detail, _ = compare_results(FWD, a, b, seed=4)  # the wrong inputs' truth: far from both outputs
    assert st is Status.DISAGREE and "beyond the noise floor" in detail


def test_noise_floor_without_a_truth_for_an_output_is_an_error():
    a = SideResult("torch:fake", Verdict.RAN_VALID, outputs={"randval": np.zeros(3)}, rule=Rule.NOISE_FLOOR)
    b = SideResult("ckfmha:cpu", Verdict.RAN_VALID, outputs={"randval": np.zeros(3)}, rule=Rule.ELEMENTWISE)
    st, comp, detail, checks = compare_results(FWD, a, b)
    assert st is Status.ERROR and "noise-floor rule cannot judge the outputs" in detail and "'randval'" in detail
    assert checks["randval"]["noise_passed"] is None


def test_report_fields_of_a_parity_item():
    from pytest_ckfmha.reporting import ROW_FIELDS, parity_props

    assert ROW_FIELDS[-4:] == ("parity_rule", "elementwise_passed", "noise_passed", "error_ratio")
    truth, same = noise_references(BWD, 0)
    row = compare_one(BWD, OutputsSide("torch:fake", same, Rule.NOISE_FLOOR), make_side("ckfmha:cpu"))
    settings = SimpleNamespace(category="smoke", backend="cpu", arch="gfx942", seed=0, parity="torch:fake")
    props = parity_props("torch::x", BWD, settings, row)
    assert props["parity_rule"] == "noise_floor" and props["noise_passed"] is True
    assert props["error_ratio"] == pytest.approx(row.error_ratio) and isinstance(props["elementwise_passed"], bool)
    none = compare_one(
        BWD, OutputsSide("a", {}, None, Verdict.UNSUPPORTED), OutputsSide("b", {}, None, Verdict.UNSUPPORTED)
    )
    props = parity_props("torch::x", BWD, settings, none)
    assert (props["parity_rule"], props["noise_passed"], props["error_ratio"]) == ("", "", "")


# ------------------------------------------------------------------------------------------ the benchmark's bugs
def test_grad_element_injection_changes_one_element_by_one_percent_of_the_max():
    r = _cpu_outputs(BWD16)
    truth, _ = noise_references(BWD16, 0)
    top = float(np.abs(truth["dk"]).max())
    bad, index, delta = parity_torch.inject_grad_element(r.outputs, "dk", top)
    a, b = r.outputs["dk"].astype(np.float64), bad["dk"].astype(np.float64)
    diff = np.argwhere(a != b)
    assert [tuple(d) for d in diff] == [index] and bad["dk"].dtype == r.outputs["dk"].dtype
    assert index == tuple(int(i) for i in np.unravel_index(a.size // 2, a.shape)) and delta == 0.01 * top
    assert b[index] - a[index] == pytest.approx(delta, rel=0.01)  # stored in fp16
    assert bad["dq"] is r.outputs["dq"]
    assert parity_torch.inject_grad_element(r.outputs, "dk", top, 0.03)[2] == 0.03 * top
    assert parity_torch.inject_grad_element(r.outputs, "dk", 0.0)[2] == 0.0  # an exactly-zero gradient: nothing
    j = judge(BWD16, 0, bad, ("dq", "dk", "dv"), Rule.NOISE_FLOOR)
    assert j.verdict is Verdict.RAN_INVALID and not j.checks["dk"]["noise_passed"] and j.checks["dq"]["noise_passed"]


def test_dropout_threshold_injection_is_caught_on_the_cpu_backend():
    from ckfmha.backends.cpu import engine

    side = make_side("ckfmha:cpu")
    p = Problem(dtype="bf16", batch=1, nhead_q=2, seqlen_q=64, seqlen_k=64, hdim_q=64, mask="t", p_drop=0.2)
    real = engine.rng
    assert side.run(p).verdict is Verdict.RAN_VALID
    with parity_torch.dropout_threshold_off_by_one():
        keep = engine.rng.dropout_keep(np.arange(256, dtype=np.uint8), 0.2)
        bad = side.run(p)
    from ckfmha.rng import p_undrop_u8

    assert int(keep.sum()) == p_undrop_u8(0.2)  # randval 0 .. t-1 kept: one value fewer than CK's 0 .. t
    assert bad.verdict is Verdict.RAN_INVALID and not bad.checks["o"]["noise_passed"], bad.reason
    assert engine.rng is real and side.run(p).verdict is Verdict.RAN_VALID  # restored
    row = parity_torch._injected_row("dropout-threshold", side.name, p, bad.verdict, bad.reason, bad.checks, {})
    s = parity_torch.catch_summary("dropout-threshold", [row])
    assert s["line"] == "injected bug caught in 1 of 1 rows (dropout-threshold)" and s["missed"] == []
    assert s["caught_by_noise_floor"] == 1 and s["caught_elementwise"] == (
        0 if bad.checks["o"]["elementwise_passed"] else 1
    )


def test_dropout_threshold_injection_reaches_every_triton_launcher():
    """The injection must reach every kernel that draws dropout: on an H100 the backward's launcher kept its own
    binding of p_undrop_u8, so the bug was never injected into the Triton backward (8 rows "missed" that ran
    correct kernels). Needs torch and triton importable (no GPU)."""
    pytest.importorskip("torch", reason="torch is not installed (pip install 'ckfmha[gpu]')")
    pytest.importorskip("triton", reason="triton is not installed (pip install 'ckfmha[gpu]')")
    from ckfmha.backends.triton import device, launch, launch_bwd
    from ckfmha.problem import Problem
    from ckfmha.rng import p_undrop_u8

    p = Problem(family="bwd", p_drop=0.2)
    for module in (
        launch,
        launch_bwd,
    ):  # both take their dropout words from device.dropout_args, no binding of their own
        assert module.dropout_args is device.dropout_args and not hasattr(module, "p_undrop_u8"), module.__name__
    assert device.p_undrop_u8 is p_undrop_u8 and device.dropout_args(p)[2] == p_undrop_u8(0.2)
    with parity_torch.dropout_threshold_off_by_one():
        assert device.dropout_args(p)[2] == p_undrop_u8(0.2) - 1
    assert device.p_undrop_u8 is p_undrop_u8 and device.dropout_args(p)[2] == p_undrop_u8(0.2)  # restored
