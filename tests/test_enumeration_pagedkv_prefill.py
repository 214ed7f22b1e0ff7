"""pagedkv_prefill enumeration: exact parity with CK's generator, upstream quirks, and data-section errors."""

from __future__ import annotations

from functools import partial

import pytest

from ckfmha.enumeration import ck_instance_names, enumerate_api, pagedkv
from ckfmha.kernel import DType, Family, MaskImpl
from tests.arch_sections import ctx_with_section, good_section, section_error
from tests.ck_names import assert_unique_names_parse_back
from tests.golden import MASK_MODES

API = "pagedkv_prefill"
# (exact list parity for every arch/receipt/mask mode: tests/test_enumeration_parity.py)
ARCHS = ("gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1201")


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100", "gfx1201"))  # gfx90a/gfx950 inherit gfx942's section
@pytest.mark.parametrize("mask_mode", MASK_MODES)
def test_configs_equal_parsed_names(arch, mask_mode):
    configs = enumerate_api(API, arch, 0, mask_mode)
    assert_unique_names_parse_back(configs)


def test_family_and_fixed_features():
    configs = enumerate_api(API, "gfx942", 0, "generic")
    assert {c.family for c in configs} == {Family.FWD_PAGEDKV}
    assert all(c.paged_kv and not c.lse and not c.skip_min_seqlen_q for c in configs)
    assert {c.mask for c in configs} == {MaskImpl.NONE, MaskImpl.CAUSAL, MaskImpl.GENERIC}
    # logits soft-cap only without bias; group mode only with padded seqlens
    assert all(c.bias.value == "none" for c in configs if c.logits_soft_cap)
    assert all(c.pad_s and c.pad_sk for c in configs if c.mode.value == "group")


def test_bf8_never_generated_and_700_empty():
    for arch in ARCHS:
        assert all(c.dtype is not DType.BF8 for c in enumerate_api(API, arch, 0))
        assert enumerate_api(API, arch, 700) == []


def test_gfx950_uses_gfx9_factory():
    names = ck_instance_names(API, "gfx950", 0, "generic")
    assert names and all(n.endswith("_gfx9.cpp") for n in names)


# ---------------------------------------------------------------------------------------- data errors
_ctx_with_section = partial(ctx_with_section, API)
_good_section = partial(good_section, API)
_error = partial(section_error, pagedkv.enumerate_api, API)


def test_good_section_copy_enumerates():
    assert len(pagedkv.enumerate_api(_ctx_with_section(_good_section()))) == 168


def test_error_section_not_a_mapping():
    msg = _error(["fwd_pagedkv"])
    assert "gfxtest.yaml: apis.pagedkv_prefill" in msg and "expected a mapping, found list" in msg


def test_error_missing_warps():
    sec = _good_section()
    del sec["fwd_pagedkv"]["dtypes"]["fp8"]["tiles"][64]["warps"]
    msg = _error(sec)
    assert "apis.pagedkv_prefill.fwd_pagedkv.dtypes.fp8.tiles.64" in msg and "missing key(s) ['warps']" in msg


def test_error_bad_warp_triple():
    sec = _good_section()
    sec["fwd_pagedkv"]["dtypes"]["fp8"]["tiles"][64]["warp_tiles"] = [[32, 32], [32, 32, 32]]
    msg = _error(sec)
    assert "tiles.64.warp_tiles[0]" in msg and "expected a list of 3 ints" in msg


def test_error_non_int_tile_entry():
    sec = _good_section()
    sec["fwd_pagedkv"]["dtypes"]["fp8"]["tiles"][64]["occupancy"] = "2"
    msg = _error(sec)
    assert "tiles.64.occupancy" in msg and "expected an int, found str '2'" in msg


def test_error_unknown_dtype():
    sec = _good_section()
    sec["fwd_pagedkv"]["dtypes"]["fp64"] = sec["fwd_pagedkv"]["dtypes"].pop("fp8")
    msg = _error(sec)
    assert "fwd_pagedkv.dtypes.fp64" in msg and "expected one of" in msg and "'fp64'" in msg


def test_error_unknown_pipeline():
    sec = _good_section()
    sec["fwd_pagedkv"]["pipeline_sets"]["half"][0]["pipeline"] = "qr_paged"
    msg = _error(sec)
    assert "pipeline_sets.half[0].pipeline" in msg and "qr_pagedkv" in msg and "'qr_paged'" in msg


def test_error_unknown_feature_field():
    sec = _good_section()
    sec["fwd_pagedkv"]["pipeline_sets"]["half"][0]["set"]["dropout"] = "enabled"
    msg = _error(sec)
    assert "pipeline_sets.half[0].set" in msg and "unknown key(s) ['dropout']" in msg
