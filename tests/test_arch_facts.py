"""Arch facts are data (ckfmha/data/archs/*.yaml): num_cus, fp8_format, vendor, the default arch -- loaded and
checked by ckfmha.archs and used by the dispatcher, the plugin, the CLI and ckfmha.run."""

from __future__ import annotations

from pathlib import Path

import pytest

import ckfmha.archs as archs
from ckfmha.archs import ArchSpecError, ck_archs, default_arch, fp8_format, load_arch_spec
from ckfmha.dispatcher import Dispatcher, decode_num_splits
from ckfmha.problem import Problem
from ckfmha.registry import Registry

FACTS = {  # arch: (vendor, num_cus, fp8_format) -- AMD / NVIDIA specs, CK's ck_tile/core/config.hpp for fp8
    "gfx90a": ("amd", 110, "fnuz"),
    "gfx942": ("amd", 304, "fnuz"),
    "gfx950": ("amd", 256, "ocp"),
    "gfx1100": ("amd", 96, "fnuz"),
    "gfx1201": ("amd", 64, "ocp"),
    "sm90": ("nvidia", 132, "ocp"),
}


@pytest.mark.parametrize("arch", sorted(FACTS))
def test_each_arch_file_holds_its_facts(arch: str) -> None:
    spec = load_arch_spec(arch)
    assert (spec.vendor, spec.num_cus, spec.fp8_format) == FACTS[arch]
    assert fp8_format(arch) == FACTS[arch][2]
    assert spec.default == (arch == "gfx942")


def test_derived_facts() -> None:
    assert default_arch() == "gfx942"
    assert ck_archs() == archs.CK_ARCHS == ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")
    from pytest_ckfmha.execute import fp8_format as plugin_fp8_format

    assert [plugin_fp8_format(a) for a in ("gfx942", "gfx950", "sm90")] == ["fnuz", "ocp", "ocp"]


# ------------------------------------------------------------------------------------- the loader's checks
GOOD = {
    "gfx942": "vendor: amd\nnum_cus: 304\nfp8_format: fnuz\ndefault: true\n",
    "gfx1100": "vendor: amd\nnum_cus: 96\nfp8_format: fnuz\n",
    "sm90": "vendor: nvidia\nnum_cus: 132\nfp8_format: ocp\n",
    "gfx90a": "vendor: amd\nnum_cus: 110\nfp8_format: fnuz\n",
}


@pytest.fixture
def data(tmp_path, monkeypatch):
    """A private arch data directory; returns a writer of ``<arch>.yaml`` bodies (the facts, no apis)."""
    (tmp_path / "archs").mkdir()
    monkeypatch.setattr("ckfmha.archs.data_dir", lambda: tmp_path)
    load_arch_spec.cache_clear()

    def write(arch: str, body: str) -> Path:
        p = tmp_path / "archs" / f"{arch}.yaml"
        p.write_text(f"schema: 1\narch: {arch}\n{body}")
        load_arch_spec.cache_clear()
        return p

    yield write
    load_arch_spec.cache_clear()


def test_a_private_data_directory_gives_its_own_facts(data) -> None:
    for arch, body in GOOD.items():
        data(arch, body)
    assert (default_arch(), ck_archs()) == ("gfx942", ("gfx90a", "gfx942", "gfx1100"))
    assert Dispatcher(Registry("gfx1100", [])).num_cus == 96


@pytest.mark.parametrize(
    "body, words",
    [
        (
            "vendor: amd\nfp8_format: fnuz\n",
            "num_cus: expected a positive int (compute units of one device), found None",
        ),
        ("vendor: amd\nnum_cus: true\nfp8_format: fnuz\n", "num_cus: expected a positive int"),
        ("vendor: amd\nnum_cus: 0\nfp8_format: fnuz\n", "num_cus: expected a positive int"),
        ("vendor: amd\nnum_cus: 96\nfp8_format: e4m3\n", "fp8_format: expected one of fnuz, ocp, found 'e4m3'"),
        ("vendor: amd\nnum_cus: 96\n", "fp8_format: expected one of fnuz, ocp, found None"),
        ("num_cus: 96\nfp8_format: ocp\n", "vendor: expected 'amd' or 'nvidia', found None"),
        ("vendor: amd\nnum_cus: 96\nfp8_format: ocp\ndefault: 'yes'\n", "default: expected true or false, found 'yes'"),
        ("vendor: amd\nnum_cus: 96\nfp8_format: ocp\ncus: 3\n", "top level: unknown key(s) ['cus']"),
    ],
)
def test_bad_facts_name_the_file_the_key_and_the_value(data, body: str, words: str) -> None:
    path = data("gfx1100", body)
    with pytest.raises(ArchSpecError) as ei:
        load_arch_spec("gfx1100")
    assert str(ei.value).startswith(f"{path}: ") and words in str(ei.value)


def test_exactly_one_default_arch_and_amd_names_are_targets(data) -> None:
    data("gfx90a", GOOD["gfx90a"])
    data("gfx1100", GOOD["gfx1100"])
    with pytest.raises(ArchSpecError, match="exactly one arch file must say 'default: true', found 0"):
        default_arch()
    data("gfx90a", GOOD["gfx90a"] + "default: true\n")
    data("gfx1100", GOOD["gfx1100"] + "default: true\n")
    with pytest.raises(ArchSpecError, match="found 2: gfx1100, gfx90a"):
        default_arch()
    data("mi300", GOOD["gfx1100"])
    with pytest.raises(ArchSpecError, match="arch: 'mi300' is not an AMDGPU target name"):
        ck_archs()


# ------------------------------------------------------------------------------------- where they are used
def test_dispatcher_sizes_split_kv_for_the_registrys_arch() -> None:
    assert Dispatcher(Registry("sm90", [])).num_cus == 132
    assert Dispatcher(Registry("gfx942", [])).num_cus == 304
    assert Dispatcher(Registry("sm90", []), num_cus=114).num_cus == 114
    decode = Problem(family="fwd_appendkv", batch=4, nhead_q=8, seqlen_q=1, seqlen_k=8192, seqlen_knew=1, hdim_q=128)
    for arch, cus in (("sm90", 132), ("gfx942", 304)):
        assert Dispatcher(Registry(arch, [])).plan_num_splits(decode) == decode_num_splits(4, 8, 8192, 128, cus)
    assert decode_num_splits(4, 8, 8192, 128, 132) != decode_num_splits(4, 8, 8192, 128, 304)
    with pytest.raises(ValueError, match="num_cus: expected a positive int"):
        Dispatcher(Registry("sm90", []), num_cus=0)
    with pytest.raises(ArchSpecError, match="arch: unknown arch 'gfx999'"):
        Dispatcher(Registry("gfx999", [])).num_cus


def test_the_default_arch_comes_from_the_data(monkeypatch, tmp_path, capsys) -> None:
    import ckfmha.runner as runner
    from ckfmha.cli import main
    from tests.test_plugin_options import _parse

    monkeypatch.setattr("ckfmha.archs.default_arch", lambda: "gfx950")
    seen = []
    monkeypatch.setattr(runner, "_registry", lambda arch, receipt, mask_mode: seen.append(arch) or Registry(arch))
    runner.dispatcher_for("cpu")
    assert seen == ["gfx950"]
    s = _parse(tmp_path, monkeypatch)
    assert (s.arch, s.arch_source) == ("gfx950", "default")
    main(["explain", "-prec=fp16", "-b=1", "-h=1", "-s=64", "-d=64"])  # the CLI's explain without --arch
    assert seen == ["gfx950", "gfx950"] and "the registry holds no fwd kernels" in capsys.readouterr().out
