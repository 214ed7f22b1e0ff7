"""CK instance names: render(parse(name)) == name for every name in the golden lists; the older naming scheme
(ck-2025-11) parses to the same fields and renders back (the real tree: tests/test_ck_versions.py)."""

from __future__ import annotations

import gzip
import re

import pytest

from ckfmha.kernel import ArchTag, Family, KVLoad, KVLookupTable, KVMemoryLayout, MaskImpl, Pipeline, QScale
from ckfmha.naming import (
    CKNameError,
    CKNamingScheme,
    ck_instance_name,
    cross_scheme_config,
    family_of_ck_name,
    parse_ck_instance_name,
    parse_ck_name,
)
from tests.golden import LOCAL_GOLDEN


def _all_golden_names() -> list[str]:
    names: set[str] = set()
    for root in (LOCAL_GOLDEN,):
        for p in root.glob("*/*/*/r*.txt.gz"):
            with gzip.open(p, "rt") as fh:
                names.update(line.strip() for line in fh if line.strip())
    return sorted(names)


def test_every_golden_name_roundtrips() -> None:
    names = _all_golden_names()
    assert len(names) > 100_000
    failures = []
    for n in names:
        try:
            parsed = parse_ck_name(n)
            back = ck_instance_name(parsed.config)
        except CKNameError as e:
            failures.append(f"{n}: {e}")
            continue
        if back != n or parsed.scheme is not CKNamingScheme.CURRENT:
            failures.append(f"{n} -> {back} ({parsed.scheme.value})")
    assert not failures, f"{len(failures)} names do not round-trip, e.g.\n" + "\n".join(failures[:10])


def test_parsed_fields() -> None:
    c = parse_ck_instance_name(
        "fmha_fwd_d192_bf16_group_b128x128x32x128x32x192_r4x1x1_r4x1x1_w32x32x16_w32x32x16_o1_qr_async_vr_psskddv"
        "_logits_nbias_mg_lse_ndropout_skip_nqscale_ntrload_sink_gfx950.cpp"
    )
    assert (c.family, c.hdim_q, c.hdim_v, c.pipeline, c.occupancy) == (Family.FWD, 192, 128, Pipeline.QR_ASYNC, 1)
    assert (c.pad_s, c.pad_sk, c.pad_d, c.pad_dv) == (1, 1, 1, 1)
    assert c.mask is MaskImpl.GENERIC and c.logits_soft_cap and c.skip_min_seqlen_q and c.sink and c.lse
    b = parse_ck_instance_name(
        "fmha_bwd_d128_fp16_batch_b16x16x128x16x128x16x16x128x128_r1x1x1_r1x1x1_r1x1x1_w16x16x32_w16x16x16_o2"
        "_maxq16_pd8dv8_nbias_ndbias_nmask_ndropout_ndeterministic_trload_gfx950.cpp"
    )
    assert (b.pad_d, b.pad_dv, b.max_seq_len_q, b.trload, b.occupancy) == (8, 8, 16, True, 2)
    a = parse_ck_instance_name("fmha_fwd_appendkv_d32_bf16_b64x64x32x32_vr_psskddv_half_pagedkv_gfx9.cpp")
    assert a.rope == "half_rotated" and a.paged_kv and a.tile == (64, 64, 32, 32)
    s = parse_ck_instance_name("fmha_fwd_appendkv_d64_fp16_b64x64x64x64_vr_psk_gfx9.cpp")
    assert (s.pad_s, s.pad_sk, s.pad_d, s.pad_dv) == (0, 1, 0, 0)


@pytest.mark.parametrize(
    "name, message",
    [
        ("fmha_gemm_d128.cpp", "unknown prefix"),
        ("fmha_fwd_d128_fp16_batch_bogus.cpp", "does not follow the fwd naming scheme"),
        ("fmha_fwd_appendkv_d64_fp16_b64x64x64x64_vr_pq_gfx9.cpp", "does not follow"),
    ],
)
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(CKNameError, match=message):
        parse_ck_instance_name(name)


def test_family_of_name_prefers_longest_prefix() -> None:
    assert (
        family_of_ck_name("fmha_fwd_splitkv_combine_d64_fp16_batch_b32_unused_ps_lse_nsquant_gfx9.cpp")
        is Family.FWD_SPLITKV_COMBINE
    )
    assert family_of_ck_name("fmha_bwd_dot_do_o_d64_fp16_b64_batch_o2_ps_gfx9.cpp") is Family.BWD_DOT_DO_O


# ----------------------------------------------------------------------------- naming schemes (ckfmha.naming doc)
OLD_FWD = (
    "fmha_fwd_d128_fp8_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x32_w32x32x32_qr_vr_npad_nlogits"
    "_nbias_mask_nlse_ndropout_nskip_squant_ntrload_gfx9.cpp"
)
OLD_SPLITKV = (
    "fmha_fwd_splitkv_d128_bf16_batch_b64x128x32x128x32x128_r4x1x1_r4x1x1_w16x16x16_w16x16x16_qr_vr_ps"
    "_logits_nbias_mask_lse_nsquant_npagedkv_gfx9.cpp"
)
OLD_BATCH_PREFILL = (
    "fmha_batch_prefill_d128_bf16_batch_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16"
    "_qr_async_vr_psddv_logits_nbias_mask_lse_dropout_nsquant.cpp"
)
OLD_CONVERT_DQ = "fmha_bwd_convert_dq_d128_bf16_b64x128_batch_o2_npad_deterministic_gfx950.cpp"
APPENDKV = "fmha_fwd_appendkv_d64_fp16_b64x64x64x64_vr_psk_gfx9.cpp"


def test_2025_11_names_parse_to_the_current_fields() -> None:
    p = parse_ck_name(OLD_FWD)
    assert p.schemes == (CKNamingScheme.CK_2025_11,) and p.scheme is CKNamingScheme.CK_2025_11
    assert (p.config.qscale, p.config.sink, p.config.fp8_static_quant) == (QScale.PERTENSOR, False, False)
    assert parse_ck_instance_name(OLD_FWD.replace("_squant_", "_nsquant_")).qscale is QScale.NONE
    # the same kernel in the current scheme: squant -> pertensor, and the sink token
    assert ck_instance_name(p.config) == OLD_FWD.replace("_squant_ntrload_gfx9", "_pertensor_ntrload_nsink_gfx9")
    s = parse_ck_name(OLD_SPLITKV)
    assert (s.schemes, s.config.sink, s.config.fp8_static_quant) == ((CKNamingScheme.CK_2025_11,), False, False)
    assert ck_instance_name(s.config) == OLD_SPLITKV.replace("_npagedkv_gfx9", "_npagedkv_nsink_gfx9")
    b = parse_ck_name(OLD_BATCH_PREFILL).config
    assert (b.page_size, b.kv_load, b.kv_memory_layout, b.kv_lookup_table, b.qscale, b.arch_tag) == (
        1,
        KVLoad.NONE,
        KVMemoryLayout.LINEAR,
        KVLookupTable.SGLANG,
        QScale.NONE,
        ArchTag.NONE,
    )
    assert (b.pad_s, b.pad_sk, b.pad_d, b.pad_dv) == (1, 0, 1, 1)
    c = parse_ck_name(OLD_CONVERT_DQ).config
    assert (c.tile, c.deterministic) == ((64, 128), True)
    a = parse_ck_name(APPENDKV)
    assert a.schemes == (CKNamingScheme.CURRENT, CKNamingScheme.CK_2025_11)  # spelled alike in both


@pytest.mark.parametrize("name", [OLD_FWD, OLD_SPLITKV, OLD_BATCH_PREFILL, OLD_CONVERT_DQ, APPENDKV])
def test_2025_11_names_round_trip_in_their_scheme(name: str) -> None:
    p = parse_ck_name(name)
    for scheme in p.schemes:
        assert ck_instance_name(p.config, scheme) == name
        assert ck_instance_name(p.config, scheme.value) == name


def test_a_scheme_restricts_the_parse() -> None:
    with pytest.raises(CKNameError, match=r"does not follow the fwd naming scheme \(current; see ckfmha.naming\)"):
        parse_ck_instance_name(OLD_FWD, CKNamingScheme.CURRENT)
    assert parse_ck_instance_name(OLD_FWD, "ck-2025-11").qscale is QScale.PERTENSOR
    with pytest.raises(CKNameError, match="scheme: unknown value 'ck-2019'; allowed: current, ck-2025-11"):
        parse_ck_instance_name(OLD_FWD, "ck-2019")


@pytest.mark.parametrize(
    "name, change, scheme, message",
    [
        (
            OLD_FWD,
            {"sink": True},
            "ck-2025-11",
            "sink: True has no spelling in the ck-2025-11 naming scheme of fwd names (its names have no sink token: that "
            "CK hard-wires sink=False)",
        ),
        (
            OLD_FWD,
            {"qscale": "blockscale"},
            "ck-2025-11",
            "qscale: 'blockscale' has no spelling in the ck-2025-11 naming scheme of fwd names (its squant token spells "
            "only qscale none (nsquant) and pertensor (squant))",
        ),
        (OLD_SPLITKV, {"sink": True}, "ck-2025-11", "sink: True has no spelling in the ck-2025-11"),
        (
            OLD_BATCH_PREFILL,
            {"page_size": 16},
            "ck-2025-11",
            "page_size: 16 has no spelling in the ck-2025-11 naming scheme of batch_prefill names (its names have no "
            "page_size token: that CK hard-wires page_size=1)",
        ),
        (
            OLD_BATCH_PREFILL,
            {},
            "current",
            "kv_load: 'none' has no spelling in the current naming scheme of batch_prefill names (this scheme names the "
            "load strategy (bload|gload))",
        ),
        (
            OLD_CONVERT_DQ,
            {},
            "current",
            r"tile: \(64, 128\) has no spelling in the current naming scheme of bwd_convert_dq names",
        ),
        (
            OLD_CONVERT_DQ,
            {"tile": (64,)},
            "ck-2025-11",
            r"tile: \(64,\) has no spelling in the ck-2025-11 naming scheme of bwd_convert_dq names \(this scheme spells a "
            r"convert_dq tile as b\{bm0\}x\{bn0\}",
        ),
        (APPENDKV, {}, "ck-2019", "scheme: unknown value 'ck-2019'"),
    ],
)
def test_a_config_a_scheme_cannot_spell_is_an_error(name, change, scheme, message) -> None:
    cfg = parse_ck_instance_name(name).replace(**change)
    with pytest.raises(CKNameError, match=message if "\\" in message else re.escape(message)):
        ck_instance_name(cfg, scheme)


def test_cross_scheme_config_erases_what_one_scheme_lacks() -> None:
    c = parse_ck_instance_name(OLD_CONVERT_DQ)
    assert cross_scheme_config(c) == c.replace(tile=(64,))
    assert cross_scheme_config(cross_scheme_config(c)) == c.replace(tile=(64,))
    cur = parse_ck_instance_name(
        "fmha_batch_prefill_d128_bf16_batch_ps1_gload_b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16"
        "_qr_async_vr_psddv_logits_nbias_mask_lse_dropout_nqscale_nsink_linear_sglang.cpp"
    )
    assert cross_scheme_config(cur) == parse_ck_instance_name(OLD_BATCH_PREFILL)
    f = parse_ck_instance_name(OLD_FWD)
    assert cross_scheme_config(f) is f and cross_scheme_config(f.replace(sink=True)) != f  # sink is kept
