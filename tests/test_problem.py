import pytest

from ckfmha.kernel import Bias, DType, Family, Mode, QScale, Rope
from ckfmha.masking import MaskSpec
from ckfmha.problem import BWD, Layout, Problem, ProblemError


def test_defaults_and_derived():
    p = Problem(nhead_q=8, seqlen_q=100, hdim_q=64)
    assert p.nhead_k == 8 and p.seqlen_k == 100 and p.hdim_v == 64
    assert p.softmax_scale == pytest.approx(1 / 8)
    g = Problem(mode="group", batch=3, seqlens_q=(3, 0, 5), seqlens_k=(4, 6, 2), s_kpad=(8, 8, 8))
    assert g.seqlen_q == 5 and g.seqlen_k == 6 and g.seqstart_q == (0, 3, 3, 8) and g.seqstart_k == (0, 8, 16, 24)
    assert Problem(family="bwd").family is BWD


def test_from_ck_args_example():
    p = Problem.from_ck_args(
        "-b=2 -h=8 -h_k=2 -s=1024 -s_k=2048 -d=128 -d_v=128 -mask=b:10,0 -bias=a -lse=1 -p_drop=0.2 -prec=bf16"
    )
    assert (p.batch, p.nhead_q, p.nhead_k, p.seqlen_q, p.seqlen_k, p.hdim_v) == (2, 8, 2, 1024, 2048, 128)
    assert p.mask == MaskSpec.window(10, 0, bottom_right=True) and p.bias is Bias.ALIBI and p.lse
    assert p.dtype is DType.BF16 and p.p_drop == 0.2 and p.family is Family.FWD
    g = Problem.from_ck_args(["-mode=1", "-b=2", "-s=100,37", "-d=64"])
    assert g.mode is Mode.GROUP and g.seqlens_q == (100, 37) and g.seqlens_k == (100, 37)


@pytest.mark.parametrize(
    "args,family",
    [
        ("-num_splits=3", Family.FWD_SPLITKV),
        ("-page_block_size=128", Family.FWD_PAGEDKV),
        ("-cache_batch_idx=1", Family.FWD_SPLITKV),
        ("-s_knew=8 -s=64 -rotary_dim=16", Family.FWD_APPENDKV),
    ],
)
def test_family_inference(args, family):
    p = Problem.from_ck_args(args + " -d=64")
    assert p.family is family
    assert Problem.from_ck_args(p.to_ck_args()) == p


def test_bwd_binary_and_command():
    p = Problem.from_ck_args(
        "tile_example_fmha_bwd -b=1 -h=4 -h_k=2 -s=64 -d=32 -bias=e -dbias=1 "
        "-deterministic=1 -scale=0.5 -iperm=0 -operm=0"
    )
    assert p.family is BWD and p.dbias and p.deterministic and p.scale == 0.5
    assert p.input_layout is Layout.BSHD
    assert Problem.from_ck_args(p.to_ck_command()) == p
    assert "-lse" not in " ".join(p.to_ck_args())  # tile_example_fmha_bwd has no -lse


def test_runner_only_args_ignored():
    p = Problem.from_ck_args("-v=1 -warmup=0 -repeat=1 -kname=1 -init=uf -seed=3 -d=32 -s=16")
    assert p.seqlen_q == 16


@pytest.mark.parametrize(
    "args,msg",
    [
        ("-foo=1", "-foo: no such argument"),
        ("-lse=1", "-lse: no such argument for tile_example_fmha_bwd"),
        ("-h=8 -h_k=3", "-h_k: '3': tile_example_fmha_fwd refuses the line: nhead:8 must be multiple of nhead_k:3"),
        ("-d=512", "hdim_q: 512 exceeds 256"),
        ("-mask=q", "invalid mask value"),
        ("-bias=x", "-bias: invalid bias value"),
        ("-prec=int8", "-prec: 'int8' unsupported precision"),
        ("-d", "should be a -key=value pair"),
        ("b=2", "illegal input"),
    ],
)
def test_cli_errors(args, msg):
    binary = "bwd" if "-lse" in args else "fwd"
    with pytest.raises(ProblemError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        Problem.from_ck_args(args, binary=binary)


def test_batch_mode_uses_the_first_length_of_a_list_as_ck_does():
    # utils.hpp generate_missing_seqlens, batch mode: every batch gets q_val[0]; the rest is ignored (unannounced)
    run = Problem.ck_run_from_args("-s=3,4 -d=64")
    assert (run.problem.seqlen_q, run.problem.seqlen_k) == (3, 3)
    assert run.unannounced == ("-s: batch mode uses the first length 3 and ignores [4]",)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(nhead_q=8, nhead_k=3), "nhead_k: 3 does not divide nhead_q=8"),
        (dict(hdim_q=0), "hdim_q: 0 must be >= 1"),
        (dict(mode="group", batch=2, seqlens_q=(1, 2, 3)), "seqlens_q: (1, 2, 3) has 3 entries, batch=2"),
        (
            dict(mode="group", batch=1, seqlens_q=(4,), seqlens_k=(4,), s_kpad=(3,)),
            "s_kpad: (3,) entry 0 = 3 < seqlens_k",
        ),
        (dict(seqlens_q=(1,)), "seqlens_q: (1,) is only defined in group mode"),
        (dict(p_drop=1.0), "p_drop: 1.0 must be in [0, 1)"),
        (dict(bias="elementwise", logits_soft_cap=10.0), "logits_soft_cap: 10.0 cannot be combined with bias"),
        (dict(bias="alibi", mask="g:3,3"), "cannot be combined with ALiBi"),
        (dict(bias="alibi", bias_rank=2), "bias_rank: 2 must be 0"),
        (dict(mode="group", bias="elementwise", bias_rank=2), "not defined in group mode"),
        (dict(dbias=True), "dbias: True needs family bwd_dq_dk_dv"),
        (dict(dtype="fp8bf16", lse=True), "lse: True is not defined for dtype fp8bf16"),
        (dict(dtype="fp16", qscale="pertensor"), "qscale: 'pertensor' needs an fp8 dtype"),
        (dict(family="bwd", dtype="fp8bf16"), "dtype: 'fp8bf16' is not defined for family bwd_dq_dk_dv"),
        (dict(family="fwd_splitkv", num_splits=1), "num_splits: 1 must be >= 2"),
        (dict(family="fwd_splitkv", num_splits=2, p_drop=0.1), "dropout is not defined for fwd_splitkv"),
        (dict(family="fwd_pagedkv", page_block_size=100), "page_block_size: 100 must be a multiple of 128"),
        (dict(family="fwd_pagedkv"), "page_block_size: 0 must be > 0"),
        (
            dict(family="batch_prefill", page_block_size=16, kv_lookup="vllm", kv_layout="linear"),
            "mode: 'batch' must be group for batch_prefill",
        ),
        (
            dict(
                family="batch_prefill",
                mode="group",
                page_block_size=4,
                kv_lookup="vllm",
                kv_layout="vectorized",
                hdim_q=64,
            ),
            "divisible by the vector size 8",
        ),
        (
            dict(family="fwd_appendkv", seqlen_q=8, seqlen_k=8, rotary_dim=24, rope="interleaved"),
            "rotary_dim: 24 must be a multiple of 16",
        ),
        (dict(family="fwd_appendkv", seqlen_k=4, seqlen_knew=5), "seqlen_knew: 5 must be in 0..seqlen_k=4"),
        (dict(family="fwd_appendkv", seqlen_k=4, seqlen_knew=2, mode="group"), "mode: 'group' must be batch"),
        (dict(family="fwd_combine"), "family: unknown value 'fwd_combine'"),
        (dict(family="fwd_splitkv_combine"), "is an internal kernel stage"),
        (dict(cache_batch_idx=True), "cache_batch_idx: True is only defined for fwd_splitkv"),
        (dict(batch=True), "batch: True is not an int"),
    ],
)
def test_validation_errors_name_field_value_rule(kw, msg):
    with pytest.raises(ProblemError) as e:
        Problem(**kw)
    assert msg in str(e.value)


def test_frozen_and_replace():
    p = Problem()
    with pytest.raises(Exception):
        p.batch = 3
    q = p.replace(nhead_q=4, nhead_k=2)
    assert q.nhead_ratio == 2 and p.nhead_q == 1


def test_batch_prefill_has_no_cli():
    p = Problem(
        family="batch_prefill", mode="group", seqlens_q=(2,), page_block_size=16, kv_lookup="sglang", kv_layout="linear"
    )
    with pytest.raises(ProblemError, match="batch_prefill"):
        p.to_ck_args()
    assert "batch_prefill" in str(p)


def test_qscale_and_rope_parse():
    # example_fmha_fwd.cpp: squant=auto is std::is_same_v<DataTypeConfig, FmhaFwdFp8> -- fp8 alone
    p = Problem.from_ck_args("-prec=fp8 -squant=auto -d=64")
    assert p.qscale is QScale.PERTENSOR
    p = Problem.from_ck_args("-prec=fp8bf16 -squant=auto -d=64")
    assert p.qscale is QScale.NONE
    p = Problem.from_ck_args("-prec=fp8bf16 -squant=1 -d=64")
    assert p.qscale is QScale.PERTENSOR
    p = Problem.from_ck_args("-prec=fp16 -s=64 -s_knew=4 -rotary_dim=32 -rotary_interleaved=0 -d=64")
    assert p.rope is Rope.HALF_ROTATED


def test_min_seqlen_q_is_group_mode_fwd_only_and_has_no_tile_example_argument():
    g = Problem(mode="group", batch=2, nhead_q=2, seqlens_q=(3, 40), seqlens_k=(3, 40), hdim_q=64, min_seqlen_q=4)
    assert g.min_seqlen_q == 4
    with pytest.raises(ProblemError, match="min_seqlen_q: 4 is only defined for fwd in group mode"):
        Problem(seqlen_q=8, hdim_q=64, min_seqlen_q=4)
    with pytest.raises(ProblemError, match="min_seqlen_q: -1 must be >= 0"):
        Problem(mode="group", batch=1, seqlens_q=(3,), hdim_q=64, min_seqlen_q=-1)
    with pytest.raises(ProblemError, match="min_seqlen_q: 4 cannot be given to tile_example_fmha_fwd"):
        g.to_ck_args()


# ---------------------------------------------------------------------- CK's int32 bounds, -mode
from ckfmha.limits import INT32_MAX  # noqa: E402
from ckfmha.problem import INT32_FIELDS  # noqa: E402


@pytest.mark.parametrize("name", INT32_FIELDS)
def test_every_int32_field_is_bounded(name):
    with pytest.raises(ProblemError) as e:
        Problem(**{name: INT32_MAX + 1})
    assert str(e.value).startswith(f"{name}: 2147483648 exceeds INT32_MAX = 2147483647")


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(mode="group", batch=2, seqlens_q=(1, INT32_MAX + 1)), "seqlens_q[1]: 2147483648 exceeds INT32_MAX"),
        (
            dict(mode="group", batch=2, seqlens_q=(1, 1), seqlens_k=(2**32, 1)),
            "seqlens_k[0]: 4294967296 exceeds INT32_MAX",
        ),
        (dict(mode="group", batch=1, seqlens_q=(1,), seqlens_k=(1,), s_kpad=(2**31,)), "s_kpad[0]: 2147483648 exceeds"),
        (
            dict(mode="group", batch=3, seqlens_q=(2**30, 2**30, 5)),
            "seqlens_q: (1073741824, 1073741824, 5) sums to 2147483653 query tokens, which exceeds INT32_MAX",
        ),
        (
            dict(mode="group", batch=2**20, seqlen_q=2**12),
            "seqlens_q: (4096,) * 1048576 sums to 4294967296 query tokens",
        ),
        (
            dict(mode="group", batch=2, seqlens_q=(1, 1), seqlens_k=(1, 1), s_kpad=(2**30, 2**30)),
            "s_kpad: (1073741824, 1073741824) sums to 2147483648 physical key tokens",
        ),
        (
            dict(mode="group", batch=2, seqlen_q=4, seqlen_k=2**30 + 1),
            "seqlens_k: (1073741825,) * 2 sums to 2147483650 physical key tokens",
        ),
    ],
)
def test_int32_bounds_of_lengths_and_group_totals(kw, msg):
    with pytest.raises(ProblemError) as e:
        Problem(**kw)
    assert msg in str(e.value)


def test_int32_max_itself_is_allowed():
    assert Problem(seqlen_q=1, seqlen_k=INT32_MAX).seqlen_k == INT32_MAX
    g = Problem(mode="group", batch=2, seqlens_q=(2**30, 2**30 - 1), seqlens_k=(1, 1))
    assert g.seqstart_q[-1] == INT32_MAX


@pytest.mark.parametrize(
    "args,msg",
    [
        ("-s=2147483648", "seqlen_q: 2147483648 exceeds INT32_MAX = 2147483647"),
        ("-b=4294967296", "batch: 4294967296 exceeds INT32_MAX"),
        # group mode used to build a 4-billion-entry length list before any check
        ("-mode=1 -b=4294967296", "batch: 4294967296 exceeds INT32_MAX"),
        ("-mode=1 -b=4294967296 -s_kpad=8", "batch: 4294967296 exceeds INT32_MAX"),
        ("-mode=1 -b=3 -s=1000000000", "seqlens_q: (1000000000,) * 3 sums to 3000000000 query tokens"),
        ("-mode=2", "-mode: 2 is not a mode; allowed: 0 (batch), 1 (group)"),
        ("-mode=-1", "-mode: -1 is not a mode"),
    ],
)
def test_from_ck_args_bounds_and_mode(args, msg):
    with pytest.raises(ProblemError) as e:
        Problem.from_ck_args(args + " -d=64")
    assert msg in str(e.value)


def test_from_ck_args_group_lengths_not_given_are_ck_random_draws():
    # utils.hpp generate_seqlens: the sequences past the given ones keep the last query length; their key lengths
    # start at the last given one and move by CK's seeded random walk (sum kept, each within [1, s_kpad]); the
    # draws are those of the runner's std::mt19937 seeded with -seed (default 11939), ckfmha.ck_seqlens
    g = Problem.from_ck_args("-mode=1 -b=3 -s=7 -s_k=9 -s_kpad=12 -d=64")
    assert g.seqlens_q == (7, 7, 7) and g.seqlens_k == (9, 12, 6) and g.s_kpad == (12, 12, 12)
    assert sum(g.seqlens_k) == 3 * 9
    assert Problem.from_ck_args("-mode=1 -b=3 -s=7 -s_k=9 -s_kpad=12 -d=64 -seed=5").seqlens_k != g.seqlens_k
    assert Problem.from_ck_args(g.to_ck_args()) == g
    g = Problem.from_ck_args("-mode=1 -b=2 -s=5,6 -d=64")
    assert g.seqlens_k == (5, 6)


@pytest.mark.parametrize(
    "word,ck", [("none", "0"), ("no_mask", "0"), ("causal", "t"), ("top_left", "t"), ("bottom_right", "b")]
)
def test_problem_takes_the_mask_words(word, ck):
    assert Problem(mask=word).mask == MaskSpec.parse(ck)


# ------------------------------------------------------------------ the argument forms CK's own scripts and logs use
# CK's ArgParser (ck_tile/host/arg_parser.hpp) reads scalars with atoi/atof (the leading number) and lists with
# get_int_vec (split at every comma, an empty item is atoi("") = 0); mask.hpp of newer CK reads t:l,r,sink.
def _real_log_commands() -> list[str]:
    """The commands of tests/data/upstream_lines/fwd_res_sink.txt (verbatim from CK's res_sink.log)."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "upstream_lines" / "fwd_res_sink.txt").read_text()
    return [ln[2:] for ln in text.splitlines() if ln.startswith("$ ")]


def test_scalar_with_a_trailing_comma_is_the_number():
    p = Problem.from_ck_args("-prec=fp16 -b=1 -h=1 -d=16, -d_v=32 -s=128 -p_drop=0.2, -lse=1,")
    assert (p.hdim_q, p.hdim_v, p.p_drop, p.lse) == (16, 32, 0.2, True)


@pytest.mark.parametrize(
    "args,msg",
    [
        (
            "-d=16,32",
            "-d: '16,32' is a list, but -d takes one number (CK's parser would read the leading '16' and ignore "
            "the rest)",
        ),
        ("-b=2,,", "-b: '2,,' is a list, but -b takes one number"),
        ("-d=,", "-d: ',' is not an integer"),
        ("-p_drop=0.1,0.2", "-p_drop: '0.1,0.2' is a list, but -p_drop takes one number"),
        ("-mode=1 -b=2 -s=4,x", "-s: '4,x' has 'x', which is not an integer"),
        (
            "-mask=t:2,0,4",
            "-mask: 't:2,0,4' has sink component 4 (StreamingLLM sink tokens, CK's mask_info.sink / "
            "sink_size), which ckfmha does not model; only sink 0 is accepted",
        ),
        ("-mask=b:1,0,2", "-mask: 'b:1,0,2' has sink component 2"),
        ("-mask=t:2,0,-1", "sink component -1: the number of sink tokens must be >= 0"),
        ("-mask=g:1,2,3", "invalid mask value 'g:1,2,3' ('2,3' is not an integer)"),
        (
            "-mode=1 -s_qpad=1152,896",
            "-s_qpad: '1152,896': tile_example_fmha_fwd refuses the line: qpad must be greater than or equal to "
            "seqlen for q",
        ),
    ],
)
def test_ck_argument_forms_rejected_with_the_rule(args, msg):
    with pytest.raises(ProblemError) as e:
        Problem.from_ck_args(args + " -h=1 -b=2" if "-b=" not in args else args + " -h=1")
    assert msg in str(e.value)


def test_batch_list_with_an_empty_item_runs_its_first_length_as_in_ck():
    # get_int_vec reads '16,' as 16, 0; batch mode uses the first (utils.hpp generate_missing_seqlens)
    run = Problem.ck_run_from_args("-s=16, -h=1 -b=2 -d=64")
    assert (run.problem.seqlen_q, run.problem.seqlen_k) == (16, 16)
    assert run.unannounced == ("-s: batch mode uses the first length 16 and ignores [0]",)


def test_batch_effective_query_lengths_are_modelled():
    # fmha_fwd_runner.hpp: -q_eff_lens is cu_seqlen_q (logical lengths inside the batch stride -s)
    p = Problem.from_ck_args("-q_eff_lens=1024,960 -h=1 -b=2 -d=64")
    assert (p.seqlen_q, p.q_eff_lens, p.seqlens_q_list) == (3328, (1024, 960), (1024, 960))
    assert p.kv_eff_lens is None
    assert Problem.from_ck_args(p.to_ck_args()) == p


def test_group_list_with_an_empty_item_is_a_zero_length_as_in_ck():
    g = Problem.from_ck_args("-mode=1 -b=2 -s=16, -d=64")
    assert g.seqlens_q == (16, 0) and g.seqlens_k == (16, 0)


@pytest.mark.parametrize(
    "mask,ck",
    [
        ("t:2,0,0", "t:2,0"),
        ("b:1,0,0", "b:1,0"),
        ("t:128,30", "t:128,30"),
        ("b:4,35", "b:4,35"),
        ("1", "t"),
        ("2", "b"),
    ],
)
def test_mask_forms_of_ck_scripts(mask, ck):
    p = Problem.from_ck_args(f"-mask={mask} -d=64 -s=256 -s_k=512")
    assert p.mask == MaskSpec.parse(ck) and p.mask.to_ck() == ck


def test_ck_res_sink_log_commands():
    """Each real command: the sink-token masks are rejected naming the sink component; with the sink set to 0 the
    rest parses to what the binary echoed (e.g. ``-d=16,`` is d 16)."""
    cmds = _real_log_commands()
    assert len(cmds) == 8 and all(" -d=16, " in c for c in cmds)
    for cmd in cmds:
        with pytest.raises(ProblemError, match=r"-mask: '[tb]:[12],0,[24]' has sink component [24] "):
            Problem.from_ck_args(cmd)
        no_sink = cmd.replace("-mask=t:2,0,4", "-mask=t:2,0,0").replace("-mask=b:1,0,2", "-mask=b:1,0,0")
        p = Problem.from_ck_args(no_sink)
        args = dict(t.lstrip("-").split("=", 1) for t in cmd.split()[1:])
        assert p.hdim_q == 16 and p.hdim_v == int(args["d_v"]) and p.batch == int(args["b"])
        assert p.mode is (Mode.GROUP if args["mode"] == "1" else Mode.BATCH)
        assert p.mask.to_ck() in ("t:2,0", "b:1,0")
        assert Problem.from_ck_args(p.to_ck_args()) == p


@pytest.mark.parametrize(
    "cmd",
    [
        # expansions of CK's example/ck_tile/01_fmha/script/smoke_test_fwd.sh (amd-aiter 0.1.7.post2.dev18 tree)
        "-prec=fp16 -mode=1 -b=2 -h=2 -h_k=1 -d=16 -d_v=64 -s=55 -s_k=256 -bias=e -p_drop=0.2 -lse=1 -iperm=0 -operm=0 "
        "-num_splits=1 -page_block_size=0 -cache_batch_idx=0 -kname=1 -v=1 -warmup=0 -repeat=1",
        "-prec=bf16 -mode=0 -b=3 -h=2 -h_k=1 -d=128 -s=200 -s_k=520 -bias=a -p_drop=0.0 -lse=0 -iperm=1 -operm=1 "
        "-mask=t:128,30 -num_splits=3 -page_block_size=0 -cache_batch_idx=1 -kname=1 -v=1 -warmup=0 -repeat=1",
        "-prec=fp16 -mode=0 -b=2 -h=1 -d=64 -s=99 -s_k=32 -bias=n -p_drop=0.0 -lse=1 -iperm=1 -operm=1 -mask=b:4,35 "
        "-num_splits=1 -page_block_size=128 -cache_batch_idx=0 -kname=1 -v=1 -warmup=0 -repeat=1",
        "-prec=fp8 -init=0 -b=2 -h=1 -d=128 -s=128 -bias=n -iperm=0 -operm=0 -vlayout=r -squant=1 -kname=1 -v=1",
        "-prec=fp16 -mode=1 -b=4 -h=4 -d=32 -s=1,127,3,65 -s_k=1,127,3,65 -s_kpad=128 -bias=n -p_drop=0.0 -lse=1",
        "-prec=fp16 -b=3 -h=3 -d=64 -s=63 -s_k=129 -s_knew=64 -rotary_dim=16 -rotary_interleaved=0 "
        "-page_block_size=128 -cache_batch_idx=0 -iperm=1 -operm=1 -kname=1 -v=1",
        # smoke_test_bwd.sh
        "tile_example_fmha_bwd -b=2 -h=3 -h_k=1 -s=244 -s_k=499 -mask=b:4,35 -prec=bf16 -d=96 -bias=a -dbias=0 "
        "-p_drop=0.2 -iperm=1 -operm=1 -deterministic=0 -v=1 -mode=1 -kname=1 -v=1",
    ],
)
def test_ck_smoke_script_forms_parse(cmd):
    p = Problem.from_ck_args(cmd)
    assert Problem.from_ck_args(p.to_ck_command()) == p


# ------------------------------------------------------------------ validate: rule groups and their tables
from ckfmha.problem import BWD_UNDEFINED_FIELDS, NUMERIC_RANGES  # noqa: E402


@pytest.mark.parametrize(
    "kw,msg",
    [
        # within a group, and across groups, the first violated rule is the error
        (dict(nhead_q=8, nhead_k=3, hdim_q=512), "nhead_k: 3 does not divide nhead_q=8"),
        (dict(hdim_q=0, seqlen_q=0), "hdim_q: 0 must be >= 1"),
        (dict(seqlen_q=0, p_drop=1.0), "seqlen_q: 0 must be >= 1 in batch mode"),
        (dict(p_drop=1.0, bias_rank=1), "p_drop: 1.0 must be in [0, 1)"),
        (dict(bias_rank=1, dtype="fp8", lse=True), "bias_rank: 1 must be 0 without a bias"),
        (dict(dtype="fp8", lse=True, deterministic=True), "lse: True is not defined for dtype fp8"),
        (dict(deterministic=True, page_block_size=-1), "deterministic: True is a backward-only option"),
        (dict(family="fwd_pagedkv", page_block_size=100, kv_lookup="vllm"), "page_block_size: 100 must be a multiple"),
        (dict(kv_lookup="vllm", cache_batch_idx=True), "kv_lookup: 'vllm' is only defined for batch_prefill"),
        (
            dict(
                family="fwd_appendkv",
                seqlen_q=4,
                seqlen_k=4,
                seqlen_knew=2,
                rotary_dim=24,
                rope="interleaved",
                vlayout="col",
            ),
            "rotary_dim: 24 must be a multiple of 16",
        ),
    ],
)
def test_validate_reports_the_first_violated_rule_in_group_order(kw, msg):
    with pytest.raises(ProblemError) as e:
        Problem(**kw)
    assert str(e.value).startswith(msg)


@pytest.mark.parametrize(
    "name,bad",
    [("scale", -1.0), ("p_drop", -0.5), ("drop_seed", -1), ("drop_offset", 2**64), ("logits_soft_cap", -2.0)],
)
def test_numeric_ranges_table(name, bad):
    (rule,) = [r for n, _, r in NUMERIC_RANGES if n == name]
    with pytest.raises(ProblemError) as e:
        Problem(**{name: bad})
    assert str(e.value) == f"{name}: {bad!r} {rule}"
    assert [n for n, _, _ in NUMERIC_RANGES] == ["scale", "p_drop", "drop_seed", "drop_offset", "logits_soft_cap"]


@pytest.mark.parametrize(
    "name,on",
    [
        ("lse", True),
        ("sink", True),
        ("logits_soft_cap", 5.0),
        ("page_block_size", 128),
        ("seqlen_knew", 1),
        ("rotary_dim", 16),
        ("cache_batch_idx", True),
    ],
)
def test_forward_only_features_are_rejected_for_the_backward(name, on):
    assert name in BWD_UNDEFINED_FIELDS
    with pytest.raises(ProblemError) as e:
        Problem(family="bwd", **{name: on})
    assert str(e.value) == f"{name}: {on!r} is not defined for the backward (the bwd reference always computes LSE)"


def test_rule_groups_cover_validate_in_a_fixed_order():
    names = [f.__name__ for f in Problem._RULE_GROUPS]
    assert names[:2] == ["_check_int32", "_check_family_and_dtype"] and names[-1] == "_check_v_layout"
    assert len(set(names)) == len(names)
    assert sorted(n for n in vars(Problem) if n.startswith("_check_")) == sorted(names)
