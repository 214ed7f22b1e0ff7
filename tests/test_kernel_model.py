"""Kernel model: the canonical kernel id is complete (hypothesis) and parses back; errors are clear."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckfmha.kernel import (
    ENUM_FIELDS,
    PAD_VALUES,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
)
from ckfmha.kernel_id import KernelIdError, parse_kernel_id

small_int = st.integers(min_value=0, max_value=512)
triple = st.tuples(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))


def _field_strategy(name: str, typ: str):
    if name in ENUM_FIELDS:
        return st.sampled_from(list(ENUM_FIELDS[name]))
    if typ == "bool":
        return st.booleans()
    if name.startswith("pad_"):
        return st.sampled_from(PAD_VALUES)
    if name == "occupancy":
        return st.integers(-1, 8)
    if name == "tile":
        return st.lists(st.integers(1, 1024), min_size=1, max_size=9).map(tuple)
    if name in ("warps", "warp_tiles"):
        return st.lists(triple, min_size=0, max_size=3).map(tuple)
    return small_int


def _part(cls):
    return st.builds(cls, **{f.name: _field_strategy(f.name, f.type) for f in dataclasses.fields(cls)})


configs = st.builds(KernelConfig, _part(KernelSignature), _part(KernelAlgorithm))


@settings(max_examples=300, deadline=None)
@given(configs)
def test_kernel_id_roundtrips(c: KernelConfig) -> None:
    assert KernelConfig.from_id(c.kernel_id) == c


@settings(max_examples=300, deadline=None)
@given(configs, configs)
def test_kernel_id_is_complete(a: KernelConfig, b: KernelConfig) -> None:
    # Two configs that differ in any field have different ids.
    assert (a.kernel_id == b.kernel_id) == (a == b)


@settings(max_examples=200, deadline=None)
@given(configs, st.data())
def test_changing_one_field_changes_the_id(c: KernelConfig, data) -> None:
    name, value = data.draw(st.sampled_from(list(c.fields())))
    typ = {f.name: f.type for cls in (KernelSignature, KernelAlgorithm) for f in dataclasses.fields(cls)}[name]
    other = data.draw(_field_strategy(name, typ).filter(lambda v: v != value))
    changed = c.replace(**{name: other})
    assert changed.kernel_id != c.kernel_id


def test_flat_field_access_and_str_enum_comparison() -> None:
    c = KernelConfig.make(
        family="fwd",
        dtype="bf16",
        mode="group",
        hdim_q=192,
        hdim_v=128,
        arch_tag="gfx950",
        pipeline="qr_async",
        tile=(128, 128, 32, 128, 32, 192),
        mask="causal",
    )
    assert c.hdim_q == 192 and c.tile[3] == 128
    assert c.pipeline == "qr_async" and c.mask == "causal" and c.dtype in ("fp16", "bf16")
    with pytest.raises(AttributeError, match="no field 'hdim'"):
        _ = c.hdim


def test_as_dict_roundtrip() -> None:
    c = KernelConfig.make(
        family="bwd_dq_dk_dv",
        dtype="fp16",
        mode="batch",
        hdim_q=128,
        hdim_v=128,
        arch_tag="gfx9",
        pipeline="bwd_dq_dk_dv",
        tile=(16, 128, 128, 16, 128, 16, 32, 128, 128),
        warps=((1, 4, 1), (4, 1, 1), (1, 4, 1)),
        warp_tiles=((16, 16, 32), (16, 16, 16)),
        pad_d=8,
        pad_dv=8,
        dropout="wg16_store_randval",
        deterministic=True,
    )
    assert KernelConfig.from_dict(c.as_dict()) == c


@pytest.mark.parametrize(
    "kid, message",
    [
        ("fwd.fp16", "at least 11"),
        ("fwd.fp99.batch.d128x128.qr.b1.r.w.p0000.o-1.gfx9", "dtype: unknown value 'fp99'"),
        ("fwd.fp16.batch.d128x128.qr.b1.r.w.p0000.o-1.gfx9.lse=1", "bare switch"),
        ("fwd.fp16.batch.d128x128.qr.b1.r.w.p0000.o-1.gfx9.bogus", "unknown flag 'bogus'"),
        ("fwd.fp16.batch.d128x128.qr.b1.r.w.p0300.o-1.gfx9", "pads must be"),
        ("fwd.fp16.batch.d128x128.qr.b1.r.w.p0000.o-1.gfx9.mask=none", "repeats the default"),
        ("fwd.fp16.batch.d128x128.qr.b1.r.w.p0000.o-1.gfx9.lse.mask=any", "out of canonical order"),
    ],
)
def test_bad_kernel_ids_are_rejected_with_a_reason(kid: str, message: str) -> None:
    with pytest.raises(KernelIdError, match=message.replace("(", r"\(")):
        parse_kernel_id(kid)


def test_make_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(ValueError, match="unknown field"):
        KernelConfig.make(family="fwd", hdim=128)
    with pytest.raises(ValueError, match="mask: unknown value 'top'"):
        KernelConfig.make(
            family="fwd",
            dtype="fp16",
            mode="batch",
            hdim_q=64,
            hdim_v=64,
            arch_tag="gfx9",
            pipeline="qr",
            tile=(64,),
            mask="top",
        )
    with pytest.raises(ValueError, match="pad_s: pad must be one of"):
        KernelConfig.make(
            family="fwd",
            dtype="fp16",
            mode="batch",
            hdim_q=64,
            hdim_v=64,
            arch_tag="gfx9",
            pipeline="qr",
            tile=(64,),
            pad_s=2,
        )
