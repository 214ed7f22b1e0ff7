"""The nightly item that exposes a CK finding (docs/ck_findings.md): a shape that triggers the ALiBi 16-bit finding
gets, beside its plan (split-KV), a kernel item pinning the best-ranked affected fwd kernel; on the hip backend it
is xfail naming the finding; on the cpu backend it is skipped, naming the finding (docs/ck_findings.md)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

MATRIX = """\
schema: 1
family: fwd
entries:
  - name: ck_finding_alibi_sad_u16
    category: nightly
    batch: 1
    nhead_q: 2
    seqlen_q: 2
    seqlen_k: 70000
    hdim_q: 32
    bias: alibi
    lse: true
"""

CONFTEST = """\
def pytest_collection_finish(session):
    for it in session.items:
        kernel = getattr(it, "kernel", None)
        xfail = [m for m in it.iter_markers("xfail")]
        print("ITEM|" + it.nodeid + "|" + (kernel.kernel_id if kernel else "plan") + "|"
              + "|".join(f"{m.kwargs['reason']}#strict={m.kwargs['strict']}" for m in xfail))
"""


def _project(pytester, monkeypatch, tmp_path) -> list[str]:
    pytester.makefile(".yaml", finding=MATRIX)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    return ["-p", "no:cacheprovider", "--ckfmha-matrix", "finding.yaml", "--ckfmha-category", "nightly"]


def _items(res) -> list[list[str]]:
    return [ln.split("|")[1:] for ln in res.stdout.lines if ln.startswith("ITEM|")]


@pytest.mark.parametrize("backend", ["hip", "auto", "cpu"])
def test_the_finding_item_is_collected_xfail_on_hip_and_auto_only(pytester, monkeypatch, tmp_path, backend) -> None:
    base = _project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-arch", "gfx942", "--ckfmha-backend", backend, "--collect-only", "-q", "-s"
    )
    items = _items(res)
    assert items, res.stdout.str()
    kernels = [i for i in items if i[1] != "plan"]
    assert [i[1].split(".")[0] for i in kernels] == ["fwd"], items  # one affected fwd kernel, no other (all refused)
    assert [i for i in items if i[1] == "plan"]  # the plan item (split-KV) too
    marks = kernels[0][2:]
    if backend in ("hip", "auto"):
        assert len(marks) == 1 and marks[0].startswith("CK finding alibi_sad_u16: ALiBi positions wrap at 2^16")
        assert marks[0].endswith("#strict=True")
    else:
        assert marks == [""]
    assert all(i[2:] == [""] for i in items if i[1] == "plan")  # the plan is exact: never xfail


def test_on_cpu_the_finding_item_is_skipped_naming_the_finding(pytester, monkeypatch, tmp_path) -> None:
    """The cpu backend refuses an affected kernel at launch (rule 9b, its launch check) and would compute exact
    positions anyway (its bias.py models CK's Alibi but not the 16-bit SAD): the item skips, naming the finding;
    the plan (split-KV, 32-bit positions) passes."""
    base = _project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(*base, "--ckfmha-arch", "gfx942", "--ckfmha-backend", "cpu", "-q", "-rs")
    res.assert_outcomes(passed=1, skipped=1)
    res.stdout.fnmatch_lines(["*ck_finding alibi_sad_u16: *exposes the finding on the hip backend only*"])
