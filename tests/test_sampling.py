"""--ckfmha-sample FRACTION[:SEED] (pytest_ckfmha.sampling): deterministic by node id, the fraction respected,
bad values usage errors naming the value and the rule, an empty sample an error; on a foreign suite and on a
ckfmha category."""

from __future__ import annotations

import pytest

from pytest_ckfmha.sampling import Sample, parse_sample
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

FOREIGN = """
import pytest

@pytest.mark.parametrize("i", range(400))
def test_many(i):
    pass
"""


def collected(res) -> list[str]:
    return [ln for ln in res.stdout.lines if "::" in ln and not ln.startswith(("ERROR", "FAILED"))]


def test_sample_is_a_pure_function_of_node_id_and_seed():
    ids = [f"tests/test_x.py::test_many[{i}]" for i in range(20000)]
    s = Sample(0.02, 0)
    kept = [n for n in ids if s.keeps(n)]
    assert kept == [n for n in ids if Sample(0.02, 0).keeps(n)]  # deterministic
    assert 0.015 < len(kept) / len(ids) < 0.025  # the fraction is respected
    other = [n for n in ids if Sample(0.02, 1).keeps(n)]
    assert other != kept and 0.015 < len(other) / len(ids) < 0.025
    # nested: a larger fraction keeps every item a smaller one keeps (same seed)
    assert set(kept) <= {n for n in ids if Sample(0.1, 0).keeps(n)}
    assert all(Sample(1.0, 3).keeps(n) for n in ids[:100])


@pytest.mark.parametrize(
    "value, sample",
    [("0.02", Sample(0.02, 0)), ("0.02:7", Sample(0.02, 7)), ("1", Sample(1.0, 0)), (" 2e-2:0 ", Sample(0.02, 0))],
)
def test_parse(value, sample):
    assert parse_sample(value) == sample


@pytest.mark.parametrize(
    "value, needle",
    [
        ("0", "'0' has FRACTION 0 outside (0, 1]"),
        ("1.5", "'1.5' has FRACTION 1.5 outside (0, 1]"),
        ("nan", "'nan' has FRACTION nan outside (0, 1]"),
        ("-0.1", "outside (0, 1]"),
        ("half", "'half' has no number as FRACTION"),
        ("0.1:x", "'0.1:x' has no integer as SEED"),
        ("0.1:", "has no integer as SEED"),
        ("0.1:-3", "has a negative SEED"),
    ],
)
def test_bad_values_name_value_and_rule(value, needle):
    with pytest.raises(pytest.UsageError) as e:
        parse_sample(value)
    msg = str(e.value)
    assert msg.startswith("--ckfmha-sample: ") and needle in msg
    assert "FRACTION a number in (0, 1] and SEED an integer >= 0" in msg


def test_foreign_suite_sampled(pytester, monkeypatch):
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    pytester.makepyfile(test_foreign=FOREIGN)
    base = ["-p", "no:cacheprovider", "--collect-only", "-q"]
    a = collected(pytester.runpytest(*base, "--ckfmha-sample", "0.1:5"))
    b = collected(pytester.runpytest(*base, "--ckfmha-sample", "0.1:5"))
    assert a == b and 20 <= len(a) <= 65
    assert a == [
        f"test_foreign.py::test_many[{i}]"
        for i in range(400)
        if Sample(0.1, 5).keeps(f"test_foreign.py::test_many[{i}]")
    ]
    res = pytester.runpytest("-p", "no:cacheprovider", "--ckfmha-sample", "0.1:5")
    res.assert_outcomes(passed=len(a), deselected=400 - len(a))
    # after -k: the sample of the remaining items is the same items' sample
    k = collected(pytester.runpytest(*base, "--ckfmha-sample", "0.1:5", "-k", "test_many and 1"))
    assert k == [n for n in a if "1" in n.split("[")[1]]


def test_bad_value_and_empty_sample_are_usage_errors(pytester, monkeypatch):
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    res = pytester.runpytest("-p", "no:cacheprovider", "--ckfmha-sample", "3")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ckfmha-sample: '3' has FRACTION 3 outside (0, 1]" in res.stderr.str()
    seed = next(s for s in range(100) if not Sample(0.01, s).keeps("test_one.py::test_a"))
    res = pytester.runpytest("-p", "no:cacheprovider", "--ckfmha-sample", f"0.01:{seed}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "keeps none of the 1 collected items" in res.stderr.str()


def test_ckfmha_category_sampled(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    full = collected(pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q"))
    seed = next(s for s in range(100) if 0 < sum(Sample(0.5, s).keeps(n) for n in full) < len(full))
    args = ("--ckfmha-category", "smoke", "--ckfmha-sample", f"0.5:{seed}", "--collect-only", "-q")
    half = collected(pytester.runpytest(*base, *args))
    assert full and half == [n for n in full if Sample(0.5, seed).keeps(n)] and len(half) < len(full)
