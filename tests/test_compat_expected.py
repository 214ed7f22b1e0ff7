"""A foreign suite's expected differences (ckfmha/compat/expected.py, the --ckfmha-flash-attn-compat plugin's
marking): the packaged list follows its schema, a bad list is an error naming the field, and the tests an entry
names are marked xfail with its reason -- strict, so a test that starts passing fails the run."""

from __future__ import annotations

import pytest

from ckfmha.compat.expected import ExpectedDifference, expected_for, load_expected
from ckfmha.datafile import DataFileError

pytest_plugins = ["pytester"]

ENTRY = """
  - name: {name}
    tests: ["{pattern}"]
    whose: {whose}
    reason: the reference drops what the kernel keeps
    sources: ["csrc/flash_attn_ck/mha_fwd.cpp:120 the seed offset"]
"""


def _write(tmp_path, *entries: str) -> str:
    p = tmp_path / "expected.yaml"
    p.write_text("schema: 1\nsuite: flash-attention\nexpected:" + ("".join(entries) or " []") + "\n")
    return str(p)


def test_the_packaged_list_follows_its_schema() -> None:
    entries = load_expected()
    assert all(isinstance(e, ExpectedDifference) and e.sources for e in entries)


def test_an_entry_names_tests_by_pattern(tmp_path) -> None:
    path = _write(tmp_path, ENTRY.format(name="dropout_2048", pattern="*test_out[[]*-2048-*", whose="fa_reference"))
    (e,) = load_expected(path)
    assert expected_for("t.py::test_out[0.17-2048-128]", [e]) is e
    assert expected_for("t.py::test_out[0.17-1024-128]", [e]) is None
    assert e.strict and e.marker_reason().startswith("expected difference dropout_2048 (fa_reference): ")


@pytest.mark.parametrize(
    "entries, words",
    [
        ((ENTRY.format(name="a", pattern="*", whose="nobody"),), ["whose", "nobody"]),
        ((ENTRY.format(name="Bad Name", pattern="*", whose="ck_kernel"),), ["name", "Bad Name"]),
        ((ENTRY.format(name="a", pattern="*", whose="ck_kernel"),) * 2, ["name 'a' appears more than once"]),
    ],
)
def test_a_bad_list_is_an_error_naming_the_field(tmp_path, entries, words) -> None:
    with pytest.raises(DataFileError) as e:
        load_expected(_write(tmp_path, *entries))
    assert all(w in str(e.value) for w in words), str(e.value)


def test_named_tests_are_marked_xfail_strictly(pytester, tmp_path) -> None:
    path = _write(
        tmp_path,
        ENTRY.format(name="known_fail", pattern="*::test_fails", whose="ck_kernel"),
        ENTRY.format(name="now_fixed", pattern="*::test_passes_now", whose="fa_cpp_layer"),
    )
    pytester.makeconftest(
        f"""
        from ckfmha.compat.expected import load_expected
        from pytest_ckfmha.flash_attn_compat import FlashAttnCompat

        def pytest_configure(config):
            config.pluginmanager.register(FlashAttnCompat([], {{}}, None, load_expected({path!r})), "fa-compat")
        """
    )
    pytester.makepyfile(
        test_suite="""
        def test_fails():
            assert 1 == 2

        def test_passes_now():
            pass

        def test_other():
            pass
        """
    )
    res = pytester.runpytest("-p", "no:cacheprovider", "-rxX")
    res.assert_outcomes(passed=1, xfailed=1, failed=1)  # the strict xfail that passes fails the run
    res.stdout.fnmatch_lines(["*known_fail 1, now_fixed 1*"])  # the terminal summary's counts
    res.stdout.fnmatch_lines(["XFAIL *test_fails - expected difference known_fail (ck_kernel): *"])
