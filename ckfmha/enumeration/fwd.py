"""Forward (``fwd`` api) enumeration: CK's ``codegen/ops/fmha_fwd.py`` factories, driven by arch data.

The ``fwd`` section of an arch data file (``data/archs/_parts/<arch>/fwd.yaml``) is a mapping::

    arch_tag: gfx9                 # the generator factory = CK's file-name suffix (gfx9, gfx950, gfx11, gfx12, ...)
    modes: [batch, group]          # in generator order
    constraints:                   # optional; every emitted kernel satisfies every rule
      - name: group_mode_pads      # a label for error messages and docs
        rule: "c.mode == 'batch' or (c.pad_s == 1 and c.pad_sk == 1)"    # a ckfmha.filters expression
    dtypes:                        # in generator order
      fp16:
        tiles:                     # "<hdim_q>x<hdim_v>" -> tiles, in generator order (bm0 must not decrease)
          128x128:
            - b128x128x32x128x32x128_r4x1x1_r4x1x1_w32x32x16_w32x32x16        # CK's fwd tile notation
            - {tile: b64x128x32x128x32x128_r4x1x1_r4x1x1_w16x16x32_w16x16x16,
               runtime_constraint: "get_num_blocks(64) <= num_cus"}           # kept as data for dispatch
        pipelines:                 # groups, in generator order
          - features:              # a product over feature axes; first axis outermost (CK's loop order)
              logits_soft_cap: [true, false]
              mask: masks          # the run's mask implementations (CK's get_mask_map), or explicit tokens
              bias: [none, elementwise, alibi]
              lse: [true, false]
            when: {hdim: [64x64, 128x128]}       # optional: which hdims / receipts / combos the group serves
            variants:              # per feature combination, in order (innermost loop)
              - {pipeline: qr_async, pad: psskddv}
              - {pipeline: qr, pad: npad, vlayout: row, trload: false, when: {bias: [elementwise]}}

Tile notation: ``b{bm0}x{bn0}x{bk0}x{bn1}x{bk1}x{bk0max}_r{m}x{n}x{k}_r{m}x{n}x{k}_w{m}x{n}x{k}_w{m}x{n}x{k}``
with an optional ``_o{occupancy}`` suffix (default -1), exactly as in CK's kernel names; ``bn1`` must equal
the table's ``hdim_v``.

Feature axes (all optional; an absent axis keeps its default, shown first): ``logits_soft_cap``, ``lse``,
``dropout``, ``skip_min_seqlen_q``, ``sink`` (booleans; dropout true = ``enabled``); ``bias``
(none/elementwise/alibi); ``qscale`` (none/pertensor/blockscale/kv_blockscale/mx); ``mask``
(none/any/causal/generic, or the word ``masks``).

Variant keys: ``pipeline`` (a Pipeline token, required), ``pad`` (CK's pad token over s, sk, d, dv: ``npad``,
``ps``, ``psk``, ``pssk``, ``pddv``, ``psddv``, ``psskddv``, ...; required), ``vlayout`` (row/col, default
row), ``trload`` (default false), ``when``.

``when`` (on a group or a variant) is a conjunction; each key takes a list of allowed values, or a mapping
``{not: [...]}`` (excluded values) and, for integers, ``{min: n}`` / ``{max: n}`` (inclusive). Keys:
``hdim`` ("HQxHV" strings), ``hdim_q`` (ints), ``receipts`` (ints: CK's receipt-dependent generation, e.g.
receipt 1 adding qr kernels) and the feature axes above.

Constraints are filter expressions over KernelConfig fields (:mod:`ckfmha.filters`). Each is evaluated once
per distinct value of what it reads: a rule reading only problem fields (dtype, mode, hdims) and algorithm
fields/vlayout once per (mode, tile, variant); one reading only feature fields (those a feature combination and
vlayout fix) once per combination, vlayout and dtype, before any signature is built; one reading problem and
feature fields once per signature; any other rule per config.

The receipt's filter (``data/receipt_rules/fwd.yaml``, ``ctx.keep``) is applied to every config, staged the
same way (the fields it reads are those its compiled code names); the result equals a per-config evaluation.

Upstream quirks reproduced (each commented where it lives): fwd_fp8_no_pipelines (gfx9/gfx950 list fp8 tiles
but no fp8 pipelines: ``pipelines: []``), fwd_v3_generic_mask_names (the gfx950 fp8bf16 qr_async_trload_v3
kernels take CK's generic ``no``/``causal`` masks in both mask modes: ``mask: [none, causal]``),
fwd_gfx950_hdim_tile_pipeline_set (gfx950's hdim/tile rule only checks qr/qr_async/qs), in the arch data;
fwd_default_no_fp32 and fwd_r801_simplified_mask in ``data/receipt_rules/fwd.yaml``.

Generator order (kept in the returned list; it is CK's dispatch order): dtype, hdim, mode, tile, group,
feature combination, variant. A section may be ``{}`` (no kernels) or ``{inherit: <arch>}``.
``enumerate_names(ctx)`` gives the CK names of the same kernels in the same order without making them (see its
doc).

Malformed data raises :class:`ckfmha.archs.ArchSpecError` naming the file, the key path, what was expected and
what was found.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ckfmha.archs import ArchSpecError
from ckfmha.enumeration._pairs import Pair, configs
from ckfmha.filters import FilterError, compile_filter
from ckfmha.kernel import (
    ALGORITHM_FIELDS,
    SIGNATURE_FIELDS,
    ArchTag,
    Bias,
    Dropout,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    MaskImpl,
    Mode,
    Pipeline,
    QScale,
    VLayout,
    new_config,
    new_signature,
)
from ckfmha.naming import ck_name_middle, ck_name_parts, render_ck_names

# ------------------------------------------------------------------------------------------------ constants
_SECTION_KEYS = {"arch_tag", "modes", "constraints", "dtypes"}
_DTYPE_KEYS = {"tiles", "pipelines"}
_GROUP_KEYS = {"features", "when", "variants"}
_VARIANT_KEYS = {"pipeline", "pad", "vlayout", "trload", "when"}
_CONSTRAINT_KEYS = {"name", "rule"}
_TILE_ENTRY_KEYS = {"tile", "runtime_constraint"}

# Feature axes: the enum-valued ones (the others are booleans), the order of a combo tuple, the defaults.
_ENUM_AXES: dict[str, type] = {"mask": MaskImpl, "bias": Bias, "qscale": QScale}
_AXES = ("logits_soft_cap", "mask", "bias", "lse", "dropout", "skip_min_seqlen_q", "qscale", "sink")
_AXIS_DEFAULT: dict[str, Any] = {
    "logits_soft_cap": False,
    "mask": MaskImpl.NONE,
    "bias": Bias.NONE,
    "lse": False,
    "dropout": False,
    "skip_min_seqlen_q": False,
    "qscale": QScale.NONE,
    "sink": False,
}
_MASKS_WORD = "masks"
_STATIC_WHEN_KEYS = ("hdim", "hdim_q", "receipts")
_WHEN_KEYS = frozenset(_STATIC_WHEN_KEYS) | frozenset(_AXES)

_TILE_RE = re.compile(
    r"^b(\d+)x(\d+)x(\d+)x(\d+)x(\d+)x(\d+)_r(\d+)x(\d+)x(\d+)_r(\d+)x(\d+)x(\d+)"
    r"_w(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)x(\d+)(?:_o(-?\d+))?$"
)
_HDIM_RE = re.compile(r"^(\d+)x(\d+)\Z")
_PAD_RE = re.compile(r"^(?:npad|p(s)?(sk)?(d)?(dv)?)\Z")

# Field classes for staged evaluation of constraints and of the receipt filter: a predicate that reads only
# "head" fields (the problem's: dtype, mode, hdims...) is evaluated once per (dtype, hdim, mode), one that reads
# only "feature-stage" fields (those a signature slot fixes) once per slot and dtype, one that reads only
# "signature-stage" fields once per signature, one that reads only "algorithm-stage" fields once per (mode, tile,
# variant), anything else once per config. Results are identical to a per-config evaluation.
_PROBLEM_FIELDS = frozenset({"family", "dtype", "mode", "hdim_q", "hdim_v", "arch_tag"})
_SIG_STAGE = frozenset(SIGNATURE_FIELDS)
# the signature fields a signature slot (feature combination and vlayout) fixes: all but dtype, mode and the hdims
_FEATURE_STAGE = _SIG_STAGE - {"dtype", "mode", "hdim_q", "hdim_v"}
_ALG_STAGE = _PROBLEM_FIELDS | frozenset(ALGORITHM_FIELDS) | {"vlayout"}
_ALL_FIELDS = frozenset(SIGNATURE_FIELDS) | frozenset(ALGORITHM_FIELDS)


def _stage(read: frozenset[str] | None) -> str:
    if read is None or not read <= _ALL_FIELDS:
        return "config"
    if read <= _PROBLEM_FIELDS:
        return "head"
    if read <= _FEATURE_STAGE:
        return "feature"
    if read <= _SIG_STAGE:
        return "signature"
    if read <= _ALG_STAGE:
        return "algorithm"
    return "config"


class _Probe:
    """A stand-in exposing config fields to compiled filter expressions (which only read ``c.<field>``)."""

    __slots__ = tuple(SIGNATURE_FIELDS) + tuple(ALGORITHM_FIELDS)

    def __init__(self) -> None:
        for part, names in (
            (KernelSignature(Family.FWD, DType.FP16, Mode.BATCH, 0, 0, ArchTag.NONE), SIGNATURE_FIELDS),
            (KernelAlgorithm(Pipeline.QR, ()), ALGORITHM_FIELDS),
        ):
            for name in names:
                setattr(self, name, getattr(part, name))

    if TYPE_CHECKING:  # the slots come from the field lists, so mypy cannot see them: any field may be set

        def __setattr__(self, name: str, value: Any) -> None: ...


class _Err:
    """Builds ArchSpecErrors: '<file> (<key path>): expected ..., found ...'."""

    def __init__(self, where: Callable[[str], str]):
        self.where = where

    def __call__(self, path: str, expected: str, found: Any) -> ArchSpecError:
        return ArchSpecError(f"{self.where(path)}: expected {expected}, found {found!r}")


# ------------------------------------------------------------------------------------------ parsed section
# Plain classes with slots, not dataclasses: creating a dataclass costs ~1.5 ms, paid at this module's lazy
# import inside a timed enumeration.
class _Cond:
    """One ``when`` mapping: static part (hdim, hdim_q, receipts) and feature part (axis -> allowed set)."""

    __slots__ = ("hdims", "hdim_q", "receipts", "features")

    hdims: Callable[[tuple[int, int]], bool] | None
    hdim_q: Callable[[int], bool] | None
    receipts: Callable[[int], bool] | None
    features: tuple[tuple[int, Callable[[Any], bool]], ...]  # (axis index in _AXES, matcher)

    def __init__(
        self,
        hdims: Callable[[tuple[int, int]], bool] | None,
        hdim_q: Callable[[int], bool] | None,
        receipts: Callable[[int], bool] | None,
        features: tuple[tuple[int, Callable[[Any], bool]], ...],
    ) -> None:
        self.hdims = hdims
        self.hdim_q = hdim_q
        self.receipts = receipts
        self.features = features

    def static_ok(self, hdim: tuple[int, int], receipt: int) -> bool:
        return (
            (self.hdims is None or self.hdims(hdim))
            and (self.hdim_q is None or self.hdim_q(hdim[0]))
            and (self.receipts is None or self.receipts(receipt))
        )

    def features_ok(self, combo: tuple) -> bool:
        for i, m in self.features:
            if not m(combo[i]):
                return False
        return True


_TRUE_COND = _Cond(None, None, None, ())


class _Variant:
    __slots__ = ("pipeline", "pads", "vlayout", "trload", "when")

    pipeline: Pipeline
    pads: tuple[int, int, int, int]
    vlayout: VLayout
    trload: bool
    when: _Cond

    def __init__(
        self,
        pipeline: Pipeline,
        pads: tuple[int, int, int, int],
        vlayout: VLayout,
        trload: bool,
        when: _Cond,
    ) -> None:
        self.pipeline = pipeline
        self.pads = pads
        self.vlayout = vlayout
        self.trload = trload
        self.when = when


class _Group:
    __slots__ = ("axes", "when", "variants")

    axes: tuple[tuple[str, Any], ...]  # (axis, tuple of values or _MASKS_WORD), in product order
    when: _Cond
    variants: tuple[_Variant, ...]

    def __init__(self, axes: tuple[tuple[str, Any], ...], when: _Cond, variants: tuple[_Variant, ...]) -> None:
        self.axes = axes
        self.when = when
        self.variants = variants


class _Tile:
    __slots__ = ("tile", "warps", "warp_tiles", "occupancy", "runtime_constraint")

    tile: tuple[int, ...]
    warps: tuple[tuple[int, int, int], tuple[int, int, int]]
    warp_tiles: tuple[tuple[int, int, int], tuple[int, int, int]]
    occupancy: int
    runtime_constraint: str | None

    def __init__(
        self,
        tile: tuple[int, ...],
        warps: tuple[tuple[int, int, int], tuple[int, int, int]],
        warp_tiles: tuple[tuple[int, int, int], tuple[int, int, int]],
        occupancy: int,
        runtime_constraint: str | None,
    ) -> None:
        self.tile = tile
        self.warps = warps
        self.warp_tiles = warp_tiles
        self.occupancy = occupancy
        self.runtime_constraint = runtime_constraint


class _DTypeSpec:
    __slots__ = ("dtype", "hdims", "groups")

    dtype: DType
    hdims: tuple[tuple[tuple[int, int], tuple[_Tile, ...]], ...]
    groups: tuple[_Group, ...]

    def __init__(
        self,
        dtype: DType,
        hdims: tuple[tuple[tuple[int, int], tuple[_Tile, ...]], ...],
        groups: tuple[_Group, ...],
    ) -> None:
        self.dtype = dtype
        self.hdims = hdims
        self.groups = groups


class _Rule:
    __slots__ = ("name", "fn", "stage", "read")

    name: str
    fn: Callable[[Any], Any]  # reads c.<field> only: takes a KernelConfig or a _Probe
    stage: str  # "head" | "feature" | "signature" | "algorithm" | "config"
    read: frozenset[str]  # the fields it reads

    def __init__(self, name: str, fn: Callable[[Any], Any], stage: str, read: frozenset[str]) -> None:
        self.name = name
        self.fn = fn
        self.stage = stage
        self.read = read


class _Section:
    __slots__ = ("arch_tag", "modes", "rules", "dtypes")

    arch_tag: ArchTag
    modes: tuple[Mode, ...]
    rules: tuple[_Rule, ...]
    dtypes: tuple[_DTypeSpec, ...]

    def __init__(
        self,
        arch_tag: ArchTag,
        modes: tuple[Mode, ...],
        rules: tuple[_Rule, ...],
        dtypes: tuple[_DTypeSpec, ...],
    ) -> None:
        self.arch_tag = arch_tag
        self.modes = modes
        self.rules = rules
        self.dtypes = dtypes


def _parse_enum(cls, value: Any, path: str, err: _Err):
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise err(path, f"one of {allowed}", value) from None


def _parse_axis_value(axis: str, value: Any, path: str, err: _Err) -> Any:
    if axis in _ENUM_AXES:
        if not isinstance(value, str):
            raise err(path, f"a {axis} token", value)
        return _parse_enum(_ENUM_AXES[axis], value, path, err)
    if not isinstance(value, bool):
        raise err(path, "a boolean (true/false)", value)
    return value


def _parse_hdim_key(value: Any, path: str, err: _Err) -> tuple[int, int]:
    m = _HDIM_RE.match(value) if isinstance(value, str) else None
    if not m:
        raise err(path, "an hdim pair written '<hdim_q>x<hdim_v>' (e.g. 128x128)", value)
    return int(m.group(1)), int(m.group(2))


def _matcher(value: Any, path: str, err: _Err, parse_one: Callable[[Any, str], Any], ints: bool):
    """A predicate from a list of allowed values, or {not: [...], min: n, max: n}."""
    if isinstance(value, list):
        allowed = frozenset(parse_one(v, f"{path}[{i}]") for i, v in enumerate(value))
        return allowed.__contains__
    if isinstance(value, dict):
        keys = {"not", "min", "max"} if ints else {"not"}
        unknown = set(value) - keys
        if unknown or not value:
            raise err(path, f"a list or a mapping with keys {sorted(keys)}", value)
        excluded: frozenset = frozenset()
        if "not" in value:
            if not isinstance(value["not"], list):
                raise err(f"{path}.not", "a list of values", value["not"])
            excluded = frozenset(parse_one(v, f"{path}.not[{i}]") for i, v in enumerate(value["not"]))
        lo, hi = value.get("min"), value.get("max")
        for k, b in (("min", lo), ("max", hi)):
            if b is not None and (isinstance(b, bool) or not isinstance(b, int)):
                raise err(f"{path}.{k}", "an integer", b)

        def match(x: Any) -> bool:
            return x not in excluded and (lo is None or x >= lo) and (hi is None or x <= hi)

        return match
    raise err(path, "a list of values or a mapping {not: [...]}" + (" / {min: n, max: n}" if ints else ""), value)


def _parse_int(value: Any, path: str, err: _Err) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise err(path, "an integer", value)
    return value


def _parse_when(value: Any, path: str, err: _Err) -> _Cond:
    if value is None:
        return _TRUE_COND
    if not isinstance(value, dict):
        raise err(path, "a mapping of condition keys", value)
    unknown = set(value) - _WHEN_KEYS
    if unknown:
        raise err(path, f"condition keys among {sorted(_WHEN_KEYS)}", sorted(unknown))
    hdims = hdim_q = receipts = None
    if "hdim" in value:
        hdims = _matcher(value["hdim"], f"{path}.hdim", err, lambda v, p: _parse_hdim_key(v, p, err), False)
    if "hdim_q" in value:
        hdim_q = _matcher(value["hdim_q"], f"{path}.hdim_q", err, lambda v, p: _parse_int(v, p, err), True)
    if "receipts" in value:
        receipts = _matcher(value["receipts"], f"{path}.receipts", err, lambda v, p: _parse_int(v, p, err), True)
    feats = []
    for _i, axis in enumerate(_AXES):
        if axis in value:
            feats.append((axis, _matcher(value[axis], f"{path}.{axis}", err, _axis_parser(axis, err), False)))
    return _Cond(hdims, hdim_q, receipts, tuple((_AXES.index(a), m) for a, m in feats))


def _axis_parser(axis: str, err: _Err) -> Callable[[Any, str], Any]:
    """``_parse_axis_value`` for one axis, as :func:`_matcher`'s ``parse_one``."""
    return lambda v, p: _parse_axis_value(axis, v, p, err)


def _parse_tile(entry: Any, path: str, err: _Err, hdim_v: int) -> _Tile:
    rc = None
    if isinstance(entry, dict):
        unknown = set(entry) - _TILE_ENTRY_KEYS
        if unknown or "tile" not in entry:
            raise err(path, f"a tile string or a mapping with keys {sorted(_TILE_ENTRY_KEYS)} ('tile' required)", entry)
        rc = entry.get("runtime_constraint")
        if rc is not None and not isinstance(rc, str):
            raise err(f"{path}.runtime_constraint", "a C++ boolean expression string", rc)
        entry, path = entry["tile"], f"{path}.tile"
    m = _TILE_RE.match(entry) if isinstance(entry, str) else None
    if not m:
        raise err(
            path,
            "a tile 'b{bm0}x{bn0}x{bk0}x{bn1}x{bk1}x{bk0max}_r{m}x{n}x{k}_r{m}x{n}x{k}"
            "_w{m}x{n}x{k}_w{m}x{n}x{k}[_o{occupancy}]'",
            entry,
        )
    v = [int(x) for x in m.groups()[:18]]
    if v[3] != hdim_v:
        raise err(path, f"bn1 (the 4th block entry) equal to the table's hdim_v {hdim_v}", entry)
    occ = int(m.group(19)) if m.group(19) is not None else -1

    def triple(i: int) -> tuple[int, int, int]:
        return (v[i], v[i + 1], v[i + 2])

    return _Tile(tuple(v[0:6]), (triple(6), triple(9)), (triple(12), triple(15)), occ, rc)


def _parse_variant(value: Any, path: str, err: _Err) -> _Variant:
    if not isinstance(value, dict):
        raise err(path, "a variant mapping {pipeline, pad[, vlayout, trload, when]}", value)
    unknown = set(value) - _VARIANT_KEYS
    if unknown:
        raise err(path, f"variant keys among {sorted(_VARIANT_KEYS)}", sorted(unknown))
    for k in ("pipeline", "pad"):
        if k not in value:
            raise err(f"{path}.{k}", "a value (required key)", None)
    pipeline = _parse_enum(Pipeline, value["pipeline"], f"{path}.pipeline", err)
    pm = _PAD_RE.match(value["pad"]) if isinstance(value["pad"], str) else None
    if not pm or value["pad"] == "p":
        raise err(
            f"{path}.pad",
            "a CK pad token: npad or p followed by s, sk, d, dv in this order (e.g. psskddv)",
            value["pad"],
        )
    pad_s, pad_sk, pad_d, pad_dv = (1 if g else 0 for g in pm.groups())
    vlayout = _parse_enum(VLayout, value.get("vlayout", "row"), f"{path}.vlayout", err)
    trload = value.get("trload", False)
    if not isinstance(trload, bool):
        raise err(f"{path}.trload", "a boolean", trload)
    pads = (pad_s, pad_sk, pad_d, pad_dv)
    return _Variant(pipeline, pads, vlayout, trload, _parse_when(value.get("when"), f"{path}.when", err))


def _parse_group(value: Any, path: str, err: _Err) -> _Group:
    if not isinstance(value, dict):
        raise err(path, "a pipeline group mapping {features, variants[, when]}", value)
    unknown = set(value) - _GROUP_KEYS
    if unknown:
        raise err(path, f"group keys among {sorted(_GROUP_KEYS)}", sorted(unknown))
    feats = value.get("features", {})
    if not isinstance(feats, dict):
        raise err(f"{path}.features", "a mapping axis -> list of values", feats)
    axes: list[tuple[str, Any]] = []
    for axis, vals in feats.items():
        ap = f"{path}.features.{axis}"
        if axis not in _AXES:
            raise err(ap, f"a feature axis among {list(_AXES)}", axis)
        if axis == "mask" and vals == _MASKS_WORD:
            axes.append((axis, _MASKS_WORD))
            continue
        if not isinstance(vals, list) or not vals:
            raise err(ap, "a non-empty list of values" + (" or the word 'masks'" if axis == "mask" else ""), vals)
        axes.append((axis, tuple(_parse_axis_value(axis, v, f"{ap}[{i}]", err) for i, v in enumerate(vals))))
    variants = value.get("variants")
    if not isinstance(variants, list) or not variants:
        raise err(f"{path}.variants", "a non-empty list of variants", variants)
    return _Group(
        tuple(axes),
        _parse_when(value.get("when"), f"{path}.when", err),
        tuple(_parse_variant(v, f"{path}.variants[{i}]", err) for i, v in enumerate(variants)),
    )


def _fields_read(expression: str) -> frozenset[str]:
    tree = ast.parse(expression.strip(), mode="eval")
    return frozenset(
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "c"
    )


def _parse_rule(value: Any, path: str, err: _Err) -> _Rule:
    if not isinstance(value, dict) or set(value) != _CONSTRAINT_KEYS:
        raise err(path, "a mapping {name: <label>, rule: <filter expression>}", value)
    name, rule = value["name"], value["rule"]
    if not isinstance(name, str) or not name:
        raise err(f"{path}.name", "a non-empty string", name)
    if not isinstance(rule, str):
        raise err(f"{path}.rule", "a filter expression string", rule)
    try:
        fn = compile_filter(rule).fast  # type: ignore[attr-defined]
    except FilterError as e:
        raise ArchSpecError(f"{err.where(path + '.rule')}: {e}") from None
    read = _fields_read(rule)
    return _Rule(name, fn, _stage(read), read)


def _parse_section(sec: Any, err: _Err) -> _Section | None:
    if sec is None or sec == {}:
        return None
    if not isinstance(sec, dict):
        raise err("", "a mapping (the fwd section)", sec)
    unknown = set(sec) - _SECTION_KEYS
    if unknown:
        raise err("", f"section keys among {sorted(_SECTION_KEYS)}", sorted(unknown))
    for k in ("arch_tag", "modes", "dtypes"):
        if k not in sec:
            raise err(k, "a value (required key)", None)
    arch_tag = _parse_enum(ArchTag, sec["arch_tag"], "arch_tag", err)
    if not isinstance(sec["modes"], list) or not sec["modes"]:
        raise err("modes", "a non-empty list of modes (batch, group)", sec["modes"])
    modes = tuple(_parse_enum(Mode, m, f"modes[{i}]", err) for i, m in enumerate(sec["modes"]))
    cons = sec.get("constraints") or []
    if not isinstance(cons, list):
        raise err("constraints", "a list of {name, rule} mappings", cons)
    rules = tuple(_parse_rule(c, f"constraints[{i}]", err) for i, c in enumerate(cons))
    dtypes_raw = sec["dtypes"]
    if not isinstance(dtypes_raw, dict):
        raise err("dtypes", "a mapping dtype -> {tiles, pipelines}", dtypes_raw)
    dtypes = []
    for dt_key, body in dtypes_raw.items():
        dp = f"dtypes.{dt_key}"
        dtype = _parse_enum(DType, dt_key, dp, err)
        if not isinstance(body, dict) or set(body) != _DTYPE_KEYS:
            raise err(dp, "a mapping with exactly the keys pipelines and tiles", body)
        tiles_raw, groups_raw = body["tiles"], body["pipelines"]
        if not isinstance(tiles_raw, dict):
            raise err(f"{dp}.tiles", "a mapping '<hdim_q>x<hdim_v>' -> list of tiles", tiles_raw)
        hdims = []
        for hk, tl in tiles_raw.items():
            hp = f"{dp}.tiles.{hk}"
            hdim = _parse_hdim_key(hk, hp, err)
            if not isinstance(tl, list) or not tl:
                raise err(hp, "a non-empty list of tiles", tl)
            tiles = tuple(_parse_tile(t, f"{hp}[{i}]", err, hdim[1]) for i, t in enumerate(tl))
            for i in range(1, len(tiles)):  # CK asserts this order (its dispatch falls back to the largest bm0)
                if tiles[i].tile[0] < tiles[i - 1].tile[0]:
                    raise err(
                        f"{hp}[{i}]",
                        f"tiles ordered by non-decreasing bm0 (previous bm0 {tiles[i - 1].tile[0]})",
                        tl[i],
                    )
            hdims.append((hdim, tiles))
        if not isinstance(groups_raw, list):
            raise err(f"{dp}.pipelines", "a list of pipeline groups", groups_raw)
        groups = tuple(_parse_group(g, f"{dp}.pipelines[{i}]", err) for i, g in enumerate(groups_raw))
        dtypes.append(_DTypeSpec(dtype, tuple(hdims), groups))
    return _Section(arch_tag, modes, rules, tuple(dtypes))


# The parsed form of each section object (sections are cached by ckfmha.archs, so identity is stable;
# the object itself is kept alive here so its id cannot be reused).
_PARSED: dict[int, tuple[Any, _Section | None]] = {}
_CACHE_LIMIT = 32


def _where(ctx) -> Callable[[str], str]:
    """Error locations: the arch file the section really comes from (following ``inherit``) and the key path."""
    return ctx.where


def _section(ctx) -> _Section | None:
    sec = ctx.section
    hit = _PARSED.get(id(sec))
    if hit is not None and hit[0] is sec:
        return hit[1]
    parsed = _parse_section(sec, _Err(_where(ctx)))
    if len(_PARSED) >= _CACHE_LIMIT:  # sections re-read after ckfmha.archs' cache was cleared: drop stale ones
        _PARSED.clear()
        _EXPANDED.clear()
    _PARSED[id(sec)] = (sec, parsed)
    return parsed


# --------------------------------------------------------------------------------------------- enumeration
_DROPOUT = {False: Dropout.NONE, True: Dropout.ENABLED}


def _combos(group: _Group, masks: tuple[MaskImpl, ...]) -> list[tuple]:
    """The group's feature combinations (full tuples over _AXES), in product order."""
    names = [a for a, _ in group.axes]  # distinct: the keys of the group's features mapping
    values = [masks if v == _MASKS_WORD else v for _, v in group.axes]
    # a full tuple takes each axis from the product (the group's axes) or, for the others, from the defaults
    # appended to it
    pick = itemgetter(*(names.index(a) if a in names else len(names) + i for i, a in enumerate(_AXES)))
    defaults = tuple(_AXIS_DEFAULT[a] for a in _AXES)
    return [pick(prod + defaults) for prod in itertools.product(*values)]


_EXPANDED: dict[tuple, tuple] = {}


def _expand_groups(dts: _DTypeSpec, masks: tuple[MaskImpl, ...]) -> tuple[list, list, list]:
    """Per group: the combos passing the group's feature condition, each with the indices of the variants whose
    feature condition holds (independent of hdim and receipt; cached per parsed dtype spec and mask mode).
    Combos get integer ids: hashing enum members is a Python-level call, too slow for the inner loops."""
    key = (id(dts), masks)
    hit = _EXPANDED.get(key)
    if hit is not None and hit[0] is dts:
        return hit[1]
    combo_id: dict[tuple, int] = {}
    combos: list[tuple] = []
    group_combos = []
    variants: list[_Variant] = []
    for g in dts.groups:
        vbase = len(variants)
        variants.extend(g.variants)
        per_combo = []
        # the variants without a feature condition serve every combo (their conditions are not called)
        every = tuple(range(vbase, len(variants))) if not any(v.when.features for v in g.variants) else None
        for combo in _combos(g, masks):
            if not g.when.features or g.when.features_ok(combo):
                vis = every or [vbase + i for i, v in enumerate(g.variants) if v.when.features_ok(combo)]
                if vis:
                    cid = combo_id.get(combo)
                    if cid is None:
                        cid = combo_id[combo] = len(combos)
                        combos.append(combo)
                    per_combo.append((cid, tuple(vis)))  # ints only: the cyclic GC stops tracking it
        group_combos.append((g, per_combo))
    result = (combos, group_combos, variants)
    if len(_EXPANDED) >= 8 * _CACHE_LIMIT:
        _EXPANDED.clear()
    _EXPANDED[key] = (dts, result)
    return result


def _keep_fields(keep: Callable) -> frozenset[str] | None:
    """The config fields a compiled receipt filter reads (its code's attribute names), None if unknown."""
    code = getattr(keep, "__code__", None)
    if code is None or code.co_argcount != 1 or code.co_freevars:
        return None
    return frozenset(code.co_names)


class _Preds:
    """The section's rules and the receipt filter, by the stage they are tested at (see ``_stage``).  (A plain
    class: a dataclass costs a millisecond to create, at the module's import, inside a timed enumeration.)"""

    __slots__ = ("head", "feature", "signature", "algorithm", "config", "signature_reads_mode", "signature_axes")

    def __init__(self, stages: dict[str, list], signature_reads: frozenset[str]) -> None:
        self.head: list = stages["head"]
        self.feature: list = stages["feature"]
        self.signature: list = stages["signature"]
        self.algorithm: list = stages["algorithm"]
        self.config: list = stages["config"]
        self.signature_reads_mode = "mode" in signature_reads  # whether a signature-stage predicate reads the mode
        # the feature axes (indices in _AXES) the signature-stage predicates read, when they read no vlayout: of
        # what a slot sets, their answer then depends on those axes only (see _slots_ok); None when they do
        self.signature_axes: tuple[int, ...] | None = (
            None if "vlayout" in signature_reads else tuple(i for i, a in enumerate(_AXES) if a in signature_reads)
        )


def _stage_predicates(sec: _Section, keep: Callable) -> _Preds:
    """The section's rules as predicates per stage, with the receipt filter ``keep`` added to the earliest stage
    whose fields cover what it reads."""
    stages: dict[str, list] = {"head": [], "feature": [], "signature": [], "algorithm": [], "config": []}
    signature_reads: set[str] = set()
    for r in sec.rules:
        stages[r.stage].append(r.fn)
        if r.stage == "signature":
            signature_reads |= r.read
    keep_read = _keep_fields(keep)
    stages[_stage(keep_read)].append(keep)
    if keep_read is not None and _stage(keep_read) == "signature":
        signature_reads |= keep_read
    return _Preds(stages, frozenset(signature_reads))


def _hdim_pattern(
    patterns: dict[tuple, tuple[list, list]],
    group_combos: list,
    variants: list[_Variant],
    vl_slot: list[int],
    hdim: tuple[int, int],
    receipt: int,
) -> tuple[list[bool], list, list]:
    """``(static_ok, entries, slots)`` of one hdim: which variants serve it under the receipt, and the entries
    (signature slot = 2 * combo id + vlayout, variant index) in generator order with their distinct slots --
    cached in ``patterns`` per static pattern (which groups/variants serve), shared by the dtype's hdims."""
    static_ok = [v.when.static_ok(hdim, receipt) for v in variants]
    group_ok = [g.when.static_ok(hdim, receipt) for g, _ in group_combos]
    pkey = (tuple(group_ok), tuple(static_ok))
    pat = patterns.get(pkey)
    if pat is None:
        entries = [
            (2 * cid + vl_slot[vi], vi)
            for (g, per_combo), gok in zip(group_combos, group_ok)
            if gok
            for cid, vis in per_combo
            for vi in vis
            if static_ok[vi]
        ]
        pat = patterns[pkey] = (entries, sorted({slot for slot, _ in entries}))
    return static_ok, pat[0], pat[1]


def _tile_algorithms(
    tiles: tuple[_Tile, ...], variants: list[_Variant], static_ok: list[bool]
) -> list[list[KernelAlgorithm | None]]:
    """Per tile, per variant: its algorithm, or None where the variant does not serve the hdim (shared by the
    modes)."""
    return [
        [
            KernelAlgorithm(
                v.pipeline,
                t.tile,
                t.warps,
                t.warp_tiles,
                occupancy=t.occupancy,
                pad_s=v.pads[0],
                pad_sk=v.pads[1],
                pad_d=v.pads[2],
                pad_dv=v.pads[3],
                trload=v.trload,
            )
            if static_ok[vi]
            else None
            for vi, v in enumerate(variants)
        ]
        for t in tiles
    ]


def _mode_signatures(
    sig_preds: list, head: tuple[Family, DType, Mode, int, int, ArchTag], combos: list[tuple], slots: list
) -> list:
    """Per signature slot: the signature of (``head`` = family, dtype, mode, hdim_q, hdim_v, arch tag) with the
    slot's features, or None where a signature-stage predicate rejects it (a signature has every field such a
    predicate reads, so it is tested itself)."""
    sigs: list = [None] * (2 * len(combos))
    for slot in slots:
        logits, mask, bias, lse, dropout, skip, qscale, sink = combos[slot >> 1]
        vl = VLayout.COL if slot & 1 else VLayout.ROW
        # positional, in field order (keywords cost a lookup each): ..., vlayout, mask, bias, dbias, lse, dropout,
        # logits_soft_cap, skip_min_seqlen_q, qscale, fp8_static_quant, sink
        sig = new_signature(*head, vl, mask, bias, False, lse, _DROPOUT[dropout], logits, skip, qscale, False, sink)
        for pred in sig_preds:
            if not pred(sig):
                break
        else:
            sigs[slot] = sig
    return sigs


def _slot_signature(head: tuple, combos: list[tuple], slot: int) -> KernelSignature:
    """The signature of ``head`` (as in :func:`_mode_signatures`) with the features of one slot."""
    logits, mask, bias, lse, dropout, skip, qscale, sink = combos[slot >> 1]
    vl = VLayout.COL if slot & 1 else VLayout.ROW
    return new_signature(*head, vl, mask, bias, False, lse, _DROPOUT[dropout], logits, skip, qscale, False, sink)


def _slots_ok(
    sig_preds: list, ap: _Probe, combos: list[tuple], slots: list, axes: tuple[int, ...] | None
) -> list[bool]:
    """Per signature slot: whether :func:`_mode_signatures` would keep its signature, tested on ``ap`` (which holds
    the block's head; the slot's features are set on it) instead of on a new signature.  With ``axes`` (the feature
    axes the predicates read, when they read no vlayout: :attr:`_Preds.signature_axes`) the answer depends only on
    the slot's values of those axes, so it is tested once per distinct such values."""
    ok = [False] * (2 * len(combos))
    if not sig_preds:
        for slot in slots:
            ok[slot] = True
        return ok
    axis_key = None if axes is None else itemgetter(*axes) if axes else _no_axes
    answers: dict[Any, bool] = {}
    for slot in slots:
        combo = combos[slot >> 1]
        if axis_key is not None:
            k = axis_key(combo)
            answer = answers.get(k)
            if answer is not None:
                ok[slot] = answer
                continue
        ap.logits_soft_cap, ap.mask, ap.bias, ap.lse, dropout, ap.skip_min_seqlen_q, ap.qscale, ap.sink = combo
        ap.dropout = _DROPOUT[dropout]
        ap.vlayout = VLayout.COL if slot & 1 else VLayout.ROW
        answer = True
        for pred in sig_preds:
            if not pred(ap):
                answer = False
                break
        ok[slot] = answer
        if axis_key is not None:
            answers[k] = answer
    return ok


def _no_axes(combo: tuple) -> tuple:
    """The key of :func:`_slots_ok`'s answers when the predicates read no feature axis: one answer for all."""
    return ()


def _feature_slots(feat_preds: list, any_sig: Callable[[int], KernelSignature], slots: list, memo: dict) -> list:
    """``slots`` without those a feature-stage predicate rejects: each slot is tested once per dtype (``memo``), on
    ``any_sig(slot)``, a signature with the slot's features and any head: such a predicate reads no head field."""
    if not feat_preds:
        return slots
    for slot in slots:
        if slot not in memo:
            sig = any_sig(slot)
            memo[slot] = all(p(sig) for p in feat_preds)
    return [slot for slot in slots if memo[slot]]


class _AnySignatures:
    """Per slot of a dtype's feature combinations, one signature with the slot's features and a fixed head (made
    once, on demand): what reads only the fields a slot fixes (a feature-stage predicate, a name's tail) takes it."""

    def __init__(self, head: tuple, combos: list[tuple]) -> None:
        self.head, self.combos = head, combos
        self.sigs: list[KernelSignature | None] = [None] * (2 * len(combos))

    def __call__(self, slot: int) -> KernelSignature:
        sig = self.sigs[slot]
        if sig is None:
            sig = self.sigs[slot] = _slot_signature(self.head, self.combos, slot)
        return sig


def _valid_variants(row: list[KernelAlgorithm | None], variants: list[_Variant], ap: _Probe, alg_preds: list) -> list:
    """Per variant of one tile: whether it serves the hdim and passes the algorithm-stage predicates (tested on
    ``ap``, which holds the block's head)."""
    valid = []
    for vi, a in enumerate(row):
        ok = a is not None
        if a is not None and alg_preds:
            ap.vlayout = variants[vi].vlayout
            ap.pipeline, ap.tile, ap.warps, ap.warp_tiles = a.pipeline, a.tile, a.warps, a.warp_tiles
            ap.occupancy, ap.pad_s, ap.pad_sk, ap.pad_d, ap.pad_dv = a.occupancy, a.pad_s, a.pad_sk, a.pad_d, a.pad_dv
            ap.trload = a.trload
            ok = all(p(ap) for p in alg_preds)
        valid.append(ok)
    return valid


def _append_pairs(
    out: list[Pair],
    algs: list[list[KernelAlgorithm | None]],
    mode_entries: list[tuple[KernelSignature, int]],
    variants: list[_Variant],
    ap: _Probe,
    preds: _Preds,
) -> None:
    """Append the kernels of one (hdim, mode) to ``out``: per tile, the entries whose algorithm passes the
    algorithm-stage predicates (tested on ``ap``), then the config-stage ones."""
    by_valid: dict[tuple, list] = {}  # valid-variant pattern -> entries it keeps (order kept)
    cfg_preds = preds.config
    for row in algs:
        valid = _valid_variants(row, variants, ap, preds.algorithm)
        vkey = tuple(valid)
        kept = by_valid.get(vkey)
        if kept is None:
            kept = by_valid[vkey] = [(sig, vi) for sig, vi in mode_entries if valid[vi]]
        if cfg_preds:
            out.extend((sig, row[vi]) for sig, vi in kept if all(p(new_config(sig, row[vi])) for p in cfg_preds))
        else:
            out.extend([(sig, row[vi]) for sig, vi in kept])


class _Block:
    """One (dtype, hdim, mode) of :func:`_blocks` (a plain class, as :class:`_Preds`)."""

    __slots__ = ("dts", "combos", "variants", "algs", "entries", "slots", "head", "any_sig")

    def __init__(
        self,
        dts: _DTypeSpec,
        combos: list[tuple],
        variants: list[_Variant],
        algs: list[list[KernelAlgorithm | None]],
        entries: list[tuple[int, int]],
        slots: list[int],
        head: tuple[Family, DType, Mode, int, int, ArchTag],
        any_sig: _AnySignatures,
    ) -> None:
        self.dts = dts
        self.combos = combos  # the dtype's feature combinations (slot = 2 * index + vlayout)
        self.variants = variants
        self.algs = algs  # per tile, per variant: its algorithm, None where it does not serve the hdim
        self.entries = entries  # the hdim's (signature slot, variant) entries, in generator order
        self.slots = slots  # the distinct slots of the entries that pass the feature-stage predicates
        self.head = head  # of the block's signatures
        self.any_sig = any_sig  # the dtype's


def _blocks(ctx, sec: _Section, preds: _Preds, ap: _Probe) -> Iterator[_Block]:
    """The fwd kernels of ``ctx`` in CK's generator order, one block per (dtype, hdim, mode) whose head passes the
    head-stage predicates; ``ap`` holds the block's head meanwhile."""
    fam, arch_tag = Family.FWD, sec.arch_tag
    for dts in sec.dtypes:
        ap.dtype = dts.dtype
        combos, group_combos, variants = _expand_groups(dts, ctx.masks)
        vl_slot = [0 if v.vlayout is VLayout.ROW else 1 for v in variants]
        patterns: dict[tuple, tuple[list, list]] = {}  # per static pattern: (entries, slots), see _hdim_pattern
        feature_ok: dict[int, bool] = {}  # per slot: passes the feature-stage predicates
        featured: dict[int, list] = {}  # per pattern's slots (alive in ``patterns``): those feature_ok passes
        any_sig = _AnySignatures((fam, dts.dtype, sec.modes[0], 0, 0, arch_tag), combos)
        for hdim, tiles in dts.hdims:
            ap.hdim_q, ap.hdim_v = hdim
            static_ok, entries, slots = _hdim_pattern(patterns, group_combos, variants, vl_slot, hdim, ctx.receipt)
            if not entries:
                continue
            kept = featured.get(id(slots))
            if kept is None:
                kept = featured[id(slots)] = _feature_slots(preds.feature, any_sig, slots, feature_ok)
            slots = kept
            algs = _tile_algorithms(tiles, variants, static_ok)
            for mode in sec.modes:
                ap.mode = mode
                if preds.head and not all(p(ap) for p in preds.head):
                    continue  # e.g. the receipt's dtype rule: no signature of this (dtype, hdim, mode) is kept
                yield _Block(
                    dts, combos, variants, algs, entries, slots, (fam, dts.dtype, mode, *hdim, arch_tag), any_sig
                )


def _probe(sec: _Section) -> _Probe:
    """A probe for the predicates tested before a config exists, with the section's family and arch tag."""
    ap = _Probe()
    ap.family = Family.FWD
    ap.arch_tag = sec.arch_tag
    return ap


def enumerate_api(ctx) -> list[KernelConfig]:
    """The configs of :func:`enumerate_pairs`."""
    return configs(enumerate_pairs(ctx))


def enumerate_pairs(ctx) -> list[Pair]:
    """The fwd kernels CK's generator emits for ``ctx`` (arch, receipt, mask mode), in its order: dtype, hdim,
    mode, tile, then the signature/variant entries of the hdim's pattern."""
    sec = _section(ctx)
    if sec is None:
        return []
    preds = _stage_predicates(sec, ctx.keep)
    ap = _probe(sec)
    out: list[Pair] = []
    for b in _blocks(ctx, sec, preds, ap):
        sigs = _mode_signatures(preds.signature, b.head, b.combos, b.slots)
        mode_entries = [(sig, vi) for slot, vi in b.entries if (sig := sigs[slot]) is not None]
        if mode_entries:
            _append_pairs(out, b.algs, mode_entries, b.variants, ap, preds)
    return out


def enumerate_names(ctx) -> list[str]:
    """The CK instance names of :func:`enumerate_pairs`' kernels, in the same order, without making the pairs.

    Each name is head + middle + tail (:func:`ckfmha.naming.ck_name_parts`): the head is made once per (dtype,
    hdim, mode), the middle once per algorithm, the tail once per feature combination, vlayout and the variant's
    pads and trload -- what each part depends on fixes no more than that -- so a name costs one concatenation.
    The signature-stage predicates are tested on the probe (once per hdim for both modes when none reads the
    mode), so a signature is built only for a head or a tail.  With config-stage predicates (none in the arch
    files) the pairs are named instead."""
    sec = _section(ctx)
    if sec is None:
        return []
    preds = _stage_predicates(sec, ctx.keep)
    if preds.config:
        return render_ck_names(enumerate_pairs(ctx))
    ap = _probe(sec)
    out: list[str] = []
    tails: list[str | None] = []
    tails_of = None
    by_features: dict[tuple, str] = {}  # tail per (combination, vlayout, pads, trload), over the dtypes
    # per (hdim pattern's entries, slots that pass) of the dtype: its named entries (hdims of one pattern mostly
    # pass the same slots)
    named_of: dict[tuple[int, bytes], list[tuple[int, str]]] = {}
    last: tuple = (None, None, [], [])  # (dtype spec, hdim, ok, named) of the last block
    for b in _blocks(ctx, sec, preds, ap):
        if b.dts is not tails_of:  # slots number the dtype's feature combinations: a tail is valid per dtype
            tails, tails_of = [None] * (2 * len(b.combos) * len(b.variants)), b.dts
            named_of = {}
        if b.dts is last[0] and b.head[3:5] == last[1] and not preds.signature_reads_mode:
            ok, named = last[2], last[3]  # the hdim's other mode: the same signatures pass, with the same tails
        else:
            ok = _slots_ok(preds.signature, ap, b.combos, b.slots, preds.signature_axes)
            key = (id(b.entries), bytes(ok))  # the entries list is one of the dtype's patterns: alive meanwhile
            named = named_of.get(key)
            if named is None:
                named = named_of[key] = _named_entries(b, ok, tails, by_features)
            last = (b.dts, b.head[3:5], ok, named)
        if named:
            first = next(slot for slot, _ in b.entries if ok[slot])
            head = ck_name_parts(_slot_signature(b.head, b.combos, first), _first_alg(b, named[0][0]))[0]
            _append_names(out, head, b.algs, named, b.variants, ap, preds.algorithm)
    return out


def _first_alg(b: _Block, vi: int) -> KernelAlgorithm:
    """Variant ``vi``'s algorithm of the block's first tile (an entry's variant serves the hdim: it has one)."""
    a = b.algs[0][vi]
    assert a is not None
    return a


def _named_entries(
    b: _Block, ok: list[bool], tails: list[str | None], by_features: dict[tuple, str]
) -> list[tuple[int, str]]:
    """``[(variant, tail)]`` of a block's entries whose slot is ``ok``, in order, with the tail of each (slot,
    variant) of the dtype remembered in ``tails``."""
    nv = len(b.variants)
    named = []
    for slot, vi in b.entries:
        if ok[slot]:
            k = slot * nv + vi
            tail = tails[k]
            if tail is None:
                tail = tails[k] = _tail(b, slot, vi, by_features)
            named.append((vi, tail))
    return named


def _tail(b: _Block, slot: int, vi: int, by_features: dict[tuple, str]) -> str:
    """The tail of the names of a slot and variant: made from a signature with the slot's features
    (:class:`_AnySignatures`) and the variant's algorithm of the first tile, once per (feature combination,
    vlayout, pads, trload) -- with the section's family and arch tag, all a tail reads (the tiles differ in no
    field it reads)."""
    v = b.variants[vi]
    key = (b.combos[slot >> 1], slot & 1, v.pads, v.trload)
    tail = by_features.get(key)
    if tail is None:
        tail = by_features[key] = ck_name_parts(b.any_sig(slot), _first_alg(b, vi))[2]
    return tail


def _append_names(
    out: list[str],
    head: str,
    algs: list[list[KernelAlgorithm | None]],
    named: list[tuple[int, str]],
    variants: list[_Variant],
    ap: _Probe,
    alg_preds: list,
) -> None:
    """Append the names of one block's kernels to ``out``, in :func:`_append_pairs`' order (no config-stage
    predicates): per tile, head + the algorithm's middle + the entry's tail."""
    by_valid: dict[tuple, list] = {}  # valid-variant pattern -> (variant, tail) entries it keeps (order kept)
    for row in algs:
        valid = _valid_variants(row, variants, ap, alg_preds)
        vkey = tuple(valid)
        kept = by_valid.get(vkey)
        if kept is None:
            kept = by_valid[vkey] = [(vi, tail) for vi, tail in named if valid[vi]]
        pre = [head + ck_name_middle(a, Family.FWD) if a is not None and ok else "" for a, ok in zip(row, valid)]
        out.extend([pre[vi] + tail for vi, tail in kept])
