"""Parity of the bwd enumeration with CK's generator, and the bwd data section's load-time checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ckfmha.archs import ArchSpec, ArchSpecError, load_arch_spec
from ckfmha.enumeration import EnumContext, ck_instance_names, enumerate_api
from ckfmha.enumeration import bwd as bwd_enum
from ckfmha.kernel import Api, Family, MaskMode
from ckfmha.naming import ck_instance_name, parse_ck_instance_name

LOCAL_ARCHS = ("gfx90a", "gfx1100", "gfx1201")


@pytest.mark.parametrize("arch", ("gfx942", "gfx950"))
def test_configs_equal_parsed_names(arch: str) -> None:
    """Each enumerated config is exactly what its CK name parses back to (no hidden extra fields)."""
    configs = enumerate_api("bwd", arch, 0, "generic")
    assert len(set(configs)) == len(configs)
    for c in configs[:: max(1, len(configs) // 500)]:
        assert parse_ck_instance_name(ck_instance_name(c)) == c
    fams = {c.family for c in configs}
    assert fams == {Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ}


def test_receipt_filters_pull_matching_1d_kernels() -> None:
    """1-D kernels follow the kept dq_dk_dv kernels: receipt 3 has no deterministic kernels at all."""
    configs = enumerate_api("bwd", "gfx950", 3, "simplified")
    assert configs and not any(c.deterministic for c in configs)
    assert all(c.pad_d == c.pad_dv for c in configs if c.family is Family.BWD_DQ_DK_DV)


# ------------------------------------------------------------------------------------------ data checks
def _ctx(section, arch: str = "gfx942", receipt: int = 0) -> EnumContext:
    real = load_arch_spec(arch)
    spec = ArchSpec(real.name, real.description, real.vendor, Path(f"/fake/{arch}.yaml"), {"bwd": section})
    return EnumContext(Api.BWD, arch, spec, receipt, MaskMode.SIMPLIFIED)


def _good() -> dict:
    return copy.deepcopy(load_arch_spec("gfx950").section("bwd"))


def test_good_section_copy_enumerates_like_the_real_one() -> None:
    names = sorted({ck_instance_name(c) for c in bwd_enum.enumerate_api(_ctx(_good(), "gfx950"))})
    assert names == ck_instance_names("bwd", "gfx950", 0, "simplified")


@pytest.mark.parametrize(
    "mutate, needles",
    [
        (lambda s: s.update(colour="red"), ["(apis.bwd): unknown key(s) ['colour']"]),
        (lambda s: s.pop("pads"), ["missing key(s) ['pads']"]),
        (lambda s: s.update(arch_tag="gfx999"), ["apis.bwd.arch_tag", "'gfx999'"]),
        (lambda s: s.update(dtypes="fp16"), ["apis.bwd.dtypes", "a list of DType tokens", "'fp16'"]),
        (lambda s: s["dropouts"].append("wg64"), ["apis.bwd.dropouts[3]", "'wg64'"]),
        (lambda s: s["pads"]["trload"].append([8, 2]), ["apis.bwd.pads.trload[2][1]", "a pad in (0, 1, 8)", "2"]),
        (lambda s: s["one_d"].update(bm0="64"), ["apis.bwd.one_d.bm0", "an int >= 1", "'64'"]),
        (lambda s: s["constraints"].pop("dbias_biases"), ["apis.bwd.constraints", "missing key(s) ['dbias_biases']"]),
        (lambda s: s["tiles"][0]["tiles"][0]["block"].pop(), ["apis.bwd.tiles[0].tiles[0].block", "a list of 9 ints"]),
        (
            lambda s: s["tiles"][1]["tiles"][2].update(warps=[[1, 4, 1]]),
            ["apis.bwd.tiles[1].tiles[2].warps", "a list of 3 [m, n, k] triples"],
        ),
        (
            lambda s: s["tiles"][2]["tiles"][3].update(max_seq_len_q=True),
            ["apis.bwd.tiles[2].tiles[3].max_seq_len_q", "an int >= 0", "True"],
        ),
        (lambda s: s["tiles"][0].update(trload="no"), ["apis.bwd.tiles[0].trload", "a bool", "'no'"]),
        (lambda s: s["tiles"][0]["tiles"][0].update(bm0=4), ["apis.bwd.tiles[0].tiles[0]", "unknown key(s) ['bm0']"]),
    ],
)
def test_malformed_section_errors(mutate, needles) -> None:
    section = _good()
    mutate(section)
    with pytest.raises(ArchSpecError) as err:
        bwd_enum.enumerate_api(_ctx(section))
    msg = str(err.value)
    assert "/fake/gfx942.yaml" in msg
    for needle in needles:
        assert needle in msg, msg


def test_section_must_be_a_mapping() -> None:
    with pytest.raises(ArchSpecError, match=r"/fake/gfx942.yaml \(apis\.bwd\): expected a mapping, found \['x'\]"):
        bwd_enum.enumerate_api(_ctx(["x"]))
