"""``ckfmha coverage``: kernels, pipelines and features a small run report and a compat kernel log exercised, and
what of the arch's kernel space they never reached."""

from __future__ import annotations

import json

import pytest

from ckfmha.cli import main
from ckfmha.cli_coverage import exercised, expand_inputs
from ckfmha.kernel import Family
from ckfmha.runner import enumerated_registry

ARCH = "gfx942"


@pytest.fixture(scope="module")
def kernels():
    """One kernel id per family we use, from gfx942's kernel space."""
    space = list(enumerated_registry(ARCH, 0, "simplified"))
    pick = {}
    for c in space:
        pick.setdefault(c.signature.family, c)
    return {f: c.kernel_id for f, c in pick.items()}, len(space)


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def call(entry, stages, **features):
    base = {"mode": "batch", "mask": "0", "alibi": False, "dropout": False, "paged_kv": False, "padding": False}
    return {
        "entry": entry,
        "backend": "cpu",
        "arch": ARCH,
        "problem": "",
        "family": "",
        "features": {**base, **features},
        "fa_path": "",
        "stages": stages,
        "note": "",
        "nodeid": "t::x",
    }


@pytest.fixture
def inputs(tmp_path, kernels):
    ids, _ = kernels
    log = {
        "schema": "ckfmha.flash_attn_calls",
        "version": 1,
        "calls": [
            call("fwd", [{"role": "fwd", "kernel_id": ids[Family.FWD], "num_splits": None}], mask="b", gqa=True),
            call(
                "fwd_kvcache",
                [
                    {"role": "splitkv", "kernel_id": ids[Family.FWD_SPLITKV], "num_splits": 1},
                    {"role": "combine", "kernel_id": ids[Family.FWD_SPLITKV_COMBINE], "num_splits": 1},
                ],
                paged_kv=True,
                padding=True,
                rope="interleaved",
            ),
            call(
                "varlen_bwd",
                [{"role": "dq_dk_dv", "kernel_id": "triton.only.kernel", "num_splits": None}],
                mode="group",
                deterministic=True,
                dropout=True,
            ),  # fmt: skip
        ],
    }
    write(tmp_path / "fa.flash_attn_calls.json", log)
    report = {
        "schema": "ckfmha.report",
        "version": 2,
        "meta": {},
        "rows": [
            {"id": "a", "verdict": "passed", "kernel_id": ids[Family.BWD_DQ_DK_DV], "plan_kernels": "", "family": "bwd",
             "mask": "b:4,0", "deterministic": True, "nhead_q": 4, "nhead_k": 4, "num_splits": 1},
            {"id": "b", "verdict": "skipped", "kernel_id": ids[Family.FWD_APPENDKV], "plan_kernels": "",
             "family": "fwd_appendkv", "seqlen_knew": 4},
        ],
    }  # fmt: skip
    write(tmp_path / "smoke.json", report)
    return tmp_path


def test_exercised_reads_logs_beside_a_report_and_rows_that_ran(inputs, kernels):
    ids, _ = kernels
    paths = expand_inputs([str(inputs / "fa.json"), str(inputs / "smoke.json")])
    assert [p.name for p in paths] == ["fa.flash_attn_calls.json", "smoke.json"]
    ex = exercised(paths)
    assert ex.units == 4  # 3 calls + 1 row that ran (the skipped one does not count)
    assert ex.kernels[ids[Family.FWD]] == 1 and ids[Family.FWD_APPENDKV] not in ex.kernels
    assert ex.features["split_kv_one_split"] == 1 and ex.features["split_kv_num_splits_gt_1"] == 0
    assert ex.features["deterministic_bwd"] == 2 and ex.features["mask_window"] == 1
    assert ex.features["paged_kv"] == 1 and ex.features["rope"] == 1 and ex.features["gqa"] == 1


def test_coverage_json(inputs, kernels, capsys):
    ids, total = kernels
    assert main(["coverage", str(inputs / "fa.json"), str(inputs / "smoke.json"), "--arch", ARCH, "--format",
                 "json"]) == 0  # fmt: skip
    cov = json.loads(capsys.readouterr().out)
    assert cov["kernels_in_space"] == total and cov["kernels_reached"] == 4
    assert set(cov["reached"]) == {ids[f] for f in (Family.FWD, Family.FWD_SPLITKV, Family.FWD_SPLITKV_COMBINE,
                                                    Family.BWD_DQ_DK_DV)}  # fmt: skip
    assert cov["outside_space"] == ["triton.only.kernel"]
    assert ids[Family.FWD_APPENDKV] in cov["unreached"]
    fams = {r["family"]: r for r in cov["families"]}
    assert fams["fwd"]["reached"] == 1 and fams["fwd_appendkv"]["reached"] == 0
    feats = {r["feature"]: r["count"] for r in cov["problem_features"]}
    assert feats["split_kv_num_splits_gt_1"] == 0 and feats["appendkv"] == 0 and feats["dropout"] == 1
    pipes = {(r["family"], r["pipeline"]): r for r in cov["pipelines"]}
    assert sum(r["reached"] for r in pipes.values()) == 4


def test_coverage_text_names_what_was_never_reached(inputs, capsys):
    assert main(["coverage", str(inputs / "fa.json"), "--arch", ARCH, "--family", "fwd,splitkv",
                 "--list-unreached", "--ck-names"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "3 calls/items" in out and "kernels reached" in out
    assert "split-KV with num_splits > 1" in out and "never reached" in out
    assert "bwd_dq_dk_dv" not in out.split("problem features")[0]  # --family narrowed the space
    assert "fmha_fwd_d" in out  # the unreached kernels' CK names


def test_coverage_bad_inputs_exit_2(tmp_path, capsys):
    assert main(["coverage", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    write(tmp_path / "other.json", {"schema": "something"})
    assert main(["coverage", str(tmp_path / "other.json")]) == 2
    assert "is neither a ckfmha run report" in capsys.readouterr().err
