"""Collection: counts per category, kernels that can serve a shape (mask respected), the cap, stable ids, marks."""

from __future__ import annotations

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def _ids(res):
    return [ln for ln in res.stdout.lines if ln.startswith("ckfmha::")]


@pytest.mark.parametrize("category, shapes", [("smoke", 2), ("full", 3), ("nightly", 4)])
def test_counts_per_category(pytester, monkeypatch, tmp_path, category, shapes):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(*base, "--ckfmha-category", category, "--collect-only", "-q")
    ids = _ids(res)
    assert sum(i.endswith("::plan") for i in ids) == shapes
    # no-mask shapes: 4 no-mask/no-lse kernels capped to 2; causal: only the mask kernel; lse: only the lse kernel
    kernel_items = {"smoke": 2 + 1, "full": 2 + 1 + 2, "nightly": 2 + 1 + 2 + 1}[category]
    assert len(ids) - shapes == kernel_items


def _kernel_ids(pytester, *args):
    """node id -> the full kernel id of each kernel item (the report's ``kernel_id``; node ids hold its token)."""
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + """

def pytest_collection_finish(session):
    for it in session.items:
        if it.kernel is not None:
            print("KERNEL|" + it.nodeid + "|" + it.kernel.kernel_id)
"""
    )
    res = pytester.runpytest(*args, "--collect-only", "-q", "-s")
    return dict(ln.split("|")[1:] for ln in res.stdout.lines if ln.startswith("KERNEL|"))


def test_kernels_respect_mask_and_features_not_just_hdim(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    ids = _kernel_ids(pytester, *base, "--ckfmha-category", "nightly", "--ckfmha-max-kernels-per-shape", "0")
    causal = [k for i, k in ids.items() if "-causal::" in i]
    assert causal and all("mask=any" in k for k in causal)
    plain = [k for i, k in ids.items() if i.startswith("ckfmha::fwd-fp16-batch-b1h2s16d64::")]
    assert len(plain) == 4 and all("mask=" not in k and not k.endswith(".lse") for k in plain)
    lse = [k for i, k in ids.items() if "-lse::" in i]
    assert len(lse) == 1 and lse[0].endswith(".lse")


def test_cap_is_best_ranked_then_distinct_pipeline_tile(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    full = _ids(
        pytester.runpytest(
            *base, "--ckfmha-category", "smoke", "--collect-only", "-q", "--ckfmha-max-kernels-per-shape", "0"
        )
    )
    capped = _ids(
        pytester.runpytest(
            *base, "--ckfmha-category", "smoke", "--collect-only", "-q", "--ckfmha-max-kernels-per-shape", "2"
        )
    )
    shape = "ckfmha::fwd-fp16-batch-b1h2s16d64::"
    ranked = [i for i in full if i.startswith(shape) and not i.endswith("plan")]
    chosen = [i for i in capped if i.startswith(shape) and not i.endswith("plan")]
    assert chosen[0] == ranked[0] and len(chosen) == 2
    key = lambda i: i.split("::")[2].rsplit("-", 1)[0]  # the kernel token's pipeline and tile  # noqa: E731
    assert key(chosen[1]) != key(chosen[0])


def test_ids_are_stable_and_readable(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    a = _ids(pytester.runpytest(*base, "--ckfmha-category", "nightly", "--collect-only", "-q"))
    b = _ids(pytester.runpytest(*base, "--ckfmha-category", "nightly", "--collect-only", "-q", "-p", "no:randomly"))
    assert a == b and len(set(a)) == len(a)
    assert "ckfmha::fwd-fp16-batch-b1h2s16d64-causal::plan" in a
    assert "ckfmha::fwd-fp16-batch-b2h4s64d64-lse::plan" in a


def test_filter_and_family_options(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    ids = _ids(
        pytester.runpytest(
            *base,
            "--ckfmha-category",
            "smoke",
            "--collect-only",
            "-q",
            "--ckfmha-filter",
            "c.pipeline == 'qr_async' or c.mask != 'none'",
        )
    )
    kernels = [i for i in ids if not i.endswith("::plan")]
    assert len(kernels) == 2 and any("qr_async" in i for i in kernels)
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q", "--ckfmha-family", "bwd")
    assert _ids(res) == []


def test_marks_groups_and_selection(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + """

def pytest_collection_finish(session):
    for it in session.items:
        g = [m.kwargs.get("name") for m in it.iter_markers("xdist_group")]
        print("MARKS|" + it.nodeid + "|" + ",".join(sorted(m.name for m in it.iter_markers() if m.name != "xdist_group")) + "|" + ",".join(g))
"""
    )
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q", "-s")
    marks = [ln.split("|") for ln in res.stdout.lines if ln.startswith("MARKS|")]
    assert len(marks) == 5
    by_id = {m[1]: m for m in marks}
    for nodeid, (_, _, names, groups) in ((k, v) for k, v in by_id.items()):
        assert {"ckfmha", "ckfmha_fwd"} <= set(names.split(","))
        assert ("ckfmha_plan" in names.split(",")) == nodeid.endswith("::plan")
        assert groups.startswith("ck-") and len(groups) == 15
    shape = "ckfmha::fwd-fp16-batch-b1h2s16d64::"
    plan_group = by_id[shape + "plan"][3]
    first_kernel = [k for k in by_id if k.startswith(shape) and not k.endswith("plan")][0]
    assert by_id[first_kernel][3] == plan_group  # the plan joins its best kernel's group
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--collect-only", "-q", "-m", "ckfmha_plan")
    assert all(i.endswith("::plan") for i in _ids(res)) and len(_ids(res)) == 2


@pytest.mark.parametrize("category", ["smoke", "full", "nightly"])
def test_the_packaged_categories_collect_with_unique_ids(pytester, monkeypatch, tmp_path, category):
    """Every packaged shape has its own id (two shapes alike but for their padding once shared one: a collection
    error on the GPU machine), and each category collects on the cpu backend."""
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    res = pytester.runpytest(
        "-p", "no:cacheprovider", "--ckfmha-category", category, "--ckfmha-backend", "cpu", "--collect-only", "-q"
    )
    assert res.ret == pytest.ExitCode.OK, res.stderr.str()[-2000:]
    ids = _ids(res)
    assert ids and len(ids) == len(set(ids))
