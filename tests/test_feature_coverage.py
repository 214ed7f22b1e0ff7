"""Feature coverage of a run (ckfmha.coverage): the features small hand-made report rows exercise, the table with
'never reached', the HTML page's section and `ckfmha coverage`'s problem-features table (shared code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckfmha.cli import main
from ckfmha.coverage import PROBLEM_FEATURES, feature_table, features_of_row, row_features


def row(rid: str, verdict: str = "passed", **extra) -> dict:
    base = {
        "id": rid,
        "verdict": verdict,
        "family": "fwd",
        "kind": "kernel",
        "reason": "",
        "mode": "batch",
        "batch": 1,
        "nhead_q": 2,
        "nhead_k": 2,
        "seqlen_q": 128,
        "seqlen_k": 128,
        "hdim_q": 64,
        "hdim_v": 64,
        "mask": "0",
        "backend": "cpu",
        "kernel_id": "k",
    }
    return {**base, **extra}


def doc(rows: list[dict]) -> dict:
    return {
        "schema": "ckfmha.report",
        "version": 2,
        "state": "complete",
        "exit_status": 0,
        "category": "smoke",
        "arch": "gfx942",
        "seed": 0,
        "collected": len(rows),
        "completed": len(rows),
        "rows": rows,
    }


def test_plain_row_has_only_its_mask_kind() -> None:
    assert features_of_row(row("a::k")) == {"mask_none"}


def test_paged_kv_partial_last_page_and_split_kv() -> None:
    f = features_of_row(
        row("a::k", family="fwd_splitkv", kernel_id="fwd_splitkv.x", num_splits=3, page_block_size=64, seqlen_k=100)
    )
    assert {"paged_kv", "paged_kv_partial_last_page", "split_kv_num_splits_gt_1"} <= f
    full = features_of_row(row("a::k", page_block_size=64, seqlen_k=128))
    assert "paged_kv" in full and "paged_kv_partial_last_page" not in full


def test_group_mode_lengths_in_report_syntax() -> None:
    """Lists are `_`-joined in a report row: per-sequence lengths give padding, length 0 and 1, partial pages."""
    f = features_of_row(
        row("a::k", mode="group", seqlens_q="0_1_70", seqlens_k="64_65_128", page_block_size=64, mask="b")
    )
    assert {"group_mode", "padding", "seqlen_0", "seqlen_1", "paged_kv_partial_last_page"} <= f
    assert {"mask_causal", "mask_causal_tile_edge"} <= f
    same = features_of_row(row("a::k", mode="group", seqlens_q="64_64", seqlens_k="64_64"))
    assert "padding" not in same and "seqlen_0" not in same


def test_masks_at_tile_edges_gqa_ratio_dropout_deterministic_bwd() -> None:
    assert "mask_causal_tile_edge" not in features_of_row(row("a::k", mask="b"))  # 128 x 128: whole tiles
    assert "mask_window_tile_edge" in features_of_row(row("a::k", mask="b:16,0", seqlen_q=65))
    f = features_of_row(row("a::k", family="bwd", nhead_q=8, nhead_k=2, p_drop=0.2, deterministic=True))
    assert {"bwd", "deterministic_bwd", "dropout", "gqa", "gqa_ratio_4"} <= f
    assert "gqa_ratio_6:4" in features_of_row(row("a::k", nhead_q=6, nhead_k=4))


def test_table_counts_rows_that_ran_and_marks_never_reached() -> None:
    rows = [
        row("a::k", nhead_q=8, nhead_k=1),
        row("b::k", nhead_q=4, nhead_k=2, seqlen_q=1),
        row("c::k", "skipped", p_drop=0.5),  # did not run: exercises nothing
        row("d::k", "not_run", p_drop=0.5),
        row("e::k", hdim_q=[64], seqlen_q={"odd": 1}),  # schema-valid, hand-edited: counted as ran, read safely
    ]
    counts, ran = row_features(rows)
    assert ran == 3
    table = feature_table(counts)
    by = {t["feature"]: t["count"] for t in table}
    assert by["gqa"] == 2 and by["seqlen_1"] == 1 and by["dropout"] == 0 and by["mask_none"] == 3
    assert [t["feature"] for t in table][: len(PROBLEM_FEATURES)] == [n for n, _ in PROBLEM_FEATURES]
    assert [t["feature"] for t in table][len(PROBLEM_FEATURES) :] == ["gqa_ratio_2", "gqa_ratio_8"]


def test_html_page_has_the_coverage_section(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [row("a::k", ms=1.0, tflops=1.0, p_drop=0.1), row("b::k", "skipped", reason="b: no")]
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(doc(rows)))
    out = tmp_path / "r.html"
    assert main(["report", str(rep), "-o", str(out)]) == 0
    page = out.read_text()
    section = page[page.index("<h2>Feature coverage</h2>") :]
    assert "1 item(s) ran" in section
    assert "<tr><td>dropout</td>" in section
    assert '<tr class="bad"><td>deterministic_bwd</td>' in section and "never reached" in section


def test_cli_coverage_uses_the_same_table(tmp_path: Path, capsys) -> None:
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(doc([row("a::k", nhead_q=4, nhead_k=1, seqlen_k=0)])))
    assert main(["coverage", str(rep), "--arch", "gfx942", "--family", "fwd", "--format", "json"]) == 0
    cov = json.loads(capsys.readouterr().out)
    by = {t["feature"]: t["count"] for t in cov["problem_features"]}
    assert by["seqlen_0"] == 1 and by["gqa_ratio_4"] == 1 and by["paged_kv"] == 0


# ------------------------------------------------------------------ compat calls: lengths from the call's problem
def _call(problem: str, mask: str = "0", **features) -> dict:
    return {"entry": "fwd", "problem": problem, "features": {"mask": mask, **features}, "stages": []}


def test_a_calls_length_features_come_from_its_problem_in_cks_syntax() -> None:
    from ckfmha.coverage import features_of_call

    group = _call("fwd: -prec=fp16 -mode=1 -b=2 -h=9 -h_k=3 -s=109,1 -s_k=191,128 -d=64 -mask=b -lse=1", "b")
    assert {"mask_causal", "mask_causal_tile_edge", "seqlen_1", "gqa_ratio_3"} <= features_of_call(group)
    aligned = _call("fwd: -prec=fp16 -b=4 -h=9 -s=128 -s_k=256 -d=40 -mask=t", "t")
    assert not {"mask_causal_tile_edge", "seqlen_1", "seqlen_0"} & features_of_call(aligned)
    assert not any(f.startswith("gqa_ratio_") for f in features_of_call(aligned))  # -h_k defaults to -h
    paged = _call("fwd_splitkv: -prec=fp16 -b=1 -h=4 -s=1 -s_k=300 -d=128 -page_block_size=128", paged_kv=True)
    assert {"paged_kv", "paged_kv_partial_last_page", "seqlen_1"} <= features_of_call(paged)


def test_a_calls_problem_in_repr_form_gives_its_lengths_too() -> None:
    from ckfmha.coverage import features_of_call

    call = _call(
        "fwd_appendkv: Problem(family=<Family.FWD_APPENDKV: 'fwd_appendkv'>, batch=2, nhead_q=6, nhead_k=2, "
        "seqlen_q=128, seqlen_k=128, seqlens_q=None, kv_eff_lens=(0, 45), page_block_size=0)",
        "b",
    )
    assert {"mask_causal_tile_edge", "seqlen_0", "gqa_ratio_3"} <= features_of_call(call)


def test_the_side_by_side_tables_put_each_source_in_a_column() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "coverage_side_by_side", Path(__file__).resolve().parent.parent / "benchmarks" / "coverage_side_by_side.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def cov(reached: int, dropout: int) -> dict:
        return {
            "calls_or_items": 10,
            "kernels_reached": reached,
            "kernels_in_space": 200,
            "families": [{"family": "fwd", "reached": reached, "total": 200}],
            "problem_features": [{"feature": "dropout", "meaning": "dropout", "count": dropout}],
        }

    md = mod.side_by_side({"FA": cov(4, 0), "smoke": cov(50, 7)})
    assert "| FA | 10 | 4/200 (2.0%) |" in md and "| smoke | 10 | 50/200 (25.0%) |" in md
    assert "| fwd | 4/200 | 50/200 |" in md and "| dropout | never | 7 |" in md
    with pytest.raises(ValueError, match="must be LABEL=PATH"):
        mod.parse_source("no-equals-sign")
