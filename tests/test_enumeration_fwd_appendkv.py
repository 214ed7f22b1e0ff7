"""fwd_appendkv enumeration: exact parity with CK's generator, upstream quirks, and data-section errors."""

from __future__ import annotations

from functools import partial

import pytest

from ckfmha.enumeration import appendkv, ck_instance_names, enumerate_api
from ckfmha.kernel import DType, Rope
from tests.arch_sections import ctx_with_section, good_section, section_error
from tests.ck_names import assert_unique_names_parse_back

API = "fwd_appendkv"
# (exact list parity for every arch/receipt/mask mode: tests/test_enumeration_parity.py)
ARCHS = ("gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1201")


@pytest.mark.parametrize("arch", ("gfx942", "gfx1100", "gfx1201"))  # gfx90a/gfx950 inherit gfx942's section
def test_configs_equal_parsed_names(arch):
    configs = enumerate_api(API, arch)
    assert_unique_names_parse_back(configs)


def test_mask_mode_does_not_matter():
    for arch in ARCHS:
        assert ck_instance_names(API, arch, 0, "simplified") == ck_instance_names(API, arch, 0, "generic")


def test_fp8_has_no_rope_or_paged_kv_and_gfx11_has_no_fp8():
    fp8 = [c for c in enumerate_api(API, "gfx942") if c.dtype is DType.FP8]
    assert len(fp8) == 3 and all(c.rope is Rope.NONE and not c.paged_kv for c in fp8)
    assert all(c.dtype is not DType.FP8 for c in enumerate_api(API, "gfx1100"))
    for arch in ARCHS:
        assert all(c.dtype is not DType.BF8 for c in enumerate_api(API, arch))


# ---------------------------------------------------------------------------------------- data errors
_ctx_with_section = partial(ctx_with_section, API)
_good_section = partial(good_section, API)
_error = partial(section_error, appendkv.enumerate_api, API)


def test_good_section_copy_enumerates():
    assert len(appendkv.enumerate_api(_ctx_with_section(_good_section()))) == 99


def test_error_warps_not_allowed_for_appendkv_tiles():
    sec = _good_section()
    sec["fwd_appendkv"]["dtypes"]["fp8"]["tiles"][64]["warps"] = [[4, 1, 1], [4, 1, 1]]
    msg = _error(sec)
    assert "apis.fwd_appendkv.fwd_appendkv.dtypes.fp8.tiles.64" in msg and "unknown key(s) ['warps']" in msg


def test_error_wrong_block_length():
    sec = _good_section()
    sec["fwd_appendkv"]["dtypes"]["fp8"]["tiles"][64]["block"] = [64, 64, 64, 64, -1]
    msg = _error(sec)
    assert "tiles.64.block" in msg and "expected a list of 4 ints" in msg


def test_error_bad_rope():
    sec = _good_section()
    sec["fwd_appendkv"]["pipeline_sets"]["half"][1]["set"]["rope"] = "inter"
    msg = _error(sec)
    assert "pipeline_sets.half[1].set.rope" in msg and "interleaved" in msg and "'inter'" in msg


def test_error_empty_pads():
    sec = _good_section()
    sec["fwd_appendkv"]["pipeline_sets"]["fp8"][0]["pads"] = []
    msg = _error(sec)
    assert "pipeline_sets.fp8[0].pads" in msg and "at least one pad token" in msg


def test_error_modes_not_a_list():
    sec = _good_section()
    sec["fwd_appendkv"]["modes"] = "batch"
    msg = _error(sec)
    assert "fwd_appendkv.modes" in msg and "expected a list, found str 'batch'" in msg


def test_error_field_in_set_and_product():
    sec = _good_section()
    sec["fwd_appendkv"]["pipeline_sets"]["half"][0]["set"]["paged_kv"] = True
    msg = _error(sec)
    assert "pipeline_sets.half[0]" in msg and "['paged_kv'] given both in set and in product" in msg
