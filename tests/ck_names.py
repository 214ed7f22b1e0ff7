"""Shared check of the enumeration tests: configs have unique CK names, and each name parses back to its config
(no field hidden from the name)."""

from __future__ import annotations

from ckfmha.naming import ck_instance_name, parse_ck_instance_name


def assert_unique_names_parse_back(configs) -> None:
    assert len({ck_instance_name(c) for c in configs}) == len(configs)
    for c in configs:
        assert parse_ck_instance_name(ck_instance_name(c)) == c
