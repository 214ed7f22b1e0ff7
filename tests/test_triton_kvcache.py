"""Triton KV-cache families (fwd_appendkv, batch_prefill) against the NumPy reference, and their sm90 plans.

The kernel tests run on a GPU, or on the CPU under ``TRITON_INTERPRET=1`` (small shapes there; realistic ones on a
GPU); they are skipped with the backend's reason where neither is there, as on CI. bf16 runs on the GPU only
(the interpreter computes bf16 through NumPy, which has no bf16: garbage values). The planning tests need no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends import get_backend
from ckfmha.dispatcher import Dispatcher, NoKernelError
from ckfmha.inputs import make_inputs
from ckfmha.kernel import Family
from ckfmha.matrix import load_matrix_file
from ckfmha.problem import Problem
from ckfmha.reference import reference
from ckfmha.registry import Registry
from ckfmha.runner import prepare_tensors
from ckfmha.validator import validate

_backend = get_backend("triton")
_avail = _backend.available()


def _interpreting() -> bool:
    if not _avail:
        return False
    from ckfmha.backends.triton.backend import interpreting

    return interpreting()


SMALL = _interpreting()
_REG: dict = {}


def dispatcher() -> Dispatcher:
    if "d" not in _REG:
        reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
        _REG["d"] = Dispatcher(reg, _backend, num_cus=132)
    return _REG["d"]


def _skip_bf16_in_interpreter(dtype: str) -> None:
    if SMALL and dtype == "bf16":
        pytest.skip("bf16 in the Triton interpreter computes garbage (NumPy has no bf16); runs on a GPU")


def run_and_validate(p: Problem, tamper=None) -> dict:
    """Run the sm90 plan of ``p`` on the triton backend (``tamper(stage, tensors)`` before each stage: fault
    injection) and validate every output the reference has; returns the validation results."""
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)
    plan = dispatcher().select(p)
    tensors, names = prepare_tensors(p, plan, inputs)
    for st in plan.stages:
        if tamper is not None:
            tamper(st, tensors)
        tensors.update(_backend.run_stage(_backend.build(st.kernel), st, p, tensors).outputs)
    return validate(p, tensors, ref, names=[n for n in names if n in ref])


def assert_passes(p: Problem) -> None:
    res = run_and_validate(p)
    bad = [str(r) for r in res.values() if not r.passed]
    assert not bad, "\n".join(bad)


def _append(**kw) -> Problem:
    base = (
        dict(batch=2, nhead_q=4, nhead_k=2, seqlen_q=1, seqlen_k=40, seqlen_knew=3, hdim_q=64)
        if SMALL
        else dict(batch=3, nhead_q=8, nhead_k=2, seqlen_q=1, seqlen_k=263, seqlen_knew=17, hdim_q=128)
    )
    return Problem(family="fwd_appendkv", **{**base, **kw})


def _prefill(**kw) -> Problem:
    base = (
        dict(batch=3, nhead_q=4, nhead_k=1, hdim_q=64, seqlens_q=[5, 33, 1], seqlens_k=[40, 33, 100])
        if SMALL
        else dict(batch=3, nhead_q=8, nhead_k=2, hdim_q=128, seqlens_q=[197, 1, 256], seqlens_k=[301, 129, 256])
    )
    return Problem(family="batch_prefill", mode="group", **{**base, **kw})


# ------------------------------------------------------------------------------------------ append-KV
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "rope, rotary_dim, mask",
    [
        ("none", 0, "0"),
        ("interleaved", 32, "0"),
        ("half_rotated", 48, "0"),
        ("interleaved", 16, "b"),
        ("half_rotated", 32, "b"),
    ],
)
def test_appendkv_contiguous_rope(dtype: str, rope: str, rotary_dim: int, mask: str) -> None:
    _skip_bf16_in_interpreter(dtype)
    seqlen_q = 1 if mask == "0" else 4
    assert_passes(_append(dtype=dtype, rope=rope, rotary_dim=rotary_dim, mask=mask, seqlen_q=seqlen_q))


@pytest.mark.gpu
@pytest.mark.parametrize("rotary_dim", [0, 32])
def test_appendkv_cache_batch_idx(rotary_dim: int) -> None:
    rope = "interleaved" if rotary_dim else "none"
    p = _append(batch=3, cache_batch_idx=True, rotary_dim=rotary_dim, rope=rope)
    assert dispatcher().roles(p)[1].value == "splitkv"  # cache_batch_idx: the split-KV attention
    assert_passes(p)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2])
@pytest.mark.parametrize("rope, rotary_dim", [("none", 0), ("half_rotated", 32)])
def test_appendkv_paged(num_splits: int, rope: str, rotary_dim: int) -> None:
    p = _append(seqlen_k=300, page_block_size=128, num_splits=num_splits, rope=rope, rotary_dim=rotary_dim)
    assert_passes(p)


@pytest.mark.gpu
@pytest.mark.parametrize("page", [0, 128])
@pytest.mark.parametrize("seqlen_knew", [0, 5])
def test_appendkv_bshd_and_rope_only(page: int, seqlen_knew: int) -> None:
    # bshd inputs (paged caches then (pages, page, hk, d)); seqlen_knew 0: RoPE of q only, the caches untouched
    p = _append(
        input_layout="bshd",
        output_layout="bshd",
        seqlen_k=300,
        page_block_size=page,
        seqlen_knew=seqlen_knew,
        rotary_dim=32,
        rope="half_rotated",
        mask="b",
        seqlen_q=3,
    )
    assert_passes(p)


@pytest.mark.gpu
def test_appendkv_bad_block_table_is_refused_before_writing() -> None:
    from ckfmha.backends.cpu.errors import KernelInputError

    p = _append(seqlen_k=300, page_block_size=128)
    inputs = make_inputs(p, 0)
    inputs["block_table"][1, 2] = 10_000  # the page of the appended keys of sequence 1: not a page of the pools
    plan = dispatcher().select(p)
    tensors, _ = prepare_tensors(p, plan, inputs)
    before = tensors["k_cache"].copy()
    st = plan.stages[0]
    with pytest.raises(KernelInputError, match=r"block_table\[1, 2\]: 10000"):
        _backend.run_stage(_backend.build(st.kernel), st, p, tensors)
    assert np.array_equal(tensors["k_cache"], before)


@pytest.mark.gpu
def test_appendkv_launcher_names_missing_tensors() -> None:
    from ckfmha.backends.triton.device import PreconditionError, to_torch
    from ckfmha.backends.triton.launch_kvcache import appendkv_launcher

    p = _append(rotary_dim=32, rope="interleaved")
    kernel = dispatcher().select(p).stages[0].kernel
    t = {n: to_torch(a) for n, a in make_inputs(p, 0).items() if n not in ("rotary_sin", "vnew")}
    with pytest.raises(PreconditionError, match=r"\['rotary_sin', 'vnew'\] missing; the append-KV stage"):
        appendkv_launcher(kernel, p, t)


@pytest.mark.gpu
def test_validator_catches_a_misplaced_append() -> None:
    # fault: the append kernel reads cache_seqlens one key short for batch 0 -> knew lands one key early
    p = _append()

    def tamper(stage, tensors):
        if stage.role.value == "appendkv":
            tensors["cache_seqlens"] = tensors["cache_seqlens"].copy()
            tensors["cache_seqlens"][0] -= 1

    res = run_and_validate(p, tamper)
    assert not res["k"].passed and not res["v"].passed
    assert res["q"].passed


# ------------------------------------------------------------------------------------------ batch prefill
# the vectorized layout needs a page size divisible by its vector length (CK; the Problem rejects page 1)
TABLE_PAGES = [("linear", 1), ("linear", 16), ("linear", 128), ("vectorized", 16), ("vectorized", 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_lookup", ["vllm", "sglang"])
@pytest.mark.parametrize("kv_layout, page", TABLE_PAGES)
@pytest.mark.parametrize("mask", ["0", "t"])
def test_batch_prefill_tables_layouts_pages(kv_lookup: str, kv_layout: str, page: int, mask: str) -> None:
    p = _prefill(kv_lookup=kv_lookup, kv_layout=kv_layout, page_block_size=page, mask=mask, lse=True)
    assert_passes(p)


FEATURES = [
    dict(mask="b:10,0"),
    dict(mask="t:7,3"),
    dict(mask="g:12,20"),
    dict(lse=True, logits_soft_cap=30.0),
    dict(sink=True, mask="b"),
    dict(sink=True, lse=True),
    dict(bias="alibi", lse=True, mask="b"),
    dict(bias="elementwise"),
    dict(p_drop=0.2, drop_seed=77, drop_offset=3),
    dict(input_layout="bshd", output_layout="bshd", mask="b", lse=True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("kv_lookup, kv_layout", [("sglang", "vectorized"), ("vllm", "linear")])
@pytest.mark.parametrize("features", FEATURES, ids=[",".join(f"{k}={v}" for k, v in f.items()) for f in FEATURES])
def test_batch_prefill_features(kv_lookup: str, kv_layout: str, features: dict) -> None:
    p = _prefill(kv_lookup=kv_lookup, kv_layout=kv_layout, page_block_size=16, nhead_q=4, nhead_k=2, **features)
    assert_passes(p)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, hdim", [("bf16", 128), ("fp16", 256), ("bf16", 256)])
def test_batch_prefill_dtypes_hdims(dtype: str, hdim: int) -> None:
    _skip_bf16_in_interpreter(dtype)
    assert_passes(_prefill(dtype=dtype, hdim_q=hdim, kv_lookup="vllm", kv_layout="vectorized", page_block_size=16))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "qscale, kv_layout, page",
    [("pertensor", "linear", 16), ("kv_blockscale", "linear", 16), ("kv_blockscale", "vectorized", 128)],
)
def test_batch_prefill_fp8(qscale: str, kv_layout: str, page: int) -> None:
    # kv_blockscale: K/V descales per (page, kv-head), read per key (any page size)
    _skip_bf16_in_interpreter("bf16")  # fp8bf16 computes in bf16
    p = _prefill(dtype="fp8bf16", qscale=qscale, kv_lookup="sglang", kv_layout=kv_layout, page_block_size=page)
    assert_passes(p)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "problem",
    [
        dict(
            family="fwd_appendkv",
            batch=2,
            nhead_q=4,
            nhead_k=2,
            seqlen_q=1,
            seqlen_k=300,
            seqlen_knew=5,
            hdim_q=128,
            page_block_size=128,
            rotary_dim=64,
            rope="interleaved",
        ),
        dict(
            family="batch_prefill",
            mode="group",
            batch=2,
            nhead_q=4,
            nhead_k=1,
            hdim_q=128,
            seqlens_q=[9, 40],
            seqlens_k=[50, 40],
            kv_lookup="sglang",
            kv_layout="vectorized",
            page_block_size=16,
            mask="b",
            lse=True,
        ),
    ],
    ids=["appendkv", "batch_prefill"],
)
def test_gfx942_kvcache_configs_run_through_triton(problem: dict) -> None:
    # CK's arch spaces run through the Triton backend for every config its supports() accepts (issue 14 item 2)
    reg = Registry.from_enumeration("gfx942", mask_mode="generic", backend="triton")
    p = Problem(**problem)
    plan = Dispatcher(reg, _backend, num_cus=304).select(p)
    assert plan.stages[0].kernel.arch_tag.value in ("gfx9", "none")
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)
    tensors, names = prepare_tensors(p, plan, inputs)
    for st in plan.stages:
        tensors.update(_backend.run_stage(_backend.build(st.kernel), st, p, tensors).outputs)
    res = validate(p, tensors, ref, names=[n for n in names if n in ref])
    assert all(r.passed for r in res.values()), [str(r) for r in res.values()]


@pytest.mark.gpu
def test_validator_catches_a_wrong_page() -> None:
    # fault: the first page of sequence 0 and the last of sequence 2 swapped in the table the kernel reads (the
    # reference reads the right ones; a swap inside one unmasked sequence would only permute its keys)
    p = _prefill(kv_lookup="sglang", kv_layout="linear", page_block_size=16)

    def tamper(stage, tensors):
        idx = tensors["kv_page_indices"].copy()
        idx[[0, -1]] = idx[[-1, 0]]
        tensors["kv_page_indices"] = idx

    res = run_and_validate(p, tamper)
    assert not res["o"].passed


# ------------------------------------------------------------------------------------------ planning (no GPU)
def _smoke_shapes(name: str) -> list:
    return [s for s in load_matrix_file(f"matrices/{name}") if s.category == "smoke"]


@pytest.mark.parametrize("matrix", ["appendkv.yaml", "batch_prefill.yaml"])
def test_sm90_plans_every_smoke_shape(matrix: str) -> None:
    """Every smoke shape of the KV-cache matrices gets a plan on sm90 with the triton backend."""
    planned, unplanned = [], []
    for s in _smoke_shapes(matrix):
        try:
            dispatcher().select(s.problem)
            planned.append(s)
        except NoKernelError:
            unplanned.append(s)
    assert unplanned == []
    assert len(planned) == {"appendkv.yaml": 17, "batch_prefill.yaml": 21}[matrix]


def test_sm90_kvcache_sections() -> None:
    reg = Registry.from_enumeration("sm90", mask_mode="generic")
    app = [c for c in reg if c.family is Family.FWD_APPENDKV]
    pre = [c for c in reg if c.family is Family.BATCH_PREFILL]
    assert {c.rope.value for c in app} == {"none", "interleaved", "half_rotated"}
    assert {c.paged_kv for c in app} == {False, True}
    assert {c.page_size for c in pre} == {1, 16, 128, 1024}
    assert {c.qscale.value for c in pre} == {"none", "pertensor", "kv_blockscale"}
    assert {(c.kv_lookup_table.value, c.kv_memory_layout.value) for c in pre} == {
        ("vllm", "linear"),
        ("vllm", "vectorized"),
        ("sglang", "linear"),
        ("sglang", "vectorized"),
    }
    assert not [c for c in pre if c.page_size == 1 and c.kv_memory_layout.value == "vectorized"]
    assert all(_backend.supports(c) is None for c in app + pre)


def test_kv_blockscale_is_realized_for_batch_prefill_only() -> None:
    from dataclasses import replace

    from ckfmha.kernel import QScale

    reg = Registry.from_enumeration("sm90", mask_mode="generic")
    fwd = next(c for c in reg if c.family is Family.FWD and c.dtype.value == "fp8bf16")
    pre = next(c for c in reg if c.family is Family.BATCH_PREFILL and c.qscale is QScale.KV_BLOCKSCALE)
    assert _backend.supports(pre) is None
    bad = replace(fwd, signature=replace(fwd.signature, qscale=QScale.KV_BLOCKSCALE))
    assert _backend.supports(bad) == "qscale kv_blockscale (per-page K/V descales) is realized for batch prefill only"
