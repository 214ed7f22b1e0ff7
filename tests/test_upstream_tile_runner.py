"""tile_example runner: Problem -> arguments -> Problem round trip, binary discovery, and the plumbing (exit codes,
timeouts, garbage output, missing binary, JSON) against tests/data/fake_tile_example.py -- a FAKE binary that
prints recorded lines (copied to tmp_path as tile_example_fmha_fwd/_bwd and made executable at test time)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

from ckfmha.masking import MaskSpec
from ckfmha.problem import Problem
from ckfmha.upstream.result import Verdict
from ckfmha.upstream.tile_runner import ENV_DIR, TileExampleSide, find_binary, parse_printed_mask, tile_example_args

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

FAKE = Path(__file__).parent / "data" / "fake_tile_example.py"
# real line: ROCm/composable_kernel example/ck_tile/01_fmha/script/res_sink.log @ 0ad4ae66
REAL_LINE = (
    "[fp16|batch|bhsd] b:4, h:1/1, s:512/1024, d:16/128, scale_s:0.25, bias:alibi, p_drop:0, lse:0, "
    "squant:0, mask:b(1:0), v:c, fmha_fwd_d128_fp16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_"
    "w32x32x16_qr_async_vc_psddv_alibi_mask_nlse_ndropout_nsquant, 0.998 ms, 0.61 TFlops, 1.77 GB/s, valid:y"
)
# the problem that line echoes
REAL_PROBLEM = Problem(
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
NOT_SUPPORTED = REAL_LINE.split(", fmha_fwd_")[0] + ", not supported yet"
INVALID = REAL_LINE.replace("valid:y", "valid:n")

ROUND_TRIP = [
    Problem(),
    REAL_PROBLEM,
    Problem(
        dtype="bf16",
        batch=2,
        nhead_q=8,
        nhead_k=2,
        seqlen_q=55,
        seqlen_k=256,
        hdim_q=128,
        lse=True,
        mask="t:128,30",
        input_layout="bshd",
        output_layout="bshd",
        p_drop=0.2,
        drop_seed=7,
        drop_offset=3,
    ),
    Problem(
        mode="group",
        batch=3,
        nhead_q=4,
        seqlens_q=(5, 9, 3),
        seqlens_k=(7, 4, 11),
        s_kpad=(8, 4, 12),
        hdim_q=64,
        hdim_v=32,
        bias="elementwise",
        bias_rank=1,
        scale=0.5,
        mask="xb:16",
    ),
    Problem(
        family="fwd_splitkv",
        batch=2,
        nhead_q=2,
        seqlen_q=100,
        seqlen_k=51,
        hdim_q=128,
        num_splits=3,
        cache_batch_idx=True,
        lse=True,
    ),
    Problem(family="fwd_pagedkv", batch=2, nhead_q=2, seqlen_q=64, seqlen_k=300, hdim_q=128, page_block_size=128),
    Problem(
        family="fwd_appendkv",
        batch=3,
        nhead_q=3,
        seqlen_q=64,
        seqlen_k=129,
        hdim_q=64,
        seqlen_knew=64,
        rotary_dim=32,
        rope="half_rotated",
        # utils.hpp generate_missing_seqlens: batches 1.. of an append-KV run get key lengths drawn in
        # [s_knew, s_k] from the runner's generator (-seed default 11939); batch 0 keeps s_k
        kv_eff_lens=(129, 82, 109),
    ),
    Problem(logits_soft_cap=30.0, sink=True, seqlen_q=16, hdim_q=64),
    Problem(
        family="bwd",
        dtype="bf16",
        batch=2,
        nhead_q=4,
        nhead_k=1,
        seqlen_q=500,
        seqlen_k=251,
        hdim_q=96,
        mask="1",
        bias="elementwise",
        dbias=True,
        deterministic=True,
        scale=0.1,
    ),
    Problem(
        family="bwd",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(516, 100),
        seqlens_k=(253, 80),
        hdim_q=64,
        bias="alibi",
        p_drop=0.2,
        input_layout="bshd",
    ),
]


@pytest.mark.parametrize("p", ROUND_TRIP, ids=range(len(ROUND_TRIP)))
def test_args_round_trip(p, tmp_path):
    args = tile_example_args(p, tmp_path / "x.json")
    assert {"-v=1", "-kname=1", "-warmup=0", "-repeat=1", "-json=1"} <= set(args)
    assert f"-jsonfile={tmp_path / 'x.json'}" in args
    assert Problem.from_ck_args(args, binary=p.ck_binary) == p
    if p.is_backward:
        assert not any(a.startswith(("-lse", "-vlayout", "-num_splits", "-s_kpad")) for a in args)


def test_printed_masks():
    for m in ("0", "1", "2", "t:3,5", "b:4,35", "g:5,7"):
        spec = MaskSpec.parse(m)
        assert parse_printed_mask(spec.ck_printed()) == spec


def test_find_binary(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_DIR, raising=False)
    path, why = find_binary("fwd")
    assert path is None and ENV_DIR in why
    path, why = find_binary("fwd", tmp_path / "nope")
    assert path is None and "does not exist" in why
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tile_example_fmha_bwd").write_text("")
    assert find_binary("bwd", tmp_path)[0] == tmp_path / "bin" / "tile_example_fmha_bwd"
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    assert find_binary("bwd")[0] is not None
    assert "not found" in find_binary("fwd")[1]


@pytest.fixture
def fake_dir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    for b in ("fwd", "bwd"):
        dst = d / f"tile_example_fmha_{b}"
        shutil.copy(FAKE, dst)
        dst.write_text(f"#!{sys.executable}\n" + dst.read_text().split("\n", 1)[1])
        dst.chmod(dst.stat().st_mode | stat.S_IXUSR)
    for k in list(os.environ):
        if k.startswith("FAKE_TILE_"):
            monkeypatch.delenv(k)
    return d


def run(fake_dir, monkeypatch, problem=REAL_PROBLEM, timeout_s=30.0, **env):
    for k, v in env.items():
        monkeypatch.setenv(f"FAKE_TILE_{k.upper()}", str(v))
    return TileExampleSide(fake_dir, timeout_s=timeout_s).run(problem)


def test_missing_binary_is_a_skip(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_DIR, raising=False)
    r = TileExampleSide(tmp_path).run(REAL_PROBLEM)
    assert r.verdict is Verdict.SKIPPED and "not found" in r.reason
    r = TileExampleSide(None).run(REAL_PROBLEM)
    assert r.verdict is Verdict.SKIPPED and ENV_DIR in r.reason
    r = TileExampleSide(tmp_path).run(
        Problem(
            family="batch_prefill",
            mode="group",
            batch=1,
            seqlens_q=(4,),
            seqlens_k=(256,),
            page_block_size=256,
            kv_lookup="vllm",
            kv_layout="linear",
            hdim_q=128,
        )
    )
    assert r.verdict is Verdict.SKIPPED


def test_valid_run(fake_dir, monkeypatch, tmp_path):
    argv_file = tmp_path / "argv.json"
    r = run(
        fake_dir,
        monkeypatch,
        stdout=REAL_LINE + "\n",
        rc=0,
        argv=argv_file,
        json='{"name": "fmha_fwd", "verification": "pass"}',
    )
    assert r.verdict is Verdict.RAN_VALID, r.reason
    assert r.fields["kernels"][0].startswith("fmha_fwd_d128_fp16_batch") and r.fields["ms"] == pytest.approx(0.998)
    assert r.fields["json_result"]["verification"] == "pass"
    argv = json.loads(argv_file.read_text())
    assert Problem.from_ck_args(argv) == REAL_PROBLEM  # the program name selects the binary
    assert "valid:y" in r.raw


def test_exit_254_is_decided_by_the_line(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout=INVALID + "\n", rc=254, stderr="OUT Error: Incorrect results!\n")
    assert r.verdict is Verdict.RAN_INVALID and "Incorrect results" in r.reason
    r = run(fake_dir, monkeypatch, stdout=NOT_SUPPORTED + "\n", rc=254)
    assert r.verdict is Verdict.UNSUPPORTED and "not supported yet" in r.reason
    r = run(fake_dir, monkeypatch, stdout="", rc=254, stderr="nhead:3 must be multiple of nhead_k:2\n")
    assert r.verdict is Verdict.ERROR and "must be multiple" in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace(", valid:y", "") + "\n", rc=254)
    assert r.verdict is Verdict.ERROR and "without valid:n" in r.reason


def test_exit_codes_that_are_errors(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout="", rc=255, stderr="no such arg:lse\n")
    assert r.verdict is Verdict.ERROR and "no such arg:lse" in r.reason and "255" in r.reason
    r = run(fake_dir, monkeypatch, stdout=INVALID + "\n", rc=0)
    assert r.verdict is Verdict.ERROR  # exit 0 with valid:n is inconsistent
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE + "\n", rc=3)
    assert r.verdict is Verdict.ERROR and "exit 3" in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE + "\n", rc=0, json='{"verification": "fail"}')
    assert r.verdict is Verdict.ERROR and "verification=fail" in r.reason


def test_garbage_output(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout="\x01\x7f garbage, more: garbage ]\n[\n", rc=0)
    assert r.verdict is Verdict.ERROR and "no result line" in r.reason
    r = run(fake_dir, monkeypatch, stdout="", rc=0)
    assert r.verdict is Verdict.ERROR


def test_echo_of_another_problem_is_an_error(fake_dir, monkeypatch):
    other = REAL_PROBLEM.replace(p_drop=0.2)  # e.g. the binary dropped dropout
    r = run(fake_dir, monkeypatch, problem=other, stdout=REAL_LINE + "\n", rc=0)
    assert r.verdict is Verdict.ERROR and "p_drop" in r.reason and "different problem" in r.reason
    other = REAL_PROBLEM.replace(mask=MaskSpec.causal(True))
    r = run(fake_dir, monkeypatch, problem=other, stdout=REAL_LINE + "\n", rc=0)
    assert r.verdict is Verdict.ERROR and "mask" in r.reason


def test_timeout_kills_the_process_group(fake_dir, monkeypatch, tmp_path):
    child_file = tmp_path / "child.pid"
    t0 = time.monotonic()
    r = run(fake_dir, monkeypatch, timeout_s=1.0, sleep=60, child=child_file, stdout=REAL_LINE)
    assert time.monotonic() - t0 < 30
    assert r.verdict is Verdict.ERROR and "timed out" in r.reason
    pid = int(child_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the binary's child survived the timeout")


def test_not_executable_is_an_error(fake_dir, monkeypatch):
    p = fake_dir / "tile_example_fmha_fwd"
    p.chmod(0o644)
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE)
    assert r.verdict is Verdict.ERROR and "not executable" in r.reason


def test_bwd_binary(fake_dir, monkeypatch):
    p = Problem(family="bwd", batch=1, nhead_q=4, nhead_k=2, seqlen_q=259, hdim_q=64)
    # constructed from fmha_bwd_runner.hpp's print statements (see tests/data/upstream_lines/constructed.txt)
    line = (
        "[fp16|batch|bhsd] b:1, h:4/2, s:259/259, d:64/64, scale:0.125, bias:n, dbias:0, p_drop:0, "
        "s_randval:0, deterministic:0, mask:n, fmha_bwd_dot_do_o_d64_fp16_batch_b64_o2_psddv, 0.085 ms, "
        "2.56 TFlops, 31.21 GB/s, valid:y"
    )
    r = run(fake_dir, monkeypatch, problem=p, stdout=line + "\n", rc=0)
    assert r.verdict is Verdict.RAN_VALID, r.reason


# ------------------------------------------------------------------------------------------ unparseable output
BWD_PROBLEM = Problem(family="bwd", batch=1, nhead_q=4, nhead_k=2, seqlen_q=259, hdim_q=64)
BWD_ECHO = (
    "[fp16|batch|bhsd] b:1, h:4/2, s:259/259, d:64/64, scale:0.125, bias:n, dbias:0, p_drop:0, "
    "s_randval:0, deterministic:0, mask:n"
)


def test_line_without_echo_or_kernel_is_unparseable(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout="[fp16|batch|bhsd] valid:y\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE, r.reason
    assert "no problem echo fields b, h, s, d, scale_s, bias, lse, mask, v" in r.reason
    assert "no kernel name although -kname=1 was passed" in r.reason
    assert "'[fp16|batch|bhsd] valid:y'" in r.reason  # the line, quoted
    assert r.verdict.is_error and not r.verdict.answered


def test_line_without_kernel_name_is_unparseable(fake_dir, monkeypatch):
    no_kname = REAL_LINE.replace(REAL_LINE.split(", ")[11] + ", ", "")
    assert "fmha_fwd_" not in no_kname and no_kname.endswith("valid:y")
    r = run(fake_dir, monkeypatch, stdout=no_kname + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "no kernel name" in r.reason and "problem echo" not in r.reason
    r = run(fake_dir, monkeypatch, stdout=no_kname.replace("valid:y", "valid:n") + "\n", rc=254)
    assert r.verdict is Verdict.UNPARSEABLE and "no kernel name" in r.reason


def test_line_missing_one_echo_field_is_unparseable(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace("v:c, ", "") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "no problem echo field v " in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace("s:512/1024", "s:512") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "s:'512' cannot be read" in r.reason


def test_fields_outside_the_grammar_are_unparseable(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace(", valid:y", ", all good here, valid:y") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "'all good here' not in the result line's grammar" in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace(", 0.998 ms", ", hello, 0.998 ms") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "'hello' is neither key:value nor a CK kernel name" in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace("valid:y", "valid:yes") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "'valid:yes'" in r.reason
    r = run(fake_dir, monkeypatch, stdout=REAL_LINE.replace("|batch|", "|batched|") + "\n", rc=0)
    assert r.verdict is Verdict.UNPARSEABLE and "mode 'batched'" in r.reason


def test_not_supported_needs_the_echo_but_no_kernel_name(fake_dir, monkeypatch):
    r = run(fake_dir, monkeypatch, stdout=NOT_SUPPORTED + "\n", rc=254)
    assert r.verdict is Verdict.UNSUPPORTED, r.reason
    r = run(fake_dir, monkeypatch, stdout="[fp16|batch|bhsd] not supported yet\n", rc=254)
    assert r.verdict is Verdict.UNPARSEABLE and "no problem echo fields b, h, s, d" in r.reason
    assert "kernel name" not in r.reason
    r = run(fake_dir, monkeypatch, problem=BWD_PROBLEM, stdout=BWD_ECHO + ", not supported yet\n", rc=254)
    assert r.verdict is Verdict.UNSUPPORTED, r.reason


def test_bwd_line_needs_the_bwd_echo(fake_dir, monkeypatch):
    kernels = ", fmha_bwd_dot_do_o_d64_fp16_batch_b64_o2_psddv, 0.085 ms, 2.56 TFlops, 31.21 GB/s, valid:y\n"
    r = run(fake_dir, monkeypatch, problem=BWD_PROBLEM, stdout=BWD_ECHO + kernels, rc=0)
    assert r.verdict is Verdict.RAN_VALID, r.reason
    r = run(fake_dir, monkeypatch, problem=BWD_PROBLEM, stdout=BWD_ECHO.replace("scale:0.125, ", "") + kernels, rc=0)
    assert r.verdict is Verdict.UNPARSEABLE
    assert "no problem echo field scale (tile_example_fmha_bwd always prints b h s d scale bias mask)" in r.reason
