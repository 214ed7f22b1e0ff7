"""The strict data-file loaders: duplicate keys, UTF-8, nesting depth and size are named errors, never silent
last-wins values, bare UnicodeDecodeErrors or RecursionErrors."""

from __future__ import annotations

import sys
import textwrap

import pytest
import yaml

import ckfmha.datafile as datafile
from ckfmha.datafile import (
    MAX_NESTING_DEPTH,
    DataFileError,
    DuplicateKeyError,
    MissingDataFileError,
    NestingError,
    StrictYAMLLoader,
    key_path,
    load_json,
    load_yaml,
    parse_json,
    parse_yaml,
)


def test_errors_are_value_errors():
    for cls in (DataFileError, DuplicateKeyError, MissingDataFileError, NestingError):
        assert issubclass(cls, ValueError)


def test_loader_is_the_c_safe_loader_when_available():
    base = yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
    assert issubclass(StrictYAMLLoader, base)
    assert parse_yaml("a: [1, {b: x}]\n") == {"a": [1, {"b": "x"}]}
    with pytest.raises(DataFileError, match="malformed YAML"):
        parse_yaml("!!python/object:os.system {}\n", "evil.yaml")  # still the safe loader


def test_key_path():
    assert key_path(()) == "top level"
    assert key_path(("entries", 2, "product")) == "entries[2].product"
    assert key_path((0, "a")) == "[0].a"


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: 1\na: 2\n", "x.yaml: top level: duplicate key 'a' at line 2 (first at line 1)"),
        ("e:\n  - n: 1\n  - n: 2\n    m: 3\n    n: 4\n", "x.yaml: e[1]: duplicate key 'n' at line 5 (first at line 3)"),
        ("p: {x: 1, y: 2, x: 3}\n", "x.yaml: p: duplicate key 'x' at line 1 (first at line 1)"),
        ("1: a\n0x1: b\n", "x.yaml: top level: duplicate key 1 at line 2 (first at line 1)"),
    ],
)
def test_yaml_duplicate_keys(text, message):
    with pytest.raises(DuplicateKeyError) as e:
        parse_yaml(text, "x.yaml")
    assert str(e.value) == message


def test_yaml_merge_keys_are_overrides_not_duplicates():
    doc = parse_yaml(
        textwrap.dedent("""\
        base: &b {x: 1, y: 2}
        d: {<<: *b, x: 3}
        e:
          <<: *b
          y: 5
        """)
    )
    assert doc["d"] == {"x": 3, "y": 2} and doc["e"] == {"x": 1, "y": 5}
    with pytest.raises(DuplicateKeyError, match="d: duplicate key 'x'"):
        parse_yaml("base: &b {x: 1}\nd: {<<: *b, x: 3, x: 4}\n")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": 1, "a": 2}', "x.json: top level: duplicate key 'a'"),
        ('{"a": {"b": [0, {"c": 1, "d": 2, "c": 3}]}}', "x.json: a.b[1]: duplicate key 'c'"),
    ],
)
def test_json_duplicate_keys(text, message):
    with pytest.raises(DuplicateKeyError) as e:
        parse_json(text, "x.json")
    assert str(e.value) == message


def test_json_same_key_in_different_objects_is_fine():
    assert parse_json('[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    "parse, text",
    [
        (parse_yaml, "[" * 100_000 + "]" * 100_000),
        (parse_yaml, "a:\n" + "".join("  " * i + "- \n" for i in range(1, 80))),
        (parse_json, "[" * 100_000 + "]" * 100_000),
        (parse_json, '{"a": ' * 100_000 + "1" + "}" * 100_000),
    ],
    ids=["yaml-flow", "yaml-block", "json-array", "json-object"],
)
def test_deep_nesting_is_a_named_error_not_a_recursion_error(parse, text):
    with pytest.raises(
        NestingError, match=f"f.txt: line \\d+: nested deeper than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels"
    ):
        parse(text, "f.txt")


def test_nesting_at_the_limit_loads_and_brackets_in_strings_do_not_count():
    assert parse_json("[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH) is not None
    assert parse_yaml("[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH) is not None
    text = '{"s": "' + "[{" * 500 + '\\"[", "t": [1]}'
    assert parse_json(text)["t"] == [1]


def test_json_line_of_the_deep_spot():
    text = '{\n"a": 1,\n"b": ' + "[" * 70 + "]" * 70 + "}"
    with pytest.raises(NestingError, match="f.json: line 3: nested deeper"):
        parse_json(text, "f.json")


def test_not_utf8_names_the_byte_offset(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(DataFileError) as e:
        load_yaml(p)
    assert str(e.value) == f"{p}: not UTF-8: byte 0xff at byte offset 8 (line 2) is invalid start byte"
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"a": "\xc3"}')
    with pytest.raises(DataFileError, match=r"bad.json: not UTF-8: byte 0xc3 at byte offset 7 \(line 1\)"):
        load_json(p)


def test_size_limit(tmp_path, monkeypatch):
    p = tmp_path / "big.json"
    p.write_text('{"a": "' + "x" * 200 + '"}')
    monkeypatch.setattr(datafile, "MAX_FILE_BYTES", 100)
    with pytest.raises(DataFileError, match=r"big.json: larger than MAX_FILE_BYTES = 100 bytes"):
        load_json(p)
    monkeypatch.setattr(datafile, "MAX_FILE_BYTES", 1000)
    assert load_json(p)["a"] == "x" * 200


def test_default_size_limit_is_16_mib():
    assert datafile.MAX_FILE_BYTES == 16 * 1024 * 1024


def test_missing_unreadable_and_malformed(tmp_path):
    with pytest.raises(MissingDataFileError, match="nope.yaml: no such file"):
        load_yaml(tmp_path / "nope.yaml")
    with pytest.raises(DataFileError, match="cannot be read"):
        load_json(tmp_path)
    with pytest.raises(DataFileError, match=r"x.json: malformed JSON at line 2 column 1"):
        parse_json('{"a": 1,\n}', "x.json")
    with pytest.raises(DataFileError, match="x.yaml: malformed YAML"):
        parse_yaml("a: [1,\n", "x.yaml")


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', "[-Infinity]"])
def test_json_nonstandard_constants(text):
    with pytest.raises(DataFileError, match="is not JSON"):
        parse_json(text, "x.json")


def test_huge_integers_are_named_errors():
    with pytest.raises(DataFileError, match="x.json: unreadable value"):
        parse_json('{"a": ' + "9" * 5000 + "}", "x.json")
    with pytest.raises(DataFileError, match="x.yaml: unreadable value"):
        parse_yaml("a: " + "9" * 5000, "x.yaml")


# ---------------------------------------------------------------------------------------------- checked-document cache
_RECEIPTS = "schema: 1\nreceipts:\n  0: {name: ck_default, aliases: [default], description: d}\n"


@pytest.fixture
def checked_cache(tmp_path, monkeypatch):
    """Entries go under a pycache prefix of their own, and may be written (whatever PYTHONDONTWRITEBYTECODE says)."""
    monkeypatch.setattr(datafile.sys, "pycache_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(datafile.sys, "dont_write_bytecode", False)
    return tmp_path / "prefix"


def _entries(prefix):
    return sorted(p.name for p in prefix.rglob("*.checked")) if prefix.exists() else []


def test_checked_documents_are_cached_and_read_back_equal(tmp_path, checked_cache, monkeypatch):
    f = tmp_path / "receipts.yaml"
    f.write_text(_RECEIPTS)
    first = datafile.load_checked_yaml(f, "receipts")
    assert first == load_yaml(f)
    assert _entries(checked_cache) == [f"receipts.yaml.receipts.{sys.implementation.cache_tag}.checked"]

    def no_parse(*args, **kwargs):  # a hit neither parses nor checks
        raise AssertionError("parsed again")

    monkeypatch.setattr(datafile, "parse_yaml", no_parse)
    again = datafile.load_checked_yaml(f, "receipts")
    assert again == first and again is not first and type(next(iter(again["receipts"]))) is int


def test_changed_content_is_checked_again(tmp_path, checked_cache):
    f = tmp_path / "receipts.yaml"
    f.write_text(_RECEIPTS)
    datafile.load_checked_yaml(f, "receipts")
    f.write_text(_RECEIPTS.replace("ck_default", "renamed"))
    assert datafile.load_checked_yaml(f, "receipts")["receipts"][0]["name"] == "renamed"
    f.write_text(_RECEIPTS.replace("schema: 1", "schema: 2"))  # the entry of the valid content is no pass
    with pytest.raises(datafile.SchemaError, match="schema"):
        datafile.load_checked_yaml(f, "receipts")


def test_errors_are_those_of_load_yaml_and_check_schema(tmp_path, checked_cache):
    f = tmp_path / "receipts.yaml"
    for text in (_RECEIPTS + "schema: 1\n", _RECEIPTS.replace("name: ck_default, ", ""), "a: [1\n"):
        f.write_text(text)
        with pytest.raises(DataFileError) as plain:
            datafile.check_schema(load_yaml(f), "receipts", str(f))
        with pytest.raises(DataFileError) as cached:
            datafile.load_checked_yaml(f, "receipts")
        assert str(cached.value) == str(plain.value) and type(cached.value) is type(plain.value)
    assert _entries(checked_cache) == []  # nothing that failed is kept


def test_no_entry_without_bytecode_writing_and_a_foreign_entry_is_ignored(tmp_path, checked_cache, monkeypatch):
    f = tmp_path / "receipts.yaml"
    f.write_text(_RECEIPTS)
    monkeypatch.setattr(datafile.sys, "dont_write_bytecode", True)
    assert datafile.load_checked_yaml(f, "receipts") == load_yaml(f) and _entries(checked_cache) == []
    monkeypatch.setattr(datafile.sys, "dont_write_bytecode", False)
    datafile.load_checked_yaml(f, "receipts")
    (entry,) = checked_cache.rglob("*.checked")
    entry.write_bytes(entry.read_bytes()[:40] + b"\x00" * 32)  # another key, unreadable payload: read the file
    assert datafile.load_checked_yaml(f, "receipts") == load_yaml(f)
