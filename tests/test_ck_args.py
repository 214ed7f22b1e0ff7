"""ckfmha.ck_args: CK's tile_example argument dialect, parsed and rendered (Problem's from/to_ck_args delegate)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ckfmha.ck_args import (
    BWD_KEYS,
    FWD_KEYS,
    RUNNER_ONLY_ARGS,
    UNMODELLED_BWD,
    UNMODELLED_FWD,
    problem_from_ck_args,
    problem_to_ck_args,
    problem_to_ck_command,
)
from ckfmha.kernel import Family
from ckfmha.problem import Problem, ProblemError

REPO = Path(__file__).resolve().parents[1]


def test_problem_methods_delegate_to_ck_args():
    text = "-prec=bf16 -b=2 -h=8 -h_k=2 -s=128 -d=64 -mask=t -lse=1"
    p = problem_from_ck_args(text)
    assert p == Problem.from_ck_args(text)
    assert problem_to_ck_args(p) == p.to_ck_args()
    assert problem_to_ck_command(p) == p.to_ck_command() == "tile_example_fmha_fwd " + " ".join(p.to_ck_args())
    bwd = problem_from_ck_args("-b=1 -h=2 -s=64 -d=32", binary="bwd")
    assert bwd.family is Family.BWD_DQ_DK_DV and problem_to_ck_command(bwd).startswith("tile_example_fmha_bwd -prec=")


def test_absent_arguments_take_cks_defaults():
    # example_fmha_fwd.cpp: -b=2 -h=8 -s=3328 -d=128 -prec=fp16 -mask=0 -bias=n -iperm=1 -operm=1
    assert problem_from_ck_args("") == Problem(batch=2, nhead_q=8, seqlen_q=3328, hdim_q=128)
    assert problem_from_ck_args([], binary="bwd") == Problem(
        family="bwd", batch=2, nhead_q=8, seqlen_q=3328, hdim_q=128
    )


def test_rendering_writes_non_defaults_in_a_fixed_order():
    p = Problem(
        family="fwd_appendkv",
        dtype="bf16",
        batch=1,
        nhead_q=4,
        nhead_k=2,
        seqlen_q=8,
        seqlen_k=64,
        hdim_q=64,
        hdim_v=32,
        scale=0.5,
        input_layout="bshd",
        bias="alibi",
        bias_rank=1,
        mask="b:4,35",
        seqlen_knew=8,
        rotary_dim=16,
        rope="half_rotated",
        cache_batch_idx=True,
        lse=True,
    )
    assert problem_to_ck_args(p) == [
        "-prec=bf16",
        "-b=1",
        "-h=4",
        "-h_k=2",
        "-s=8",
        "-s_k=64",
        "-d=64",
        "-d_v=32",
        "-scale_s=0.5",
        "-iperm=0",
        "-bias=a:1",
        "-mask=b:4,35",
        "-lse=1",
        "-s_knew=8",
        "-rotary_dim=16",
        "-rotary_interleaved=0",
        "-cache_batch_idx=1",
    ]
    q = Problem(
        dtype="fp8bf16",
        qscale="blockscale",
        vlayout="col",
        output_layout="bshd",
        logits_soft_cap=30.0,
        sink=True,
        drop_seed=7,
    )
    assert problem_to_ck_args(q) == [
        "-prec=fp8bf16",
        "-b=1",
        "-h=1",
        "-s=1",
        "-s_k=1",
        "-d=64",
        "-operm=0",
        "-drop_seed=7",
        "-vlayout=c",
        "-logits_soft_cap=30.0",
        "-init_sink=1",
        "-qscale=bs",
    ]
    g = Problem(
        family="bwd",
        mode="group",
        batch=2,
        seqlens_q=(3, 4),
        seqlens_k=(5, 6),
        hdim_q=32,
        p_drop=0.25,
        drop_offset=3,
        bias="elementwise",
        dbias=True,
        deterministic=True,
    )
    assert problem_to_ck_args(g) == [
        "-prec=fp16",
        "-mode=1",
        "-b=2",
        "-h=1",
        "-s=3,4",
        "-s_k=5,6",
        "-d=32",
        "-bias=e",
        "-p_drop=0.25",
        "-drop_offset=3",
        "-dbias=1",
        "-deterministic=1",
    ]
    for problem in (p, q, g):
        assert problem_from_ck_args(problem_to_ck_args(problem), binary=problem.ck_binary) == problem


def test_what_tile_example_cannot_take_is_an_error_naming_the_field():
    # an append-KV batch > 1: the runner draws the cache lengths of batches 1.. (utils.hpp generate_missing_seqlens),
    # so one common seqlen_k has no command line
    app = Problem(family="fwd_appendkv", batch=3, seqlen_q=8, seqlen_k=64, hdim_q=64, seqlen_knew=8)
    with pytest.raises(ProblemError) as e:
        problem_to_ck_args(app)
    assert str(e.value).startswith(
        "kv_eff_lens: None has no tile_example_fmha_fwd command line: the runner would run kv_eff_lens=(64, "
    )
    bwd = Problem(family="bwd", mode="group", batch=2, seqlens_q=(3, 4), seqlens_k=(5, 6), s_kpad=(8, 8), hdim_q=32)
    assert problem_to_ck_args(bwd)[-2:] == ["-s_kpad=8,8", "-d=32"]
    assert problem_from_ck_args(problem_to_ck_args(bwd), binary="bwd") == bwd
    assert str(app).startswith("fwd_appendkv: Problem(")  # __str__ falls back to the repr


@pytest.mark.parametrize(
    "args,binary,msg",
    [
        ("-vlayout=x", "fwd", "-vlayout: 'x' must be r or c"),
        ("-qscale=x", "fwd", "-qscale: 'x' unknown; allowed: n, pt, bs, mx"),
        (
            "-seed=0 -s_knew=-1",
            "fwd",
            "-seed: 0 seeds the runner's generator from std::random_device, which ckfmha cannot reproduce, and "
            "-s_knew < 0 draws from it; give a seed",
        ),
        ("-bias=e:x", "fwd", "-bias: 'x' is not an integer"),
        (
            "-mode=1 -s=16 -s_kpad=8",
            "fwd",
            "-s_kpad: '8': tile_example_fmha_fwd refuses the line: kpad must be greater than or equal to seqlen for k",
        ),
        ("-iperm=x", "fwd", "-iperm: 'x' is not an integer"),
        ("-scale_s=x", "fwd", "-scale_s: 'x' is not a number"),
        ("-scale=x", "bwd", "-scale: 'x' is not a number"),
        ("-scale=0.5", "fwd", "-scale: no such argument for tile_example_fmha_fwd"),
        ("-prec=int4", "bwd", "-prec: 'int4' unsupported precision; allowed: fp16, bf16, fp32"),
        ("-prec=fp8", "bwd", "dtype: 'fp8' is not defined for family bwd_dq_dk_dv; allowed: fp16, bf16, fp32"),
        (
            "-mode=1 -s_kpad=8",
            "bwd",
            "s_kpad: (8, 8) entry 0 = 8 < seqlens_k[0] = 3328 (kpad must be >= the sequence's key length)",
        ),
        ("-d=", "fwd", "args: no value after '=' in '-d='"),
        ("-b=2", "xyz", "binary: 'xyz' is not a tile_example binary; allowed: fwd, bwd"),
        (
            "tile_example_fmha_combine -b=2",
            None,
            "args: illegal input 'tile_example_fmha_combine' (arguments must look like -key=value)",
        ),
    ],
)
def test_argument_errors_name_argument_value_and_rule(args, binary, msg):
    with pytest.raises(ProblemError) as e:
        problem_from_ck_args(args, binary=binary)
    assert str(e.value) == msg


@pytest.mark.parametrize(
    "args,msg",
    [
        # read in CK's order: mode, b, h, h_k, s, s_k, d, d_v, prec, scale, layouts, bias, mask, dropout, fwd-only
        ("-d=x -b=y", "-b: 'y' is not an integer"),
        ("-prec=int8 -s=3,x", "-s: '3,x' has 'x', which is not an integer"),
        ("-mask=q -bias=x", "-bias: invalid bias value 'x'"),
        ("-num_splits=x -lse=x", "-lse: 'x' is not an integer"),
        ("-foo=1 -mode=7", "-foo: no such argument"),
    ],
)
def test_the_first_bad_argument_in_cks_order_is_the_error(args, msg):
    with pytest.raises(ProblemError) as e:
        problem_from_ck_args(args)
    assert str(e.value).startswith(msg)


def test_argument_tables_are_consistent():
    assert not RUNNER_ONLY_ARGS & (FWD_KEYS | BWD_KEYS)
    assert not set(UNMODELLED_FWD) & FWD_KEYS and not set(UNMODELLED_BWD) & BWD_KEYS
    assert not UNMODELLED_FWD and not UNMODELLED_BWD  # every argument of the amd-aiter tree's binaries is modelled
    assert {"s_qpad", "s_kpad"} <= FWD_KEYS & BWD_KEYS and {"q_eff_lens", "kv_eff_lens"} <= FWD_KEYS - BWD_KEYS


def test_problem_module_imports_the_dialect_lazily_and_either_imports_first():
    code = (
        "import sys, ckfmha.problem; assert 'ckfmha.ck_dialect' not in sys.modules; "
        "p = ckfmha.problem.Problem.from_ck_args('-d=64 -s=8'); assert 'ckfmha.ck_dialect' in sys.modules; "
        "assert 'ckfmha.ck_args' not in sys.modules; print(p.to_ck_command())"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tile_example_fmha_fwd -prec=fp16 -b=2 -h=8 -s=8 -s_k=8 -d=64"
    for code in (
        "import ckfmha.ck_args as a; print(a.problem_from_ck_args('').batch)",
        "import ckfmha.ck_dialect as d, sys; assert 'ckfmha.problem' not in sys.modules; "
        "print(d.parse_ck_args('').fields['batch'])",
    ):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
        assert (r.returncode, r.stdout.strip()) == (0, "2"), r.stderr


def test_ck_args_names_keep_their_identity():
    """ckfmha.ck_args gathers the dialect's names; the problem's error classes are one class wherever imported."""
    import ckfmha.ck_args as a
    import ckfmha.ck_dialect as d
    import ckfmha.problem as p

    assert a.parse_ck_args is d.parse_ck_args and a.ck_run_from_args is p.ck_run_from_args
    assert a.CKRefusal is d.CKRefusal and issubclass(a.CKRefusal, p.ProblemError)
    assert a.CKRun is p.CKRun and p.Problem.ck_run_from_args("-d=64 -s=8") == a.ck_run_from_args("-d=64 -s=8")


@pytest.mark.parametrize("module", ["ckfmha/problem.py", "ckfmha/ck_dialect.py", "pytest_ckfmha/options.py"])
def test_functions_stay_under_60_lines(module):
    """House rule: no function over ~60 lines (validate, the argument parser and options.parse were 120-200)."""
    tree = ast.parse((REPO / module).read_text())
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60
    ]
    assert long == []
