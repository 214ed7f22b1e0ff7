"""Sweep configs (tile-engine JSON): every key is honoured; malformed files get errors with file and key path."""

from __future__ import annotations

import json

import pytest

from ckfmha.kernel import Family, KernelConfig, MaskImpl
from ckfmha.sweep import SweepError, load_sweep, parse_sweep


def cfg(**kw) -> KernelConfig:
    base = dict(
        family="fwd",
        dtype="fp16",
        mode="batch",
        hdim_q=128,
        hdim_v=128,
        arch_tag="gfx9",
        pipeline="qr_async",
        tile=(128, 128, 32, 128, 32, 128),
        warps=((4, 1, 1), (4, 1, 1)),
        warp_tiles=((32, 32, 16), (32, 32, 16)),
    )
    base.update(kw)
    return KernelConfig.make(**base)


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
        ([], "top level: expected an object"),
        ({"variant": "fwdd"}, "variant: expected one of"),
        ({"variant": "fwd", "trait_config": {"color": {"values": [1]}}}, "trait_config.color: unknown trait"),
        ({"variant": "fwd", "trait_config": {"mask": ["no"]}}, 'trait_config.mask: expected {"values"'),
        (
            {"variant": "fwd", "trait_config": {"mask": {"values": []}}},
            "trait_config.mask.values: expected a non-empty list",
        ),
        (
            {"variant": "fwd", "trait_config": {"mask": {"values": ["sideways"]}}},
            "trait_config.mask.values\\[0\\]: unknown mask",
        ),
        (
            {"variant": "fwd", "trait_config": {"lse": {"values": ["t"]}}},
            "trait_config.lse.values\\[0\\]: expected true or false, found 't'",
        ),
        (
            {"variant": "fwd", "trait_config": {"data_type": {"values": ["fp64"]}}},
            "data_type.values\\[0\\]: expected one of",
        ),
        ({"variant": "fwd", "tile_config": {"tile_q": {"values": [64]}}}, "tile_config.tile_q: unknown tile key"),
        (
            {"variant": "fwd", "tile_config": {"tile_m0": {"values": [0]}}},
            "tile_config.tile_m0.values\\[0\\]: expected a positive integer",
        ),
        ({"variant": "fwd", "extra": 1}, "unknown key"),
    ],
)
def test_malformed_sweeps(doc, message: str) -> None:
    with pytest.raises(SweepError, match=message):
        parse_sweep(doc, "s.json")


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
