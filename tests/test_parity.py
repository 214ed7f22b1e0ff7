"""Parity semantics with fake sides (agree / disagree / skip / error; never a pass without a comparison), the
report formats, the default parity set, and the ckfmha side on the CPU backend."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from ckfmha.parity import (
    ParityReport,
    ParitySide,
    Status,
    compare_one,
    compare_results,
    default_parity_set,
    make_pair,
    make_side,
    run_parity,
    sides_that_never_ran,
)
from ckfmha.problem import Problem
from ckfmha.upstream.result import SideResult, Verdict

P = Problem(batch=1, nhead_q=2, seqlen_q=16, hdim_q=32)
O = np.linspace(-1, 1, 1 * 2 * 16 * 32, dtype=np.float32).reshape(1, 2, 16, 32).astype(np.float16)


class FakeSide:
    """A scripted parity side."""

    def __init__(self, name, verdict, reason="", outputs=None):
        self.name, self.verdict, self.reason, self.outputs = name, verdict, reason, outputs
        self.calls = []

    def run(self, problem, seed=0):
        self.calls.append((problem, seed))
        return SideResult(self.name, self.verdict, self.reason, self.outputs)


def res(name, v, reason="", outputs=None):
    return SideResult(name, v, reason, outputs)


def test_protocol():
    assert isinstance(FakeSide("a", Verdict.RAN_VALID), ParitySide)


def test_verdicts_agree_without_outputs_compare_verdicts():
    st, comp, detail, _ = compare_results(P, res("ck", Verdict.RAN_VALID, "valid:y"), res("us", Verdict.RAN_VALID))
    assert st is Status.AGREE and comp == "verdicts" and "valid:y" in detail
    st, comp, detail, _ = compare_results(
        P, res("ck", Verdict.UNSUPPORTED, "not supported yet"), res("us", Verdict.UNSUPPORTED, "no kernel")
    )
    assert st is Status.AGREE and comp == "verdicts" and "not supported yet" in detail and "no kernel" in detail


def test_disagreements_carry_both_sides_words():
    st, comp, detail, _ = compare_results(
        P, res("ck", Verdict.UNSUPPORTED, "not supported yet"), res("us", Verdict.RAN_VALID, "o: PASS")
    )
    assert (
        st is Status.DISAGREE and "ck: unsupported: not supported yet" in detail and "us: ran_valid: o: PASS" in detail
    )
    st, *_ = compare_results(P, res("a", Verdict.RAN_VALID), res("b", Verdict.RAN_INVALID, "o: FAIL"))
    assert st is Status.DISAGREE


def test_outputs_are_compared_when_both_have_them():
    a = res("a", Verdict.RAN_VALID, outputs={"o": O})
    b = res("b", Verdict.RAN_VALID, outputs={"o": O.copy()})
    st, comp, _, checks = compare_results(P, a, b)
    assert st is Status.AGREE and comp == "verdicts+outputs" and checks["o"]["passed"]
    bad = O.copy()
    bad[0, 1, 3, 4] += np.float16(0.5)
    st, comp, detail, checks = compare_results(P, a, res("b", Verdict.RAN_VALID, outputs={"o": bad}))
    assert st is Status.DISAGREE and comp == "verdicts+outputs" and not checks["o"]["passed"]
    assert "outputs differ" in detail and "(0, 1, 3, 4)" in detail


def test_both_invalid_agree_but_are_flagged():
    st, _, detail, _ = compare_results(P, res("a", Verdict.RAN_INVALID), res("b", Verdict.RAN_INVALID))
    assert st is Status.AGREE and "both invalid" in detail


def test_skip_and_error_are_never_passes():
    for v in (Verdict.SKIPPED, Verdict.ERROR):
        for left, right in (
            (res("a", v, "why"), res("b", Verdict.RAN_VALID)),
            (res("a", Verdict.RAN_VALID), res("b", v, "why")),
            (res("a", v, "x"), res("b", v, "y")),
        ):
            st, comp, detail, _ = compare_results(P, left, right)
            assert st is (Status.SKIPPED if v is Verdict.SKIPPED else Status.ERROR)
            assert comp == "" and "why" in detail or "x" in detail
    row = compare_one(P, FakeSide("a", Verdict.SKIPPED, "binary missing"), FakeSide("b", Verdict.RAN_VALID))
    assert not row.passed and row.pytest_outcome() == ("skipped", "a skipped: binary missing")
    row = compare_one(P, FakeSide("a", Verdict.ERROR, "boom"), FakeSide("b", Verdict.ERROR, "bang"))
    assert row.pytest_outcome()[0] == "failed"


def test_run_parity_report_formats(tmp_path):
    left = FakeSide("left", Verdict.RAN_VALID, outputs={"o": O})
    right = FakeSide("right", Verdict.UNSUPPORTED, "no kernel")
    rep = run_parity([("one", P), P.replace(seqlen_q=8)], left, right, seed=5)
    assert isinstance(rep, ParityReport) and left.calls[0][1] == 5
    assert rep.counts() == {"agree": 0, "disagree": 2, "skipped": 0, "error": 0, "total": 2}
    assert not rep.ok and len(rep.disagreements) == 2
    doc = json.loads(rep.to_json(tmp_path / "r.json"))
    assert doc["rows"][0]["name"] == "one" and doc["rows"][0]["left"]["verdict"] == "ran_valid"
    assert doc["rows"][0]["right"]["reason"] == "no kernel" and doc["rows"][0]["left"]["outputs"] == ["o"]
    rows = list(csv.DictReader(io.StringIO(rep.to_csv(tmp_path / "r.csv"))))
    assert rows[1]["status"] == "disagree" and rows[1]["right_words"] == "no kernel"
    assert "DISAGREE one" in rep.table()
    ok = run_parity([P], FakeSide("a", Verdict.UNSUPPORTED), FakeSide("b", Verdict.UNSUPPORTED))
    assert ok.ok and ok.rows[0].passed


def test_kernel_names_are_compared_as_info():
    a = FakeSide("a", Verdict.RAN_VALID)
    b = FakeSide("b", Verdict.RAN_VALID)
    row = compare_one(P, a, b)
    assert "kernels_match" not in row.info
    a.run = lambda p, s=0: SideResult("a", Verdict.RAN_VALID, fields={"kernels": ["fmha_fwd_d64_x"]})
    b.run = lambda p, s=0: SideResult("b", Verdict.RAN_VALID, fields={"kernels": ["fmha_fwd_d64_x_gfx9.cpp"]})
    assert compare_one(P, a, b).info["kernels_match"] is True


def test_make_side():
    assert make_side("tile_example").name == "tile_example"
    assert make_side("ckfmha").name == "ckfmha:cpu"
    assert make_side("torch:flash").name == "torch:flash" and make_side("torch").name == "torch:math"
    up, ours = make_pair("torch:flex")
    assert (up.name, ours.name) == ("torch:flex", "ckfmha:cpu")
    with pytest.raises(ValueError, match="allowed"):
        make_side("cuDNN")


def test_default_parity_set_is_upstreams_14():
    cases = dict(default_parity_set())
    assert len(cases) == 14
    assert cases["basic_fp16"] == Problem(batch=2, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128)
    assert cases["gqa_4_1"].nhead_q == 8 and cases["gqa_4_1"].nhead_k == 2
    assert cases["causal_bottom_right"].mask.to_ck() == "b" and cases["bias_alibi"].bias.value == "alibi"
    assert cases["with_lse"].lse and cases["asymmetric_seq"].seqlen_k == 256
    assert cases["single_query"].seqlen_q == 1 and cases["basic_bf16"].dtype.value == "bf16"


def test_ckfmha_side_against_missing_tile_example_is_skipped(tmp_path, monkeypatch):
    monkeypatch.delenv("CK_TILE_EXAMPLE_DIR", raising=False)
    rep = run_parity(default_parity_set()[:1], "tile_example", "ckfmha:cpu", bin_dir=tmp_path)
    row = rep.rows[0]
    assert row.status is Status.SKIPPED and not row.passed and "not found" in row.detail
    assert row.right.verdict is Verdict.RAN_VALID  # ckfmha still ran and was validated


def test_ckfmha_side_cpu():
    side = make_side("ckfmha:cpu")
    r = side.run(Problem(batch=1, nhead_q=2, nhead_k=1, seqlen_q=40, seqlen_k=72, hdim_q=64, mask="b", lse=True))
    assert r.verdict is Verdict.RAN_VALID, r.reason
    assert set(r.outputs) == {"o", "lse"} and r.fields["kernels"]
    r = side.run(Problem(dtype="fp32", batch=1, nhead_q=1, seqlen_q=16, hdim_q=256, logits_soft_cap=3.0))
    assert r.verdict is Verdict.UNSUPPORTED and "no kernel" in r.reason


# ------------------------------------------------------------------------------------------ unparseable
def test_unparseable_counts_as_an_error_everywhere():
    bad = res("tile_example", Verdict.UNPARSEABLE, "not a tile_example_fmha_fwd result line: no kernel name")
    for left, right in ((bad, res("us", Verdict.RAN_VALID)), (res("us", Verdict.UNSUPPORTED), bad)):
        st, comp, detail, _ = compare_results(P, left, right)
        assert st is Status.ERROR and comp == ""
        assert detail.startswith("tile_example unparseable: not a tile_example_fmha_fwd result line: no kernel name")
    row = compare_one(P, FakeSide("tile_example", Verdict.UNPARSEABLE, "no echo"), FakeSide("us", Verdict.RAN_VALID))
    assert not row.passed and row.pytest_outcome() == ("failed", row.detail) and "unparseable: no echo" in row.detail
    rep = run_parity([P], FakeSide("a", Verdict.UNPARSEABLE, "x"), FakeSide("b", Verdict.UNPARSEABLE, "y"))
    assert not rep.ok and rep.counts()["error"] == 1 and rep.disagreements == rep.rows


# ------------------------------------------------------------------------------------------ "the side ran"
def test_verdict_groups():
    assert {v for v in Verdict if v.ran} == {Verdict.RAN_VALID, Verdict.RAN_INVALID}
    assert {v for v in Verdict if v.answered} == {Verdict.RAN_VALID, Verdict.RAN_INVALID, Verdict.UNSUPPORTED}
    assert {v for v in Verdict if v.is_error} == {Verdict.ERROR, Verdict.UNPARSEABLE}
    assert Verdict.parse("unparseable", "upstream_verdict").answered is False  # report rows hold the token
    with pytest.raises(ValueError, match="upstream_verdict: unknown value 'ok'"):
        Verdict.parse("ok", "upstream_verdict")


def test_sides_that_never_ran():
    ck_missing = FakeSide("tile_example", Verdict.SKIPPED, "tile_example_fmha_fwd: not found")
    ours = FakeSide("ckfmha:cpu", Verdict.RAN_VALID)
    rep = run_parity([P, P.replace(seqlen_q=8)], ck_missing, ours)
    assert rep.sides_that_never_ran() == ["tile_example"] and sides_that_never_ran(rep.rows) == ["tile_example"]
    # one answer is enough: an unsupported problem is an answer, errors and unparseable output are not
    rows = [
        compare_one(P, FakeSide("up", v), FakeSide("us", Verdict.ERROR, "boom"))
        for v in (Verdict.ERROR, Verdict.UNPARSEABLE, Verdict.UNSUPPORTED)
    ]
    assert sides_that_never_ran(rows) == ["us"]
    assert sides_that_never_ran(rows[:2]) == ["up", "us"]
    assert sides_that_never_ran([]) == []


# ------------------------------------------------------------------------------------------ ckfmha:auto
def test_ckfmha_auto_resolves_lazily_like_a_normal_run(monkeypatch):
    import ckfmha.backends

    calls = []
    monkeypatch.setattr(ckfmha.backends, "auto_backend_name", lambda: calls.append(1) or "cpu")
    up, ours = make_pair("tile_example", "ckfmha:auto")
    assert calls == [] and ours.requested_backend == "auto"  # nothing resolved by constructing
    r = ours.run(Problem(batch=1, nhead_q=1, seqlen_q=16, hdim_q=64))
    assert calls == [1] and r.verdict is Verdict.RAN_VALID, r.reason
    assert r.side == "ckfmha:cpu" and ours.name == "ckfmha:cpu" and ours.backend == "cpu"
    assert r.fields["backend"] == "cpu" and r.fields["requested_backend"] == "auto"
    ours.run(P)
    assert calls == [1]  # resolved once


def test_ckfmha_auto_report_names_the_resolved_backend(monkeypatch, tmp_path):
    import ckfmha.backends

    monkeypatch.setattr(ckfmha.backends, "auto_backend_name", lambda: "cpu")
    monkeypatch.delenv("CK_TILE_EXAMPLE_DIR", raising=False)
    rep = run_parity(default_parity_set()[:1], "tile_example", "ckfmha:auto", bin_dir=tmp_path)
    assert rep.right == "ckfmha:cpu" and rep.rows[0].right.side == "ckfmha:cpu"
    assert rep.rows[0].right.verdict is Verdict.RAN_VALID  # not "unknown backend 'auto'"


def test_ckfmha_auto_without_patching_is_what_auto_backend_name_says():
    from ckfmha.backends import auto_backend_name

    side = make_side("ckfmha:auto")
    assert side.name == f"ckfmha:{auto_backend_name()}"


def test_constructing_ckfmha_auto_imports_no_backend():
    code = (
        "import sys; from ckfmha.parity import make_pair; make_pair('tile_example', 'ckfmha:auto'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton') or "
        "m.startswith(('ckfmha.backends.cpu', 'ckfmha.backends.triton', 'ckfmha.backends.hip'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_make_side_rejects_unknown_ckfmha_backends():
    with pytest.raises(
        ValueError,
        match=r"parity side: 'ckfmha:cuda': backend 'cuda' unknown; "
        r"allowed: auto, cpu, triton, hip",
    ):
        make_side("ckfmha:cuda")
