"""Sweep configs (tile-engine JSON): every key is honoured; malformed files get errors with file and key path."""

from __future__ import annotations

import json

import pytest

from ckfmha.kernel import Family, KernelConfig, MaskImpl
from ckfmha.sweep import SweepError, load_sweep, parse_sweep
from tests.sample_kernels import FWD_WARPS, fwd_config


def cfg(**kw) -> KernelConfig:
    return fwd_config(**{**FWD_WARPS, **kw})


def test_trait_config_allow_lists() -> None:
    sw = parse_sweep(
        {
            "variant": "fwd",
            "trait_config": {
                "data_type": {"values": ["fp16"]},
                "pipeline": {"values": ["qr_async"]},
                "mask": {"values": ["no", "top_left"]},
                "bias": {"values": ["no"]},
                "lse": {"values": [False]},
                "block_per_cu": {"values": [-1]},
            },
        }
    )
    assert sw(cfg())
    assert sw(cfg(mask="causal")) and sw(cfg(mask="any"))
    assert not sw(cfg(mask="generic"))
    assert not sw(cfg(dtype="bf16"))
    assert not sw(cfg(bias="alibi"))
    assert not sw(cfg(lse=True))
    assert not sw(cfg(occupancy=1))
    assert not sw(cfg(family="fwd_splitkv"))  # the variant selects the families


def test_tile_config_is_applied() -> None:
    # Upstream silently ignored tile_config; we apply it.
    sw = parse_sweep({"variant": "fwd", "tile_config": {"tile_m0": {"values": [64]}, "warp_m0": {"values": [32]}}})
    assert not sw(cfg())
    assert sw(cfg(tile=(64, 128, 32, 128, 32, 128)))
    assert not sw(cfg(tile=(64, 128, 32, 128, 32, 128), warp_tiles=((16, 16, 32), (16, 16, 16))))
    bwd = parse_sweep({"variant": "bwd", "tile_config": {"tile_bwd6": {"values": [32]}}})
    assert bwd.families == (Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ)
    # a 1-entry tile (dot_do_o) has no entry 6: it cannot match an allow-list on it
    dot = cfg(family="bwd_dot_do_o", pipeline="bwd_dot_do_o", tile=(64,), warps=(), warp_tiles=())
    assert not bwd(dot)


def test_dropout_booleans_and_variants() -> None:
    sw = parse_sweep({"variant": "bwd", "trait_config": {"dropout": {"values": [True]}}})
    assert sw.allowed["dropout"] and all(d.value != "none" for d in sw.allowed["dropout"])


@pytest.mark.parametrize(
    "doc, message",
    [
        # the schema (ckfmha/data/schemas/sweep.schema.yaml)
        ([], "s.json: top level: expected an object (a mapping), found []"),
        ({}, "s.json: top level: missing key(s) 'variant'"),
        (
            {"variant": "fwdd"},
            "s.json: variant: expected one of 'fwd', 'bwd', 'splitkv', 'appendkv', 'pagedkv', 'batch_prefill', "
            "found 'fwdd' (rule: the tile-engine variant: which kernel families the sweep covers)",
        ),
        ({"variant": "fwd", "name": 3}, "s.json: name: expected a string, found 3 (rule: free text: the sweep's name)"),
        ({"variant": "fwd", "description": None}, "s.json: description: expected a string, found None"),
        (
            {"variant": "fwd", "trait_config": []},
            "s.json: trait_config: expected an object (a mapping), found [] (rule: allow-lists over kernel traits",
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": ["no"]}},
            "s.json: trait_config.mask: expected an object (a mapping), found ['no'] (rule: an allow-list "
            '{"values": [<value>, ...]})',
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": {"value": ["no"]}}},
            "s.json: trait_config.mask: unknown key(s) 'value' (did you mean 'values'?); known: values",
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": {"values": []}}},
            "s.json: trait_config.mask.values: expected at least this many items: 1, found [] "
            "(rule: a non-empty list of the allowed values)",
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": {"values": "no"}}},
            "s.json: trait_config.mask.values: expected a list, found 'no' (rule: a non-empty list of the allowed "
            "values)",
        ),
        (
            {"variant": "fwd", "tile_config": {"tile_m0": {"values": [0]}}},
            "s.json: tile_config.tile_m0.values[0]: expected a value >= 1, found 0 (rule: a tile / warp size: a "
            "positive integer)",
        ),
        (
            {"variant": "fwd", "tile_config": {"tile_m0": {"values": [True]}}},
            "s.json: tile_config.tile_m0.values[0]: expected an integer, found True",
        ),
        (
            {"variant": "fwd", "tile_config": {"tile_m0": {"values": [float("nan")]}}},
            "s.json: tile_config.tile_m0.values[0]: expected a finite number, found nan",
        ),
        (
            {"variant": "fwd", "extra": 1},
            "s.json: top level: unknown key(s) 'extra'; known: description, name, tile_config, trait_config, variant",
        ),
        # the code (trait / tile tables, per-field values)
        (
            {"variant": "fwd", "trait_config": {"color": {"values": [1]}}},
            "s.json: trait_config.color: unknown trait; known: bias, block_per_cu, data_type, ",
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": {"values": ["sideways"]}}},
            "s.json: trait_config.mask.values[0]: unknown mask; expected one of ['any', 'bottom_right', 'causal', ",
        ),
        (
            {"variant": "fwd", "trait_config": {"lse": {"values": ["t"]}}},
            "s.json: trait_config.lse.values[0]: expected true or false, found 't'",
        ),
        (
            {"variant": "fwd", "trait_config": {"data_type": {"values": ["fp64"]}}},
            "s.json: trait_config.data_type.values[0]: expected one of ['fp16', ",
        ),
        (
            {"variant": "fwd", "tile_config": {"tile_q": {"values": [64]}}},
            "s.json: tile_config.tile_q: unknown tile key; known: tile_m0, tile_n0, ",
        ),
        (
            {"variant": "fwd", "tile_config": {"tile_m0": {"values": [64.0]}}},
            "s.json: tile_config.tile_m0.values[0]: expected an integer written without a fraction, found 64.0",
        ),
    ],
)
def test_malformed_sweeps(doc, message: str) -> None:
    with pytest.raises(SweepError) as ei:
        parse_sweep(doc, "s.json")
    assert message in str(ei.value)


def test_a_tile_engine_sweep_follows_the_schema() -> None:
    from ckfmha.datafile import check_schema

    doc = {
        "name": "fwd_small",
        "description": "fp16 causal, one tile",
        "variant": "fwd",
        "trait_config": {"data_type": {"values": ["fp16", "bf16"]}, "block_per_cu": {"values": [-1, 1]}},
        "tile_config": {"tile_m0": {"values": [128]}, "wave_m0": {"values": [4]}},
    }
    check_schema(doc, "sweep", "s.json")
    assert parse_sweep(doc, "s.json").variant == "fwd"


def test_the_schemas_variants_are_the_codes() -> None:
    from ckfmha.datafile import schema_validator
    from ckfmha.sweep import VARIANT_FAMILIES

    assert schema_validator("sweep").schema["properties"]["variant"]["enum"] == list(VARIANT_FAMILIES)


def test_load_sweep_file_errors(tmp_path) -> None:
    p = tmp_path / "s.json"
    p.write_text('{"variant": "fwd", ')
    with pytest.raises(SweepError, match=r"s.json: malformed JSON at line 1"):
        load_sweep(p)
    with pytest.raises(SweepError, match="no such sweep file"):
        load_sweep(tmp_path / "none.json")
    p.write_text(json.dumps({"variant": "fwd", "trait_config": {"mask": {"values": ["no"]}}}))
    sw = load_sweep(p)
    assert sw.allowed["mask"] == frozenset({MaskImpl.NONE})


# ---------------------------------------------------------------------- strict JSON files
@pytest.mark.parametrize(
    "data, message",
    [
        (
            b'{"variant": "fwd", "trait_config": {"mask": {"values": ["no"]}, "mask": {"values": ["generic"]}}}',
            r"s.json: trait_config: duplicate key 'mask'",
        ),
        (b'{"variant": "fwd", "variant": "bwd"}', r"s.json: top level: duplicate key 'variant'"),
        (b'{"variant": "fwd", "name": "caf\xe9"}', r"s.json: not UTF-8: byte 0xe9 at byte offset 31 \(line 1\)"),
        (
            b'{"variant": "fwd", "description": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            r"s.json: line 1: nested deeper than MAX_NESTING_DEPTH = 64",
        ),
        (b'{"variant": "fwd", "tile_config": {"tile_m0": {"values": [NaN]}}}', r"s.json: NaN is not JSON"),
    ],
    ids=["duplicate-nested", "duplicate-top", "not-utf8", "too-deep", "nan"],
)
def test_load_sweep_strict_file_errors(tmp_path, data: bytes, message: str) -> None:
    p = tmp_path / "s.json"
    p.write_bytes(data)
    with pytest.raises(SweepError, match=message):
        load_sweep(p)
