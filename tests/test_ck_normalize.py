"""CK's runner normalizations (ckfmha.ck_args.ck_run_from_args), the runner's random lengths (ckfmha.ck_seqlens)
and the reference's honouring of the padded layouts they produce."""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha import Problem
from ckfmha.ck_args import CKRefusal, CKRun, ck_run_from_args, problem_from_ck_args
from ckfmha.ck_seqlens import MT19937, CKHostRandom
from ckfmha.inputs import make_inputs
from ckfmha.kernel import Family, Mode
from ckfmha.problem import ProblemError
from ckfmha.reference import reference

DROP = "dropout is not supported by split-kv kernels. ignoring the 'p_drop' option"
PAGED_CBI = "paged-kvcache does not support cache_batch_idx. ignoring the 'cache_batch_idx' option"
GROUP_CBI = "group mode will not use cache_batch_idx. ignoring the 'cache_batch_idx' option"
APPEND_MODE = "fmha_fwd_appendkv() will be invoked. ignoring the 'mode' option"


def test_mt19937_is_the_standards_generator():
    m = MT19937(5489)  # [rand.predef]: the 10000th output of a default-constructed std::mt19937 is 4123659995
    for _ in range(9999):
        m.next()
    assert m.next() == 4123659995


def test_uniform_int_draws_as_libstdcxx():
    # printed by `std::mt19937 e(11939); uniform_int_distribution<>(0,2)(e), (1,519)(e)` x5, g++ 12 (libstdc++)
    r = CKHostRandom(11939)
    got = [x for _ in range(5) for x in (r.uniform_int(0, 2), r.uniform_int(1, 519))]
    assert got == [0, 359, 2, 293, 0, 197, 1, 33, 2, 28]


# (arguments, fwd_apis, announced normalizations (CK's stderr words, fmha_fwd_runner.hpp), expected fields)
NORMALIZED = [
    ("-b=2 -s=55 -s_k=256 -d=64 -p_drop=0.2 -num_splits=2", "all", (DROP,), dict(family="fwd_splitkv", p_drop=0.0)),
    ("-s=64 -d=64 -p_drop=0.2 -page_block_size=128", "all", (DROP,), dict(family="fwd_pagedkv", p_drop=0.0)),
    (
        "-s=64 -d=64 -page_block_size=128 -cache_batch_idx=1",
        "all",
        (PAGED_CBI,),
        dict(family="fwd_pagedkv", cache_batch_idx=False, page_block_size=128),
    ),
    (
        "-mode=1 -b=1 -s=64 -d=64 -cache_batch_idx=1 -num_splits=2 -p_drop=0.2",
        "all",
        (GROUP_CBI, DROP),
        dict(family="fwd_splitkv", cache_batch_idx=False, p_drop=0.0, mode=Mode.GROUP),
    ),
    ("-s=64 -d=64 -num_splits=2", "all", (), dict(family="fwd_splitkv", num_splits=2)),
    (
        "-b=1 -h=3 -d=64 -s=63 -s_k=65 -s_knew=64 -rotary_dim=16 -mode=1",
        "all",
        (APPEND_MODE,),
        dict(family="fwd_appendkv", mode=Mode.BATCH, seqlen_knew=64, rotary_dim=16),
    ),
    (
        "-s=64 -d=64 -num_splits=2 -p_drop=0.2",
        "fwd",
        ("split-kv is not supported. ignoring the 'num_splits' option",),
        dict(family="fwd", num_splits=1, p_drop=0.2),
    ),
    (
        "-s=64 -d=64 -s_knew=8 -rotary_dim=16 -page_block_size=128 -cache_batch_idx=1",
        "fwd",
        (
            "fmha_fwd_appendkv() is not enabled. ignoring the 's_knew' option",
            "rotary embedding is not supported. ignoring the 'rotary_dim' option",
            "paged-kvcache is not supported. ignoring the 'page_block_size' option",
            "split-kv is not supported. ignoring the 'cache_batch_idx' option",
        ),
        dict(family="fwd", seqlen_knew=0, rotary_dim=0, page_block_size=0, cache_batch_idx=False),
    ),
    # not normalizations: padding is honoured (plain fwd), batch mode ignores the group-mode pads silently
    (
        "-b=4 -s=128 -d=64 -q_eff_lens=100,64 -kv_eff_lens=128,7,9,20",
        "all",
        (),
        dict(family="fwd", q_eff_lens=(100, 64, 64, 64), kv_eff_lens=(128, 7, 9, 20)),
    ),
    ("-mode=0 -b=1 -s=16 -d=64 -s_kpad=32", "all", (), dict(mode=Mode.BATCH, s_kpad=None)),
    (
        "-mode=1 -b=2 -s=1,3 -s_k=10,12 -s_qpad=4,4 -s_kpad=32,16 -d=64",
        "all",
        (),
        dict(seqlens_q=(1, 3), seqlens_k=(10, 12), s_qpad=(4, 4), s_kpad=(32, 16)),
    ),
    ("-prec=fp8 -s=128 -d=64 -bias=e -squant=1", "all", (), dict(bias="elementwise", qscale="pertensor")),
]


@pytest.mark.parametrize("args,apis,said,fields", NORMALIZED, ids=[c[0] for c in NORMALIZED])
def test_normalizations_are_the_ones_ck_announces(args, apis, said, fields):
    run = ck_run_from_args(args, fwd_apis=apis)
    assert isinstance(run, CKRun) and run.normalizations == said
    expected = Problem(**{**_as_problem_fields(run.problem), **fields})
    assert run.problem == expected
    assert problem_from_ck_args(args, fwd_apis=apis) == run.problem == Problem.from_ck_args(args, fwd_apis=apis)
    assert Problem.ck_run_from_args(args, fwd_apis=apis) == run


def _as_problem_fields(p: Problem) -> dict:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


@pytest.mark.parametrize(
    "args,words",
    [
        ("-h=8 -h_k=3", "-h_k: '3': tile_example_fmha_fwd refuses the line: nhead:8 must be multiple of nhead_k:3"),
        (
            "-mode=1 -b=1 -s=1 -s_k=10 -s_kpad=32 -num_splits=2",
            "-s_kpad: '32': tile_example_fmha_fwd refuses the line: Padding (physical or effective lengths) is not "
            "supported with appendkv/splitkv/pagedkv pipelines",
        ),
        (
            "-page_block_size=100",
            "-page_block_size: '100': tile_example_fmha_fwd refuses the line: only paged-kvcache block size "
            "divisible by 128 are currently supported",
        ),
        (
            "-prec=fp8 -s_knew=8 -rotary_dim=16",
            "-rotary_dim: '16': tile_example_fmha_fwd refuses the line: rotary embedding is only available for "
            "data type=fp16|bf16",
        ),
        ("-p_drop=1.5", "-p_drop: '1.5': tile_example_fmha_fwd refuses the line: The value of p_drop should be 0~1"),
        (
            "-num_splits=129",
            "-num_splits: '129': tile_example_fmha_fwd refuses the line: num_splits greater than 128 is not supported",
        ),
    ],
)
def test_what_the_runner_refuses_is_a_refusal_in_its_words(args, words):
    with pytest.raises(CKRefusal) as e:
        ck_run_from_args(args)
    assert str(e.value) == words


def test_generated_lengths_are_the_runners_draws():
    # utils.hpp generate_missing_seqlens: the walk keeps the key sum; the query lengths cannot move
    run = ck_run_from_args("-mode=1 -b=3 -s=200 -s_k=520 -d=64")
    assert run.problem.seqlens_q == (200, 200, 200) and run.problem.seqlens_k == (520, 500, 540)
    assert run.unannounced == (
        "-s: lengths of sequences 1..2 generated: seqlens_q (200, 200, 200), seqlens_k (520, 500, 540)",
    )
    other_seed = ck_run_from_args("-mode=1 -b=3 -s=200 -s_k=520 -d=64 -seed=7").problem.seqlens_k
    assert sum(other_seed) == 1560 and other_seed != (520, 500, 540)
    app = ck_run_from_args("-b=3 -d=64 -s=63 -s_k=65 -s_knew=64")
    assert app.problem.kv_eff_lens == (65, 64, 65) and app.problem.cache_seqlens == (1, 0, 1)


def test_walks_too_long_to_replay_and_int32_totals_are_errors_before_any_draw():
    with pytest.raises(ProblemError, match=r"seqlens_q: \(1000000000,\) \* 3 sums to 3000000000 query tokens"):
        ck_run_from_args("-mode=1 -b=3 -s=1000000000 -d=64")
    with pytest.raises(ProblemError, match=r"-b: 1000001 with 1 given lengths: .* random walk of 8000000 steps"):
        ck_run_from_args("-mode=1 -b=1000001 -s=8 -d=64")


def test_direct_construction_stays_strict():
    with pytest.raises(ProblemError, match="q_eff_lens: .* has 2 entries, batch=4"):
        Problem(batch=4, seqlen_q=128, hdim_q=64, q_eff_lens=(100, 64))
    with pytest.raises(ProblemError, match="q_eff_lens: .* is not defined for fwd_splitkv"):
        Problem(family="fwd_splitkv", batch=1, seqlen_q=128, hdim_q=64, q_eff_lens=(100,))
    with pytest.raises(ProblemError, match=r"entry 0 = 200 is not in 0..seqlen_q=128"):
        Problem(batch=1, seqlen_q=128, hdim_q=64, q_eff_lens=(200,))
    with pytest.raises(ProblemError, match="s_qpad: .* entry 0 = 2 < seqlens_q"):
        Problem(mode="group", batch=1, seqlens_q=(3,), hdim_q=64, s_qpad=(2,))
    with pytest.raises(ProblemError, match="p_drop: 0.2 .*split"):
        Problem(family="fwd_splitkv", seqlen_q=64, hdim_q=64, num_splits=2, p_drop=0.2)


def _o_lse(p: Problem, seed: int = 3):
    inputs = make_inputs(p, seed=seed)
    out = reference(p, inputs)
    return inputs, np.asarray(out["o"]), np.asarray(out["lse"])


def test_reference_honours_batch_effective_lengths():
    p = problem_from_ck_args("-b=2 -h=2 -s=32 -d=32 -q_eff_lens=20,32 -kv_eff_lens=9,32 -mask=t")
    inputs, o, lse = _o_lse(p)
    assert p.family is Family.FWD and o.shape == (2, 2, 32, 32)
    assert np.isnan(o[0, :, 20:]).all() and np.isnan(lse[0, :, 20:]).all()  # rows past q_eff_lens: never written
    assert not np.isnan(o[0, :, :20]).any() and not np.isnan(o[1]).any()
    # batch 0 alone, cut to its effective lengths, is the same attention (causal mask over 20 x 9)
    one = Problem(batch=1, nhead_q=2, seqlen_q=20, seqlen_k=9, hdim_q=32, mask="t")
    cut = {n: inputs[n][:1, :, : (20 if n == "q" else 9)] for n in ("q", "k", "v")}
    out1 = reference(one, cut)
    np.testing.assert_allclose(o[0, :, :20], np.asarray(out1["o"])[0], rtol=1e-6, atol=1e-6)
    # an injected fault: taking every key of batch 0 changes the result the reference gives
    full = reference(Problem(batch=1, nhead_q=2, seqlen_q=20, seqlen_k=32, hdim_q=32, mask="t"), {
        "q": inputs["q"][:1, :, :20], "k": inputs["k"][:1], "v": inputs["v"][:1]})  # fmt: skip
    assert not np.allclose(o[0, :, :20], np.asarray(full["o"])[0], atol=1e-3)


def test_reference_leaves_group_query_padding_unwritten():
    p = problem_from_ck_args("-mode=1 -b=2 -h=1 -s=3,5 -s_k=7,4 -s_qpad=8,6 -s_kpad=9,4 -d=32")
    assert p.seqstart_q == (0, 8, 14) and p.seqstart_k == (0, 9, 13) and p.total_q == 14
    _, o, lse = _o_lse(p)
    rows = o[0, 0, :, 0]  # (1, h, total_q, d) in bhsd
    assert np.isnan(rows[3:8]).all() and np.isnan(rows[13:14]).all()
    assert not np.isnan(rows[0:3]).any() and not np.isnan(rows[8:13]).any()
    assert np.isnan(lse[0, 0, 3:8]).all() and np.isfinite(lse[0, 0, 8:13]).all()


def test_paged_kv_without_a_paged_kernel_falls_back_to_split_kv():
    # fmha_fwd_runner.hpp run_fwd: fmha_fwd_pagedkv, and when it has no instance, fmha_fwd_splitkv
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.plan import StageRole
    from ckfmha.registry import Registry

    d = Dispatcher(Registry.from_enumeration("gfx942", families=["fwd_pagedkv", "fwd_splitkv", "fwd_splitkv_combine"]))
    small = problem_from_ck_args("-mode=1 -b=2 -h=2 -h_k=1 -d=16 -d_v=32 -s=55 -s_k=256 -page_block_size=128")
    assert small.family is Family.FWD_PAGEDKV
    assert [s.role for s in d.select(small).stages] == [StageRole.SPLITKV, StageRole.COMBINE]
    assert d.structures(small)[0] == [StageRole.PAGEDKV]  # still the first choice
    served = problem_from_ck_args("-b=1 -h=1 -d=128 -s=128 -s_k=256 -page_block_size=128")
    assert [s.role for s in d.select(served).stages] == [StageRole.PAGEDKV]
