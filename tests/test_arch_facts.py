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
        p.write_text(f"schema: 1\narch: {arch}\napis: {{}}\n{body}")
        load_arch_spec.cache_clear()
        return p

    yield write
    load_arch_spec.cache_clear()


@pytest.fixture
def data_dir_path(tmp_path, monkeypatch):
    """A private, empty arch data directory (its path): tests write whole files into ``archs/``."""
    (tmp_path / "archs").mkdir()
    monkeypatch.setattr("ckfmha.archs.data_dir", lambda: tmp_path)
    load_arch_spec.cache_clear()
    yield tmp_path
    load_arch_spec.cache_clear()


def test_a_private_data_directory_gives_its_own_facts(data) -> None:
    for arch, body in GOOD.items():
        data(arch, body)
    assert (default_arch(), ck_archs()) == ("gfx942", ("gfx90a", "gfx942", "gfx1100"))
    assert Dispatcher(Registry("gfx1100", [])).num_cus == 96


# One wrong value per top-level key: the message names the file, the key path, the value and the rule (the arch
# schema, ckfmha/data/schemas/arch.schema.yaml, or the code's checks for what a schema cannot see).
FACTS_OK = "vendor: amd\nnum_cus: 96\nfp8_format: fnuz\n"


@pytest.mark.parametrize(
    "head, body, words",
    [
        (
            "schema: 2\narch: gfx1100\napis: {}\n",
            FACTS_OK,
            "schema: expected 1, found 2 (rule: the arch-file format version",
        ),
        ("arch: gfx1100\napis: {}\n", FACTS_OK, "top level: missing key(s) 'schema'"),
        (
            "schema: 1\narch: gfx942\napis: {}\n",
            FACTS_OK,
            "arch: expected 'gfx1100' (the file name), found 'gfx942'",
        ),
        (
            "schema: 1\narch: GFX1100\napis: {}\n",
            FACTS_OK,
            "arch: found 'GFX1100' (rule: the arch name (lower case, digits, _), the same as the file name)",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            FACTS_OK + "description: [a]\n",
            "description: expected a string, found ['a']",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "num_cus: 96\nfp8_format: fnuz\n",
            "top level: missing key(s) 'vendor'",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: intel\nnum_cus: 96\nfp8_format: fnuz\n",
            "vendor: expected one of 'amd', 'nvidia', found 'intel' (rule: amd: CK's generator factories",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nfp8_format: fnuz\n",
            "top level: missing key(s) 'num_cus'",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: 0\nfp8_format: fnuz\n",
            "num_cus: expected a value >= 1, found 0 (rule: compute units (NVIDIA: SMs) of one device, a positive "
            "integer",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: true\nfp8_format: fnuz\n",
            "num_cus: expected an integer, found True (rule: compute units",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: 96.0\nfp8_format: fnuz\n",
            "num_cus: expected an integer written without a fraction (compute units of one device), found 96.0",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: .nan\nfp8_format: fnuz\n",
            "num_cus: expected a finite number, found nan",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: 96\nfp8_format: e4m3\n",
            "fp8_format: expected one of 'fnuz', 'ocp', found 'e4m3' (rule: the fp8 encoding CK compiles for the arch",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            "vendor: amd\nnum_cus: 96\n",
            "top level: missing key(s) 'fp8_format'",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            FACTS_OK + "default: 'yes'\n",
            "default: expected true or false, found 'yes' (rule: true on exactly one arch file",
        ),
        ("schema: 1\narch: gfx1100\n", FACTS_OK, "top level: missing key(s) 'apis'"),
        (
            "schema: 1\narch: gfx1100\napis: [fwd]\n",
            FACTS_OK,
            "apis: expected an object (a mapping), found ['fwd'] (rule: one section per generator api",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {fwdd: {}}\n",
            FACTS_OK,
            "apis: unknown key(s) 'fwdd' (did you mean 'fwd'?); known: batch_prefill, bwd, fwd, fwd_appendkv, "
            "fwd_splitkv, pagedkv_prefill",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {bwd: [x]}\n",
            FACTS_OK,
            "apis.bwd: expected an object (a mapping), found ['x'] (rule: an api section",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {fwd: {inherit: gfx942, dtypes: []}}\n",
            FACTS_OK,
            "apis.fwd: unknown key(s) 'dtypes'; known: inherit (rule: {inherit: <arch>} reuses that arch's section "
            "unchanged and holds no other key)",
        ),
        (
            "schema: 1\narch: gfx1100\napis: {}\n",
            FACTS_OK + "cus: 3\n",
            "top level: unknown key(s) 'cus' (did you mean 'num_cus'?); known: apis, arch, default, description, "
            "fp8_format, num_cus, schema, vendor",
        ),
        ("", "[1, 2]\n", "top level: expected an object (a mapping), found [1, 2]"),
    ],
)
def test_bad_facts_name_the_file_the_key_the_value_and_the_rule(
    data_dir_path: Path, head: str, body: str, words: str
) -> None:
    path = data_dir_path / "archs" / "gfx1100.yaml"
    path.write_text(head + body)
    with pytest.raises(ArchSpecError) as ei:
        load_arch_spec("gfx1100")
    assert str(ei.value).startswith(f"{path}: ") and words in str(ei.value)


def test_a_key_written_twice_in_an_arch_file_is_an_error(data) -> None:
    # the old loader (yaml.safe_load) kept the second value silently
    path = data("gfx1100", "vendor: amd\nnum_cus: 96\nnum_cus: 97\nfp8_format: fnuz\n")
    with pytest.raises(ArchSpecError) as ei:
        load_arch_spec("gfx1100")
    assert str(ei.value) == f"{path}: top level: duplicate key 'num_cus' at line 6 (first at line 5)"


def test_a_malformed_arch_file_names_the_file(data) -> None:
    path = data("gfx1100", "vendor: [amd\n")
    with pytest.raises(ArchSpecError) as ei:
        load_arch_spec("gfx1100")
    assert str(ei.value).startswith(f"{path}: malformed YAML: ")


def test_the_schema_lists_agree_with_the_code() -> None:
    from ckfmha.datafile import schema_validator
    from ckfmha.kernel import Api

    props = schema_validator("arch").schema["properties"]
    assert sorted(props["apis"]["properties"]) == sorted(a.value for a in Api)
    assert tuple(props["fp8_format"]["enum"]) == archs.FP8_FORMATS


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
    monkeypatch.setattr(
        runner, "enumerated_registry", lambda arch, receipt, mask_mode: seen.append(arch) or Registry(arch)
    )
    runner.dispatcher_for("cpu")
    assert seen == ["gfx950"]
    s = _parse(tmp_path, monkeypatch)
    assert (s.arch, s.arch_source) == ("gfx950", "default")
    main(["explain", "-prec=fp16", "-b=1", "-h=1", "-s=64", "-d=64"])  # the CLI's explain without --arch
    assert seen == ["gfx950", "gfx950"] and "the registry holds no fwd kernels" in capsys.readouterr().out
