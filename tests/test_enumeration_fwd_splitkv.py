"""fwd_splitkv enumeration: exact parity with CK's generator, upstream quirks, and data-section errors."""

from __future__ import annotations

from functools import partial

import pytest

from ckfmha.archs import load_arch_spec
from ckfmha.enumeration import EnumContext, ck_instance_names, enumerate_api, splitkv
from ckfmha.kernel import Api, DType, Family, MaskMode
from tests.arch_sections import ctx_with_section, good_section, section_error
from tests.ck_names import assert_unique_names_parse_back
from tests.golden import MASK_MODES

API = "fwd_splitkv"
# (exact list parity for every arch/receipt/mask mode: tests/test_enumeration_parity.py)
ARCHS = ("gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1201")


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100", "gfx1201"))  # gfx90a/gfx950 inherit gfx942's section
@pytest.mark.parametrize("mask_mode", MASK_MODES)
def test_configs_equal_parsed_names(arch, mask_mode):
    # config-level parity: every config is exactly what its CK name parses back to
    configs = enumerate_api(API, arch, 0, mask_mode)
    assert_unique_names_parse_back(configs)


def test_receipt4_quirk_keeps_only_combine_kernels():
    # UPSTREAM QUIRK: receipt 4 tests dtype in ["fp16, bf16"] (one string) -> no main split-KV kernels
    configs = enumerate_api(API, "gfx942", 4)
    assert len(configs) == 138
    assert {c.family for c in configs} == {Family.FWD_SPLITKV_COMBINE}


def test_bf8_never_generated():
    for arch in ARCHS:
        assert all(c.dtype is not DType.BF8 for c in enumerate_api(API, arch, 0, "generic"))


def test_gfx950_uses_gfx9_factory():
    names = ck_instance_names(API, "gfx950")
    assert names and all(n.endswith("_gfx9.cpp") for n in names)
    assert names == ck_instance_names(API, "gfx942")


def test_gfx11_gets_fp8_combine_but_no_fp8_main():
    configs = enumerate_api(API, "gfx1100")
    fp8 = {c.family for c in configs if c.dtype is DType.FP8}
    assert fp8 == {Family.FWD_SPLITKV_COMBINE}


# ---------------------------------------------------------------------------------------- data errors
_ctx_with_section = partial(ctx_with_section, API)
_good_section = partial(good_section, API)
_error = partial(section_error, splitkv.enumerate_api, API)


def test_good_section_copy_enumerates():
    assert len(splitkv.enumerate_api(_ctx_with_section(_good_section()))) == 2106


def test_empty_section_emits_nothing():
    assert splitkv.enumerate_api(_ctx_with_section({})) == []


def test_error_unknown_family_key():
    sec = _good_section()
    sec["fwd_pagedkv"] = sec.pop("fwd_splitkv")
    msg = _error(sec)
    assert "gfxtest.yaml: apis.fwd_splitkv" in msg and "unknown key(s) ['fwd_pagedkv']" in msg


def test_error_unknown_key_in_block():
    sec = _good_section()
    sec["fwd_splitkv"]["tile_table"] = {}
    msg = _error(sec)
    assert "apis.fwd_splitkv.fwd_splitkv" in msg and "'tile_table'" in msg and "expected keys" in msg


def test_error_wrong_tile_length():
    sec = _good_section()
    sec["fwd_splitkv"]["dtypes"]["fp16"]["tiles"][128]["block"] = [64, 128, 32]
    msg = _error(sec)
    assert "fwd_splitkv.dtypes.fp16.tiles.128.block" in msg
    assert "expected a list of 6 ints" in msg and "found 3 entries" in msg


def test_error_bad_pad_token():
    sec = _good_section()
    sec["fwd_splitkv"]["pipeline_sets"]["half"][0]["pads"] = ["pdvd"]
    msg = _error(sec)
    assert "fwd_splitkv.pipeline_sets.half[0].pads[0]" in msg and "'pdvd'" in msg


def test_error_bad_feature_value():
    sec = _good_section()
    sec["fwd_splitkv"]["pipeline_sets"]["half"][0]["product"]["bias"] = ["none", "elementwise", "rope"]
    msg = _error(sec)
    assert "product.bias[2]" in msg and "expected one of none, elementwise, alibi" in msg and "'rope'" in msg


def test_error_bool_field_given_string():
    sec = _good_section()
    sec["fwd_splitkv"]["pipeline_sets"]["half"][0]["set"]["lse"] = "t"
    msg = _error(sec)
    assert "set.lse" in msg and "expected a boolean" in msg and "'t'" in msg


def test_error_unknown_pipeline_set():
    sec = _good_section()
    sec["fwd_splitkv"]["dtypes"]["fp16"]["pipelines"] = "halves"
    msg = _error(sec)
    assert "dtypes.fp16.pipelines" in msg and "'halves'" in msg and "half" in msg


def test_error_bad_constraint():
    sec = _good_section()
    sec["fwd_splitkv"]["constraints"] = ["c.nonsense == 1"]
    msg = _error(sec)
    assert "fwd_splitkv.constraints[0]" in msg and "unknown field 'nonsense'" in msg


def test_error_names_the_file_holding_the_section():
    # errors in a real data file name that file and the section's key path in it
    from ckfmha.enumeration import section_source

    ctx = EnumContext(Api(API), "gfx950", load_arch_spec("gfx950"), 0, MaskMode.SIMPLIFIED)
    path, prefix = section_source(ctx)  # gfx950 inherits gfx942's section
    assert path.endswith("archs/gfx942.yaml") and prefix == "apis.fwd_splitkv"
