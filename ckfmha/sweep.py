"""Sweep configs: CK tile-engine JSON files that narrow an arch's kernel space.

Format (upstream's tile-engine format, every key honoured)::

    {
      "variant": "fwd",                                  # fwd | bwd | splitkv | appendkv | pagedkv | batch_prefill
      "trait_config": {                                  # allow-lists over kernel traits; absent key = allow all
        "data_type": {"values": ["fp16", "bf16"]},
        "pipeline":  {"values": ["qr_async"]},
        "mask":      {"values": ["no", "top_left"]},
        "block_per_cu": {"values": [-1, 1]}
      },
      "tile_config": {                                   # allow-lists over tile/warp fields (upstream ignored
        "tile_m0": {"values": [128]},                    # this block silently; ckfmha applies it)
        "tile_n0": {"values": [128]}
      }
    }

Trait keys (upstream name -> KernelConfig field): data_type -> dtype, pipeline, mode, vlayout, hdim_q, hdim_v,
mask, bias, lse, dropout, logits -> logits_soft_cap, sink, skip / skip_min_seqlen_q, qscale, rope, paged_kv,
deterministic, dbias, page_size, kv_memory_layout, kv_lookup_table, kv_load, trload / use_trload,
block_per_cu -> occupancy. Mask values accept upstream's names: ``no`` (none); ``top_left``, ``bottom_right``,
``causal`` (served by a causal kernel: ``causal`` under ``-m generic``, ``any`` under ``-m simplified``);
``generic``/``window`` (``generic`` or ``any``); and ckfmha's own tokens. Bias values: ``no``/``none``,
``bias``/``elementwise``, ``alibi``. Dropout values: booleans (any dropout variant / none) or variant tokens.

Tile keys: tile_m0 tile_n0 tile_k0 tile_n1 tile_k1 tile_k0max (tile entries 0-5), tile_bwd6..8 (entries 6-8),
wave_m0 wave_n0 wave_k0 wave_m1 ... wave_k2 (warps per block per stage), warp_m0 ... warp_k2 (warp tiles).

Checks (every error is a :class:`SweepError` naming the file, the key path, what was expected and what was found):

| check | where |
|---|---|
| duplicate keys, not UTF-8, too deep, too large, ``NaN``/``Infinity`` | :func:`ckfmha.datafile.load_json` |
| keys (``variant`` required; ``trait_config``, ``tile_config``, ``name``, ``description``), the variant, \
each allow-list ``{"values": [...]}`` non-empty, tile sizes integers >= 1, no NaN/inf | the schema \
``data/schemas/sweep.schema.yaml`` |
| trait names and tile keys known; each trait value fits its field (the aliases above); tile sizes \
written without a fraction (JSON Schema's ``integer`` takes ``64.0``) | :func:`parse_sweep` (its trait / tile tables) |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckfmha.datafile import DataFileError, MissingDataFileError, check_schema, load_json
from ckfmha.kernel import (
    BOOL_FIELDS,
    ENUM_FIELDS,
    Bias,
    Dropout,
    Family,
    KernelConfig,
    MaskImpl,
)


class SweepError(ValueError):
    pass


VARIANT_FAMILIES: dict[str, tuple[Family, ...]] = {
    "fwd": (Family.FWD,),
    "bwd": (Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ),
    "splitkv": (Family.FWD_SPLITKV, Family.FWD_SPLITKV_COMBINE),
    "appendkv": (Family.FWD_APPENDKV,),
    "pagedkv": (Family.FWD_PAGEDKV,),
    "batch_prefill": (Family.BATCH_PREFILL,),
}

_TRAIT_FIELDS: dict[str, str] = {
    "data_type": "dtype",
    "dtype": "dtype",
    "pipeline": "pipeline",
    "mode": "mode",
    "vlayout": "vlayout",
    "hdim_q": "hdim_q",
    "hdim_v": "hdim_v",
    "mask": "mask",
    "bias": "bias",
    "lse": "lse",
    "dropout": "dropout",
    "logits": "logits_soft_cap",
    "logits_soft_cap": "logits_soft_cap",
    "sink": "sink",
    "skip": "skip_min_seqlen_q",
    "skip_min_seqlen_q": "skip_min_seqlen_q",
    "qscale": "qscale",
    "rope": "rope",
    "paged_kv": "paged_kv",
    "deterministic": "deterministic",
    "dbias": "dbias",
    "page_size": "page_size",
    "kv_memory_layout": "kv_memory_layout",
    "kv_lookup_table": "kv_lookup_table",
    "kv_load": "kv_load",
    "trload": "trload",
    "use_trload": "trload",
    "block_per_cu": "occupancy",
    "occupancy": "occupancy",
    "num_stages": "num_stages",
}

_TILE_NAMES = (
    "tile_m0",
    "tile_n0",
    "tile_k0",
    "tile_n1",
    "tile_k1",
    "tile_k0max",
    "tile_bwd6",
    "tile_bwd7",
    "tile_bwd8",
)
_TILE_KEYS: dict[str, tuple[str, int, int]] = {name: ("tile", i, -1) for i, name in enumerate(_TILE_NAMES)}
for _stage in range(3):
    for _j, _axis in enumerate("mnk"):
        _TILE_KEYS[f"wave_{_axis}{_stage}"] = ("warps", _stage, _j)
        _TILE_KEYS[f"warp_{_axis}{_stage}"] = ("warp_tiles", _stage, _j)

_MASK_ALIASES: dict[str, set[MaskImpl]] = {
    "no": {MaskImpl.NONE},
    "none": {MaskImpl.NONE},
    "no_mask": {MaskImpl.NONE},
    "top_left": {MaskImpl.CAUSAL, MaskImpl.ANY},
    "bottom_right": {MaskImpl.CAUSAL, MaskImpl.ANY},
    "causal": {MaskImpl.CAUSAL, MaskImpl.ANY},
    "generic": {MaskImpl.GENERIC, MaskImpl.ANY},
    "window": {MaskImpl.GENERIC, MaskImpl.ANY},
    "window_generic": {MaskImpl.GENERIC, MaskImpl.ANY},
    "any": {MaskImpl.ANY},
}
_BIAS_ALIASES: dict[str, Bias] = {"no": Bias.NONE, "no_bias": Bias.NONE, "bias": Bias.ELEMENTWISE}


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep config: the families of its variant and a predicate over KernelConfigs."""

    source: str
    variant: str
    families: tuple[Family, ...]
    allowed: dict[str, frozenset[Any]]  # field -> allowed values (trait_config)
    tile_allowed: dict[str, tuple[tuple[str, int, int], frozenset[int]]]  # tile key -> (where, allowed)

    def __call__(self, c: KernelConfig) -> bool:
        if c.signature.family not in self.families:
            return False
        for fname, values in self.allowed.items():
            if getattr(c, fname) not in values:
                return False
        for (field_name, i, j), values in self.tile_allowed.values():
            seq = getattr(c.algorithm, field_name)
            if i >= len(seq):
                return False  # the config has no such entry: it cannot match an allow-list
            v = seq[i] if j < 0 else seq[i][j]
            if v not in values:
                return False
        return True


def _convert_value(source: str, key_path: str, fname: str, value: Any) -> set[Any]:
    def fail(rule: str) -> SweepError:
        return SweepError(f"{source}: {key_path}: {rule}, found {value!r}")

    if fname == "mask":
        if not isinstance(value, str):
            raise fail("expected a mask name (no, top_left, bottom_right, causal, generic, any)")
        if value in _MASK_ALIASES:
            return set(_MASK_ALIASES[value])
        try:
            return {MaskImpl(value)}
        except ValueError:
            raise fail(
                f"unknown mask; expected one of {sorted(set(_MASK_ALIASES) | {m.value for m in MaskImpl})}"
            ) from None
    if fname == "bias" and isinstance(value, str) and value in _BIAS_ALIASES:
        return {_BIAS_ALIASES[value]}
    if fname == "dropout" and isinstance(value, bool):
        return {d for d in Dropout if (d is not Dropout.NONE) == value}
    if fname in ENUM_FIELDS:
        if not isinstance(value, str):
            raise fail(f"expected one of {[m.value for m in ENUM_FIELDS[fname]]}")
        try:
            return {ENUM_FIELDS[fname](value)}
        except ValueError:
            raise fail(f"expected one of {[m.value for m in ENUM_FIELDS[fname]]}") from None
    if fname in BOOL_FIELDS:
        if not isinstance(value, bool):
            raise fail("expected true or false")
        return {value}
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail("expected an integer")
    return {value}


def _tile_allowed(source: str, tile_config: dict[str, Any]) -> dict[str, tuple[tuple[str, int, int], frozenset[int]]]:
    """tile key -> (where in the algorithm, allowed sizes); the schema has checked the allow-lists' shape."""
    out: dict[str, tuple[tuple[str, int, int], frozenset[int]]] = {}
    for key, entry in tile_config.items():
        if key not in _TILE_KEYS:
            raise SweepError(f"{source}: tile_config.{key}: unknown tile key; known: {', '.join(_TILE_KEYS)}")
        for i, v in enumerate(entry["values"]):
            if not isinstance(v, int):  # JSON Schema's "integer" takes 64.0
                raise SweepError(
                    f"{source}: tile_config.{key}.values[{i}]: expected an integer written without a fraction, "
                    f"found {v!r}"
                )
        out[key] = (_TILE_KEYS[key], frozenset(entry["values"]))
    return out


def parse_sweep(doc: Any, source: str = "<sweep>") -> Sweep:
    """A sweep config document -> :class:`Sweep`: the schema ``data/schemas/sweep.schema.yaml`` (keys, variant,
    allow-list shapes, positive tile sizes), then the trait and tile names and each trait value (see the module
    doc); errors are :class:`SweepError` naming the source, the key path, the value and the rule."""
    try:
        check_schema(doc, "sweep", source)
    except DataFileError as e:
        raise SweepError(str(e)) from None
    variant = doc["variant"]
    allowed: dict[str, set[Any]] = {}
    for key, entry in doc.get("trait_config", {}).items():
        if key not in _TRAIT_FIELDS:
            raise SweepError(f"{source}: trait_config.{key}: unknown trait; known: {', '.join(sorted(_TRAIT_FIELDS))}")
        fname = _TRAIT_FIELDS[key]
        vals: set[Any] = set()
        for i, v in enumerate(entry["values"]):
            vals |= _convert_value(source, f"trait_config.{key}.values[{i}]", fname, v)
        allowed[fname] = allowed[fname] & vals if fname in allowed else vals
    tile_allowed = _tile_allowed(source, doc.get("tile_config", {}))
    return Sweep(
        source, variant, VARIANT_FAMILIES[variant], {k: frozenset(v) for k, v in allowed.items()}, tile_allowed
    )


def load_sweep(path: str | Path) -> Sweep:
    p = Path(path)
    if not p.is_file():
        raise SweepError(f"{p}: no such sweep file")
    try:
        doc = load_json(p)
    except MissingDataFileError:  # removed since the check above
        raise SweepError(f"{p}: no such sweep file") from None
    except DataFileError as e:  # duplicate keys, not UTF-8, too deep, too large, malformed JSON
        raise SweepError(str(e)) from None
    return parse_sweep(doc, str(p))
