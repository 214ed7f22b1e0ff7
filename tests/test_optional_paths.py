"""Paths reworked so mypy can follow them (an Optional checked, a read-only protocol member, a value read from a
narrowed name): each keeps its observable behaviour, pinned here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ckfmha.parity import ParitySide
from ckfmha.problem import Problem
from ckfmha.upstream.result import SideResult, Verdict
from ckfmha.upstream.tile_output import parse_stdout
from ckfmha.upstream.tile_runner import RawRun, interpret
from pytest_ckfmha.collect import build_specs
from pytest_ckfmha.reporting import RowBook

# a real tile_example line (see tests/test_upstream_tile_runner.py) and the problem it echoes
REAL_LINE = (
    "[fp16|batch|bhsd] b:4, h:1/1, s:512/1024, d:16/128, scale_s:0.25, bias:alibi, p_drop:0, lse:0, "
    "squant:0, mask:b(1:0), v:c, fmha_fwd_d128_fp16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_"
    "w32x32x16_qr_async_vc_psddv_alibi_mask_nlse_ndropout_nsquant, 0.998 ms, 0.61 TFlops, 1.77 GB/s, valid:y"
)


def _real_problem() -> Problem:
    from ckfmha.masking import MaskSpec

    return Problem(
        batch=4,
        nhead_q=1,
        seqlen_q=512,
        seqlen_k=1024,
        hdim_q=16,
        hdim_v=128,
        bias="alibi",
        mask=MaskSpec.window(1, 0, bottom_right=True),
        vlayout="col",
    )


@pytest.mark.parametrize("verification, valid_word", [("fail", "valid:y"), ("pass", "valid:n")])
def test_json_verification_note_names_the_json_files_word(verification, valid_word):
    line = REAL_LINE.replace("valid:y", valid_word)
    out = parse_stdout(line + "\n")
    out.json_result = {"name": "fmha_fwd", "verification": verification}
    raw = RawRun(["tile_example_fmha_fwd"], 0, line + "\n", "", False, 0.1)
    r = interpret(_real_problem(), raw, out)
    assert f"JSON verification={verification!r} disagrees with {valid_word}" in r.notes


def test_json_verification_that_agrees_adds_no_note():
    out = parse_stdout(REAL_LINE + "\n")
    out.json_result = {"verification": "pass"}
    r = interpret(_real_problem(), RawRun(["x"], 0, REAL_LINE + "\n", "", False, 0.1), out)
    assert r.verdict is Verdict.RAN_VALID and not [n for n in r.notes if n.startswith("JSON verification")]


def _report(when: str, outcome: str, reason: str = "") -> SimpleNamespace:
    return SimpleNamespace(
        nodeid="ckfmha::s1::k1",
        when=when,
        outcome=outcome,
        passed=outcome == "passed",
        skipped=outcome == "skipped",
        failed=outcome == "failed",
        longrepr=None,
        longreprtext=reason,
        user_properties=[("verdict", outcome), ("reason", reason)] if reason else [("verdict", outcome)],
        duration=0.5,
    )


def test_teardown_error_reason_follows_the_calls_reason():
    book = RowBook(lambda nodeid: {})
    book.add(_report("call", "failed", "outputs differ"))
    row = book.add(_report("teardown", "failed", "fixture exploded"))
    assert row is not None and row["verdict"] == "error"
    assert row["reason"] == "outputs differ | teardown: fixture exploded"


def test_teardown_error_reason_alone_when_the_call_gave_none():
    book = RowBook(lambda nodeid: {})
    book.add(_report("call", "passed"))
    row = book.add(_report("teardown", "failed", "fixture exploded"))
    assert row is not None and row["reason"] == "teardown: fixture exploded"


def test_build_specs_without_a_category_names_the_option():
    settings = SimpleNamespace(category=None, matrices=(), families=None, max_kernels_per_shape=1)
    with pytest.raises(ValueError, match=r"settings\.category is None.*--ckfmha-category"):
        build_specs(None, settings, registry=None)


class _PropertyNamedSide:
    """A side whose ``name`` is a read-only property (as :class:`ckfmha.upstream.ckfmha_side.CkfmhaSide`'s)."""

    @property
    def name(self) -> str:
        return "fake:property"

    def run(self, problem: Problem, seed: int = 0) -> SideResult:
        return SideResult(self.name, Verdict.RAN_VALID)


def test_a_side_with_a_read_only_name_is_a_parity_side():
    side = _PropertyNamedSide()
    assert isinstance(side, ParitySide)
    assert side.run(Problem()).side == "fake:property"
