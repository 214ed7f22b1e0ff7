"""--ckfmha-sample FRACTION[:SEED] (pytest_ckfmha.sampling): deterministic by node id, the fraction respected,
bad values usage errors naming the value and the rule, an empty sample an error; on a foreign suite and on a
ckfmha category; generation pruning (the same items, the left-out ones never created, how they are counted, when
it is off)."""

from __future__ import annotations

import pytest

from pytest_ckfmha import sampling
from pytest_ckfmha.sampling import Sample, parse_sample
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

FOREIGN = """
import pytest

@pytest.mark.parametrize("i", range(400))
def test_many(i):
    pass
"""


#: generation pruning off (blocks the plugin name ckfmha's pytest_configure registers sampling.py under) / on
NO_PRUNING = ("-p", f"no:{sampling.PLUGIN_NAME}")
PRUNING = ("-p", "pytest_ckfmha.sampling")


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
    base = ["-p", "no:cacheprovider", *NO_PRUNING, "--collect-only", "-q"]
    a = collected(pytester.runpytest(*base, "--ckfmha-sample", "0.1:5"))
    b = collected(pytester.runpytest(*base, "--ckfmha-sample", "0.1:5"))
    assert a == b and 20 <= len(a) <= 65
    assert a == [
        f"test_foreign.py::test_many[{i}]"
        for i in range(400)
        if Sample(0.1, 5).keeps(f"test_foreign.py::test_many[{i}]")
    ]
    res = pytester.runpytest("-p", "no:cacheprovider", *NO_PRUNING, "--ckfmha-sample", "0.1:5")
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


# --- generation pruning ----------------------------------------------------------------------------------------

#: a suite of every kind of parametrization: stacked marks, a class and a nested class, fixture params, a module's
#: own pytest_generate_tests, ids with brackets, an unparametrized test
PRUNED_SUITE = """
import pytest

@pytest.fixture(params=["p", "q"])
def fx(request):
    return request.param

@pytest.mark.parametrize("a", range(30))
@pytest.mark.parametrize("b", ["x", "y[z]", "[w]"])
def test_stacked(a, b):
    pass

@pytest.mark.parametrize("s", ["a]b", "[", "c[d]e", "[[]]"], ids=lambda s: s)
@pytest.mark.parametrize("t", range(10))
def test_brackets(s, t):
    pass

class TestCls:
    @pytest.mark.parametrize("n", range(40))
    def test_method(self, n, fx):
        pass

    class TestInner:
        @pytest.mark.parametrize("n", range(20), ids=[f"i[{i}]" for i in range(20)])
        def test_inner(self, n):
            pass

def pytest_generate_tests(metafunc):
    if "g" in metafunc.fixturenames:
        metafunc.parametrize("g", range(25), ids=[f"g[{i}]" for i in range(25)])

def test_generated(g):
    pass

@pytest.mark.parametrize("one", [1])
def test_single(one):
    pass

def test_plain():
    pass
"""

#: counts the items pytest creates (pytest_itemcollected is called once per created item)
COUNTING_CONFTEST = """
CREATED = []

def pytest_itemcollected(item):
    CREATED.append(item.nodeid)

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"created items: {len(CREATED)}")
"""

PRUNED_TOTAL = 30 * 3 + 4 * 10 + 40 * 2 + 20 + 25 + 1 + 1


def _created(res) -> int:
    return int(next(ln for ln in res.stdout.lines if ln.startswith("created items: ")).split(": ")[1])


def _not_generated(res) -> int:
    lines = [ln for ln in res.stdout.lines if ln.startswith("ckfmha-sample ")]
    if not lines:
        return 0
    assert len(lines) == 1 and "parametrizations not generated" in lines[0]
    return int(lines[0].split(": ")[1].split()[0])


@pytest.fixture
def pruned_suite(pytester, monkeypatch):
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(test_suite=PRUNED_SUITE)
    return pytester


def test_pruning_keeps_exactly_the_same_items(pruned_suite):
    base = ("-p", "no:cacheprovider", "--collect-only", "-q")
    full = collected(pruned_suite.runpytest(*base, *NO_PRUNING))
    assert len(full) == PRUNED_TOTAL
    assert "test_suite.py::TestCls::TestInner::test_inner[i[3]]" in full  # the ids with brackets are real
    assert "test_suite.py::test_brackets[3-a]b]" in full
    for value in ("0.1:0", "0.1:3", "0.3:1", "0.02:0", "1"):
        sample = parse_sample(value)
        expected = [n for n in full if sample.keeps(n)]
        if not expected:
            continue
        off = pruned_suite.runpytest(*base, *NO_PRUNING, "--ckfmha-sample", value)
        on = pruned_suite.runpytest(*base, *PRUNING, "--ckfmha-sample", value)
        assert collected(off) == expected, value
        assert collected(on) == expected, value  # the same items, in the same order
        assert _created(off) == PRUNED_TOTAL and _not_generated(off) == 0
        # every item is created or not generated, never both
        assert _created(on) + _not_generated(on) == PRUNED_TOTAL, value


def test_pruning_happens(pruned_suite):
    """Fails when the pruning does not run: the items left out are never created."""
    value = "0.1:0"
    res = pruned_suite.runpytest("-p", "no:cacheprovider", *PRUNING, "--collect-only", "-q", "--ckfmha-sample", value)
    kept = collected(res)
    functions = 7  # a function none of whose parametrizations is kept still creates its first one
    assert 0 < len(kept) <= _created(res) <= len(kept) + functions
    assert _created(res) < PRUNED_TOTAL / 3
    assert _not_generated(res) == PRUNED_TOTAL - _created(res)
    assert (
        f"ckfmha-sample {parse_sample(value)}: {_not_generated(res)} parametrizations not generated" in res.stdout.str()
    )


def test_pruned_run_counts(pruned_suite):
    """A run: selected + deselected + not generated = the collection without pruning; the outcomes the same."""
    off = pruned_suite.runpytest("-p", "no:cacheprovider", *NO_PRUNING, "--ckfmha-sample", "0.2:4")
    on = pruned_suite.runpytest("-p", "no:cacheprovider", *PRUNING, "--ckfmha-sample", "0.2:4")
    o_off, o_on = off.parseoutcomes(), on.parseoutcomes()
    assert o_on["passed"] == o_off["passed"] > 0 and o_off["deselected"] == PRUNED_TOTAL - o_off["passed"]
    assert o_on["passed"] + o_on.get("deselected", 0) + _not_generated(on) == PRUNED_TOTAL
    assert _not_generated(on) > 0


@pytest.mark.parametrize("select", [("-k", "stacked or Inner"), ("-k", "not brackets and not 3"), ("-m", "not slow")])
def test_pruning_commutes_with_k_and_m(pruned_suite, select):
    base = ("-p", "no:cacheprovider", "--collect-only", "-q", "--ckfmha-sample", "0.3:2", *select)
    off = collected(pruned_suite.runpytest(*base, *NO_PRUNING))
    on = collected(pruned_suite.runpytest(*base, *PRUNING))
    assert off and on == off


def test_named_parametrizations_turn_pruning_off(pruned_suite):
    """An argument naming a parametrization finds its item (pruning would leave it uncreated: 'not found')."""
    ids = [f"test_suite.py::TestCls::TestInner::test_inner[i[{i}]]" for i in range(20)]
    sample = Sample(0.3, 0)
    inside = next(n for n in ids if sample.keeps(n))
    outside = next(n for n in ids if not sample.keeps(n))
    args = ("-p", "no:cacheprovider", "--collect-only", "-q", "--ckfmha-sample", "0.3:0", inside, outside)
    on = pruned_suite.runpytest(*PRUNING, *args)
    assert on.ret == pytest.ExitCode.OK and collected(on) == [inside] == collected(
        pruned_suite.runpytest(*NO_PRUNING, *args)
    )
    assert _not_generated(on) == 0


def test_pruned_empty_sample(pruned_suite):
    """The empty-sample usage error also when no item is left to reach the sample; -k narrowing everything is not."""
    pruned_suite.makepyfile(
        test_suite="import pytest\n\n@pytest.mark.parametrize('i', range(3))\ndef test_p(i):\n    pass\n"
    )
    ids = [f"test_suite.py::test_p[{i}]" for i in range(3)]
    seed = next(s for s in range(1000) if not any(Sample(0.05, s).keeps(n) for n in ids))
    for plugin in (NO_PRUNING, PRUNING):
        res = pruned_suite.runpytest("-p", "no:cacheprovider", *plugin, "--ckfmha-sample", f"0.05:{seed}")
        assert res.ret == pytest.ExitCode.USAGE_ERROR
        assert "keeps none of the 3 collected items" in res.stderr.str()
    res = pruned_suite.runpytest("-p", "no:cacheprovider", *PRUNING, "--ckfmha-sample", f"0.05:{seed}", "-k", "nothing")
    assert res.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_pruning_falls_back_without_pytest_internals():
    """Metafunc without ``_calls`` (another pytest): nothing pruned; modifyitems samples as before."""
    from types import SimpleNamespace

    meta = SimpleNamespace(definition=SimpleNamespace(nodeid="t.py::test_a"))
    assert sampling.prune_calls(meta, Sample(0.01, 0)) == 0
    meta._calls = [SimpleNamespace(params={})]  # callspecs of another shape
    assert sampling.prune_calls(meta, Sample(0.01, 0)) == 0 and len(meta._calls) == 1
    calls = [SimpleNamespace(id=str(i), _idlist=[str(i)]) for i in range(200)]
    meta._calls = list(calls)
    dropped = sampling.prune_calls(meta, Sample(0.1, 0))
    assert meta._calls == [c for c in calls if Sample(0.1, 0).keeps(f"t.py::test_a[{c.id}]")]
    assert dropped == 200 - len(meta._calls) > 0


def test_register_pruning(pytester, monkeypatch):
    """register_pruning (ckfmha's pytest_configure calls it): registers sampling.py as ``ckfmha-sample``, once; not
    when ``-p no:ckfmha-sample`` blocks it or ``-p pytest_ckfmha.sampling`` registered it already."""
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    for args, named in (((), True), (NO_PRUNING, False), (PRUNING, False)):
        config = pytester.parseconfigure("-p", "no:cacheprovider", *args, "--ckfmha-sample", "0.1")
        sampling.register_pruning(config)
        sampling.register_pruning(config)
        assert (config.pluginmanager.get_plugin(sampling.PLUGIN_NAME) is sampling) == named, args
        assert config.pluginmanager.is_registered(sampling) == (args != NO_PRUNING), args
