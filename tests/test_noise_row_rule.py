"""The per-row noise floor (ckfmha.validator, granularity "row", tolerances.yaml ``row_noise_floor``) -- the rule
that decides a noise-floor verdict -- on synthetic rows, on real cpu-backend outputs with and without an injected
1% single-element bug, its table, and the torch sweep's per-rule summary."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ckfmha.parity import make_side
from ckfmha.problem import Problem
from ckfmha.upstream.reference_cache import noise_references
from ckfmha.upstream.result import Verdict
from ckfmha.validator import (
    DECIDING_GRANULARITY,
    TOLERANCES_PATH,
    Granularity,
    NoiseFloor,
    ToleranceError,
    load_tolerances,
    noise_floor_check,
    noise_floor_for,
    unit_roundoff,
    validate_noise_floor,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import parity_torch  # noqa: E402

BWD = Problem(family="bwd", dtype="bf16", batch=1, nhead_q=4, nhead_k=2, seqlen_q=64, seqlen_k=80, hdim_q=64, mask="t")
FWD = Problem(dtype="bf16", batch=1, nhead_q=4, nhead_k=1, seqlen_q=96, seqlen_k=128, hdim_q=128, lse=True)
U_BF16 = 2.0**-8


# ------------------------------------------------------------------------------------------ the rule, synthetic
def _rows() -> tuple[np.ndarray, np.ndarray]:
    """truth: row 0 of magnitude 4, row 1 of magnitude 1/4, row 2 zeros; same (bf16): exact except one element of
    row 0, off by 2^-5 (more than row 0's rounding bound u x 4 = 2^-6)."""
    import ml_dtypes

    truth = np.array([[4.0, -2.0, 1.0, 0.5], [0.25, -0.125, 0.0625, 0.0], [0.0, 0.0, 0.0, 0.0]])
    same = truth.copy()
    same[0, 1] += 2.0**-5
    return truth, same.astype(ml_dtypes.bfloat16)


def test_unit_roundoff_of_the_stored_dtypes():
    import ml_dtypes

    assert unit_roundoff(ml_dtypes.bfloat16) == U_BF16 and unit_roundoff(np.float16) == 2.0**-11
    assert unit_roundoff(np.float32) == 2.0**-24 and unit_roundoff(np.int32) == 0.0


def test_row_limit_is_k_times_the_rows_rounding_bound_or_its_observed_reference_error():
    truth, bf = _rows()
    k, atol = 2.0, 0.0
    # magnitude_floor 0: row 1 is held to k x u x 1/4 = 2^-9 ...
    out = truth.copy()
    out[1, 2] += 2.0**-9
    r = noise_floor_check(out, truth, bf, k, atol, "o", Granularity.ROW, 0.0)
    assert r.passed and r.where == (1, 2) and r.limit == k * U_BF16 / 4 and r.ratio == pytest.approx(2.0), str(r)
    out[1, 2] += 2.0**-30  # just above row 1's own limit ...
    r = noise_floor_check(out, truth, bf, k, atol, "o", "row", 0.0)
    assert not r.passed and r.where == (1, 2) and "row noise floor FAIL" in str(r) and "worst at (1, 2)" in str(r)
    # ... which the tensor-wide rule (k x the largest reference error, 2^-5) does not see
    t = noise_floor_check(out, truth, bf, k, atol, "o")
    assert t.passed and t.granularity is Granularity.TENSOR and t.limit == k * 2.0**-5
    # row 0's limit is k x its observed reference error (2^-5 > u x 4): k x 2^-5 passes there, a hair more fails
    out0 = truth.copy()
    out0[0, 0] += k * 2.0**-5
    assert noise_floor_check(out0, truth, bf, k, atol, "o", "row", 0.0).passed
    out0[0, 0] += 2.0**-30
    assert not noise_floor_check(out0, truth, bf, k, atol, "o", "row", 0.0).passed


def test_the_magnitude_floor_keeps_rows_of_zeros_and_tiny_values_from_false_alarms():
    import ml_dtypes

    truth, bf = _rows()
    noisy = truth.copy()
    noisy[2, 3] = 1e-3  # noise of the tensor's scale (u x 4 = 0.0156) in the row of zeros
    noisy[1, 0] += 1e-3
    # without a floor a zero row allows only atol: a false alarm
    r = noise_floor_check(noisy, truth, bf, 2.0, 1e-5, "dk", "row", 0.0)
    assert not r.passed and r.where == (2, 3) and r.limit == pytest.approx(1e-5)
    # magnitude_floor 1: every row is held to the tensor's rounding bound, k x u x 4
    r = noise_floor_check(noisy, truth, bf, 2.0, 1e-5, "dk", "row", 1.0)
    assert r.passed and r.limit == pytest.approx(2.0 * U_BF16 * 4 + 1e-5)
    # ... and 1/4 of it: rows below a quarter of the tensor's magnitude are held to k x u x 1
    r = noise_floor_check(noisy, truth, bf, 2.0, 1e-5, "dk", "row", 0.25)
    assert r.passed and r.limit == pytest.approx(2.0 * U_BF16 * 1 + 1e-5)
    noisy[2, 3] = 2.0 * U_BF16 + 2e-5
    assert not noise_floor_check(noisy, truth, bf, 2.0, 1e-5, "dk", "row", 0.25).passed
    # an all-zero output of an all-zero truth passes at any floor (and an empty one)
    z = np.zeros((3, 4))
    assert noise_floor_check(z, z, z.astype(ml_dtypes.bfloat16), 2.0, 0.0, "dq", "row", 0.0).passed
    e = np.zeros((0, 4))
    assert noise_floor_check(e, e, e, 2.0, 0.0, "dq", "row", 1.0).passed


def test_row_rule_arguments_are_checked():
    truth, same = _rows()
    with pytest.raises(ValueError, match=r"noise floor magnitude_floor: 1.5 must be a finite number <= 1"):
        noise_floor_check(truth, truth, same, 2.0, 0.0, "o", "row", 1.5)
    with pytest.raises(ValueError, match=r"noise floor magnitude_floor: -0.1 must be a finite number >= 0"):
        noise_floor_check(truth, truth, same, 2.0, 0.0, "o", "row", -0.1)
    with pytest.raises(ValueError, match=r"granularity: unknown value 'column'; allowed: tensor, row"):
        noise_floor_check(truth, truth, same, 2.0, 0.0, "o", "column")
    r = noise_floor_check(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), np.array([0.0, 1.0]), 2, 0, "lse", "row")
    assert not r.passed and r.err == float("inf") and r.where == (0,) and "non-finite mismatch" in r.message


# ------------------------------------------------------------------------------------------ the table
def test_the_deciding_rule_and_its_constants_come_from_the_table(tmp_path):
    assert DECIDING_GRANULARITY is Granularity.ROW
    row = Granularity.ROW
    # FlashAttention's k per direction, except bf16 backward (k_by_dtype): the 1% bug is 2.56 u there
    assert noise_floor_for(True, granularity="row") == NoiseFloor(3.0, 1e-5, row, 1.0)
    assert noise_floor_for(True, granularity="row", dtype="bf16") == NoiseFloor(2.0, 1e-5, row, 1.0)
    assert noise_floor_for(True, granularity="row", dtype="fp16") == NoiseFloor(3.0, 1e-5, row, 1.0)
    assert noise_floor_for(False, granularity="row", dtype="bf16") == NoiseFloor(2.0, 1e-5, row, 1.0)
    assert noise_floor_for(True) == NoiseFloor(3.0, 1e-5)  # FlashAttention's tensor-wide constants, reported
    assert noise_floor_for(True, dtype="bf16") == NoiseFloor(3.0, 1e-5)
    with pytest.raises(ValueError, match="dtype: unknown value 'bf17'"):
        noise_floor_for(True, granularity="row", dtype="bf17")
    data = yaml.safe_load(TOLERANCES_PATH.read_text())
    data["row_noise_floor"]["backward"] = {"k": 4.0, "atol": 0.0, "magnitude_floor": 0.5, "k_by_dtype": {"fp8": 9}}
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    tables = load_tolerances(f)
    assert noise_floor_for(True, tables, "row") == NoiseFloor(4.0, 0.0, row, 0.5)
    assert noise_floor_for(True, tables, "row", "bf16") == NoiseFloor(4.0, 0.0, row, 0.5)
    assert noise_floor_for(True, tables, "row", "fp8") == NoiseFloor(9.0, 0.0, row, 0.5)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("row_noise_floor"), r"top level: missing key\(s\) 'row_noise_floor'"),
        (
            lambda d: d["row_noise_floor"]["forward"].pop("magnitude_floor"),
            r"row_noise_floor.forward: missing key\(s\) 'magnitude_floor'",
        ),
        (
            lambda d: d["row_noise_floor"]["backward"].update(magnitude_floor=1.5),
            r"row_noise_floor.backward.magnitude_floor: expected a value <= 1, found 1.5 \(rule: 0 <= magnitude_floor",
        ),
        (
            lambda d: d["row_noise_floor"]["backward"].update(k=0.9),
            r"row_noise_floor.backward.k: expected a value >= 1, found 0.9",
        ),
        (
            lambda d: d["row_noise_floor"]["forward"].update(granularity="row"),
            r"row_noise_floor.forward: unknown key\(s\) 'granularity'",
        ),
        (
            lambda d: d["row_noise_floor"]["backward"].update(k_by_dtype={"bf17": 2.0}),
            r"t.yaml: row_noise_floor.backward.k_by_dtype.bf17: unknown dtype; expected one of",
        ),
        (
            lambda d: d["row_noise_floor"]["backward"].update(k_by_dtype={"bf16": 0.5}),
            r"row_noise_floor.backward.k_by_dtype.bf16: expected a value >= 1, found 0.5",
        ),
    ],
)
def test_row_noise_floor_table_schema(tmp_path, edit, message):
    data = yaml.safe_load(TOLERANCES_PATH.read_text())
    edit(data)
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ToleranceError, match=message):
        load_tolerances(f)


# ------------------------------------------------------------------------------------------ real outputs
def _cpu(p: Problem) -> dict:
    r = make_side("ckfmha:cpu").run(p)
    assert r.verdict is Verdict.RAN_VALID, r.reason
    return r.outputs


@pytest.mark.parametrize("p, names", [(BWD, ("dq", "dk", "dv")), (FWD, ("o", "lse"))], ids=["bwd", "fwd"])
def test_a_correct_bf16_output_of_the_cpu_backend_passes_and_a_one_percent_bump_fails(p, names):
    """The cpu backend rounds P (and dS) to bf16 before the second GEMMs, as flash kernels do: correct, but rounded
    differently from the same-precision reference."""
    truth, same = noise_references(p, 0)
    out = _cpu(p)
    clean = validate_noise_floor(p, out, truth, same, names=list(names))
    for r in clean.values():
        assert r.passed and r.granularity is Granularity.ROW and r.tensor is not None and r.tensor.passed, str(r)
        assert r.err <= r.limit and r.ratio is not None and r.ratio <= 1.5, str(r)
    missed_by_tensor_wide = []
    for n in (x for x in names if x != "lse"):
        magnitude = float(np.abs(truth[n]).max())
        bad, index, delta = parity_torch.inject_grad_element(out, n, magnitude)
        r = validate_noise_floor(p, bad, truth, same, names=[n])[n]
        assert not r.passed and r.where == index and r.err >= 0.9 * delta, str(r)
        if r.tensor is not None and r.tensor.passed:
            missed_by_tensor_wide.append(n)
    if p.is_backward:  # the reason for the rule: FlashAttention's tensor-wide k = 3 lets dk's and dv's bump through
        assert missed_by_tensor_wide == ["dk", "dv"]


# ------------------------------------------------------------------------------------------ the sweep's summary
def _injected(noise: bool, tensor: bool, elementwise: bool) -> dict:
    checks = {
        "dk": {
            "noise_passed": noise,
            "tensor_noise_passed": tensor,
            "elementwise_passed": elementwise,
            "error_ratio": 1.0,
            "tensor_error_ratio": 2.0,
        }
    }
    verdict = Verdict.RAN_VALID if noise else Verdict.RAN_INVALID
    return parity_torch._injected_row("grad-element", "flash", BWD, verdict, "w", checks, {"tensor": "dk"})


def test_catch_summary_and_clean_counts_are_reported_per_rule():
    rows = [_injected(False, True, True), _injected(False, False, True), _injected(True, True, False)]
    s = parity_torch.catch_summary("grad-element", rows)
    assert s["caught"] == 2 and s["rows"] == 3
    assert s["caught_by_rule"] == {"row_noise_floor": 2, "tensor_noise_floor": 1, "elementwise": 1}
    assert s["caught_by_noise_floor"] == 2 and s["caught_elementwise"] == 1
    assert s["missed"] == [f"flash {BWD} dk"]
    counts = {"flash": parity_torch.new_counts(), "cudnn": parity_torch.new_counts()}
    parity_torch.count_row(
        counts["flash"], {"verdict": "ran_valid", "noise_passed": True, "tensor_noise_passed": False}
    )
    parity_torch.count_row(
        counts["cudnn"], {"verdict": "ran_invalid", "noise_passed": False, "elementwise_passed": False}
    )
    parity_torch.count_row(counts["cudnn"], {"verdict": "skipped", "noise_passed": None})
    assert counts["flash"]["ran_valid"] == 1 and counts["flash"]["tensor_noise_floor_invalid"] == 1
    assert counts["cudnn"]["row_noise_floor_invalid"] == 1 and counts["cudnn"]["elementwise_invalid"] == 1
    assert counts["cudnn"]["skipped"] == 1
    lines = parity_torch.rule_lines(counts, s)
    assert lines == [
        "  per-row noise floor (decides the torch sides): clean rows invalid 1 of 2; injected bug caught in 2 of 3",
        "  tensor-wide noise floor (FlashAttention): clean rows invalid 1 of 2; injected bug caught in 1 of 3",
        "  CK's elementwise tolerance: clean rows invalid 1 of 2; injected bug caught in 1 of 3",
    ]
    assert parity_torch.rule_lines(counts, None)[0].endswith("clean rows invalid 1 of 2")


class _CpuAsTorch:
    """A stand-in for a torch side on a machine without torch: the cpu backend's outputs, judged as a torch side is
    (the noise floor decides) -- the sweep's plumbing end to end, not torch's numbers."""

    def __init__(self, backend, device=None):
        self.name = f"torch:{backend}"

    def run(self, problem, seed=0):
        from ckfmha.upstream.judging import judge
        from ckfmha.upstream.result import SideResult

        out = make_side("ckfmha:cpu").run(problem, seed).outputs
        names = ("dq", "dk", "dv") if problem.is_backward else ("o", "lse")
        j = judge(problem, seed, {n: out[n] for n in names}, names, "noise_floor")
        return SideResult(self.name, j.verdict, j.words, {n: out[n] for n in names}, checks=j.checks, rule=j.rule)


def test_the_sweep_command_reports_clean_counts_and_catches_per_rule(tmp_path, monkeypatch, capsys):
    import json

    import ckfmha.upstream.torch_sdpa as torch_sdpa

    monkeypatch.setattr(torch_sdpa, "gpu_status", lambda: (True, "fake GPU"))
    monkeypatch.setattr(torch_sdpa, "TorchSide", _CpuAsTorch)
    monkeypatch.setattr(parity_torch, "sweep", lambda quick: [BWD])
    report = tmp_path / "r.json"
    rc = parity_torch.main([str(report), "--backends", "flash", "--inject", "grad-element"])
    printed = capsys.readouterr().out
    data = json.loads(report.read_text())
    assert rc == 0, printed  # the clean row is valid and all three injected gradients are caught
    assert data["counts"]["flash"] == {
        "ran_valid": 1,
        "ran_invalid": 0,
        "skipped": 0,
        "error": 0,
        "unsupported": 0,
        "row_noise_floor_invalid": 0,
        "tensor_noise_floor_invalid": 0,
        "elementwise_invalid": 0,
    }
    inj = data["injection"]
    assert (inj["rows"], inj["caught"]) == (3, 3)
    # FlashAttention's tensor-wide k = 3 misses the dk and dv bumps of this problem (see the real-output test)
    assert inj["caught_by_rule"] == {
        "row_noise_floor": 3,
        "tensor_noise_floor": 1,
        "elementwise": inj["caught_elementwise"],
    }
    assert data["noise_floor_decides"] == "row" and data["noise_floor"]["row"]["backward"]["k"] == 3.0
    assert data["noise_floor"]["tensor"]["backward"] == {
        "k": 3.0,
        "atol": 1e-5,
        "granularity": "tensor",
        "magnitude_floor": 0.0,
    }
    assert (
        "per-row noise floor (decides the torch sides): clean rows invalid 0 of 1; injected bug caught in 3 of 3"
        in printed
    )
    assert (
        "tensor-wide noise floor (FlashAttention): clean rows invalid 0 of 1; injected bug caught in 1 of 3" in printed
    )
    assert "injected bug caught in 3 of 3 rows (grad-element)" in printed
    row = data["rows"][0]
    assert row["tensor_noise_passed"] is True and set(row["tensor_error_ratio"]) == {"dq", "dk", "dv"}
