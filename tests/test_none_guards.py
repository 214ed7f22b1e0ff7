"""Guards on values that may be ``None``: each is a named error (or a documented skip), never an
``AttributeError`` / ``TypeError`` / ``IndexError`` from deep inside.

* :func:`ckfmha.archs.fp8_format` of a hand-built :class:`~ckfmha.archs.ArchSpec` without ``fp8_format``;
* :func:`ckfmha.naming.required_group` for a pattern group that did not match;
* :func:`ckfmha.datafile.parse_yaml`'s nesting error for an event without a position;
* :func:`ckfmha.matrix.parse_matrix` for an entry ``name`` that is not a name;
* :mod:`ckfmha.enumeration.bwd` for a tile with no pad variant (an empty ``pads`` list).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from ckfmha import archs
from ckfmha import datafile as datafile_mod
from ckfmha.archs import ArchSpec, ArchSpecError, data_dir, fp8_format, load_arch_spec
from ckfmha.datafile import MAX_NESTING_DEPTH, NestingError, parse_yaml
from ckfmha.enumeration import EnumContext, enumerate_api
from ckfmha.enumeration import bwd as bwd_enum
from ckfmha.kernel import Api, ArchTag, Dropout, Family, MaskMode, Mode, Rope
from ckfmha.matrix import MatrixError, parse_matrix
from ckfmha.naming import CKNameError, CKNamingScheme, ck_instance_name, parse_ck_name, required_group
from tests.golden import load_golden


# ----------------------------------------------------------------------------------------------- archs.fp8_format
def test_fp8_format_of_a_spec_without_one_names_the_file_and_field(monkeypatch: pytest.MonkeyPatch) -> None:
    # load_arch_spec requires the key, so only a hand-built spec (as the enumerator tests build) lacks it
    real = load_arch_spec("gfx942")
    bare = dataclasses.replace(real, fp8_format=None)
    assert bare.fp8_format is None and ArchSpec.__dataclass_fields__["fp8_format"].default is None
    monkeypatch.setattr(archs, "load_arch_spec", lambda arch: bare)
    with pytest.raises(ArchSpecError) as ei:
        fp8_format("gfx942")
    assert str(ei.value) == f"{real.path}: fp8_format: missing; expected one of fnuz, ocp"
    assert str(ei.value) == f"{data_dir() / 'archs' / 'gfx942.yaml'}: fp8_format: missing; expected one of fnuz, ocp"


def test_fp8_format_of_a_data_file_is_unchanged() -> None:
    assert fp8_format("gfx942") == "fnuz"
    assert fp8_format("gfx950") == "ocp"
    with open(data_dir() / "archs" / "sm90.yaml", encoding="utf-8") as fh:
        sm90_doc = yaml.safe_load(fh)
    assert sm90_doc["fp8_format"] == "ocp"  # Hopper's FP8 is the OCP e4m3fn / e5m2 pair (the file's comment)
    assert fp8_format("sm90") == sm90_doc["fp8_format"]


# ------------------------------------------------------------------------------------------------ naming.required_group
def test_naming_group_that_did_not_match_is_a_named_error() -> None:
    assert required_group({"hq": "128"}, "hq") == "128"
    with pytest.raises(CKNameError) as ei:
        required_group({"hq": "128", "maxq": None}, "maxq")
    assert str(ei.value) == "naming pattern defect: group 'maxq' is required here but did not match"
    with pytest.raises(CKNameError) as ei:
        required_group({}, "tile")
    assert str(ei.value) == "naming pattern defect: group 'tile' is required here but did not match"


# (golden list, name, expected fields): names whose optional groups (occupancy, arch suffix, rope, pagedkv, page
# size, pads) are present or absent
GOLDEN_NAMES = [
    (
        ("generic", "fwd", "gfx942", 0),
        "fmha_fwd_d128_bf16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16_qr_async_vr_psddv_logits"
        "_nbias_mc_lse_dropout_nskip_nqscale_ntrload_nsink_gfx9.cpp",
        {
            "family": Family.FWD,
            "occupancy": -1,
            "arch_tag": ArchTag.GFX9,
            "mode": Mode.BATCH,
            "dropout": Dropout.ENABLED,
            "pads": (1, 0, 1, 1),
            "hdim_v": 128,
        },
    ),
    (
        ("generic", "fwd", "gfx942", 0),
        "fmha_fwd_d192_bf16_batch_b128x128x32x192x32x192_r4x1x1_r4x1x1_w32x32x16_w32x32x16_o1_qr_vr_psskddv_nlogits"
        "_bias_nmask_lse_ndropout_skip_nqscale_ntrload_sink_gfx9.cpp",
        {
            "family": Family.FWD,
            "occupancy": 1,
            "arch_tag": ArchTag.GFX9,
            "mode": Mode.BATCH,
            "dropout": Dropout.NONE,
            "pads": (1, 1, 1, 1),
            "hdim_v": 192,
        },
    ),
    (
        ("generic", "fwd_appendkv", "gfx942", 0),
        "fmha_fwd_appendkv_d128_bf16_b64x64x128x128_vr_psk_gfx9.cpp",
        {
            "family": Family.FWD_APPENDKV,
            "occupancy": -1,
            "rope": Rope.NONE,
            "paged_kv": False,
            "mode": Mode.BATCH,
            "pads": (0, 1, 0, 0),
            "hdim_v": 128,
        },
    ),
    (
        ("generic", "fwd_splitkv", "gfx950", 0),
        "fmha_fwd_splitkv_combine_d128_bf16_batch_b32_unused_npad_lse_nsquant_gfx9.cpp",
        {"family": Family.FWD_SPLITKV_COMBINE, "occupancy": -1, "tile": (32,), "pads": (0, 0, 0, 0), "hdim_v": 128},
    ),
    (
        ("generic", "batch_prefill", "gfx942", 0),
        "fmha_batch_prefill_d128_bf16_group_ps16_bload_b64x128x64x128x64x128_r4x1x1_r4x1x1_w16x16x16_w16x16x16"
        "_qr_async_vr_psskddv_logits_nbias_mg_lse_dropout_nqscale_sink_linear_vllm.cpp",
        {
            "family": Family.BATCH_PREFILL,
            "arch_tag": ArchTag.NONE,
            "paged_kv": True,
            "page_size": 16,
            "mode": Mode.GROUP,
            "pads": (1, 1, 1, 1),
        },
    ),
    (
        ("generic", "bwd", "gfx950", 0),
        "fmha_bwd_d128_fp16_group_b16x128x128x16x128x16x32x128x128_r1x4x1_r4x1x1_r1x4x1_w16x16x32_w16x16x16_o1"
        "_maxq0_pd8dv8_nbias_ndbias_mg_dropout_wg16_storerandval_ndeterministic_ntrload_gfx950.cpp",
        {
            "family": Family.BWD_DQ_DK_DV,
            "occupancy": 1,
            "arch_tag": ArchTag.GFX950,
            "max_seq_len_q": 0,
            "dropout": Dropout.WG16_STORE_RANDVAL,
            "pads": (1, 1, 8, 8),
            "hdim_v": 128,
        },
    ),
    (
        ("generic", "bwd", "gfx950", 0),
        "fmha_bwd_convert_dq_d128_bf16_b64_batch_o2_npad_deterministic_gfx950.cpp",
        {"family": Family.BWD_CONVERT_DQ, "occupancy": 2, "deterministic": True, "tile": (64,), "pads": (0, 0, 0, 0)},
    ),
]


@pytest.mark.parametrize(
    "golden, name, expected",
    GOLDEN_NAMES,
    ids=["fwd", "fwd_o1", "appendkv", "splitkv_combine", "batch_prefill", "bwd_dq_dk_dv", "bwd_convert_dq"],
)
def test_parsed_optional_groups_are_unchanged(golden: tuple, name: str, expected: dict) -> None:
    assert name in load_golden(*golden)
    parsed = parse_ck_name(name)
    c = parsed.config
    assert parsed.scheme is CKNamingScheme.CURRENT
    assert ck_instance_name(c) == name
    got = {k: (c.pad_s, c.pad_sk, c.pad_d, c.pad_dv) if k == "pads" else getattr(c, k) for k in expected}
    assert got == expected


# ------------------------------------------------------------------------------------------ datafile nesting error
def _too_deep_at_line_3() -> str:
    """Two block mappings, then a flow list whose outermost bracket is the 65th collection (on line 3)."""
    return "a:\n  b:\n    " + "[" * (MAX_NESTING_DEPTH - 1) + "]" * (MAX_NESTING_DEPTH - 1) + "\n"


def test_yaml_nesting_error_without_an_event_position_omits_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoMarkLoader(datafile_mod.SafeLoader):
        """The same events, without their start positions."""

        def get_event(self) -> Any:
            event: Any = super().get_event()
            event.start_mark = None
            return event

    monkeypatch.setattr(datafile_mod, "SafeLoader", NoMarkLoader)
    with pytest.raises(NestingError) as ei:
        parse_yaml(_too_deep_at_line_3(), "f.yaml")
    assert str(ei.value) == (
        f"f.yaml: nested deeper than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels of lists/mappings"
    )


def test_yaml_nesting_error_keeps_the_line() -> None:
    with pytest.raises(NestingError) as ei:
        parse_yaml(_too_deep_at_line_3(), "f.yaml")
    assert str(ei.value) == (
        f"f.yaml: line 3: nested deeper than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels of lists/mappings"
    )
    # one level less is within the limit
    assert parse_yaml("a:\n  b:\n    " + "[" * (MAX_NESTING_DEPTH - 2) + "]" * (MAX_NESTING_DEPTH - 2) + "\n")


# ---------------------------------------------------------------------------------------------- matrix entry name
GOOD_ENTRY = {"category": "smoke", "batch": 1, "nhead_q": 2, "seqlen_q": 8, "hdim_q": 64}


@pytest.mark.parametrize(
    "bad_name, shown",
    [("gqa-prefill", "'gqa-prefill'"), (7, "7"), ("", "''"), ("ok\n", "'ok\\n'")],
    ids=["hyphen", "int", "empty", "trailing-newline"],
)
def test_matrix_entry_name_error_shows_the_written_value(bad_name: object, shown: str) -> None:
    doc = {"schema": 1, "family": "fwd", "entries": [{**GOOD_ENTRY, "name": bad_name}]}
    with pytest.raises(MatrixError) as ei:
        parse_matrix(doc, "m.yaml")
    assert str(ei.value) == f"m.yaml: entries[0]: name: expected a name of letters, digits and '_', found {shown}"


# ------------------------------------------------------------------------------------------------- bwd empty pads
def _bwd_ctx(section: dict, receipt: int) -> EnumContext:
    real = load_arch_spec("gfx950")
    spec = ArchSpec(real.name, real.description, real.vendor, Path("/fake/gfx950.yaml"), {"bwd": section})
    return EnumContext(Api.BWD, "gfx950", spec, receipt, MaskMode.SIMPLIFIED)


@pytest.mark.parametrize("receipt", [0, 3])
def test_bwd_empty_pad_list_gives_no_tiles_of_that_kind(receipt: int) -> None:
    section = copy.deepcopy(load_arch_spec("gfx950").section("bwd"))
    assert section["pads"]["trload"] and section["pads"]["ntrload"]
    full = enumerate_api("bwd", "gfx950", receipt, "simplified")
    assert any(c.trload for c in full)

    section["pads"]["trload"] = []  # trload tiles have no pad variant: no kernel of theirs
    got = bwd_enum.enumerate_api(_bwd_ctx(section, receipt))
    dq = [c for c in got if c.family is Family.BWD_DQ_DK_DV]
    assert dq and not any(c.trload for c in got)
    assert dq == [c for c in full if c.family is Family.BWD_DQ_DK_DV and not c.trload]
    assert {c for c in got if c.family is not Family.BWD_DQ_DK_DV} <= set(full)

    # a new dict: the bwd enumerator caches its checked plan per section object
    no_pads = copy.deepcopy(section)
    no_pads["pads"]["ntrload"] = []  # no pad variant at all: no dq_dk_dv kernel, hence no 1-D kernel either
    assert bwd_enum.enumerate_api(_bwd_ctx(no_pads, receipt)) == []
