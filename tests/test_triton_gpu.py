"""Triton backend on a GPU: every forward-family feature against the NumPy reference.

Skipped (with the backend's reason) where torch/triton or a GPU is missing, as on CI.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends import get_backend

_backend = get_backend("triton")
_avail = _backend.available()

from ckfmha.dispatcher import Dispatcher  # noqa: E402
from ckfmha.inputs import make_inputs  # noqa: E402
from ckfmha.problem import Problem  # noqa: E402
from ckfmha.reference import reference  # noqa: E402
from ckfmha.registry import Registry  # noqa: E402
from ckfmha.runner import bind_plan  # noqa: E402
from ckfmha.validator import validate  # noqa: E402

_REG: dict = {}


def dispatcher() -> Dispatcher:
    if "d" not in _REG:
        reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
        _REG["d"] = Dispatcher(reg, _backend, num_cus=132)
    return _REG["d"]


def run_plan(p: Problem, seed: int = 0, fp8_format: str = "ocp"):
    inputs = make_inputs(p, seed, fp8_format=fp8_format)
    ref = reference(p, inputs)
    plan = bind_plan(dispatcher().select(p), inputs)  # the stages' outputs in the inputs' fp8 encoding
    tensors = dict(inputs)
    for st in plan.stages:
        kernel = _backend.build(st.kernel)
        tensors.update(_backend.run_stage(kernel, st, p, tensors).outputs)
    return plan, tensors, ref, inputs


def assert_valid(p: Problem, out: dict, ref: dict, names=("o",)) -> None:
    res = validate(p, out, ref, names=[n for n in names])
    bad = [str(r) for r in res.values() if not r.passed]
    assert not bad, "\n".join(bad)


BASE = dict(batch=2, nhead_q=4, seqlen_q=197, seqlen_k=301, hdim_q=128)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("mask", ["0", "t", "b", "t:37,0", "b:16,16", "g:40,70"])
def test_masks_and_dtypes(dtype: str, mask: str) -> None:
    p = Problem(dtype=dtype, mask=mask, lse=True, **BASE)
    plan, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse"))


@pytest.mark.parametrize(
    "bias, rank", [("elementwise", 0), ("elementwise", 1), ("elementwise", 2), ("alibi", 0), ("alibi", 1)]
)
@pytest.mark.parametrize("mask", ["0", "t", "b:20,5"])
def test_bias_and_alibi(bias: str, rank: int, mask: str) -> None:
    p = Problem(dtype="fp16", bias=bias, bias_rank=rank, mask=mask, **BASE)
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref)


@pytest.mark.parametrize("mask,p_drop", [("0", 0.2), ("b", 0.2), ("b", 0.6)])
def test_dropout_matches_reference_exactly(mask: str, p_drop: float) -> None:
    # p = 0.6: CK's float32 keep threshold is 101 (float64 would give 102); randval is CK's tile order
    p = Problem(dtype="bf16", p_drop=p_drop, drop_seed=0x1234_5678_9ABC, drop_offset=77, lse=True, mask=mask, **BASE)
    from ckfmha.reference.forward import reference_forward

    inputs = make_inputs(p, 3)
    ref = reference_forward(p, inputs, return_randval=True)
    plan = dispatcher().select(p)
    tensors = dict(inputs)
    for st in plan.stages:
        tensors.update(_backend.run_stage(_backend.build(st.kernel), st, p, tensors).outputs)
    # random values are bit-exact wherever the kernel visits (allowed positions)
    allowed = p.mask.allowed(p.seqlen_q, p.seqlen_k)[None, None]
    rv_gpu, rv_ref = tensors["randval"], ref["randval"]
    assert rv_gpu.shape == rv_ref.shape
    mism = (rv_gpu != rv_ref) & allowed
    assert not mism.any(), f"{int(mism.sum())} random values differ, first at {np.argwhere(mism)[0]}"
    assert_valid(p, tensors, ref, ("o", "lse"))


def test_generic_mask_launches_as_cks_bottom_right_window() -> None:
    # -mask=g:y,x: CK's kernels read y, x as the window (left, right) from the bottom-right corner (mask.hpp,
    # make_generic_attention_mask_from_lr_window); BASE has seqlen_q != seqlen_k, where that differs from a
    # top-left window or raw coordinates
    from ckfmha.backends.triton.device import mask_args as _mask_args

    assert _mask_args(Problem(dtype="fp16", mask="g:40,70", **BASE)) == (2, 40, 70, 0, 0, 0)
    assert _mask_args(Problem(dtype="fp16", mask="g:-1,3", **BASE))[:3] == (2, -1, 3)
    assert _mask_args(Problem(dtype="fp16", mask="t:5,2", **BASE))[:3] == (1, 5, 2)
    assert _mask_args(Problem(dtype="fp16", mask="0", **BASE)) == (0, -1, 0, 0, 0, 2)  # ALiBi: bottom-right


@pytest.mark.parametrize("cap", [0.0, 10.0])
@pytest.mark.parametrize("sink", [False, True])
def test_softcap_and_sink(cap: float, sink: bool) -> None:
    p = Problem(dtype="fp16", logits_soft_cap=cap, sink=sink, lse=True, mask="t", **BASE)
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse"))


@pytest.mark.parametrize("hq, hk", [(8, 2), (8, 1)])
def test_gqa_mqa(hq: int, hk: int) -> None:
    p = Problem(dtype="bf16", batch=2, nhead_q=hq, nhead_k=hk, seqlen_q=128, seqlen_k=256, hdim_q=64)
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref)


@pytest.mark.parametrize("hdims", [(192, 128), (80, 80), (256, 256), (32, 32), (96, 96)])
def test_head_dims(hdims) -> None:
    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=130, seqlen_k=200, hdim_q=hdims[0], hdim_v=hdims[1])
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref)


@pytest.mark.parametrize("layouts", [("bshd", "bshd"), ("bhsd", "bshd"), ("bshd", "bhsd")])
def test_layouts(layouts) -> None:
    p = Problem(dtype="fp16", input_layout=layouts[0], output_layout=layouts[1], lse=True, **BASE)
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse"))


def test_group_mode_uneven_lengths() -> None:
    p = Problem(
        dtype="fp16",
        mode="group",
        batch=3,
        nhead_q=4,
        nhead_k=2,
        seqlens_q=(1, 130, 77),
        seqlens_k=(5, 300, 64),
        hdim_q=128,
        mask="b",
        lse=True,
    )
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse"))


@pytest.mark.parametrize("qscale", ["pertensor", "blockscale"])
@pytest.mark.parametrize("dtype", ["fp8bf16", "fp8fp32"])
def test_fp8(dtype: str, qscale: str) -> None:
    p = Problem(dtype=dtype, qscale=qscale, batch=1, nhead_q=2, seqlen_q=256, seqlen_k=384, hdim_q=128, mask="t")
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref)


def test_aligned_shape_selects_a_no_pad_kernel_and_unaligned_is_rejected() -> None:
    p = Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=256, seqlen_k=512, hdim_q=128)
    plan, out, ref, _ = run_plan(p)
    k = plan.stages[0].kernel
    assert (k.pad_s, k.pad_sk) == (0, 0)
    assert_valid(p, out, ref)
    from ckfmha.backends.triton.device import PreconditionError, check_preconditions

    with pytest.raises(PreconditionError, match="not a multiple of bm0"):
        check_preconditions(k, Problem(dtype="fp16", batch=1, nhead_q=1, seqlen_q=200, seqlen_k=512, hdim_q=128))


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("mask", ["0", "b"])
def test_splitkv_and_combine(paged: bool, mask: str) -> None:
    kw = dict(
        family="fwd_splitkv",
        dtype="fp16",
        batch=2,
        nhead_q=8,
        nhead_k=2,
        seqlen_q=1,
        seqlen_k=1000,
        hdim_q=128,
        num_splits=3,
        mask=mask,
        lse=True,
    )
    if paged:
        kw["page_block_size"] = 128
    p = Problem(**kw)
    plan, out, ref, _ = run_plan(p)
    assert [s.role.value for s in plan.stages] == ["splitkv", "combine"]
    assert_valid(p, out, ref, ("o", "lse"))
    # the partials match the reference's per-split partial results too
    res = validate(p, {"o": out["o_acc"], "lse": out["lse_acc"]}, {"o": ref["o_acc"], "lse": ref["lse_acc"]})
    assert all(r.passed for r in res.values()), [str(r) for r in res.values()]


@pytest.mark.parametrize(
    "kw",
    [
        dict(mask="0"),
        dict(mask="b"),
        dict(family="fwd_splitkv", num_splits=3, mask="b"),
        dict(family="fwd_splitkv", num_splits=2, mask="0", seqlen_q=1),
    ],
)
def test_batch_mode_per_batch_key_lengths(kw: dict) -> None:
    """kv_eff_lens without a cache_seqlens input (FA's KV-cache call with cache_seqlens on a contiguous cache): the
    launcher hands the kernel the per-batch key counts (CK's seqlen_k_ptr), one batch without keys included."""
    base = dict(dtype="fp16", batch=3, nhead_q=4, nhead_k=2, seqlen_q=37, seqlen_k=300, hdim_q=64, lse=True)
    p = Problem(**{**base, **kw}, kv_eff_lens=(300, 123, 0))
    plan, out, ref, _ = run_plan(p)
    assert "cache_seqlens" not in make_inputs(p, 0)
    assert_valid(p, out, ref, ("o", "lse"))


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_pagedkv(layout: str) -> None:
    p = Problem(
        family="fwd_pagedkv",
        dtype="bf16",
        batch=2,
        nhead_q=4,
        nhead_k=4,
        seqlen_q=100,
        seqlen_k=700,
        hdim_q=128,
        page_block_size=128,
        mask="b",
        input_layout=layout,
        output_layout=layout,
    )
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref)


def test_fp8_fnuz_inputs_widened_exactly() -> None:
    # AMD's e4m3fnuz inputs (what CK arch spaces use) have no NVIDIA type: the backend widens them to bf16
    p = Problem(dtype="fp8bf16", qscale="pertensor", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=256, hdim_q=128)
    _, out, ref, _ = run_plan(p, fp8_format="fnuz")
    assert_valid(p, out, ref)


def test_splitkv_with_cache_batch_idx() -> None:
    p = Problem(
        family="fwd_splitkv",
        dtype="bf16",
        batch=3,
        nhead_q=4,
        nhead_k=2,
        seqlen_q=1,
        seqlen_k=300,
        hdim_q=128,
        num_splits=2,
        cache_batch_idx=True,
        lse=True,
    )
    _, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse"))


def test_skip_min_seqlen_q() -> None:
    p = Problem(
        dtype="bf16",
        mode="group",
        batch=3,
        nhead_q=4,
        seqlens_q=(1, 200, 7),
        seqlens_k=(5, 333, 9),
        hdim_q=128,
        min_seqlen_q=7,
        lse=True,
    )
    plan, out, ref, _ = run_plan(p)
    assert plan.stages[0].kernel.skip_min_seqlen_q
    assert_valid(p, out, ref, ("o", "lse"))  # skipped rows: NaN in both (the poison stays)


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("fuse_tail", [False, True])
@pytest.mark.parametrize("mask", ["t", "b", "b:16,16", "g:40,70"])
def test_masked_edge_blocks_inside_or_after_the_pipelined_loop(mask: str, fuse_tail: bool, tma: bool) -> None:
    # aligned keys (no-pad kernel): the trailing masked blocks run in the pipelined loop (FUSE_TAIL) or apart;
    # with and without TMA loads; a short masked problem selects the 64x64 tile (heuristics short_query_tiles)
    import torch

    from ckfmha.backends.triton.device import out_torch_dtype, to_numpy, to_torch
    from ckfmha.backends.triton.launch import attention_launcher
    from ckfmha.inputs import lse_shape, o_shape

    p = Problem(dtype="bf16", batch=2, nhead_q=4, seqlen_q=256, seqlen_k=384, hdim_q=128, mask=mask, lse=True)
    k = dispatcher().select(p).stages[0].kernel
    assert (k.pad_s, k.pad_sk, tuple(k.algorithm.tile[:2])) == (0, 0, (64, 64))
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)
    t = {name: to_torch(inputs[name]) for name in ("q", "k", "v")}
    t["o"] = torch.full(o_shape(p), float("nan"), dtype=out_torch_dtype(p.dtype), device="cuda")
    t["lse"] = torch.full(lse_shape(p), float("nan"), dtype=torch.float32, device="cuda")
    attention_launcher(k, p, t, tma=tma, fuse_tail=fuse_tail)()
    torch.cuda.synchronize()
    assert_valid(p, {"o": to_numpy(t["o"]), "lse": to_numpy(t["lse"])}, ref, ("o", "lse"))


@pytest.mark.parametrize(
    "kw",
    [
        dict(seqlen_q=33, seqlen_k=0),
        dict(seqlen_q=33, seqlen_k=0, input_layout="bshd", output_layout="bshd", lse=True),
        dict(mode="group", batch=2, seqlens_q=(33, 5), seqlens_k=(0, 7), lse=True),
        dict(family="fwd_splitkv", seqlen_q=33, seqlen_k=0, num_splits=2, lse=True),
    ],
    ids=["batch", "bshd", "group", "splitkv"],
)
def test_no_keys(kw: dict) -> None:
    """CK's smoke tests run ``-s_k=0``: no keys, O = 0 and LSE = -inf as CK's reference (found on an H100: the
    contiguity check and the TMA descriptor refused the empty K/V tensors)."""
    p = Problem(dtype="fp16", nhead_q=2, hdim_q=64, **{"batch": 1, **kw})
    plan, out, ref, _ = run_plan(p)
    assert_valid(p, out, ref, ("o", "lse") if p.lse else ("o",))


@pytest.mark.parametrize("lpt_heads", [0, 3])
@pytest.mark.parametrize("qk_ahead", [False, True])
@pytest.mark.parametrize(
    "mask,tma,fuse_tail,shape",
    [
        ("0", False, False, (1, 320, 384)),
        ("0", True, False, (1, 320, 384)),
        ("b", True, True, (1, 320, 384)),
        ("t", False, False, (1, 320, 384)),
        # unaligned keys (a padded kernel: the last key block partial, bounds-masked) in two batches
        ("0", True, True, (2, 130, 301)),
        ("b", True, True, (2, 130, 301)),
        ("g:40,70", False, False, (2, 130, 301)),
    ],
)
def test_hopper_variants_match_the_reference(
    mask: str, tma: bool, fuse_tail: bool, shape: tuple, qk_ahead: bool, lpt_heads: int
) -> None:
    """The launch variants benchmarks/tune_fwd.py --only hopper measures: Q.K one key block ahead of the softmax
    (plain problems), the one-dimensional longest-first grid over groups of ``lpt_heads`` heads (5 (batch, head)
    pairs: the last group is short), with and without TMA and the fused masked tail; each against the reference."""
    import torch

    from ckfmha.backends.triton.device import out_torch_dtype, to_numpy, to_torch
    from ckfmha.backends.triton.launch import attention_launcher
    from ckfmha.inputs import lse_shape, o_shape

    b, sq, sk = shape
    p = Problem(dtype="fp16", batch=b, nhead_q=5, seqlen_q=sq, seqlen_k=sk, hdim_q=64, mask=mask, lse=True)
    k = dispatcher().select(p).stages[0].kernel
    assert k.pad_sk == (sk % 64 != 0)
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)
    t = {name: to_torch(inputs[name]) for name in ("q", "k", "v")}
    t["o"] = torch.full(o_shape(p), float("nan"), dtype=out_torch_dtype(p.dtype), device=t["q"].device)
    t["lse"] = torch.full(lse_shape(p), float("nan"), dtype=torch.float32, device=t["q"].device)
    attention_launcher(k, p, t, tma=tma, fuse_tail=fuse_tail, qk_ahead=qk_ahead, lpt_heads=lpt_heads)()
    assert_valid(p, {"o": to_numpy(t["o"]), "lse": to_numpy(t["lse"])}, ref, ("o", "lse"))


def test_hopper_variants_refuse_what_they_cannot_serve() -> None:
    import torch

    from ckfmha.backends.triton.device import to_torch
    from ckfmha.backends.triton.launch import attention_launcher

    p = Problem(dtype="fp16", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=64, bias="elementwise")
    k = dispatcher().select(p).stages[0].kernel
    inputs = make_inputs(p, 0)
    t = {name: to_torch(inputs[name]) for name in ("q", "k", "v", "bias")}
    t["o"] = torch.empty_like(t["q"])
    with pytest.raises(ValueError, match="qk_ahead=True: .*plain problems only; this one has bias=elementwise"):
        attention_launcher(k, p, t, qk_ahead=True)
    with pytest.raises(ValueError, match="lpt_heads=-1: .*>= 0"):
        attention_launcher(k, p, t, lpt_heads=-1)
    g = Problem(dtype="fp16", mode="group", batch=2, nhead_q=2, seqlens_q=(64, 30), seqlens_k=(64, 40), hdim_q=64)
    kg = dispatcher().select(g).stages[0].kernel
    tg = {
        name: to_torch(arr)
        for name, arr in make_inputs(g, 0).items()
        if name in ("q", "k", "v", "seqstart_q", "seqstart_k")
    }
    tg["o"] = torch.empty_like(tg["q"])
    with pytest.raises(
        ValueError, match="lpt_heads=4: .*batch mode without packed GQA rows; this problem has mode=group"
    ):
        attention_launcher(kg, g, tg, lpt_heads=4)


@pytest.fixture
def launched(monkeypatch) -> list:
    """The constexpr meta of every forward-attention launch of the test (the launcher's own call, recorded)."""
    from ckfmha.backends.triton import launch

    seen: list = []
    real = launch.launch_fitting_stages

    def record(kern, grid, args, meta, num_warps):
        seen.append(dict(meta, grid=grid))
        return real(kern, grid, args, meta, num_warps)

    monkeypatch.setattr(launch, "launch_fitting_stages", record)
    return seen


@pytest.mark.parametrize(
    "kw,expected",
    [
        (dict(mask="b"), (True, 8)),
        (dict(mask="t", bias="alibi"), (False, 8)),
        (dict(mask="b", mode="group", batch=2, seqlens_q=(130, 70), seqlens_k=(200, 90)), (True, 0)),
    ],
    ids=["plain", "alibi", "group"],
)
def test_masked_hdim256_takes_its_launch_variants_where_the_problem_fits(kw: dict, expected: tuple, launched) -> None:
    """data/heuristics.yaml gives masked hdim-256 fwd kernels Q.K ahead and the longest-first grid: the plan's
    stage carries them, the launch applies what the problem can take (no Q.K ahead with ALiBi, no longest-first
    grid in group mode) and the result matches the reference."""
    p = Problem(**{"dtype": "fp16", "batch": 1, "nhead_q": 3, "seqlen_q": 192, "seqlen_k": 256, "hdim_q": 256, **kw})
    plan, out, ref, _ = run_plan(p)
    assert plan.stages[0].kernel.hdim_q == 256
    assert plan.stages[0].launch.variant.as_stage_args() == {"qk_ahead": True, "lpt_heads": 8}
    assert (launched[-1]["QK_AHEAD"], launched[-1]["LPT_HEADS"]) == expected
    if expected[1]:  # the longest-first grid is one-dimensional
        assert launched[-1]["grid"][1] == 1
    assert_valid(p, out, ref)


def test_a_table_without_launch_variants_launches_without_them(launched) -> None:
    """The dispatcher's own table decides the launch variants (they travel on the plan's stage): a table with no
    ``launch_variants`` gives a masked hdim-256 plan none, and the launch takes none."""
    from ckfmha.heuristics import Heuristics, load_heuristics

    real = load_heuristics()
    reg = dispatcher().registry
    d = Dispatcher(
        reg,
        _backend,
        num_cus=132,
        heuristics=Heuristics("test: no launch_variants", real.rules, real.short_query_tiles),
    )
    p = Problem(dtype="fp16", batch=1, nhead_q=3, seqlen_q=192, seqlen_k=256, hdim_q=256, mask="b")
    plan = d.select(p)
    assert plan.stages[0].launch.variant.as_stage_args() == {}
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)
    tensors = dict(inputs)
    tensors.update(_backend.run_stage(_backend.build(plan.stages[0].kernel), plan.stages[0], p, tensors).outputs)
    assert (launched[-1]["QK_AHEAD"], launched[-1]["LPT_HEADS"]) == (False, 0)
    assert_valid(p, tensors, ref)


def test_a_compile_is_counted_once_as_build_and_never_as_run_time() -> None:
    # build compiles nothing; the first launch of a specialization compiles (unless Triton's disk cache has it) and
    # says so (compile_seconds, no device time); another shape of the same kernel -- lengths of another
    # divisibility class, other batch and heads: not specialized on -- compiles nothing
    from ckfmha.backends.triton.device import COMPILES_COUNTED

    assert COMPILES_COUNTED, "Triton has no compilation listener: compiles cannot be counted"
    p = Problem(dtype="fp16", mask="b:13,7", lse=True, batch=3, nhead_q=5, seqlen_q=77, seqlen_k=91, hdim_q=96)
    st = dispatcher().select(p).stages[0]
    kernel = _backend.build(st.kernel)
    assert kernel.build_seconds == 0.0 and kernel.cached
    first = _backend.run_stage(kernel, st, p, make_inputs(p, 0), timing=True)
    assert first.compile_seconds == 0.0 or first.device_ms is None  # a compiling launch has no device time
    p2 = Problem(dtype="fp16", mask="b:13,7", lse=True, batch=2, nhead_q=3, seqlen_q=64, seqlen_k=96, hdim_q=96)
    st2 = dispatcher().select(p2).stages[0]
    assert st2.kernel == st.kernel
    second = _backend.run_stage(kernel, st2, p2, make_inputs(p2, 1), timing=True)
    assert second.compile_seconds == 0.0 and second.device_ms is not None and second.device_ms > 0
