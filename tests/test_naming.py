"""CK instance names: render(parse(name)) == name for every name in the golden lists."""

from __future__ import annotations

import gzip

import pytest

from ckfmha.kernel import Family, MaskImpl, Pipeline
from ckfmha.naming import CKNameError, ck_instance_name, family_of_ck_name, parse_ck_instance_name
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
            back = ck_instance_name(parse_ck_instance_name(n))
        except CKNameError as e:
            failures.append(f"{n}: {e}")
            continue
        if back != n:
            failures.append(f"{n} -> {back}")
    assert not failures, f"{len(failures)} names do not round-trip, e.g.\n" + "\n".join(failures[:10])


def test_parsed_fields() -> None:
    c = parse_ck_instance_name(
        "fmha_fwd_d192_bf16_group_b128x128x32x128x32x192_r4x1x1_r4x1x1_w32x32x16_w32x32x16_o1_qr_async_vr_psskddv"
        "_logits_nbias_mg_lse_ndropout_skip_nqscale_ntrload_sink_gfx950.cpp")
    assert (c.family, c.hdim_q, c.hdim_v, c.pipeline, c.occupancy) == (Family.FWD, 192, 128, Pipeline.QR_ASYNC, 1)
    assert (c.pad_s, c.pad_sk, c.pad_d, c.pad_dv) == (1, 1, 1, 1)
    assert c.mask is MaskImpl.GENERIC and c.logits_soft_cap and c.skip_min_seqlen_q and c.sink and c.lse
    b = parse_ck_instance_name(
        "fmha_bwd_d128_fp16_batch_b16x16x128x16x128x16x16x128x128_r1x1x1_r1x1x1_r1x1x1_w16x16x32_w16x16x16_o2"
        "_maxq16_pd8dv8_nbias_ndbias_nmask_ndropout_ndeterministic_trload_gfx950.cpp")
    assert (b.pad_d, b.pad_dv, b.max_seq_len_q, b.trload, b.occupancy) == (8, 8, 16, True, 2)
    a = parse_ck_instance_name("fmha_fwd_appendkv_d32_bf16_b64x64x32x32_vr_psskddv_half_pagedkv_gfx9.cpp")
    assert a.rope == "half_rotated" and a.paged_kv and a.tile == (64, 64, 32, 32)
    s = parse_ck_instance_name("fmha_fwd_appendkv_d64_fp16_b64x64x64x64_vr_psk_gfx9.cpp")
    assert (s.pad_s, s.pad_sk, s.pad_d, s.pad_dv) == (0, 1, 0, 0)


@pytest.mark.parametrize("name, message", [
    ("fmha_gemm_d128.cpp", "unknown prefix"),
    ("fmha_fwd_d128_fp16_batch_bogus.cpp", "does not follow the fwd naming scheme"),
    ("fmha_fwd_appendkv_d64_fp16_b64x64x64x64_vr_pq_gfx9.cpp", "does not follow"),
])
def test_bad_names(name: str, message: str) -> None:
    with pytest.raises(CKNameError, match=message):
        parse_ck_instance_name(name)


def test_family_of_name_prefers_longest_prefix() -> None:
    assert family_of_ck_name("fmha_fwd_splitkv_combine_d64_fp16_batch_b32_unused_ps_lse_nsquant_gfx9.cpp") \
        is Family.FWD_SPLITKV_COMBINE
    assert family_of_ck_name("fmha_bwd_dot_do_o_d64_fp16_b64_batch_o2_ps_gfx9.cpp") is Family.BWD_DOT_DO_O
