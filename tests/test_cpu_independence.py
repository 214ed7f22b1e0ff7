"""The cpu backend (the system under test) shares no computation with the NumPy references (the oracle).

* its own ALiBi, RoPE, K/V gathers and cache writes agree with the references' on random problems;
* injected faults: a wrong ``alibi_bias`` / ``apply_rope`` / ``kv_sources`` / ``write_cache`` in the reference
  changes the reference and leaves the cpu backend's outputs bit for bit unchanged, so comparing the two catches
  the fault; with every function of the forward references made to raise, every family still runs on the cpu;
* (that the backends import nothing of ``ckfmha.reference`` is the import contract
  ``backends-independent-of-reference`` of pyproject.toml, checked by tests/test_import_contracts.py);
* the backend's own input checks (page tables, cache rows, rotary tables) name the tensor, index, value and rule.
"""

from __future__ import annotations

import sys
import types

import ml_dtypes
import numpy as np
import pytest

from ckfmha.backends.common.kv import KVAddressing, PageBlockNavigator, PoolLayout, sequence_kv
from ckfmha.backends.common.rope import rotate, table_rows
from ckfmha.backends.cpu import stages
from ckfmha.backends.cpu.backend import make_plan
from ckfmha.backends.cpu.bias import Alibi, AlibiMode, alibi_mode
from ckfmha.backends.cpu.errors import KernelInputError
from ckfmha.inputs import alibi_slopes, make_inputs, rotary_tables
from ckfmha.masking import MaskSpec
from ckfmha.problem import Problem
from ckfmha.reference import apply_rope, reference
from ckfmha.reference.core import alibi_bias, seq_slice, to_hsd
from ckfmha.reference.pagedkv import kv_sources
from ckfmha.runner import explain, run
from ckfmha.validator import validate
from tests.test_cpu_backend import cpu_registry


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


# ------------------------------------------------------------------------------------ ALiBi
def test_alibi_reproduces_the_pictures_of_ck_block_position_encoding() -> None:
    slopes = np.array([1.0, 0.5], dtype=np.float32)
    rows, cols = np.arange(4), np.arange(6)
    vertical = Alibi(slopes, AlibiMode.VERTICAL, 4, 6).tile(rows, cols)
    assert vertical[0].tolist() == [[0, 1, 2, 3, 4, 5]] * 4
    top_left = Alibi(slopes, AlibiMode.FROM_TOP_LEFT, 4, 6).tile(rows, cols)
    assert (-top_left[0]).tolist() == [[0, 1, 2, 3, 4, 5], [1, 0, 1, 2, 3, 4], [2, 1, 0, 1, 2, 3], [3, 2, 1, 0, 1, 2]]
    bottom_right = Alibi(slopes, AlibiMode.FROM_BOTTOM_RIGHT, 4, 6).tile(rows, cols)
    assert (-bottom_right[0]).tolist() == [
        [2, 1, 0, 1, 2, 3],
        [3, 2, 1, 0, 1, 2],
        [4, 3, 2, 1, 0, 1],
        [5, 4, 3, 2, 1, 0],
    ]
    assert (-bottom_right[1]).tolist() == (0.5 * -bottom_right[0]).tolist()
    tall = Alibi(slopes, AlibiMode.FROM_BOTTOM_RIGHT, 6, 4).tile(np.arange(6), np.arange(4))  # sq > sk
    assert (-tall[0]).tolist()[2:] == [[0, 1, 2, 3], [1, 0, 1, 2], [2, 1, 0, 1], [3, 2, 1, 0]]


@pytest.mark.parametrize(
    "mask, mode",
    [
        ("0", AlibiMode.FROM_BOTTOM_RIGHT),
        ("t", AlibiMode.VERTICAL),
        ("b", AlibiMode.VERTICAL),
        ("t:3,0", AlibiMode.FROM_TOP_LEFT),
        ("b:-1,4", AlibiMode.FROM_BOTTOM_RIGHT),
        ("xt:7", AlibiMode.FROM_TOP_LEFT),
    ],
)
def test_alibi_mode_is_make_alibi_from_lr_mask(mask: str, mode: AlibiMode) -> None:
    assert alibi_mode(MaskSpec.parse(mask)) is mode


def test_alibi_mode_of_a_generic_mask_is_an_error() -> None:
    with pytest.raises(
        KernelInputError,
        match=r"mask: g:2,1 with ALiBi: CK's make_alibi_from_lr_mask casts "
        r"mask_type 3 to an AlibiMode that has no meaning",
    ):
        alibi_mode(MaskSpec.parse("g:2,1"))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mask", ["0", "t", "b", "t:5,2", "b:9,0", "b:-1,3", "xb:12"])
def test_alibi_agrees_with_the_reference_on_random_tiles(seed: int, mask: str) -> None:
    rng = np.random.default_rng(seed)
    sq, sk, hq = int(rng.integers(1, 90)), int(rng.integers(1, 90)), int(rng.integers(1, 9))
    slopes = alibi_slopes(hq) * np.float32(1 + rng.random())
    spec = MaskSpec.parse(mask)
    r0, c0 = int(rng.integers(0, sq)), int(rng.integers(0, sk))
    rows, cols = np.arange(r0, sq), np.arange(c0, sk)
    mine = Alibi(slopes, alibi_mode(spec), sq, sk).tile(rows, cols)
    theirs = alibi_bias(slopes, spec.alibi_mode(), rows, sq, sk, np.float32)[:, :, c0:]
    assert mine.dtype == theirs.dtype == np.float32
    assert np.array_equal(mine, theirs)


# ------------------------------------------------------------------------------------ RoPE
def test_rope_is_cks_float32_rotation() -> None:
    x = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]], dtype=np.float32)  # one head, one row, d = 5, rotary_dim = 4
    cos = np.array([[0.5, 0.25]], dtype=np.float32)
    sin = np.array([[0.75, -1.0]], dtype=np.float32)
    inter = rotate(x, cos, sin, "interleaved", 4)
    assert inter[0, 0].tolist() == [
        1 * 0.5 - 2 * 0.75,
        2 * 0.5 + 1 * 0.75,
        3 * 0.25 - 4 * -1.0,
        4 * 0.25 + 3 * -1.0,
        5.0,
    ]
    half = rotate(x, cos, sin, "half_rotated", 4)
    assert half[0, 0].tolist() == [
        1 * 0.5 - 3 * 0.75,
        2 * 0.25 - 4 * -1.0,
        3 * 0.5 + 1 * 0.75,
        4 * 0.25 + 2 * -1.0,
        5.0,
    ]
    assert inter.dtype == half.dtype == np.float32 and x[0, 0, 0] == 1.0  # a new array
    # float32, not float64: (1 + 2^-23) * (1 - 2^-24) rounds in float32
    e = np.float32(2.0**-23)
    y = rotate(
        np.array([[[1 + e, 0.0]]], dtype=np.float32),
        np.array([[1 - e / 2]], dtype=np.float32),
        np.array([[0.0]], dtype=np.float32),
        "interleaved",
        2,
    )
    assert y[0, 0, 0] == np.float32(1 + e) * np.float32(1 - e / 2)


def test_rope_table_rows_follow_the_appendkv_kernel() -> None:
    assert table_rows(7, 3, per_row=True).tolist() == [7, 8, 9]
    assert table_rows(7, 3, per_row=False).tolist() == [7, 7, 7]  # q of an unmasked problem: row stride 0


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("rope", ["interleaved", "half_rotated"])
@pytest.mark.parametrize("seed", range(3))
def test_rope_agrees_with_the_reference_on_random_rows(dtype: str, rope: str, seed: int) -> None:
    sdt = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16), "fp32": np.dtype(np.float32)}[dtype]
    rng = np.random.default_rng(seed)
    rd = int(rng.choice([16, 32, 64]))
    cos, sin = (t.astype(sdt) for t in rotary_tables(512, rd))
    x = rng.standard_normal((3, 40, 64), dtype=np.float32).astype(sdt)
    pos = rng.integers(0, 512, 40)
    mine = rotate(x, cos[pos], sin[pos], rope, rd)
    theirs = apply_rope(x, cos, sin, pos, rope, rd).astype(sdt)  # the reference: also CK's float32 rotation
    assert mine.dtype == sdt
    assert np.array_equal(mine[..., rd:].view(np.uint8), x[..., rd:].view(np.uint8))  # untouched features
    # two implementations of the same float32 arithmetic: bit-equal results
    assert np.array_equal(mine.view(np.uint8), theirs.view(np.uint8))


# ------------------------------------------------------------------------------------ K/V gathers
GATHER_CASES = {
    "fwd-batch": dict(batch=3, nhead_q=4, nhead_k=2, seqlen_q=5, seqlen_k=77, hdim_q=32),
    "fwd-bshd": dict(batch=2, nhead_q=2, seqlen_q=5, seqlen_k=40, hdim_q=32, input_layout="bshd", output_layout="bshd"),
    "fwd-group-skpad": dict(
        mode="group", batch=3, nhead_q=2, seqlens_q=(3, 1, 4), seqlens_k=(30, 0, 17), s_kpad=(32, 5, 20), hdim_q=32
    ),
    "splitkv-cache-batch-idx": dict(
        family="fwd_splitkv", batch=4, nhead_q=2, seqlen_q=3, seqlen_k=50, hdim_q=32, cache_batch_idx=True, num_splits=2
    ),
    "splitkv-paged": dict(
        family="fwd_splitkv", batch=3, nhead_q=2, seqlen_q=3, seqlen_k=300, hdim_q=32, num_splits=2, page_block_size=128
    ),
    "pagedkv-bhsd": dict(
        family="fwd_pagedkv", batch=2, nhead_q=2, nhead_k=1, seqlen_q=3, seqlen_k=290, hdim_q=32, page_block_size=128
    ),
    "pagedkv-bshd": dict(
        family="fwd_pagedkv",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=257,
        hdim_q=32,
        page_block_size=256,
        input_layout="bshd",
        output_layout="bshd",
    ),
    "prefill-sglang-vectorized": dict(
        family="batch_prefill",
        mode="group",
        batch=3,
        nhead_q=4,
        nhead_k=2,
        seqlens_q=(2, 5, 1),
        seqlens_k=(41, 16, 0),
        hdim_q=32,
        page_block_size=16,
        kv_lookup="sglang",
        kv_layout="vectorized",
    ),
    "prefill-sglang-linear": dict(
        family="batch_prefill",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(2, 5),
        seqlens_k=(9, 33),
        hdim_q=32,
        page_block_size=4,
        kv_lookup="sglang",
        kv_layout="linear",
    ),
    "prefill-vllm-vectorized": dict(
        family="batch_prefill",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(2, 5),
        seqlens_k=(70, 8),
        hdim_q=64,
        page_block_size=32,
        kv_lookup="vllm",
        kv_layout="vectorized",
    ),
    "prefill-vllm-linear": dict(
        family="batch_prefill",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(2, 5),
        seqlens_k=(3, 21),
        hdim_q=32,
        page_block_size=1,
        kv_lookup="vllm",
        kv_layout="linear",
    ),
}


def _reference_kv(p: Problem, x: dict, b: int) -> tuple[np.ndarray, np.ndarray]:
    k_of, v_of = kv_sources(p, x)
    if k_of is not None:
        return k_of(b), v_of(b)
    return (seq_slice(p, to_hsd(x["k"], p.input_layout), b, "k"), seq_slice(p, to_hsd(x["v"], p.input_layout), b, "k"))


@pytest.mark.parametrize("name", list(GATHER_CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_gathers_agree_with_the_reference(name: str, seed: int) -> None:
    p = Problem(dtype="fp16", **GATHER_CASES[name])
    x = make_inputs(p, seed)
    kv = sequence_kv(p, x, KVAddressing.of(p, lookup=p.kv_lookup, kv_layout=p.kv_layout))
    assert len(kv) == p.batch
    for b, (k_src, v_src) in enumerate(kv):
        sk = p.seqlens_k_list[b]
        want_k, want_v = _reference_kv(p, x, b)
        got_k, got_v = k_src.read(0, sk), v_src.read(0, sk)
        assert got_k.shape == want_k.shape and got_v.shape == want_v.shape
        assert np.array_equal(got_k.view(np.uint16), want_k.view(np.uint16)), b
        assert np.array_equal(got_v.view(np.uint16), want_v.view(np.uint16)), b
        if sk > 2:  # a window in the middle of the sequence, across page boundaries
            np.testing.assert_array_equal(k_src.read(1, sk - 1), want_k[:, 1 : sk - 1])


def test_the_navigator_walks_pages_like_ck() -> None:
    pool = np.arange(5 * 1 * 4 * 2, dtype=np.float32).reshape(5, 1, 4, 2)  # (pages, hk, page, d)
    nav = PageBlockNavigator("k_cache", pool, np.array([3, 0, 4]), 4, PoolLayout.HEAD_MAJOR)
    page, off = nav.locate(np.array([0, 3, 4, 9, 11]))
    assert page.tolist() == [3, 3, 0, 4, 4] and off.tolist() == [0, 3, 0, 1, 3]
    assert np.array_equal(nav.read(3, 6)[0], np.stack([pool[3, 0, 3], pool[0, 0, 0], pool[0, 0, 1]]))
    with pytest.raises(
        KernelInputError,
        match=r"k_cache: key 12 lies in logical block 3, the sequence has 3 "
        r"block\(s\)",
    ):
        nav.read(10, 13)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(input_layout="bshd", output_layout="bshd"),
        dict(cache_batch_idx=True, batch=3),
        dict(page_block_size=128, seqlen_k=140),
        dict(page_block_size=128, seqlen_k=300, input_layout="bshd", output_layout="bshd"),
        dict(rotary_dim=16, rope="interleaved", page_block_size=128, seqlen_k=260),
        dict(rotary_dim=32, rope="half_rotated", mask="0"),
    ],
)
def test_cache_writes_agree_with_the_reference(kw: dict) -> None:
    base = dict(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=120,
        seqlen_knew=9,
        hdim_q=64,
        dtype="fp16",
        mask="b",
    )
    base.update(kw)
    p = Problem(**base)
    x = make_inputs(p, 2)
    res = run(p, x, registry=cpu_registry())
    ref = reference(p, x)
    for name in ("q", "k", "v", "k_cache", "v_cache"):
        if name in ref:
            assert np.array_equal(res.outputs[name].view(np.uint16), ref[name].view(np.uint16)), name


# ------------------------------------------------------------------------------------ injected faults
def _rebind(monkeypatch, original, replacement) -> list[str]:
    """Replace ``original`` by ``replacement`` wherever a ckfmha module binds it; the modules patched."""
    hit = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("ckfmha") or not isinstance(mod, types.ModuleType):
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                monkeypatch.setattr(mod, attr, replacement)
                hit.append(name)
    return hit


def _cpu_outputs(p: Problem, x: dict) -> dict:
    return {n: a.copy() for n, a in run(p, x, registry=cpu_registry()).outputs.items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[n].view(np.uint8), b[n].view(np.uint8)) for n in a)


def _wrong_alibi(slopes, mode, rows, sq, sk, accum):
    return 2 * alibi_bias(slopes, mode, rows, sq, sk, accum)


def _wrong_rope(x, cos, sin, pos, rope, rotary_dim):
    return apply_rope(x, cos, -sin, pos, rope, rotary_dim)  # rotates the wrong way


def _wrong_kv_sources(p, inputs):
    k_of, v_of = kv_sources(p, inputs)
    if k_of is None:
        return None, None
    return (lambda b: k_of((b + 1) % p.batch)), (lambda b: v_of((b + 1) % p.batch))  # the next sequence's K/V


FAULTS = {
    "alibi_bias": (
        alibi_bias,
        _wrong_alibi,
        [
            Problem(batch=2, nhead_q=4, seqlen_q=40, seqlen_k=70, hdim_q=64, bias="alibi", mask="t:20,5", lse=True),
            Problem(
                family="fwd_splitkv",
                batch=2,
                nhead_q=2,
                seqlen_q=8,
                seqlen_k=300,
                hdim_q=64,
                num_splits=3,
                bias="alibi",
                lse=True,
            ),
            Problem(family="bwd", batch=1, nhead_q=2, seqlen_q=40, seqlen_k=64, hdim_q=64, bias="alibi", mask="b"),
        ],
    ),
    "apply_rope": (
        apply_rope,
        _wrong_rope,
        [
            Problem(
                family="fwd_appendkv",
                batch=2,
                nhead_q=2,
                seqlen_q=3,
                seqlen_k=260,
                seqlen_knew=9,
                rotary_dim=64,
                rope="interleaved",
                hdim_q=64,
                page_block_size=128,
                lse=True,
            ),
            Problem(
                family="fwd_appendkv",
                batch=2,
                nhead_q=2,
                seqlen_q=16,
                seqlen_k=300,
                seqlen_knew=20,
                rotary_dim=32,
                rope="half_rotated",
                hdim_q=128,
                mask="b",
            ),
        ],
    ),
    "kv_sources": (
        kv_sources,
        _wrong_kv_sources,
        [
            Problem(
                family="fwd_pagedkv", batch=2, nhead_q=2, seqlen_q=20, seqlen_k=200, hdim_q=128, page_block_size=128
            ),
            Problem(
                family="fwd_splitkv",
                batch=3,
                nhead_q=2,
                seqlen_q=4,
                seqlen_k=150,
                hdim_q=64,
                cache_batch_idx=True,
                num_splits=2,
            ),
            Problem(
                family="batch_prefill",
                mode="group",
                batch=2,
                nhead_q=4,
                nhead_k=2,
                seqlens_q=(30, 50),
                seqlens_k=(100, 100),
                hdim_q=128,
                page_block_size=16,
                kv_lookup="sglang",
                kv_layout="vectorized",
                lse=True,
                mask="b",
            ),
        ],
    ),
}


@pytest.mark.parametrize("helper, case", [(h, i) for h, (_, _, ps) in FAULTS.items() for i in range(len(ps))])
def test_a_fault_in_the_reference_leaves_the_cpu_backend_unchanged(monkeypatch, helper: str, case: int) -> None:
    original, wrong, problems = FAULTS[helper]
    p = problems[case]
    x = make_inputs(p, 0)
    if p.is_backward:  # the forward the backward reads, computed before the fault (the runner's host step)
        fwd = reference(p, x)
        x["o"], x["lse"] = fwd["o"].astype(x["q"].dtype), fwd["lse"]
    before_cpu, before_ref = _cpu_outputs(p, x), reference(p, x)
    assert all(validate(p, before_cpu, before_ref).values())
    patched = _rebind(monkeypatch, original, wrong)
    assert any(m.startswith("ckfmha.reference") for m in patched)
    assert not any(m.startswith("ckfmha.backends.cpu") for m in patched)
    after_cpu, after_ref = _cpu_outputs(p, x), reference(p, x)
    assert _same(after_cpu, before_cpu)  # the system under test does not use the oracle's helper
    checks = validate(p, after_cpu, after_ref)
    assert not all(checks.values()), f"the fault in {helper} went unnoticed: {checks}"  # so the fault is caught


def test_a_fault_in_the_reference_cache_write_leaves_the_cpu_backend_unchanged(monkeypatch) -> None:
    from ckfmha.reference.appendkv import write_cache

    def shifted(p, inputs, cache, new_hsd, b, pos, paged):
        write_cache(p, inputs, cache, new_hsd, b, pos - 1, paged)  # one key too early

    p = Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=5,
        seqlen_k=100,
        seqlen_knew=7,
        hdim_q=64,
        cache_batch_idx=True,
    )
    x = make_inputs(p, 1)
    before = _cpu_outputs(p, x)
    assert _rebind(monkeypatch, write_cache, shifted)
    assert _same(_cpu_outputs(p, x), before)
    assert not np.array_equal(reference(p, x)["k"], before["k"])


EVERY_FAMILY = [
    Problem(batch=2, nhead_q=4, nhead_k=2, seqlen_q=40, seqlen_k=77, hdim_q=64, bias="alibi", mask="b", lse=True),
    Problem(
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(17, 40),
        seqlens_k=(30, 65),
        s_kpad=(32, 70),
        hdim_q=64,
        bias="elementwise",
        bias_rank=1,
        sink=True,
        lse=True,
    ),
    Problem(
        family="fwd_splitkv",
        batch=2,
        nhead_q=2,
        seqlen_q=8,
        seqlen_k=300,
        hdim_q=128,
        num_splits=4,
        page_block_size=128,
        lse=True,
    ),
    Problem(
        family="fwd_pagedkv",
        batch=2,
        nhead_q=2,
        seqlen_q=20,
        seqlen_k=200,
        hdim_q=128,
        page_block_size=128,
        input_layout="bshd",
        mask="b",
    ),
    Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=260,
        seqlen_knew=9,
        rotary_dim=64,
        rope="interleaved",
        hdim_q=64,
        page_block_size=128,
        lse=True,
    ),
    Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=5,
        seqlen_k=100,
        seqlen_knew=7,
        hdim_q=64,
        cache_batch_idx=True,
    ),
    Problem(
        family="batch_prefill",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(9, 20),
        seqlens_k=(40, 150),
        hdim_q=128,
        page_block_size=16,
        kv_lookup="sglang",
        kv_layout="vectorized",
        p_drop=0.2,
    ),
    Problem(
        family="bwd",
        batch=2,
        nhead_q=4,
        nhead_k=2,
        seqlen_q=50,
        seqlen_k=70,
        hdim_q=64,
        mask="t",
        p_drop=0.1,
        bias="alibi",
    ),
    Problem(
        family="bwd",
        mode="group",
        batch=3,
        nhead_q=2,
        seqlens_q=(10, 64, 1),
        seqlens_k=(50, 31, 0),
        hdim_q=64,
        mask="b:20,5",
        dbias=True,
        bias="elementwise",
    ),
]


def test_every_family_runs_with_every_forward_reference_function_broken(monkeypatch) -> None:
    """Every function the forward references define (ckfmha.reference.core, forward, pagedkv, appendkv, splitkv,
    batch_prefill and the package's ``reference``) raises wherever a ckfmha module binds it; the cpu backend
    runs every family regardless. (ckfmha.reference.backward keeps its bindings: its reduce_raw_gradients is the
    runner's host step after the kernels, not the backend's.)"""
    prepared = []
    for p in EVERY_FAMILY:
        x = make_inputs(p, 0)
        if p.is_backward:
            fwd = reference(p, x)
            x["o"], x["lse"] = fwd["o"].astype(x["q"].dtype), fwd["lse"]
        prepared.append((p, x, _cpu_outputs(p, x)))
    names = (
        "ckfmha.reference",
        *(f"ckfmha.reference.{m}" for m in ("core", "forward", "pagedkv", "appendkv", "splitkv", "batch_prefill")),
    )
    modules = [sys.modules[n] for n in names]
    functions = {
        id(f): f
        for m in modules
        for f in vars(m).values()
        if isinstance(f, types.FunctionType) and f.__module__.startswith("ckfmha.reference")
    }
    assert {
        "alibi_bias",
        "apply_rope",
        "kv_sources",
        "write_cache",
        "sequence_extras",
        "sequences",
        "to_hsd",
        "from_hsd",
        "attend",
    } <= {f.__name__ for f in functions.values()}
    keep = sys.modules["ckfmha.reference.backward"]
    for f in functions.values():

        def broken(*args, _name=f.__name__, **kwargs):
            raise AssertionError(f"the cpu backend called the reference's {_name}")

        for name, mod in list(sys.modules.items()):
            if name.startswith("ckfmha") and isinstance(mod, types.ModuleType) and mod is not keep:
                for attr, value in list(vars(mod).items()):
                    if value is f:
                        monkeypatch.setattr(mod, attr, broken)
    for p, x, before in prepared:
        assert _same(_cpu_outputs(p, x), before), p


# ------------------------------------------------------------------------------------ the backend's own checks
def _appendkv_stage(p: Problem):
    cfg = explain(p, registry=cpu_registry()).stages[0].chosen
    return make_plan(cfg), cfg


def _paged_appendkv() -> tuple[Problem, dict]:
    p = Problem(
        family="fwd_appendkv",
        batch=2,
        nhead_q=2,
        seqlen_q=3,
        seqlen_k=260,
        seqlen_knew=9,
        hdim_q=64,
        page_block_size=128,
        rotary_dim=16,
        rope="interleaved",
    )
    return p, make_inputs(p, 0)


def test_a_bad_block_table_entry_is_refused_before_anything_is_written() -> None:
    p, x = _paged_appendkv()
    plan, cfg = _appendkv_stage(p)
    n = x["k_cache"].shape[0]
    x["block_table"] = x["block_table"].copy()
    x["block_table"][1, 2] = n
    k_before, v_before, q_before = x["k_cache"].copy(), x["v_cache"].copy(), x["q"].copy()
    with pytest.raises(KernelInputError) as e:
        stages.run_appendkv(plan, cfg, None, p, x)
    assert str(e.value) == (
        f"block_table[1, 2]: {n} (sequence 1, logical block 2) is not a page of the K/V pools; allowed 0..{n - 1}"
    )
    assert isinstance(e.value, ValueError)
    assert np.array_equal(x["k_cache"], k_before) and np.array_equal(x["v_cache"], v_before)  # sequence 0 too
    assert np.array_equal(x["q"], q_before)


def test_a_short_rotary_table_is_refused() -> None:
    p, x = _paged_appendkv()
    plan, cfg = _appendkv_stage(p)
    x["rotary_cos"] = x["rotary_cos"][:255]  # the cache holds 251 keys, knew row 8 reads table row 259
    with pytest.raises(
        KernelInputError,
        match=r"^rotary_cos: 255 rows, the append reads row 259 \(cache length \+ "
        r"appended position\); the table needs at least 260 rows$",
    ):
        stages.run_appendkv(plan, cfg, None, p, x)


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda x: x.update(kv_last_page_lens=np.array([3, 4], dtype=np.int32)),
            "kv_indptr, kv_last_page_lens: sequence 0's page table holds 35 keys ((pages - 1) * page_block_size + last "
            "page length), seqlens_k[0] = 40",
        ),
        (
            lambda x: x.update(kv_last_page_lens=np.array([8, 17], dtype=np.int32)),
            "kv_last_page_lens[1]: 17 must be in 1..page_block_size=16 (sequence 1 has 10 page(s))",
        ),
        (
            lambda x: x.update(kv_indptr=np.array([0, 3, 2], dtype=np.int32)),
            "kv_indptr[1], kv_indptr[2]: (3, 2) must satisfy 0 <= kv_indptr[b] <= kv_indptr[b + 1] <= "
            "len(kv_page_indices) = 13",
        ),
        (
            lambda x: x.update(kv_page_indices=np.where(np.arange(13) == 4, -1, x["kv_page_indices"]).astype(np.int32)),
            "kv_page_indices[4]: -1 (sequence 1, logical block 1) is not a page of the K/V pools; allowed 0..13",
        ),
        (
            lambda x: x.update(kv_page_indices=x["kv_page_indices"].astype(np.float32)),
            "kv_page_indices: dtype float32 is not an integer type (the kernel reads int32 indices)",
        ),
        (lambda x: x.pop("kv_indptr"), None),
    ],
)
def test_sglang_page_tables_are_checked(edit, message) -> None:
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=2,
        nhead_q=2,
        seqlens_q=(9, 20),
        seqlens_k=(40, 150),
        hdim_q=128,
        page_block_size=16,
        kv_lookup="sglang",
        kv_layout="vectorized",
    )
    x = make_inputs(p, 0)
    assert x["kv_indptr"].tolist() == [0, 3, 13] and x["kv_last_page_lens"].tolist() == [8, 6]
    edit(x)
    with pytest.raises(KernelInputError) as e:
        run(p, x, registry=cpu_registry())
    if message is None:
        assert str(e.value).startswith("kv_indptr: missing from the tensors (batch prefill with an SGLang page table")
    else:
        assert str(e.value) == message


@pytest.mark.parametrize(
    "bad, message",
    [
        (3, "cache_batch_idx[1]: 3 is not a row of k; allowed 0..2"),
        (-1, "cache_batch_idx[1]: -1 is not a row of k; allowed 0..2"),
    ],
)
def test_cache_batch_idx_rows_are_checked(bad: int, message: str) -> None:
    p = Problem(
        family="fwd_splitkv",
        batch=3,
        nhead_q=2,
        seqlen_q=4,
        seqlen_k=150,
        hdim_q=64,
        cache_batch_idx=True,
        num_splits=2,
    )
    x = make_inputs(p, 0)
    x["cache_batch_idx"] = np.array([0, bad, 1], dtype=np.int32)
    with pytest.raises(KernelInputError) as e:
        run(p, x, registry=cpu_registry())
    assert str(e.value) == message


def test_contiguous_kv_too_short_is_refused() -> None:
    p = Problem(batch=2, nhead_q=2, seqlen_q=40, seqlen_k=70, hdim_q=64)
    x = make_inputs(p, 0)
    x["v"] = x["v"][:, :, :64]
    with pytest.raises(KernelInputError) as e:
        run(p, x, registry=cpu_registry())
    assert str(e.value) == (
        "v: shape (2, 2, 64, 64) (bhsd) holds 2 row(s) of 64 keys; sequence 0 reads row 0, keys 0..69"
    )


def test_alibi_slopes_of_the_wrong_shape_are_refused() -> None:
    p = Problem(batch=2, nhead_q=4, seqlen_q=40, seqlen_k=70, hdim_q=64, bias="alibi", bias_rank=1)
    x = make_inputs(p, 0)
    x["alibi_slopes"] = x["alibi_slopes"][:1]
    with pytest.raises(KernelInputError) as e:
        run(p, x, registry=cpu_registry())
    assert str(e.value) == "alibi_slopes: shape (1, 4) must be (2, 4) (ALiBi slopes of rank 1)"
