"""ckfmha.rules: one answer to "does kernel c serve problem p in role r" for the dispatcher, the backends' host
checks and the plugin's collection; the dispatcher's public ranked_candidates; no private reach-ins."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckfmha.backends.base import BackendError
from ckfmha.backends.cpu import PreconditionError, make_backend
from ckfmha.dispatcher import Dispatcher
from ckfmha.inputs import make_inputs
from ckfmha.kernel import KernelConfig
from ckfmha.plan import FAMILY_ROLE, PAIRED_ROLE, ROLE_FAMILY, Stage, StageRole, main_role
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from ckfmha.rules import Misfit, RoleRules, fits, misfit, pad_rules, requirements
from tests.test_cpu_backend import cpu_registry, golden_configs

ROOT = Path(__file__).resolve().parents[1]


def fwd_kernel(**kw) -> KernelConfig:
    base = dict(
        family="fwd",
        dtype="fp16",
        mode="batch",
        hdim_q=64,
        hdim_v=64,
        arch_tag="gfx9",
        pipeline="qr",
        tile=[64, 64, 32, 64, 32, 64],
        warps=[[4, 1, 1], [4, 1, 1]],
        warp_tiles=[[32, 32, 16], [32, 32, 16]],
        pad_s=0,
        pad_sk=0,
        pad_d=0,
        pad_dv=0,
    )
    return KernelConfig.make(**{**base, **kw})


def bwd_pad8() -> KernelConfig:
    return next(
        c for c in golden_configs("bwd", "fmha_bwd_d64_", "_fp16_", "_batch_") if c.pad_d == 8 and c.pad_dv == 8
    )


P64 = Problem(batch=1, nhead_q=1, seqlen_q=128, seqlen_k=128, hdim_q=64)


# ------------------------------------------------------------------------------------- the rules, in words
@pytest.mark.parametrize(
    "kernel, problem, role, reason",
    [
        (fwd_kernel(), P64, StageRole.FWD, None),
        (fwd_kernel(), P64, StageRole.PAGEDKV, "family: a fwd kernel cannot run stage pagedkv"),
        (fwd_kernel(dtype="bf16"), P64, StageRole.FWD, "dtype: kernel is bf16, problem is fp16"),
        (fwd_kernel(mode="group"), P64, StageRole.FWD, "mode: kernel is group, problem needs batch"),
        (fwd_kernel(), P64.replace(hdim_q=96, hdim_v=96), StageRole.FWD, "hdim_q: problem 96 exceeds the kernel's 64"),
        (
            fwd_kernel(),
            P64.replace(hdim_q=48, hdim_v=48),
            StageRole.FWD,
            "hdim_q: problem 48 != kernel 64 and the kernel has no hdim_q padding",
        ),
        (fwd_kernel(), P64.replace(mask="t"), StageRole.FWD, "mask: problem needs mask t, kernel has mask=none"),
        (fwd_kernel(), P64.replace(lse=True), StageRole.FWD, "lse: problem needs LSE output, kernel has lse=False"),
        (
            fwd_kernel(),
            P64.replace(seqlen_q=100),
            StageRole.FWD,
            "padding: seqlen_q=100 is not a multiple of the kernel's tile 64 and the kernel has no s padding",
        ),
        (
            fwd_kernel(pad_s=1),
            P64.replace(seqlen_k=0),
            StageRole.FWD,
            "padding: seqlen_k=0 is not a multiple of the kernel's tile 64 and the kernel has no sk padding",
        ),
        (
            fwd_kernel(mode="group", pad_s=1),
            Problem(mode="group", batch=2, nhead_q=1, seqlens_q=(64, 64), hdim_q=64),
            StageRole.FWD,
            "padding: group mode needs a kernel with seqlen padding",
        ),
    ],
)
def test_fits_names_the_first_failed_rule_in_the_dispatchers_words(kernel, problem, role, reason) -> None:
    assert fits(problem, role, kernel) == reason


def test_pad_8_needs_a_multiple_of_8_and_max_seq_len_q_bounds_the_query() -> None:
    c = bwd_pad8()
    p = Problem(
        family="bwd", batch=1, nhead_q=1, seqlen_q=10, hdim_q=36, mask="t", bias="alibi", p_drop=0.2, deterministic=True
    )
    assert fits(p, StageRole.DQ_DK_DV, c) == (
        "hdim_q: problem 36 is not a multiple of 8 (the kernel pads with 8-element alignment)"
    )
    assert fits(p.replace(hdim_q=40, hdim_v=40), StageRole.DQ_DK_DV, c) is None
    short = c.replace(max_seq_len_q=16)
    m = misfit(p.replace(hdim_q=40, hdim_v=40, seqlen_q=17), StageRole.DQ_DK_DV, short)
    assert m == Misfit(
        "max_seq_len_q: problem seqlen_q 17 > the kernel's limit 16",
        "seqlen_q",
        17,
        "exceeds the kernel's max_seq_len_q=16",
    )


def test_combine_reuses_the_pads_of_its_paired_split_kernel() -> None:
    split = next(
        c
        for c in golden_configs("fwd_splitkv", "_d128_", "_fp16_", "_batch_")
        if c.family.value == "fwd_splitkv" and c.pad_s == 1 and c.pad_dv == 1
    )
    combine = next(
        c for c in golden_configs("fwd_splitkv", "combine", "_d128_", "_fp16_", "_batch_") if c.pad_s == 0 and not c.lse
    )
    p = Problem(family="fwd_splitkv", batch=1, nhead_q=1, seqlen_q=64, seqlen_k=512, hdim_q=128, num_splits=2)
    assert fits(p, StageRole.COMBINE, combine) is None
    assert (
        fits(p, StageRole.COMBINE, combine, paired=split)
        == "pad_s: problem needs pad_s=1 like the split kernel, kernel has pad_s=0"
    )
    assert [r.field for r in requirements(p, StageRole.COMBINE, paired=split)][-2:] == ["pad_s", "pad_dv"]


def test_attention_after_append_kv_needs_the_seqlen_k_pad() -> None:
    p = Problem(family="fwd_appendkv", dtype="fp16", seqlen_q=4, seqlen_k=256, seqlen_knew=10, hdim_q=64)
    c = fwd_kernel(pad_s=1, pad_sk=0)
    m = misfit(p, StageRole.FWD, c)
    assert m is not None and m.reason.startswith("padding: after append-KV the attention reads seqlen_k per batch")
    assert (m.argument, m.value) == ("seqlen_k", 256)
    assert misfit(p, StageRole.FWD, c.replace(pad_sk=1)) is None


def test_pad_rules_and_roles_are_one_table() -> None:
    assert [r.tile_name for r in pad_rules(StageRole.APPENDKV, golden_configs("fwd_appendkv", "_fp16_")[0])] == [
        "bs",
        "bsk",
    ]
    assert pad_rules(StageRole.DQ_DK_DV, bwd_pad8()) == ()
    assert all(FAMILY_ROLE[ROLE_FAMILY[r]] is r for r in StageRole)
    assert main_role(Problem(family="bwd", hdim_q=64)) is StageRole.DQ_DK_DV


# ------------------------------------------------------------------------------------- the host checks use them
def test_cpu_launch_misfits_are_precondition_errors_with_the_rules_words() -> None:
    be = make_backend()
    cases = [  # (kernel, role, problem, error class, text)
        (
            fwd_kernel(),
            StageRole.FWD,
            P64.replace(seqlen_q=100),
            PreconditionError,
            "seqlen_q=100: is not a multiple of the kernel's bm0=64 and the kernel has no seqlen_q padding (pad_s=0",
        ),
        (
            fwd_kernel(mode="group"),
            StageRole.FWD,
            Problem(mode="group", batch=2, nhead_q=1, seqlens_q=(64, 64), hdim_q=64),
            PreconditionError,
            "mode=group: variable-length sequences need seqlen_q padding and the kernel has pad_s=0",
        ),
        (
            fwd_kernel(pad_s=1, pad_sk=0),
            StageRole.FWD,
            Problem(family="fwd_appendkv", seqlen_q=4, seqlen_k=256, seqlen_knew=10, hdim_q=64),
            PreconditionError,
            "seqlen_k=256: after append-KV the attention reads seqlen_k per batch",
        ),
        (
            fwd_kernel(pad_s=1, pad_sk=1),
            StageRole.FWD,
            P64.replace(mask="t"),
            BackendError,
            "mask: problem needs mask t, kernel has mask=none",
        ),
    ]
    for c, role, p, cls, text in cases:
        with pytest.raises(cls) as ei:
            be.run_stage(be.build(c), Stage(role, c), p, dict(make_inputs(p, 0)))
        assert str(ei.value) == misfit(p, role, c).message(c.kernel_id)
        assert str(ei.value).startswith(f"{c.kernel_id}: {text}"), str(ei.value)
        assert (cls is PreconditionError) == misfit(p, role, c).launch_check


def test_triton_host_check_is_as_strict_as_the_dispatcher() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from ckfmha.backends.triton.launch import PreconditionError as TritonPrecondition
    from ckfmha.backends.triton.launch import check_preconditions

    group = fwd_kernel(mode="group", pad_s=1, pad_sk=0, pipeline="qr_async")
    p = Problem(mode="group", batch=2, nhead_q=1, seqlens_q=(64, 64), hdim_q=64)
    with pytest.raises(TritonPrecondition, match="mode=group: variable-length sequences need seqlen_k padding"):
        check_preconditions(group, p)
    unaligned = fwd_kernel()
    with pytest.raises(TritonPrecondition, match="not a multiple of bm0"):
        check_preconditions(unaligned, P64.replace(seqlen_q=100))
    check_preconditions(unaligned, P64)


# ------------------------------------------------------------------------------------- the dispatcher's API
PROBLEMS = [
    Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=256, seqlen_k=512, hdim_q=64),
    Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=100, seqlen_k=77, hdim_q=128, mask="b", lse=True),
    Problem(dtype="fp16", mode="group", batch=2, nhead_q=2, seqlens_q=(30, 64), hdim_q=64, mask="t"),
    Problem(family="bwd", dtype="fp16", batch=1, nhead_q=2, seqlen_q=64, hdim_q=64, mask="t"),
    Problem(
        family="fwd_splitkv",
        dtype="fp16",
        batch=1,
        nhead_q=2,
        seqlen_q=1,
        seqlen_k=300,
        hdim_q=128,
        num_splits=3,
        lse=True,
    ),
    Problem(
        family="fwd_appendkv", dtype="fp16", seqlen_q=4, seqlen_k=266, seqlen_knew=10, hdim_q=64, page_block_size=128
    ),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.family.value)
def test_ranked_candidates_are_the_ok_verdicts_of_explain_in_rank_order(problem) -> None:
    d = Dispatcher(cpu_registry(), make_backend())
    explanation = d.explain(problem)
    chosen = {}
    for st in explanation.stages:
        paired = chosen.get(PAIRED_ROLE[st.role]) if st.role in PAIRED_ROLE else None
        ranked = d.ranked_candidates(problem, st.role, paired=paired)
        assert ranked == [v.config for v in st.verdicts if v.ok]
        assert ranked, st.summary()
        chosen[st.role] = st.chosen
        rules = RoleRules(problem, st.role, paired=paired)
        # explain's reasons are the rules' words (plus rule 10, the backend's)
        assert all(
            v.reason == rules.reason(v.config) for v in st.verdicts if not (v.reason or "").startswith("backend ")
        )


def test_ranked_candidates_see_a_registry_that_grew() -> None:
    p = PROBLEMS[0]
    reg = Registry("gfx942", [fwd_kernel(pad_s=1, pad_sk=1)])
    d = Dispatcher(reg)
    assert d.ranked_candidates(p, StageRole.FWD) == [fwd_kernel(pad_s=1, pad_sk=1)]
    reg.add(fwd_kernel())
    assert d.ranked_candidates(p, StageRole.FWD) == [fwd_kernel(), fwd_kernel(pad_s=1, pad_sk=1)]  # no pad first


# ------------------------------------------------------------------------------------- structure
def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out += [(node.module, a.name) for a in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ):
            out.append(("getattr", str(node.args[1].value)))
    return out


def test_no_module_reaches_into_the_dispatchers_privates() -> None:
    """(That no backend imports the dispatcher, and the runner no backend implementation, are the import contracts
    ``backends-below-dispatcher`` and ``runner-uses-backends-by-name`` of pyproject.toml.)"""
    files = sorted((ROOT / "pytest_ckfmha").glob("*.py")) + sorted((ROOT / "ckfmha").rglob("*.py"))
    bad = [
        (f.relative_to(ROOT).as_posix(), m, n)
        for f in files
        for m, n in _imports(f)
        if (m == "ckfmha.dispatcher" and n.startswith("_"))
        or (m == "getattr" and n in ("_first_failed_rule", "_rank", "_requirements"))
    ]
    assert bad == []


def test_the_triton_warmup_problem_fits_every_sm90_kernel() -> None:
    """The Triton backend compiles a kernel by launching it on warmup.synthetic_problem, and its launch check
    applies the dispatcher's rules: every sm90 kernel must fit its own synthetic problem (no GPU needed)."""
    from ckfmha.backends.triton.warmup import synthetic_problem
    from ckfmha.enumeration import enumerate_kernels
    from ckfmha.kernel import Family
    from ckfmha.plan import FAMILY_ROLE
    from ckfmha.rules import fits

    configs = [c for c in enumerate_kernels("sm90") if c.family is not Family.FWD_SPLITKV_COMBINE]
    assert len(configs) > 1000
    bad = [(c.kernel_id, why) for c in configs if (why := fits(synthetic_problem(c), FAMILY_ROLE[c.family], c))]
    assert bad == [], bad[:5]
