"""fwd enumeration: exact parity with CK's generator, upstream quirks, rule staging, and data-section errors."""

from __future__ import annotations

import copy

import pytest

from ckfmha.archs import ArchSpec, ArchSpecError, data_dir, load_arch_spec
from ckfmha.enumeration import EnumContext, ck_instance_names, enumerate_api, fwd
from ckfmha.filters import compile_filter
from ckfmha.kernel import Api, ArchTag, DType, MaskImpl, MaskMode, Pipeline, VLayout
from ckfmha.naming import ck_instance_name, parse_ck_instance_name
from tests.ck_names import assert_unique_names_parse_back

API = "fwd"
# (exact list parity for every arch/receipt/mask mode: tests/test_enumeration_parity.py)
ARCHS = ("gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1201")


def test_golden_orientation_counts():
    assert len(ck_instance_names(API, "gfx942", 0, "simplified")) == 7208
    assert len(ck_instance_names(API, "gfx950", 0, "simplified")) == 7760
    assert len(ck_instance_names(API, "gfx942", 0, "generic")) == 10812
    assert len(ck_instance_names(API, "gfx950", 0, "generic")) == 11624


@pytest.mark.parametrize("arch", ("gfx942", "gfx950", "gfx1100", "gfx1201"))  # gfx90a inherits gfx942
@pytest.mark.parametrize("receipt", (1, 800))  # receipt 1 is a superset of 0
def test_configs_equal_parsed_names(arch, receipt):
    # config-level parity: configs are unique and each is exactly what its CK name parses back to
    configs = enumerate_api(API, arch, receipt, "generic")
    assert_unique_names_parse_back(configs)


@pytest.mark.parametrize("arch", ("gfx942", "gfx950", "gfx1100", "gfx1201"))
def test_staged_rules_hold_per_config(arch):
    # constraints and the receipt filter are evaluated per signature / per (tile, variant); check that every
    # emitted config satisfies each of them when evaluated on the config itself
    spec = load_arch_spec(arch)
    rules = [compile_filter(r["rule"]) for r in spec.section(API).get("constraints", [])]
    configs = enumerate_api(API, arch, 0, "simplified") + enumerate_api(API, arch, 2, "generic")
    keep0 = compile_filter("c.dtype != 'fp32'")
    for c in configs:
        assert all(rule(c) for rule in rules), c.kernel_id
    assert all(keep0(c) for c in configs)


def test_generator_order_kept():
    configs = enumerate_api(API, "gfx942", 1, "simplified")
    dtypes = list(dict.fromkeys(c.dtype for c in configs))
    assert dtypes == [DType.FP16, DType.BF16, DType.FP8BF16, DType.FP8FP32]
    first = configs[0]
    assert (first.hdim_q, first.mode.value, first.tile[0]) == (32, "batch", 128)


def test_receipt1_adds_padded_qr():
    r0 = set(ck_instance_names(API, "gfx942", 0))
    r1 = set(ck_instance_names(API, "gfx942", 1))
    assert r0 < r1
    extra = [parse_ck_instance_name(n) for n in r1 - r0]
    assert {(c.pipeline, c.pad_s, c.pad_sk, c.pad_d, c.pad_dv) for c in extra} == {(Pipeline.QR, 1, 1, 1, 1)}


def test_fp8_has_tiles_but_no_kernels_on_gfx9():
    # quirk fwd_fp8_no_pipelines
    for arch in ("gfx942", "gfx950"):
        assert not any(c.dtype is DType.FP8 for c in enumerate_api(API, arch, 0, "generic"))
    assert any(c.dtype is DType.FP8 for c in enumerate_api(API, "gfx1201", 0, "generic"))


def test_v3_uses_generic_mask_names_in_simplified_mode():
    # quirk fwd_v3_generic_mask_names
    v3 = [c for c in enumerate_api(API, "gfx950", 0, "simplified") if c.pipeline is Pipeline.QR_ASYNC_TRLOAD_V3]
    assert v3 and {c.mask for c in v3} == {MaskImpl.NONE, MaskImpl.CAUSAL}
    assert all(c.tile[0] == 256 and c.dtype is DType.FP8BF16 for c in v3)


def test_r801_generic_is_empty():
    assert ck_instance_names(API, "gfx942", 801, "generic") == []
    assert len(ck_instance_names(API, "gfx942", 801, "simplified")) == 24


def test_arch_tags_and_mx():
    assert {c.arch_tag for c in enumerate_api(API, "gfx90a")} == {ArchTag.GFX9}
    assert {c.arch_tag for c in enumerate_api(API, "gfx1100")} == {ArchTag.GFX11}
    assert {c.arch_tag for c in enumerate_api(API, "gfx1201")} == {ArchTag.GFX12}
    mx = [c for c in enumerate_api(API, "gfx950") if c.dtype in (DType.MXFP8, DType.MXFP4)]
    assert mx and all(c.vlayout is VLayout.COL and c.lse for c in mx)
    assert not any(c.dtype is DType.MXFP4 and c.pipeline is Pipeline.QR_ASYNC for c in mx)


# ---------------------------------------------------------------------------------------- data errors
def _ctx(section, receipt: int = 0) -> EnumContext:
    spec = ArchSpec("gfxtest", "test", "amd", data_dir() / "archs" / "gfxtest.yaml", {API: section})
    return EnumContext(Api(API), "gfxtest", spec, receipt, MaskMode.SIMPLIFIED)


def _good():
    return copy.deepcopy(load_arch_spec("gfx942").section(API))


def _error(section) -> str:
    with pytest.raises(ArchSpecError) as e:
        fwd.enumerate_api(_ctx(section))
    msg = str(e.value)
    assert "gfxtest.yaml" in msg and "apis.fwd" in msg
    return msg


def test_good_copy_enumerates_like_gfx942():
    got = {ck_instance_name(c) for c in fwd.enumerate_api(_ctx(_good()))}
    assert got == set(ck_instance_names(API, "gfx942"))


def test_empty_section_emits_nothing():
    assert fwd.enumerate_api(_ctx({})) == []


def test_error_unknown_section_key():
    s = _good()
    s["tile_tables"] = {}
    msg = _error(s)
    assert "section keys" in msg and "tile_tables" in msg


def test_error_missing_arch_tag():
    s = _good()
    del s["arch_tag"]
    assert "arch_tag" in _error(s)


def test_error_bad_arch_tag():
    s = _good()
    s["arch_tag"] = "gfx9x"
    msg = _error(s)
    assert "apis.fwd.arch_tag" in msg and "'gfx9x'" in msg


def test_error_malformed_tile():
    s = _good()
    s["dtypes"]["fp16"]["tiles"]["32x32"] = ["b128x64x16x32x32_r4x1x1_r4x1x1_w32x32x16_w32x32x16"]
    msg = _error(s)
    assert "dtypes.fp16.tiles.32x32[0]" in msg and "expected a tile" in msg and "b128x64x16x32x32_" in msg


def test_error_tile_bn1_not_hdim_v():
    s = _good()
    s["dtypes"]["fp16"]["tiles"]["32x32"] = ["b128x64x16x64x32x32_r4x1x1_r4x1x1_w32x32x16_w32x32x16"]
    assert "bn1" in _error(s)


def test_error_tiles_not_ordered_by_bm0():
    s = _good()
    s["dtypes"]["fp16"]["tiles"]["64x64"].reverse()
    msg = _error(s)
    assert "dtypes.fp16.tiles.64x64[1]" in msg and "non-decreasing bm0" in msg


def test_error_bad_hdim_key():
    s = _good()
    s["dtypes"]["fp16"]["tiles"]["128"] = s["dtypes"]["fp16"]["tiles"].pop("32x32")
    msg = _error(s)
    assert "dtypes.fp16.tiles.128" in msg and "hdim pair" in msg


def test_error_bad_pad_token():
    s = _good()
    s["dtypes"]["fp32"]["pipelines"][0]["variants"][0]["pad"] = "pdvd"
    msg = _error(s)
    assert "dtypes.fp32.pipelines[0].variants[0].pad" in msg and "'pdvd'" in msg


def test_error_unknown_pipeline():
    s = _good()
    s["dtypes"]["fp32"]["pipelines"][0]["variants"][1]["pipeline"] = "qr_sync"
    msg = _error(s)
    assert "variants[1].pipeline" in msg and "qr_async" in msg and "'qr_sync'" in msg


def test_error_unknown_feature_axis():
    s = _good()
    s["dtypes"]["fp32"]["pipelines"][0]["features"] = dict(s["dtypes"]["fp32"]["pipelines"][0]["features"], rope=[True])
    msg = _error(s)
    assert "features.rope" in msg and "feature axis" in msg


def test_error_bad_feature_value():
    s = _good()
    s["dtypes"]["fp32"]["pipelines"][0]["features"] = dict(s["dtypes"]["fp32"]["pipelines"][0]["features"], lse=["yes"])
    msg = _error(s)
    assert "features.lse[0]" in msg and "boolean" in msg


def test_error_bad_when_key():
    s = _good()
    s["dtypes"]["fp16"]["pipelines"][0]["variants"][0]["when"] = {"hdims": ["256x256"]}
    msg = _error(s)
    assert "variants[0].when" in msg and "hdims" in msg


def test_error_bad_when_value():
    s = _good()
    s["dtypes"]["fp16"]["pipelines"][0]["variants"][0]["when"] = {"receipts": {"above": 1}}
    msg = _error(s)
    assert "when.receipts" in msg and "above" in msg


def test_error_bad_constraint_expression():
    s = _good()
    s["constraints"][0] = {"name": "bad", "rule": "__import__('os')"}
    msg = _error(s)
    assert "constraints[0].rule" in msg and "not allowed" in msg


def test_error_constraint_shape():
    s = _good()
    s["constraints"][0] = "c.mode == 'batch'"
    msg = _error(s)
    assert "constraints[0]" in msg and "name" in msg


def test_error_dtype_body_keys():
    s = _good()
    s["dtypes"]["fp16"] = {"tiles": s["dtypes"]["fp16"]["tiles"]}
    msg = _error(s)
    assert "dtypes.fp16" in msg and "pipelines" in msg


def test_error_unknown_dtype():
    s = _good()
    s["dtypes"]["fp6"] = s["dtypes"].pop("fp32")
    msg = _error(s)
    assert "dtypes.fp6" in msg and "fp16" in msg


def test_error_location_names_the_file_holding_the_section():
    spec = load_arch_spec("gfx90a")  # inherits gfx942's section
    where = EnumContext(Api(API), "gfx90a", spec, 0, MaskMode.SIMPLIFIED).where  # what fwd's errors are located by
    loc = where("dtypes.fp16.tiles")
    assert loc.endswith("archs/gfx942.yaml (apis.fwd.dtypes.fp16.tiles)")


class _KeepEverything(EnumContext):
    """A context whose receipt keeps every config."""

    @property
    def keep(self):
        return lambda c: True


@pytest.mark.parametrize("receipt", (0, 2, 888))
def test_staged_evaluation_equals_per_config_evaluation(receipt):
    # the naive evaluation: every config of the section without its constraints and without a receipt filter, then
    # every constraint and the receipt filter on each config -- the same configs in the same order
    section = _good()
    ctx = _ctx(section, receipt)
    staged = fwd.enumerate_api(ctx)
    rules = [compile_filter(r["rule"]) for r in section["constraints"]]
    assert rules
    bare = ArchSpec("gfxtest", "test", "amd", ctx.spec.path, {API: dict(section, constraints=[])})
    everything = fwd.enumerate_api(_KeepEverything(Api(API), "gfxtest", bare, receipt, MaskMode.SIMPLIFIED))
    naive = [c for c in everything if all(rule(c) for rule in rules) and ctx.keep(c)]
    assert staged == naive and 0 < len(staged) < len(everything)
