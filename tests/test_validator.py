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
    with pytest.raises(ToleranceError, match="forward.fp16.atol"):
        load_tolerances(f)
    data["forward"]["fp16"] = {"rtol": 1e-3, "atol": 1e-3, "bogus": 1}
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ToleranceError, match="unknown key"):
        load_tolerances(f)


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


def test_validate_fp16_output_of_reference_passes():
    p = Problem(nhead_q=2, seqlen_q=16, hdim_q=16, lse=True, mask="b")
    x = make_inputs(p, 0)
    ref = reference(p, x)
    kern = {"o": ref["o"].astype(output_dtype(p.dtype)), "lse": ref["lse"]}
    res = validate(p, kern, ref)
    assert all(res.values()), [str(r) for r in res.values()]
    kern["o"] = kern["o"] + np.float16(0.01)
    assert not validate(p, kern, ref)["o"].passed
