"""batch_prefill enumeration: exact parity with CK's generator lists, config/name agreement, data-loading errors."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from ckfmha.archs import load_arch_spec
from ckfmha.enumeration import batch_prefill as bp
from ckfmha.enumeration import ck_instance_names, enumerate_api
from ckfmha.kernel import KVLoad, MaskImpl, MaskMode
from ckfmha.naming import ck_instance_name, parse_ck_instance_name
from tests.golden import ALL_ARCHS, MASK_MODES, golden_path

API = "batch_prefill"
ARCHS = ALL_ARCHS  # every list is in tests/data/golden/


def test_golden_counts() -> None:
    assert len(ck_instance_names(API, "gfx942", 0, "simplified")) == 6504
    assert len(ck_instance_names(API, "gfx950", 0, "simplified")) == 6504
    assert len(ck_instance_names(API, "gfx942", 0, "generic")) == 10840
    assert ck_instance_names(API, "gfx1100", 0) == []
    assert ck_instance_names(API, "gfx1201", 0, "generic") == []


def test_local_reference_lists_present() -> None:
    # the non-shared archs must really be checked, not skipped
    for arch in ("gfx90a", "gfx1100", "gfx1201"):
        for mm in MASK_MODES:
            assert golden_path(mm, API, arch, 0) is not None, (arch, mm)


@pytest.mark.parametrize("mask_mode", MASK_MODES)
def test_configs_match_parsed_names(mask_mode: str) -> None:
    configs = enumerate_api(API, "gfx942", 0, mask_mode)
    assert len(set(configs)) == len(configs)
    for c in configs:
        name = ck_instance_name(c)
        assert parse_ck_instance_name(name) == c, name


def test_gload_only_below_bn0() -> None:
    for c in enumerate_api(API, "gfx950", 0, "generic"):
        if c.kv_load is KVLoad.GLOBAL_LDS:
            assert c.page_size < c.tile[1]
        assert not (c.qscale == "kv_blockscale" and c.page_size < c.tile[1])
        assert not (c.sink and c.mask == "none")
        assert c.page_size != 1 or c.kv_memory_layout == "linear"


def test_mask_modes_use_their_masks() -> None:
    simple = {c.mask for c in enumerate_api(API, "gfx942", 0, "simplified")}
    generic = {c.mask for c in enumerate_api(API, "gfx942", 0, "generic")}
    assert simple == {MaskImpl.NONE, MaskImpl.ANY}
    assert generic == {MaskImpl.NONE, MaskImpl.CAUSAL, MaskImpl.GENERIC}


# ------------------------------------------------------------------------------------------ data errors
def _section() -> dict:
    return copy.deepcopy(load_arch_spec("gfx942").section(API))


def _ctx(section, mask_mode: str = "simplified") -> SimpleNamespace:
    mm = MaskMode(mask_mode)
    masks = (
        (MaskImpl.NONE, MaskImpl.ANY)
        if mm is MaskMode.SIMPLIFIED
        else (MaskImpl.NONE, MaskImpl.CAUSAL, MaskImpl.GENERIC)
    )
    return SimpleNamespace(
        section=section,
        mask_mode=mm,
        masks=masks,
        keep=lambda c: True,
        where=lambda key: f"test.yaml (apis.{API}.{key})",
    )


def _error(section) -> str:
    with pytest.raises(bp.BatchPrefillSpecError) as exc:
        bp.enumerate_api(_ctx(section))
    msg = str(exc.value)
    assert "test.yaml" in msg
    return msg


def test_fake_ctx_reproduces_the_real_section() -> None:
    assert len(bp.enumerate_api(_ctx(_section()))) == 6504
    assert len(bp.enumerate_api(_ctx(_section(), "generic"))) == 10840


def test_error_unknown_top_key() -> None:
    s = _section()
    s["page_size"] = [16]
    msg = _error(s)
    assert "unknown key" in msg and "page_size" in msg


def test_error_missing_required_key() -> None:
    s = _section()
    del s["modes"]
    assert "modes" in _error(s)


def test_error_wrong_page_size_type() -> None:
    s = _section()
    s["page_sizes"] = [16, "1024"]
    msg = _error(s)
    assert "page_sizes[1]" in msg and "positive int" in msg and "'1024'" in msg


def test_error_bad_tile_block() -> None:
    s = _section()
    s["dtypes"]["fp16"]["tiles"][128][1]["block"] = [128, 128, 32]
    msg = _error(s)
    assert "dtypes.fp16.tiles.128[1].block" in msg and "6 positive ints" in msg


def test_error_bad_warps() -> None:
    s = _section()
    s["dtypes"]["fp8bf16"]["tiles"][256][0]["warps"] = [[4, 1, 1]]
    assert "dtypes.fp8bf16.tiles.256[0].warps" in _error(s)


def test_error_unknown_tile_key() -> None:
    s = _section()
    s["dtypes"]["fp16"]["tiles"][128][0]["ocupancy"] = 2
    msg = _error(s)
    assert "dtypes.fp16.tiles.128[0]" in msg and "ocupancy" in msg


def test_error_unknown_dtype() -> None:
    s = _section()
    s["dtypes"]["fp17"] = s["dtypes"]["fp16"]
    msg = _error(s)
    assert "dtypes.fp17" in msg and "fp16" in msg


def test_error_bad_feature_value() -> None:
    s = _section()
    s["dtypes"]["fp16"]["features"]["bias"] = ["none", "elementwize"]
    msg = _error(s)
    assert "dtypes.fp16.features.bias[1]" in msg and "elementwize" in msg


def test_error_bool_feature_not_bool() -> None:
    s = _section()
    s["dtypes"]["fp16"]["features"]["lse"] = ["t", "f"]
    assert "true or false" in _error(s)


def test_error_mask_must_follow_mode() -> None:
    s = _section()
    s["dtypes"]["fp16"]["features"]["mask"] = ["causal"]
    assert "dtypes.fp16.features.mask" in _error(s)


def test_error_unknown_feature() -> None:
    s = _section()
    s["dtypes"]["fp16"]["features"]["rope"] = ["none"]
    msg = _error(s)
    assert "dtypes.fp16.features" in msg and "rope" in msg


def test_error_bad_exclude_expression() -> None:
    s = _section()
    s["exclude"].append("c.page_sz == 1")
    msg = _error(s)
    assert "exclude[5]" in msg and "page_sz" in msg


def test_error_exclude_not_evaluable() -> None:
    s = _section()
    s["exclude"].append("c.page_size[0] == 1")
    msg = _error(s)
    assert "exclude[5]" in msg and "cannot be indexed" in msg  # caught when the filter is compiled


def test_error_global_load_reads_kv_load() -> None:
    s = _section()
    s["global_load_when"] = "c.kv_load == 'bload'"
    assert "global_load_when" in _error(s)


def test_error_bad_pad() -> None:
    s = _section()
    s["pads"]["s"] = 2
    assert "pads.s" in _error(s)


def test_error_unsupported_with_other_keys() -> None:
    assert "unsupported" in _error({"unsupported": "no", "modes": ["group"]})


def test_unsupported_section_emits_nothing() -> None:
    assert bp.enumerate_api(_ctx({"unsupported": "gfx9 only"})) == []


def test_section_not_a_mapping() -> None:
    assert "a mapping" in _error(["qr_async"])
