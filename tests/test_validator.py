import numpy as np
import pytest
import yaml

from ckfmha.inputs import make_inputs, output_dtype
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.validator import TOLERANCES_PATH, ToleranceError, check, load_tolerances, tolerance_for, validate


def test_tables_match_ck():
    assert tolerance_for("fp16") == tolerance_for("fp16", fp8_format="fnuz")
    assert (tolerance_for("fp16").rtol, tolerance_for("fp16").atol) == (1e-3, 1e-3)
    assert tolerance_for("fp32").atol == 1e-5 and tolerance_for("bf16").rtol == 1e-2
    assert tolerance_for("fp8", fp8_format="fnuz").atol == 16 and tolerance_for("fp8").atol == 32
    assert tolerance_for("fp8bf16").atol == 0.18
    assert tolerance_for("fp16", backward=True).rtol == 1e-2
    assert tolerance_for("bf16", True, 256, 256).atol == 3.2e-2
    assert tolerance_for("bf16", True, 256, 128).atol == 1e-2
    assert tolerance_for("fp32", backward=True).atol == 1e-4
    with pytest.raises(ToleranceError, match="no backward tolerance for fp8"):
        tolerance_for("fp8", backward=True)


def test_bad_table_rejected(tmp_path):
    data = yaml.safe_load(TOLERANCES_PATH.read_text())
    data["forward"]["fp16"]["atol"] = -1
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ToleranceError, match=r"t.yaml: forward.fp16.atol: expected a value >= 0, found -1"):
        load_tolerances(f)
    data["forward"]["fp16"] = {"rtol": 1e-3, "atol": 1e-3, "bogus": 1}
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ToleranceError, match=r"forward.fp16: unknown key\(s\) 'bogus'"):
        load_tolerances(f)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("noise_floor"), r"t.yaml: top level: missing key\(s\) 'noise_floor'$"),
        (lambda d: d["noise_floor"].pop("backward"), r"t.yaml: noise_floor: missing key\(s\) 'backward' \(rule: max"),
        (lambda d: d["noise_floor"]["forward"].pop("k"), r"t.yaml: noise_floor.forward: missing key\(s\) 'k'$"),
        (
            lambda d: d["noise_floor"]["forward"].update(k=0.5),
            r"noise_floor.forward.k: expected a value >= 1, found 0.5 \(rule: k >= 1: a kernel is never asked",
        ),
        (
            lambda d: d["noise_floor"]["backward"].update(k="3"),
            r"noise_floor.backward.k: expected a number, found '3'",
        ),
        (
            lambda d: d["noise_floor"]["backward"].update(k=True),
            r"noise_floor.backward.k: expected a number, found True",
        ),
        (
            lambda d: d["noise_floor"]["backward"].update(atol=-1e-5),
            r"noise_floor.backward.atol: expected a value >= 0, found -1e-05 \(rule: a finite number >= 0\)",
        ),
        (
            lambda d: d["noise_floor"]["forward"].update(k=float("nan")),
            r"noise_floor.forward.k: expected a finite number, found nan",
        ),
        (
            lambda d: d["noise_floor"]["forward"].update(factor=2),
            r"noise_floor.forward: unknown key\(s\) 'factor' \(did you mean 'atol'\?\); known: atol, k",
        ),
        (lambda d: d["noise_floor"].update(split={"k": 2, "atol": 0}), r"noise_floor: unknown key\(s\) 'split'"),
        (
            lambda d: d.update(relative={"forward": {"factor": 2, "atol": 1e-5}}),
            r"top level: unknown key\(s\) 'relative'; known: backward, forward, noise_floor, row_noise_floor, version",
        ),
        (lambda d: d.update(version=2), r"t.yaml: version: expected 1, found 2"),
        (lambda d: d["forward"].update(fp17={"rtol": 0, "atol": 0}), r"t.yaml: forward.fp17: unknown dtype; expected"),
        (lambda d: d["forward"].update(fp16={}), r"t.yaml: forward.fp16: missing key\(s\) 'rtol', 'atol'"),
        (
            lambda d: d["forward"]["fp8"].update(ocp_atol_factor=0),
            r"forward.fp8.ocp_atol_factor: expected a value > 0, found 0",
        ),
        (lambda d: d["backward"]["bf16"]["large_hdim"].pop("atol"), r"backward.bf16.large_hdim: missing key"),
        (lambda d: d.update(backward={}), r"backward: expected at least this many keys: 1, found \{\}"),
    ],
)
def test_noise_floor_table_schema(tmp_path, edit, message):
    data = yaml.safe_load(TOLERANCES_PATH.read_text())
    edit(data)
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ToleranceError, match=message):
        load_tolerances(f)


def test_noise_floor_table_is_read_per_direction(tmp_path):
    from ckfmha.validator import NoiseFloor, noise_floor_for

    data = yaml.safe_load(TOLERANCES_PATH.read_text())
    data["noise_floor"] = {"forward": {"k": 1, "atol": 0}, "backward": {"k": 4.5, "atol": 2e-4}}
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(data))
    tables = load_tolerances(f)
    assert noise_floor_for(False, tables) == NoiseFloor(1.0, 0.0)
    assert noise_floor_for(True, tables) == NoiseFloor(4.5, 2e-4)
    # the shipped constants: FlashAttention's k (forward 2, backward 3) and FA2's + 1e-5
    assert noise_floor_for(False) == NoiseFloor(2.0, 1e-5) and noise_floor_for(True) == NoiseFloor(3.0, 1e-5)


def test_allclose_rule_and_result():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    out = ref + np.array([[0.0, 0.0], [0.5, 0.0]])
    r = check(out, ref, rtol=0.1, atol=0.01, name="o")
    assert not r.passed and r.mismatch_count == 1 and r.first_mismatch == (1, 0)
    assert r.max_abs_err == 0.5 and r.max_rel_err == pytest.approx(0.5 / 3)
    assert "FAIL" in str(r) and "(1, 0)" in str(r)
    assert check(ref * 1.05, ref, rtol=0.1, atol=0).passed


def test_nonfinite_rules():
    ref = np.array([-np.inf, 1.0, np.nan, np.inf])
    assert check(ref.copy(), ref, 1e-3, 1e-3).passed
    assert not check(np.array([0.0, 1.0, np.nan, np.inf]), ref, 1, 1).passed  # -inf lost
    assert not check(np.array([-np.inf, np.nan, np.nan, np.inf]), ref, 1, 1).passed  # NaN where ref finite
    assert not check(np.array([-np.inf, 1.0, np.nan, -np.inf]), ref, 1, 1).passed  # wrong sign
    assert not check(np.ones(3), np.ones(4), 1, 1).passed  # shape


def test_relative_rule():
    ref = np.linspace(-1, 1, 50)
    base = ref + 1e-3
    assert check(ref + 1.5e-3, ref, 0, 0, rule="relative", base=base, factor=2).passed
    r = check(ref + 3e-3, ref, 0, 0, rule="relative", base=base, factor=2)
    assert not r.passed and "relative rule" in r.message
    with pytest.raises(ValueError, match="needs base"):
        check(ref, ref, 0, 0, rule="relative")
    with pytest.raises(ValueError, match="rule: 'loose' must be 'allclose' or 'relative'"):
        check(ref, ref, 0, 0, rule="loose")


def test_validate_relative_uses_the_noise_floor_table():
    p = Problem(nhead_q=2, seqlen_q=16, hdim_q=16, lse=True)
    x = make_inputs(p, 0)
    truth = reference(p, x, np.float64)
    base = {"o": reference(p, x)["o"].astype(output_dtype(p.dtype)), "lse": reference(p, x)["lse"]}
    err = {n: np.abs(base[n].astype(np.float64) - truth[n]).max() for n in base}
    ok = {n: truth[n] + 1.9 * (base[n].astype(np.float64) - truth[n]) for n in base}  # within k = 2
    assert all(validate(p, ok, truth, rule="relative", base=base).values())
    bad = {"o": truth["o"] + 2 * err["o"] + 1e-3, "lse": ok["lse"]}
    res = validate(p, bad, truth, rule="relative", base=base)
    assert res["lse"].passed and not res["o"].passed and "2 x" in res["o"].message


def test_validate_fp16_output_of_reference_passes():
    p = Problem(nhead_q=2, seqlen_q=16, hdim_q=16, lse=True, mask="b")
    x = make_inputs(p, 0)
    ref = reference(p, x)
    kern = {"o": ref["o"].astype(output_dtype(p.dtype)), "lse": ref["lse"]}
    res = validate(p, kern, ref)
    assert all(res.values()), [str(r) for r in res.values()]
    kern["o"] = kern["o"] + np.float16(0.01)
    assert not validate(p, kern, ref)["o"].passed


@pytest.mark.parametrize("seed", range(4))
def test_limit_ratio_is_above_one_exactly_when_the_check_fails(seed):
    """CheckResult.limit_ratio, the pass rule's figure at the worst element, against the rule itself: random
    outputs around the boundary, zeros and non-finite values; and its value where it can be computed by hand."""
    rng = np.random.default_rng(seed)
    rtol, atol = 1e-3, 1e-3
    for case in range(40):
        ref = rng.standard_normal(300) * 10.0 ** rng.uniform(-3, 2)
        ref[rng.random(300) < 0.1] = 0.0
        out = ref + rng.uniform(-1.2, 1.2, 300) * (atol + rtol * np.abs(ref)) * rng.uniform(0, 1)
        if case % 9 == 0:
            out[5] = np.nan
        if case % 11 == 0:
            ref[7] = out[7] = np.inf  # the same non-finite value: no mismatch
        c = check(out, ref, rtol, atol)
        assert (c.limit_ratio > 1.0) is (not c.passed), (case, c)
    c = check(np.array([1.0, 2.5, 0.0]), np.array([1.0, 2.0, 0.0]), rtol, atol)
    assert c.limit_ratio == pytest.approx(0.5 / (atol + rtol * 2.0)) and not c.passed
    assert check(np.zeros(3), np.zeros(3), rtol, atol).limit_ratio == 0.0
    assert check(np.zeros(3), np.zeros(4), rtol, atol).limit_ratio == float("inf")


def test_limit_ratio_of_the_relative_rule_is_err_over_its_limit():
    truth = np.linspace(-1, 1, 64)
    base = truth + 1e-3
    c = check(truth + 1.5e-3, truth, 1e-3, 1e-3, rule="relative", base=base, factor=2.0, rel_atol=1e-5)
    assert c.passed and c.limit_ratio == pytest.approx(1.5e-3 / (2 * 1e-3 + 1e-5), rel=1e-6)
    c = check(truth + 3e-3, truth, 1e-3, 1e-3, rule="relative", base=base, factor=2.0, rel_atol=1e-5)
    assert not c.passed and c.limit_ratio > 1
