"""No green run that tested nothing: empty selections are usage errors, a run whose every item is skipped fails,
malformed matrix files are usage errors naming file / entry / key; --ckfmha-allow-empty opts out."""

from __future__ import annotations

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def test_filter_matching_no_kernel_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-filter", "c.hdim_q == 96")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "*ckfmha: the kernel selection matches no kernel (category smoke, arch gfx942, "
            "backend auto, receipt 0, mask mode simplified, filter 'c.hdim_q == 96'*"
            "--ckfmha-allow-empty*"
        ]
    )
    assert "collected" not in res.stdout.str()  # nothing was collected or run


def test_no_kernel_serves_any_shape_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    # only the lse kernel survives: it serves none of the smoke shapes (they have no lse)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-filter", "c.lse == True")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*ckfmha: no kernel of the selection serves any of its 2 shapes*"])


def test_every_item_skipped_fails_the_run_and_allow_empty_accepts_it(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="unavailable")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(skipped=5)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(
        [
            "*ckfmha: ERROR: every one of the 5 ckfmha items was skipped, so this run tested "
            "nothing (category smoke, arch gfx942, backend auto*): 5 x backend testref is not "
            "available: no GPU in this test; pass --ckfmha-allow-empty*"
        ]
    )
    import json

    assert json.loads((pytester.path / "r.json").read_text())["exit_status"] == 4
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-allow-empty")
    assert res.ret == 0
    res.assert_outcomes(skipped=5)


def test_a_failing_run_keeps_its_own_exit_status(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    assert res.ret == pytest.ExitCode.TESTS_FAILED and "ckfmha: ERROR" not in res.stdout.str()


def test_skip_reasons_name_the_shape(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "-rs")
    res.stdout.fnmatch_lines(
        [
            "SKIPPED * fwd-fp16-batch-b1h2s16d64: backend testref cannot realize this kernel: "
            "pipeline qs is not realized by the test backend"
        ]
    )


def test_a_problem_the_backend_declines_skips_every_item_of_it_with_the_backends_words(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    monkeypatch.setenv("CKT_DECLINE_MASKED", "1")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "-rs")
    out = res.stdout.str()
    declined = [ln for ln in out.splitlines() if "cannot run this problem with any kernel" in ln]
    assert declined and all("fwd-fp16-batch-b1h2s16d64-causal:" in ln for ln in declined), out
    assert all("mask: t: the test backend runs no masked problem (rule: unmasked only)" in ln for ln in declined)
    res.assert_outcomes(passed=2, skipped=3)  # the causal shape's 2 items declined; the unmasked shape's run


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "schema: 1\nfamily: fwd\nentries:\n  - nme: x\n    category: smoke\n",
            "small.yaml: entries[0]: unknown key 'nme' (did you mean 'name'?)",
        ),
        (
            "schema: 1\nfamily: fwd\nentries:\n  - {name: a, category: smoke, batch: 1, batch: 2}\n",
            "duplicate key 'batch'",
        ),
        ("schema: true\nfamily: fwd\nentries:\n  - {name: a, category: smoke}\n", "small.yaml: schema"),
        (
            "schema: 1\nfamily: fwd\nentries:\n  - {name: a, category: smoke, seqlen_q: 2147483648}\n",
            "exceeds INT32_MAX",
        ),
    ],
)
def test_malformed_matrix_files_are_usage_errors(pytester, monkeypatch, tmp_path, text, words):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makefile(".yaml", small=text)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    assert "ckfmha: malformed matrix file:" in res.stderr.str() and words in res.stderr.str()
    assert "Traceback" not in res.stdout.str() + res.stderr.str()


def test_a_non_utf8_matrix_file_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    (pytester.path / "small.yaml").write_bytes(b"schema: 1\nfamily: fwd\n# \xff\xfe\nentries: []\n")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "small.yaml" in res.stderr.str() and "UTF-8" in res.stderr.str()


def test_under_xdist_the_check_runs_after_the_workers_started_and_stops_them(pytester, monkeypatch, tmp_path):
    """An xdist controller checks the selection while its workers start (plugin.pytest_sessionstart); a failed check
    is the same usage error, and the workers it started are stopped: the run ends, nothing is collected or run."""
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path)
    args = (*base, "-p", "xdist", "-n", "2", "--ckfmha-category", "smoke")
    res = pytester.runpytest_subprocess(*args, "--ckfmha-filter", "c.hdim_q == 96", timeout=120)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(["created: 2/2 workers"])  # the workers had been started when the check failed
    res.stderr.fnmatch_lines(["*ckfmha: the kernel selection matches no kernel (category smoke, arch gfx942*"])
    assert "collected" not in res.stdout.str() and "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    res = pytester.runpytest_subprocess(*args, timeout=120)  # the same run with a selection: it checks and runs
    assert res.ret == 0 and res.parseoutcomes().get("passed", 0) > 0
