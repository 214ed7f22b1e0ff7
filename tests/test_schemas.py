"""Data files against their JSON Schemas (ckfmha/data/schemas): the schemas are valid, every packaged file
follows its schema, and a bad document's error names the file, the key path, the value and the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckfmha.archs import data_dir
from ckfmha.datafile import SchemaError, check_schema, load_yaml, schema_validator

SCHEMAS = sorted(p.name.removesuffix(".schema.yaml") for p in (data_dir() / "schemas").glob("*.schema.yaml"))
PACKAGED = [
    ("receipts", data_dir() / "receipts.yaml"),
    ("heuristics", data_dir() / "heuristics.yaml"),
    ("tolerances", data_dir() / "tolerances.yaml"),
    ("parity_set", data_dir() / "parity_default.yaml"),
    ("ck_findings", data_dir() / "ck_findings.yaml"),
    ("faults", data_dir() / "faults.yaml"),
    ("suite_expected", data_dir() / "flash_attn_expected.yaml"),
] + [
    (name, p)
    for name, folder in (("receipt_rules", "receipt_rules"), ("arch", "archs"))
    for p in sorted((data_dir() / folder).glob("*.yaml"))
]
#: schemas of files ckfmha writes or users bring, none packaged: registries (ckfmha.registry), sweep configs
#: (ckfmha.sweep), run reports (pytest_ckfmha.reporting); tests/test_sweep.py and tests/test_runreport.py validate
#: real ones
UNPACKAGED = {"registry", "sweep", "run_report"}


def test_every_schema_has_a_packaged_file() -> None:
    assert sorted({name for name, _ in PACKAGED} | UNPACKAGED) == SCHEMAS
    assert len([name for name, _ in PACKAGED if name == "arch"]) >= 6  # gfx90a ... gfx1201, sm90


@pytest.mark.parametrize("name", SCHEMAS)
def test_every_schema_is_a_valid_schema(name: str) -> None:
    assert schema_validator(name) is not None


@pytest.mark.parametrize("name, path", PACKAGED, ids=[p.name for _, p in PACKAGED])
def test_packaged_files_follow_their_schema(name: str, path: Path) -> None:
    check_schema(load_yaml(path), name, str(path))


@pytest.mark.parametrize(
    "doc, words",
    [
        (
            {"schema": 2, "receipts": {0: {"name": "x"}}},
            "r.yaml: schema: expected 1, found 2 (rule: the schema version",
        ),
        (
            {"schema": 1, "receipts": {"zero": {"name": "x"}}},
            "r.yaml: receipts: found 'zero' (rule: a receipt number (a non-negative integer))",
        ),
        (
            {"schema": 1, "receipts": {0: {"name": "Bad Name"}}},
            "r.yaml: receipts.0.name: found 'Bad Name' (rule: the profile name (lower case, digits, _))",
        ),
        # a trailing newline is not "the end" of a name (Python's `$` would let it through)
        ({"schema": 1, "receipts": {0: {"name": "x\n"}}}, "r.yaml: receipts.0.name: found 'x\\n' (rule:"),
        ({"schema": 1, "receipts": {"0\n": {"name": "x"}}}, "r.yaml: receipts: found '0\\n' (rule:"),
        (
            {"schema": 1, "receipts": {0: {"nam": "x"}}},
            "r.yaml: receipts.0: unknown key(s) 'nam' (did you mean 'name'?)",
        ),
        ({"schema": 1, "receipts": {0: {"description": "x"}}}, "r.yaml: receipts.0: missing key(s) 'name'"),
        (
            {"schema": 1, "receipts": {0: {"name": "x", "alias": []}}},
            "unknown key(s) 'alias' (did you mean 'aliases'?); known: ",
        ),
        ({"schema": True, "receipts": {}}, "schema: expected 1, found True"),
        ({"schema": 1, "recipts": {}}, "r.yaml: top level: "),
    ],
)
def test_errors_name_file_path_value_and_rule(doc, words: str) -> None:
    with pytest.raises(SchemaError) as e:
        check_schema(doc, "receipts", "r.yaml")
    assert words in str(e.value)


def test_receipt_rules_per_mask_mode_need_both_modes() -> None:
    doc = {"schema": 1, "api": "fwd", "rules": {801: {"simplified": "c.lse"}}}
    with pytest.raises(SchemaError, match=r"rules.801"):
        check_schema(doc, "receipt_rules", "f.yaml")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_rejected_anywhere(value: float) -> None:
    # JSON Schema's `minimum` alone lets NaN through (every comparison with NaN is false)
    doc = load_yaml(data_dir() / "tolerances.yaml")
    doc["forward"]["fp16"]["atol"] = value
    with pytest.raises(SchemaError, match=rf"t.yaml: forward.fp16.atol: expected a finite number, found {value!r}"):
        check_schema(doc, "tolerances", "t.yaml")


@pytest.mark.parametrize(
    "name, doc, words",
    [
        # a trailing newline is not "the end" of a name: the patterns end with (?![\s\S]), never $
        (
            "arch",
            {"schema": 1, "arch": "gfx942\n", "vendor": "amd", "num_cus": 304, "fp8_format": "fnuz", "apis": {}},
            "a.yaml: arch: found 'gfx942\\n' (rule: the arch name (lower case, digits, _), the same as the file name)",
        ),
        (
            "arch",
            {
                "schema": 1,
                "arch": "gfx90a",
                "vendor": "amd",
                "num_cus": 110,
                "fp8_format": "fnuz",
                "apis": {"fwd": {"inherit": "gfx942\n"}},
            },
            "a.yaml: apis.fwd.inherit: found 'gfx942\\n' (rule: the name of another arch file)",
        ),
    ],
)
def test_names_with_a_trailing_newline_are_rejected(name: str, doc, words: str) -> None:
    with pytest.raises(SchemaError) as e:
        check_schema(doc, name, "a.yaml")
    assert words in str(e.value)
