"""Triton backend coverage of the sm90 smoke shapes issue 14 names: plain fp8 (fp8 O), column-major V, split-KV
with elementwise bias.

Three tiers, each skipping with its reason where it cannot run:

* no torch needed: ``supports()``, the warm-up twin, the sm90 kernel space (nvidia.py's ``vlayouts`` axis) and
  the dispatcher's plans for the five smoke shapes;
* torch needed (no GPU): the launcher's NumPy <-> torch and layout logic on CPU tensors, each with a fault it
  must catch;
* a GPU or ``TRITON_INTERPRET=1``: each new realization run through the Triton kernels and compared with the
  NumPy reference (the interpreter runs them on the CPU; fp8 e4m3fn loads and stores work there).
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ckfmha.archs import ArchSpec, data_dir, load_arch_spec
from ckfmha.backends import get_backend
from ckfmha.backends.triton.backend import TritonBackend
from ckfmha.dispatcher import Dispatcher
from ckfmha.enumeration import EnumContext, enumerate_kernels
from ckfmha.enumeration.nvidia import NvidiaSpecError, enumerate_api
from ckfmha.kernel import Api, Bias, DType, Family, MaskMode, QScale, VLayout
from ckfmha.matrix import load_matrix_file
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from pytest_ckfmha.ids import shape_id

MATRICES = Path(__file__).resolve().parents[1] / "matrices"
SMOKE_IDS = {
    "fwd-fp8-batch-b1h2s128d128-qspertensor": "fwd.yaml",
    "fwd-fp16-batch-b2h2s80d64-vcol": "fwd.yaml",
    "fwd_splitkv-fp16-batch-b1h4s4x200d128-bias-split2": "splitkv.yaml",
    "fwd_splitkv-fp8-batch-b1h4s1x256d128-qspertensor-split2": "splitkv.yaml",
    "fwd_pagedkv-fp8-batch-b1h2s16x256d128-qspertensor-page128": "pagedkv.yaml",
}
HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("triton") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch and triton are not installed (pip install 'ckfmha[gpu]')")

_SPACE: dict = {}


def sm90_space() -> list:
    if "ks" not in _SPACE:
        _SPACE["ks"] = enumerate_kernels("sm90", ["fwd", "fwd_splitkv", "fwd_splitkv_combine", "fwd_pagedkv"])
    return _SPACE["ks"]


def smoke_problem(sid: str) -> Problem:
    for s in load_matrix_file(MATRICES / SMOKE_IDS[sid]):
        if s.category == "smoke" and shape_id(s.problem) == sid:
            return s.problem
    raise AssertionError(f"smoke shape {sid} is not in matrices/{SMOKE_IDS[sid]}")


def one(family: str, **kw):
    """The first sm90 kernel of ``family`` whose signature has every field in ``kw``."""
    for c in sm90_space():
        if c.family.value == family and all(getattr(c, k) == v for k, v in kw.items()):
            return c
    raise AssertionError(f"no sm90 {family} kernel with {kw}")


# ------------------------------------------------------------------------------ supports() (no torch)
@pytest.mark.parametrize("family", ["fwd", "fwd_splitkv", "fwd_splitkv_combine", "fwd_pagedkv"])
def test_plain_fp8_is_realized_for_the_forward_attention_families(family: str) -> None:
    c = one(family, dtype=DType.FP8)
    assert TritonBackend().supports(c) is None


def test_plain_fp8_is_refused_outside_them_with_the_families_named() -> None:
    c = one("fwd", dtype=DType.FP8).replace(family="batch_prefill")
    assert TritonBackend().supports(c) == (
        "dtype fp8 (fp8 output) is realized for fwd, fwd_splitkv, fwd_splitkv_combine, fwd_pagedkv only"
    )


def test_column_major_v_is_realized_for_fwd_only() -> None:
    col = one("fwd", dtype=DType.FP16).replace(vlayout="col")
    assert TritonBackend().supports(col) is None
    split_col = one("fwd_splitkv", dtype=DType.FP16).replace(vlayout="col")
    assert TritonBackend().supports(split_col) == "column-major V is realized for fwd only"


def test_every_sm90_forward_kernel_is_supported() -> None:
    refused = {c.kernel_id: TritonBackend().supports(c) for c in sm90_space()}
    assert {k: why for k, why in refused.items() if why is not None} == {}


def test_warmup_problem_of_col_v_and_squant_kernels() -> None:
    # the build's warm-up launch compiles the kernel of the config itself: column-major V and CK's squant fp8
    # kernels without a qscale field (per-tensor descales) get a problem they accept
    from ckfmha.backends.triton.warmup import synthetic_problem

    col = one("fwd", dtype=DType.FP16).replace(vlayout="col")
    assert synthetic_problem(col).vlayout is VLayout.COL
    squant = one("fwd_splitkv", dtype=DType.FP8).replace(qscale="none")
    assert squant.fp8_static_quant and synthetic_problem(squant).qscale is QScale.PERTENSOR


# ------------------------------------------------------------------------------ the sm90 space (no torch)
def test_sm90_space_has_fp8_and_split_bias_with_the_exclusions() -> None:
    ks = sm90_space()
    fp8 = [c for c in ks if c.dtype is DType.FP8]
    assert {c.family.value for c in fp8} == {"fwd", "fwd_splitkv", "fwd_splitkv_combine", "fwd_pagedkv"}
    attn = [c for c in fp8 if c.family is not Family.FWD_SPLITKV_COMBINE]
    assert all(c.qscale is QScale.PERTENSOR and c.bias is Bias.NONE for c in attn)
    assert not any(c.lse for c in attn if c.family is not Family.FWD_SPLITKV)  # as fp8bf16: no LSE output
    split_bias = [c for c in ks if c.family is Family.FWD_SPLITKV and c.bias is Bias.ELEMENTWISE]
    assert {c.dtype.value for c in split_bias} == {"fp16", "bf16"}
    counts = {f: sum(1 for c in ks if c.family.value == f and c.dtype is DType.FP8) for f in ("fwd", "fwd_pagedkv")}
    assert counts == {"fwd": 588, "fwd_pagedkv": 144}  # paged: a prefill and a decode tile per head dim
    assert len(split_bias) == 288


def _ctx(api: str, section: dict) -> EnumContext:
    real = load_arch_spec("sm90")
    spec = ArchSpec("sm90", "test", "nvidia", data_dir() / "archs" / "sm90.yaml", {api: section}, real.num_cus, "ocp")
    return EnumContext(Api(api), "sm90", spec, 0, MaskMode.SIMPLIFIED)


def col_v_kernels() -> list:
    """The column-major-V kernels of sm90.yaml's fwd section."""
    return [c for c in sm90_space() if c.vlayout is VLayout.COL]


def test_col_v_kernels_are_bounded_and_supported() -> None:
    col = col_v_kernels()
    assert len(col) == 1512  # fp16/bf16 without dropout, soft-cap, sink or skip, seven head dims
    assert {c.dtype.value for c in col} == {"fp16", "bf16"} and {c.family for c in col} == {Family.FWD}
    assert all(TritonBackend().supports(c) is None for c in col)


def test_vlayouts_axis_absent_means_row_and_bad_values_name_the_key() -> None:
    section = copy.deepcopy(load_arch_spec("sm90").section("pagedkv_prefill"))
    assert "vlayouts" not in section
    assert {c.vlayout for c in enumerate_api(_ctx("pagedkv_prefill", section))} == {VLayout.ROW}
    fwd = copy.deepcopy(load_arch_spec("sm90").section("fwd"))
    fwd["vlayouts"] = ["col"]
    fwd["exclude"] = [r for r in fwd["exclude"] if "vlayout" not in r]
    fwd["dtypes"], fwd["hdims"] = ["fp16"], [[64, 64]]
    assert {c.vlayout for c in enumerate_api(_ctx("fwd", fwd))} == {VLayout.COL}
    fwd["vlayouts"] = ["diag"]
    with pytest.raises(NvidiaSpecError) as ei:
        enumerate_api(_ctx("fwd", fwd))
    assert "(apis.fwd.vlayouts[0])" in str(ei.value) and "diag" in str(ei.value)
    fwd["vlayouts"] = []
    with pytest.raises(NvidiaSpecError) as ei:
        enumerate_api(_ctx("fwd", fwd))
    assert "(apis.fwd.vlayouts): expected a non-empty list, found []" in str(ei.value)
    split = copy.deepcopy(load_arch_spec("sm90").section("fwd_splitkv"))
    split["vlayouts"] = ["row", "col"]  # no Problem gives col V to split-KV: such kernels could never be chosen
    with pytest.raises(NvidiaSpecError) as ei:
        enumerate_api(_ctx("fwd_splitkv", split))
    assert "(apis.fwd_splitkv.vlayouts): col is defined for the fwd family only" in str(ei.value)


@pytest.mark.parametrize("sid", sorted(SMOKE_IDS))
def test_the_issue_14_smoke_shapes_are_planned_on_sm90(sid: str) -> None:
    p = smoke_problem(sid)
    reg = Registry.from_enumeration("sm90", backend="triton")
    plan = Dispatcher(reg, get_backend("triton"), num_cus=132).select(p)
    main = plan.stages[0].kernel
    assert main.dtype is p.dtype and main.vlayout is p.vlayout and main.bias is p.bias
    assert all(TritonBackend().supports(st.kernel) is None for st in plan.stages)
    assert len(plan.stages) == (2 if p.family is Family.FWD_SPLITKV else 1)


# ------------------------------------------------------------------------------ launcher logic (torch, no GPU)
@needs_torch
def test_fp8_output_dtypes_and_host_rounding() -> None:
    import torch

    from ckfmha.backends.triton.device import out_torch_dtype, stored_output, to_numpy
    from ckfmha.inputs import fp8_format_of as input_fp8_format

    assert out_torch_dtype(DType.FP8) is torch.float8_e4m3fn
    assert out_torch_dtype(DType.FP8, "fnuz") is torch.float32
    assert out_torch_dtype(DType.FP8BF16, "fnuz") is torch.bfloat16
    with pytest.raises(ValueError, match=r"fp8_format: 'e5m2' must be 'ocp' or 'fnuz'"):
        out_torch_dtype(DType.FP8, "e5m2")
    # e4m3fn bits come back as ml_dtypes' e4m3fn, bit for bit
    vals = np.array([0.0, -1.5, 448.0, 2.0**-9, 0.3], dtype=np.float32)
    fn = vals.astype(ml_dtypes.float8_e4m3fn)
    t = torch.from_numpy(fn.view(np.uint8)).view(torch.float8_e4m3fn)
    assert to_numpy(t).dtype == ml_dtypes.float8_e4m3fn and (to_numpy(t).view(np.uint8) == fn.view(np.uint8)).all()
    # fnuz: float32 rounded as NumPy rounds the reference; 2^-10 is fnuz's smallest subnormal, below e4m3fn's
    f32 = torch.tensor([2.0**-10, 0.3, 239.0, -3.3], dtype=torch.float32)
    got = stored_output(f32, DType.FP8, "fnuz")
    want = f32.numpy().astype(ml_dtypes.float8_e4m3fnuz)
    assert got.dtype == ml_dtypes.float8_e4m3fnuz and (got.view(np.uint8) == want.view(np.uint8)).all()
    assert float(got[0]) == 2.0**-10 and float(f32.numpy().astype(ml_dtypes.float8_e4m3fn)[0]) == 0.0
    assert stored_output(f32, DType.FP8BF16, "fnuz").dtype == np.float32  # only plain fp8 is rounded
    q_fnuz = np.zeros(2, ml_dtypes.float8_e4m3fnuz)
    assert input_fp8_format({"q": q_fnuz}) == "fnuz"
    assert input_fp8_format({"q": q_fnuz.astype(ml_dtypes.float8_e4m3fn)}) == "ocp"
    assert input_fp8_format({"k_cache": q_fnuz}) == "fnuz"


@needs_torch
def test_fp8_buffer_for_fnuz_inputs_is_refused() -> None:
    import torch

    from ckfmha.backends.triton.device import PreconditionError, check_fp8_output

    widened = torch.zeros(2, dtype=torch.bfloat16)  # to_torch's form of fnuz inputs
    ocp = torch.zeros(2, dtype=torch.float8_e4m3fn)
    check_fp8_output(DType.FP8, ocp, torch.zeros(2, dtype=torch.float8_e4m3fn))  # OCP: fine
    check_fp8_output(DType.FP8, widened, torch.zeros(2, dtype=torch.float32))  # fnuz into float32: fine
    with pytest.raises(PreconditionError, match=r"o: dtype torch.float8_e4m3fn for fp8 inputs widened from fnuz"):
        check_fp8_output(DType.FP8, widened, torch.zeros(2, dtype=torch.float8_e4m3fn))


# ------------------------------------------------------------------------------ kernels vs the reference
def _gpu_skip() -> str | None:
    if not HAS_TORCH:
        return "torch and triton are not installed (pip install 'ckfmha[gpu]')"
    avail = get_backend("triton").available()
    return None if avail else f"triton backend unavailable: {avail.reason}"


_GPU_SKIP = _gpu_skip()  # the gpu-marked tests here are skipped by the one rule of tests/conftest.py
_REG: dict = {}


def dispatcher() -> Dispatcher:
    if "d" not in _REG:
        reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
        _REG["d"] = Dispatcher(reg, get_backend("triton"), num_cus=132)
    return _REG["d"]


def col_dispatcher() -> Dispatcher:
    """The sm90 space's dispatcher (it holds the column-major-V kernels)."""
    return dispatcher()


def run_plan(p: Problem, seed: int = 0):
    from ckfmha.inputs import make_inputs
    from ckfmha.reference import reference

    backend = get_backend("triton")
    inputs = make_inputs(p, seed)
    tensors = dict(inputs)
    plan = (col_dispatcher() if p.vlayout is VLayout.COL else dispatcher()).select(p)
    for st in plan.stages:
        tensors.update(backend.run_stage(backend.build(st.kernel), st, p, tensors).outputs)
    return plan, tensors, reference(p, inputs)


def failures(p: Problem, out: dict, ref: dict, names=("o",), fp8_format: str = "ocp") -> list[str]:
    from ckfmha.validator import validate

    res = validate(p, {n: out[n] for n in names}, ref, names=list(names), fp8_format=fp8_format)
    return [str(r) for r in res.values() if not r.passed]


FP8_SHAPES = [
    dict(family="fwd", batch=1, nhead_q=2, seqlen_q=128, seqlen_k=128, hdim_q=128),
    dict(family="fwd_splitkv", batch=1, nhead_q=4, seqlen_q=1, seqlen_k=256, hdim_q=128, num_splits=2),
    dict(family="fwd_pagedkv", batch=1, nhead_q=2, seqlen_q=16, seqlen_k=256, hdim_q=128, page_block_size=128),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: s["family"])
def test_plain_fp8_matches_the_reference(shape: dict) -> None:
    p = Problem(dtype="fp8", qscale="pertensor", mask="b", **shape)
    plan, out, ref = run_plan(p)
    assert plan.stages[0].kernel.dtype is DType.FP8
    assert out["o"].dtype == ml_dtypes.float8_e4m3fn  # O stored as fp8, not widened
    assert failures(p, out, ref) == []


def _interpreting() -> bool:
    from ckfmha.backends.triton.backend import interpreting

    return HAS_TORCH and interpreting()


INTERPRETER_FP8_CAST = (
    "the Triton interpreter's fp32 -> fp8 cast is not round-to-nearest-even (triton/runtime/interpreter.py "
    "_convert_float adds the cut-off bit without carrying into the exponent); this test runs on a GPU"
)


@pytest.mark.gpu
@pytest.mark.skipif(_GPU_SKIP is None and _interpreting(), reason=INTERPRETER_FP8_CAST)
def test_fp8_store_rounds_the_float32_output_to_nearest_even() -> None:
    """The kernel's fp8 O is its own float32 O rounded as the validator rounds the reference (NumPy astype to
    e4m3fn: round to nearest even), bit for bit; and that float32 O is within 1e-4 of the reference."""
    import torch

    from ckfmha.backends.base import RunContext
    from ckfmha.backends.triton import device
    from ckfmha.backends.triton.launch import attention_launcher
    from ckfmha.inputs import o_shape

    p = Problem(dtype="fp8", qscale="pertensor", mask="b", **FP8_SHAPES[0])
    plan, out, ref = run_plan(p)
    t = device.DeviceTensors(out, RunContext(), hidden=("o", "lse", "randval"))
    t["o"] = torch.zeros(o_shape(p), dtype=torch.float32, device=device.DEVICE)
    attention_launcher(plan.stages[0].kernel, p, t)()
    o32 = device.to_numpy(t["o"])
    assert np.abs(o32 - ref["o"]).max() < 1e-4
    assert (out["o"].view(np.uint8) == o32.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: s["family"])
def test_plain_fp8_fnuz_output_rounded_on_the_host(shape: dict) -> None:
    """The fnuz path through execute.run_stage: the plan bound to the inputs' encoding (inputs.fp8_format_of)
    declares an fnuz O, the kernel gets a float32 O buffer (device.poisoned_output) and O is rounded to
    float8_e4m3fnuz on the host (device.spec_output)."""
    from ckfmha.backends.triton.execute import run_stage
    from ckfmha.inputs import fp8_format_of, make_inputs
    from ckfmha.reference import reference
    from ckfmha.runner import bind_plan

    p = Problem(dtype="fp8", qscale="pertensor", mask="b", **shape)
    inputs = make_inputs(p, 0, fp8_format="fnuz")
    tensors = dict(inputs)
    assert fp8_format_of(tensors) == "fnuz"
    for st in bind_plan(dispatcher().select(p), tensors).stages:
        tensors.update(run_stage(st.kernel, st, p, tensors).outputs)
    out = {"o": tensors["o"]}
    assert out["o"].dtype == ml_dtypes.float8_e4m3fnuz
    assert failures(p, out, reference(p, inputs), fp8_format="fnuz") == []


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_column_major_v_matches_the_reference(layout: str) -> None:
    # served by the row-major kernel over the logical V (the package table's "vlayout col")
    p = Problem(dtype="fp16", batch=2, nhead_q=2, seqlen_q=80, hdim_q=64, lse=True, vlayout="col",
                input_layout=layout, output_layout=layout)  # fmt: skip
    plan, out, ref = run_plan(p)
    assert plan.stages[0].kernel.vlayout is VLayout.COL
    assert failures(p, out, ref, ("o", "lse")) == []


@pytest.mark.gpu
@pytest.mark.parametrize("page", [0, 128])
@pytest.mark.parametrize("rank", [0, 1, 2])
def test_splitkv_elementwise_bias_matches_the_reference(rank: int, page: int) -> None:
    p = Problem(family="fwd_splitkv", dtype="fp16", batch=2, nhead_q=4, seqlen_q=4, seqlen_k=300, hdim_q=128,
                bias="elementwise", bias_rank=rank, num_splits=2, lse=True, mask="b", page_block_size=page)  # fmt: skip
    plan, out, ref = run_plan(p)
    assert plan.stages[0].kernel.bias is Bias.ELEMENTWISE and plan.stages[0].kernel.paged_kv is (page > 0)
    assert failures(p, out, ref, ("o", "lse")) == []
