"""Item ids that round-trip (issue 28, finding 1): short and dot-free, one string in every place pytest prints
it, pasteable back as an argument (where a ``ckfmha`` directory exists, elsewhere, from a subdirectory),
``-k`` words, locations at the matrix entry, and resume refusing a report of the old id format."""

from __future__ import annotations

import json
import re

import pytest

from pytest_ckfmha.ids import NodeId
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

SHAPE = "ckfmha::fwd-fp16-batch-b1h2s16d64"


def _ids(res):
    return [ln for ln in res.stdout.lines if ln.startswith("ckfmha::")]


def _collect(pytester, base, *more):
    return _ids(pytester.runpytest(*base, "--ckfmha-category", "nightly", "--collect-only", "-q", *more))


def test_ids_are_short_dot_free_and_name_the_kernel_compactly(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    ids = _collect(pytester, base, "--ckfmha-max-kernels-per-shape", "0")
    kernels = [i for i in ids if not i.endswith("::plan")]
    assert kernels and max(len(i) for i in ids) < 90
    assert not any("." in i or "=" in i for i in ids)
    # {pipeline}-b{bm0}x{bn0}x{bk0}-{8 hex}: the hash tells apart kernels of one pipeline and tile
    assert all(re.fullmatch(r"[a-z_]+-b\d+x\d+x\d+-[0-9a-f]{8}", i.split("::")[2]) for i in kernels)
    assert ids == _collect(pytester, base, "--ckfmha-max-kernels-per-shape", "0")  # stable


def test_the_same_string_in_verbose_failed_and_collect_only(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    collected = set(_ids(pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q")))
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "-v", "-rfs")
    verbose = {ln.split(" ")[0] for ln in res.stdout.lines if ln.startswith("ckfmha::") and " FAILED" in ln}
    failed = {ln.split(" ")[1] for ln in res.stdout.lines if ln.startswith("FAILED ckfmha::")}
    assert verbose and verbose == failed and verbose <= collected
    # the failure text names the full kernel id and the matrix entry
    out = res.stdout.str()
    assert "kernel fwd.fp16.batch.d64x64.qr." in out and "entry 'plain' (combination 0)" in out


def test_a_printed_node_id_runs_again_from_a_root_with_a_ckfmha_directory(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.mkdir("ckfmha")  # the repository root: pytest alone says "directory argument cannot contain ::"
    ids = _collect(pytester, base)
    kernel = next(i for i in ids if i.startswith(SHAPE + "::") and not i.endswith("::plan"))
    res = pytester.runpytest(*base, "--ckfmha-category", "nightly", "-v", kernel, SHAPE + "-causal")
    res.assert_outcomes(passed=3)
    ran = [ln.split(" ")[0] for ln in res.stdout.lines if " PASSED" in ln]
    assert ran[0] == kernel and all(r.startswith(SHAPE + "-causal::") for r in ran[1:])


def test_a_printed_node_id_runs_again_from_a_subdirectory(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeini("[pytest]\n")
    ids = _collect(pytester, base)
    plan = SHAPE + "::plan"
    assert plan in ids
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    args = ["-p", "no:cacheprovider", "--ckfmha-matrix", "../small.yaml", "--ckfmha-category", "nightly"]
    res = pytester.runpytest(*args, "-v", "../" + plan)  # pytest prints ../ckfmha::... from a subdirectory
    res.assert_outcomes(passed=1)
    assert any(ln.startswith("../" + plan + " PASSED") for ln in res.stdout.lines)


def test_a_node_id_that_names_nothing_or_needs_a_ckfmha_run_is_a_usage_error(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", SHAPE + "::no-such-kernel")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"*node id '{SHAPE}::no-such-kernel' names no item of this run*"])
    res = pytester.runpytest("-p", "no:cacheprovider", SHAPE + "::plan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*no ckfmha items are collected*--ckfmha-category*"])


def test_k_selects_by_words(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    causal = _collect(pytester, base, "-k", "fwd and fp16 and causal")
    assert causal and all("-causal::" in i for i in causal)
    assert _collect(pytester, base, "-k", "plain and plan") == [SHAPE + "::plan", SHAPE + "-causal::plan"]
    qr = _collect(pytester, base, "-k", "qr and kernel and not causal")
    assert qr and all(i.split("::")[2].startswith("qr-") for i in qr)


def test_skips_point_at_the_matrix_entry(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="unavailable")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "-rs")
    # small.yaml line 4 holds "- name: plain" (not pytest_ckfmha/isolation.py)
    res.stdout.fnmatch_lines(["SKIPPED [[]*] small.yaml:4: fwd-fp16-batch-b1h2s16d64*"])
    assert "isolation.py" not in res.stdout.str()


def test_resume_refuses_a_report_of_the_old_id_format(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(passed=4, skipped=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    for row in doc["rows"]:
        node = NodeId.parse(row["nodeid"])
        if node.kind == "kernel":  # as the first id format wrote it: the full kernel id
            row["nodeid"] = f"ckfmha::{node.scope}::{row['kernel_id']}"
            row["id"] = f"{node.scope}::{row['kernel_id']}"
    (pytester.path / "old.json").write_text(json.dumps(doc))
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-resume", "old.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--ckfmha-resume*old id format*cannot be resumed*"])


def test_node_id_arguments_are_read_as_pytest_prints_them():
    plan = NodeId.plan("fwd-fp16-batch-b1h2s16d64")
    assert NodeId.parse_argument("../../" + str(plan)) == plan
    assert NodeId.parse_argument(str(plan) + "@ck-0123") == plan
    shape = NodeId.parse_argument("ckfmha::fwd-fp16-batch-b1h2s16d64")
    assert shape is not None and shape.covers(plan) and not plan.covers(shape)
    assert NodeId.parse_argument("tests/test_x.py::test_y") is None
    assert NodeId.parse_argument("ckfmha") is None


def test_problems_differing_only_in_physical_or_effective_lengths_get_different_ids():
    """The smoke category once had two group shapes alike but for s_qpad: their ids were one (a collection error)."""
    from ckfmha.problem import Problem
    from pytest_ckfmha.ids import shape_id

    group = dict(mode="group", batch=2, nhead_q=2, hdim_q=64, seqlens_q=(9, 16), seqlens_k=(20, 30), lse=True)
    ids = {
        shape_id(Problem(**group, s_kpad=(24, 30))),
        shape_id(Problem(**group, s_qpad=(12, 16), s_kpad=(24, 30))),
        shape_id(Problem(**group)),
    }
    assert len(ids) == 3 and any(i.endswith("-lse-qpad12_16-kpad24_30") for i in ids), ids
    batch = dict(batch=2, nhead_q=2, seqlen_q=40, seqlen_k=30, hdim_q=64)
    eff = {
        shape_id(Problem(**batch)),
        shape_id(Problem(**batch, q_eff_lens=(40, 7))),
        shape_id(Problem(**batch, kv_eff_lens=(30, 7))),
    }
    assert len(eff) == 3 and any(i.endswith("-qeff40_7") for i in eff) and any(i.endswith("-kveff30_7") for i in eff)
