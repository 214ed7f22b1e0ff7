"""The sm90 (Triton) backward kernel space: the ``bwd`` section of ckfmha/data/archs/sm90.yaml as
ckfmha/enumeration/nvidia.py enumerates it, and the dispatcher planning every backward smoke shape with it.
Needs no GPU (the triton backend's ``supports()`` is plain Python)."""

from __future__ import annotations

import collections
import copy
from pathlib import Path

import pytest

from ckfmha.archs import ArchSpec, data_dir, load_arch_spec
from ckfmha.backends import get_backend
from ckfmha.dispatcher import Dispatcher
from ckfmha.enumeration import EnumContext, enumerate_kernels
from ckfmha.enumeration.nvidia import NvidiaSpecError, enumerate_api
from ckfmha.kernel import Api, Dropout, Family, MaskMode, Pipeline
from ckfmha.matrix import load_matrix_file
from ckfmha.registry import Registry

BWD = ["bwd_dot_do_o", "bwd_dq_dk_dv", "bwd_convert_dq"]
MATRICES = Path(__file__).resolve().parents[1] / "matrices"


def _space():
    return enumerate_kernels("sm90", BWD, 0, "generic")


def test_the_bwd_section_emits_the_three_families() -> None:
    ks = _space()
    by_family = collections.Counter(c.family for c in ks)
    assert set(by_family) == {Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ}
    dq = [c for c in ks if c.family is Family.BWD_DQ_DK_DV]
    assert {c.dropout for c in dq} == {Dropout.NONE, Dropout.WG16}  # the variant the backward rules accept
    assert all(c.pipeline is Pipeline.TRITON and c.pad_s == c.pad_sk == 1 for c in dq)
    assert not [c for c in dq if c.dbias and c.bias.value != "elementwise"]
    assert {(c.hdim_q, c.hdim_v) for c in dq} >= {(32, 32), (64, 64), (128, 128), (192, 128), (256, 256)}
    assert {c.dtype.value for c in dq} == {"fp16", "bf16", "fp32"}
    assert max(c.hdim_q for c in dq if c.dtype.value == "fp32") == 128
    # the 1-D kernels: dot_do_o sees hdim_v, convert_dq hdim_q (one per deterministic value)
    dots = {(c.dtype.value, c.mode.value, c.hdim_v) for c in ks if c.family is Family.BWD_DOT_DO_O}
    convs = {(c.dtype.value, c.mode.value, c.hdim_q, c.deterministic) for c in ks if c.family is Family.BWD_CONVERT_DQ}
    for c in dq:
        assert (c.dtype.value, c.mode.value, c.hdim_v) in dots
        assert (c.dtype.value, c.mode.value, c.hdim_q, c.deterministic) in convs
    assert ("fp16", "batch", 192, True) in convs and ("fp16", "batch", 192) not in dots
    assert all(c.tile == (64,) for c in ks if c.family is not Family.BWD_DQ_DK_DV)
    assert len({c.kernel_id for c in ks}) == len(ks)


def test_every_bwd_smoke_shape_is_planned_on_sm90() -> None:
    reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
    disp = Dispatcher(reg, get_backend("triton"), num_cus=132)
    shapes = [s for s in load_matrix_file(MATRICES / "bwd.yaml") if s.category == "smoke"]
    assert len(shapes) == 35  # matrices/bwd.yaml smoke shapes (docs: matrices/README.md)
    for s in shapes:
        plan = disp.select(s.problem)
        roles = [st.role.value for st in plan.stages]
        assert roles[:2] == ["dot_do_o", "dq_dk_dv"], s.problem
        assert (roles[-1] == "convert_dq") == (s.problem.dtype.value != "fp32" or s.problem.deterministic)
        assert all(st.kernel.arch_tag.value == "sm90" for st in plan.stages)


def _ctx(section: dict) -> EnumContext:
    real = load_arch_spec("sm90")
    spec = ArchSpec("sm90", "test", "nvidia", data_dir() / "archs" / "sm90.yaml", {"bwd": section}, real.num_cus, "ocp")
    return EnumContext(Api.BWD, "sm90", spec, 0, MaskMode.GENERIC)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("dbias", [1], "(apis.bwd.dbias[0]): expected true or false, found 1"),
        ("deterministic", "yes", "(apis.bwd.deterministic): expected a non-empty list, found 'yes'"),
        ("one_d_tile", 0, "(apis.bwd.one_d_tile): expected a positive int (the 1-D kernels' bm0), found 0"),
        ("one_d_tile", True, "(apis.bwd.one_d_tile): expected a positive int (the 1-D kernels' bm0), found True"),
    ],
)
def test_bad_bwd_section_values_name_the_key(key: str, value, message: str) -> None:
    section = copy.deepcopy(load_arch_spec("sm90").section("bwd"))
    section[key] = value
    with pytest.raises(NvidiaSpecError) as ei:
        enumerate_api(_ctx(section))
    assert message in str(ei.value)
