"""Enumerator of CK's ``batch_prefill`` api (paged-KV prefill kernels, family ``batch_prefill``).

The arch data section (``apis.batch_prefill``, kept in ``data/archs/_parts/<arch>/batch_prefill.yaml``) has
this schema; every key is checked when the section is first used, and a wrong key or value is an error that
names the file, the key path, what was expected and what was found::

    pipeline: qr_async              # Pipeline token (default for every dtype)
    vlayout: row                    # row | col (default for every dtype)
    pads: {s: 1, sk: 1, d: 1, dv: 1}  # pad of each dim, 0/1 (default for every dtype)
    modes: [group]                  # Mode tokens; the generator's mode loop
    page_sizes: [1, 16, 1024]       # KV-cache page sizes (positive ints), in generator order
    global_load_when: "c.page_size < c.tile[1]"
                                    # optional filter expression: where it holds, a GLOBAL_LOAD_LDS twin
                                    # (kv_load gload) is emitted after the BUFFER_LOAD kernel (kv_load bload);
                                    # absent = bload kernels only. It may not look at kv_load.
    exclude:                        # optional list of filter expressions; a kernel matching any is skipped
      - "c.sink and c.mask == 'none'"
    dtypes:                         # DType token -> entry, in generator order
      fp16:
        pipeline / vlayout / pads:  # optional per-dtype overrides of the defaults above
        features:                   # ordered cartesian product (first key outermost); a feature left out
          logits_soft_cap: [true, false]      # keeps its KernelSignature default
          mask: mode                # the mask implementations of the -m mask mode (the only allowed value)
          bias: [none, elementwise, alibi]
          lse: [true, false]
          dropout: [enabled, none]
          sink: [true, false]
          qscale: [none]
          kv_memory_layout: [vectorized, linear]
          kv_lookup_table: [vllm, sglang]
        tiles:                      # hdim_q (int) -> list of tiles, in generator order
          128:
            - block: [bm0, bn0, bk0, bn1, bk1, bk0max]   # hdim_v = bn1
              warps: [[4, 1, 1], [4, 1, 1]]              # warps per block, gemm0 and gemm1
              warp_tiles: [[32, 32, 16], [32, 32, 16]]   # warp tile, gemm0 and gemm1
              occupancy: -1                              # optional, default -1 (kBlockPerCu)
              dispatch_constraint: "num_cus < 128"       # optional, informational: runtime dispatch guard
              device_archs: [gfx942]                     # optional, informational: device-code arch guard
                                                         # (the instance is listed for every target anyway)

A section ``{unsupported: "<reason>"}`` means the generator emits nothing for that arch (CK builds no
batch_prefill kernels for non-gfx9 targets).

Generation order follows CK's generator: dtype, hdim, mode, tile, feature combination, page size, then
bload before gload. ``exclude`` and ``global_load_when`` are ordinary filter expressions
(:mod:`ckfmha.filters`); each is evaluated at the earliest loop level where every field it reads is known
(features, then tile, then page size, then kv_load), so the loops stay cheap. The receipt predicate
(``data/receipt_rules/batch_prefill.yaml``) is applied to each finished kernel (on its signature alone when it reads
signature fields only: :func:`ckfmha.enumeration._pairs.kept`).

Configs carry ``family=batch_prefill``, ``arch_tag=none`` (batch_prefill names have no arch suffix) and
``paged_kv=True``. The unfiltered product of a section depends only on the section and the mask mode, so it
is computed once per (section object, mask mode): gfx90a/gfx942/gfx950 share one section and one product
(sections are treated as immutable; re-reading the arch files, ``load_arch_spec.cache_clear()``, gives new
section objects and so a fresh computation). ``enumerate_names`` runs the same loops but names the kernels as
they come (head, middle and tail of :func:`ckfmha.naming.ck_name_parts`), keeping nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import itertools
from collections.abc import Callable
from enum import Enum
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ckfmha.archs import ArchSpecError
from ckfmha.enumeration._pairs import Pair, configs, kept, reads_signature_only
from ckfmha.filters import FilterError, compile_filter
from ckfmha.kernel import (
    CONFIG_FIELDS,
    PAD_VALUES,
    SIGNATURE_FIELDS,
    ArchTag,
    Bias,
    Dropout,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    KVLoad,
    KVLookupTable,
    KVMemoryLayout,
    MaskMode,
    Mode,
    Pipeline,
    QScale,
    VLayout,
    new_signature,
)
from ckfmha.naming import ck_name_middle, ck_name_parts, render_ck_names

_TOP_KEYS = {"pipeline", "vlayout", "pads", "modes", "page_sizes", "global_load_when", "exclude", "dtypes"}
_REQUIRED_TOP = ("modes", "page_sizes", "dtypes")
_DTYPE_KEYS = {"pipeline", "vlayout", "pads", "features", "tiles"}
_TILE_KEYS = {"block", "warps", "warp_tiles", "occupancy", "dispatch_constraint", "device_archs"}
_PAD_KEYS = ("s", "sk", "d", "dv")
# feature name -> value kind (an enum class or bool)
_FEATURES: dict[str, Any] = {
    "logits_soft_cap": bool,
    "mask": "mode",
    "bias": Bias,
    "lse": bool,
    "dropout": Dropout,
    "sink": bool,
    "qscale": QScale,
    "kv_memory_layout": KVMemoryLayout,
    "kv_lookup_table": KVLookupTable,
}

# Loop levels at which a field becomes known; an expression runs at the deepest level of the fields it reads.
_TILE_FIELDS = frozenset({"hdim_v", "tile", "warps", "warp_tiles", "occupancy"})
_PAGE_FIELDS = frozenset({"page_size"})
_LOAD_FIELDS = frozenset({"kv_load"})
_LEVEL_FEATURES, _LEVEL_TILE, _LEVEL_PAGE, _LEVEL_LOAD = range(4)

_FIELD_DEFAULTS: dict[str, Any] = {}
for _cls in (KernelSignature, KernelAlgorithm):
    for _f in dataclasses.fields(_cls):
        if _f.default is not dataclasses.MISSING:
            _FIELD_DEFAULTS[_f.name] = _f.default


_NEW = object()  # not yet in a cache

# Signatures are built positionally: every field but the last (page_size, set per page) comes from a prefix
# tuple computed once per feature combination and hdim_v.
assert SIGNATURE_FIELDS[-1] == "page_size", SIGNATURE_FIELDS
_SIG_PREFIX_FIELDS = SIGNATURE_FIELDS[:-1]
_PREFIX_DEFAULTS = {f: _FIELD_DEFAULTS.get(f) for f in _SIG_PREFIX_FIELDS}
_PREFIX_OF = itemgetter(*_SIG_PREFIX_FIELDS)  # the prefix tuple of a merged mapping of fields


class BatchPrefillSpecError(ArchSpecError):
    """A malformed batch_prefill arch-data section."""


class _Probe:
    """A stand-in config the ``exclude`` / ``global_load_when`` expressions read while the loops run."""

    __slots__ = CONFIG_FIELDS

    if TYPE_CHECKING:  # the slots come from CONFIG_FIELDS, so mypy cannot see them: any config field may be set

        def __setattr__(self, name: str, value: Any) -> None: ...


# Plain classes with slots, not dataclasses: creating a dataclass costs ~1.5 ms, paid at this module's lazy
# import inside a timed enumeration.
class _Expr:
    __slots__ = ("source", "fn", "level", "where")

    source: str
    fn: Callable[[Any], Any]
    level: int
    where: str

    def __init__(self, source: str, fn: Callable[[Any], Any], level: int, where: str) -> None:
        self.source = source
        self.fn = fn
        self.level = level
        self.where = where


class _Tile:
    __slots__ = ("algorithm_bload", "algorithm_gload", "hdim_v", "values")

    algorithm_bload: KernelAlgorithm
    algorithm_gload: KernelAlgorithm
    hdim_v: int
    values: tuple[tuple[str, Any], ...]  # probe fields set at the tile level

    def __init__(
        self,
        algorithm_bload: KernelAlgorithm,
        algorithm_gload: KernelAlgorithm,
        hdim_v: int,
        values: tuple[tuple[str, Any], ...],
    ) -> None:
        self.algorithm_bload = algorithm_bload
        self.algorithm_gload = algorithm_gload
        self.hdim_v = hdim_v
        self.values = values


class _DTypeEntry:
    __slots__ = ("dtype", "pipeline", "vlayout", "pads", "feature_names", "feature_values", "tiles")

    dtype: DType
    pipeline: Pipeline
    vlayout: VLayout
    pads: tuple[int, int, int, int]
    feature_names: tuple[str, ...]
    feature_values: tuple[tuple[Any, ...], ...]  # "mode" stands for the mask mode's masks
    tiles: tuple[tuple[int, tuple[_Tile, ...]], ...]

    def __init__(
        self,
        dtype: DType,
        pipeline: Pipeline,
        vlayout: VLayout,
        pads: tuple[int, int, int, int],
        feature_names: tuple[str, ...],
        feature_values: tuple[tuple[Any, ...], ...],
        tiles: tuple[tuple[int, tuple[_Tile, ...]], ...],
    ) -> None:
        self.dtype = dtype
        self.pipeline = pipeline
        self.vlayout = vlayout
        self.pads = pads
        self.feature_names = feature_names
        self.feature_values = feature_values
        self.tiles = tiles


class _Section:
    __slots__ = ("section", "unsupported", "modes", "page_sizes", "exclude", "global_load", "dtypes", "products")

    section: Any  # the raw section object (kept so its id stays unique while cached)
    unsupported: bool
    modes: tuple[Mode, ...]
    page_sizes: tuple[int, ...]
    exclude: tuple[_Expr, ...]
    global_load: _Expr | None
    dtypes: tuple[_DTypeEntry, ...]
    products: dict[MaskMode, tuple[Pair, ...]]  # the unfiltered kernels per mask mode, made on demand

    def __init__(
        self,
        section: Any,
        unsupported: bool,
        modes: tuple[Mode, ...] = (),
        page_sizes: tuple[int, ...] = (),
        exclude: tuple[_Expr, ...] = (),
        global_load: _Expr | None = None,
        dtypes: tuple[_DTypeEntry, ...] = (),
    ) -> None:
        self.section = section
        self.unsupported = unsupported
        self.modes = modes
        self.page_sizes = page_sizes
        self.exclude = exclude
        self.global_load = global_load
        self.dtypes = dtypes
        self.products = {}


# ------------------------------------------------------------------------------------------ loading
def _err(where: Callable[[str], str], path: str, expected: str, found: Any) -> BatchPrefillSpecError:
    return BatchPrefillSpecError(f"{where(path or 'section')}: expected {expected}, found {found!r}")


def _mapping(where, path: str, value: Any, allowed: set[str] | None = None) -> dict:
    if not isinstance(value, dict):
        raise _err(where, path, "a mapping", value)
    if allowed is not None:
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise BatchPrefillSpecError(
                f"{where(path or 'section')}: unknown key(s) {sorted(map(str, unknown))}; allowed: {sorted(allowed)}"
            )
    return value


def _token(where, path: str, value: Any, enum: type[Enum]) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise _err(where, path, f"one of {allowed}", value) from None


def _int(where, path: str, value: Any, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (positive and value <= 0):
        raise _err(where, path, "a positive int" if positive else "an int", value)
    return value


def _list(where, path: str, value: Any, *, nonempty: bool = True) -> list:
    if not isinstance(value, list) or (nonempty and not value):
        raise _err(where, path, "a non-empty list" if nonempty else "a list", value)
    return value


def _triples(where, path: str, value: Any) -> tuple[tuple[int, int, int], ...]:
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(
            isinstance(t, list) and len(t) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in t)
            for t in value
        )
    )
    if not ok:
        raise _err(where, path, "two [m, n, k] int triples (gemm0, gemm1)", value)
    return tuple(tuple(t) for t in value)


def _pads(where, path: str, value: Any) -> tuple[int, int, int, int]:
    _mapping(where, path, value, set(_PAD_KEYS))
    out = []
    for k in _PAD_KEYS:
        v = value.get(k, 0)
        if isinstance(v, bool) or v not in PAD_VALUES:
            raise _err(where, f"{path}.{k}", f"a pad value in {PAD_VALUES}", v)
        out.append(v)
    return tuple(out)


def _fields_read(tree: ast.AST) -> set[str]:
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "c"
    }


def _expr(where, path: str, value: Any) -> _Expr:
    if not isinstance(value, str):
        raise _err(where, path, "a filter expression string", value)
    try:
        pred = compile_filter(value)
    except FilterError as e:
        raise BatchPrefillSpecError(f"{where(path)}: {e}") from None
    fields = _fields_read(ast.parse(value.strip(), mode="eval"))
    if fields & _LOAD_FIELDS:
        level = _LEVEL_LOAD
    elif fields & _PAGE_FIELDS:
        level = _LEVEL_PAGE
    elif fields & _TILE_FIELDS:
        level = _LEVEL_TILE
    else:
        level = _LEVEL_FEATURES
    return _Expr(value, pred.fast, level, where(path))  # type: ignore[attr-defined]


def _feature_values(where, path: str, name: str, value: Any) -> tuple[Any, ...]:
    kind = _FEATURES[name]
    if kind == "mode":
        if value != "mode":
            raise _err(where, path, "'mode' (the masks of the -m mask mode)", value)
        return ("mode",)
    vals = _list(where, path, value)
    out = []
    for i, v in enumerate(vals):
        if kind is bool:
            if not isinstance(v, bool):
                raise _err(where, f"{path}[{i}]", "true or false", v)
            out.append(v)
        else:
            out.append(_token(where, f"{path}[{i}]", v, kind))
    if len(set(out)) != len(out):
        raise _err(where, path, "distinct values", value)
    return tuple(out)


def _tile(where, path: str, value: Any, pipeline: Pipeline, pads: tuple[int, ...]) -> _Tile:
    _mapping(where, path, value, _TILE_KEYS)
    for k in ("block", "warps", "warp_tiles"):
        if k not in value:
            raise BatchPrefillSpecError(f"{where(path)}: missing key {k!r}")
    block = value["block"]
    if not (
        isinstance(block, list)
        and len(block) == 6
        and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in block)
    ):
        raise _err(where, f"{path}.block", "6 positive ints [bm0, bn0, bk0, bn1, bk1, bk0max]", block)
    warps = _triples(where, f"{path}.warps", value["warps"])
    warp_tiles = _triples(where, f"{path}.warp_tiles", value["warp_tiles"])
    occ = _int(where, f"{path}.occupancy", value.get("occupancy", -1))
    if "dispatch_constraint" in value and not isinstance(value["dispatch_constraint"], str):
        raise _err(where, f"{path}.dispatch_constraint", "a string", value["dispatch_constraint"])
    if "device_archs" in value:
        da = value["device_archs"]
        if not (isinstance(da, list) and da and all(isinstance(x, str) for x in da)):
            raise _err(where, f"{path}.device_archs", "a non-empty list of arch names", da)
    tile = tuple(block)
    algs = [
        KernelAlgorithm(pipeline, tile, warps, warp_tiles, occ, pads[0], pads[1], pads[2], pads[3], False, load)
        for load in (KVLoad.BLOCK, KVLoad.GLOBAL_LDS)
    ]
    values = (("hdim_v", tile[3]), ("tile", tile), ("warps", warps), ("warp_tiles", warp_tiles), ("occupancy", occ))
    return _Tile(algs[0], algs[1], tile[3], values)


def _dtype_entry(where, path: str, dtype: DType, value: Any, defaults: dict[str, Any]) -> _DTypeEntry:
    _mapping(where, path, value, _DTYPE_KEYS)
    pipeline = (
        _token(where, f"{path}.pipeline", value["pipeline"], Pipeline) if "pipeline" in value else defaults["pipeline"]
    )
    vlayout = _token(where, f"{path}.vlayout", value["vlayout"], VLayout) if "vlayout" in value else defaults["vlayout"]
    pads = _pads(where, f"{path}.pads", value["pads"]) if "pads" in value else defaults["pads"]
    if pipeline is None:
        raise BatchPrefillSpecError(f"{where(path)}: no 'pipeline' here nor at the top of the section")
    feats = _mapping(where, f"{path}.features", value.get("features"), set(_FEATURES))
    names = tuple(feats)
    values = tuple(_feature_values(where, f"{path}.features.{n}", n, feats[n]) for n in names)
    tiles_raw = _mapping(where, f"{path}.tiles", value.get("tiles"))
    tiles = []
    for hdim, entries in tiles_raw.items():
        hpath = f"{path}.tiles.{hdim}"
        _int(where, hpath + " (key: hdim_q)", hdim, positive=True)
        _list(where, hpath, entries)
        tiles.append((hdim, tuple(_tile(where, f"{hpath}[{i}]", t, pipeline, pads) for i, t in enumerate(entries))))
    return _DTypeEntry(dtype, pipeline, vlayout, pads, names, values, tuple(tiles))


def _compile_section(section: Any, where: Callable[[str], str]) -> _Section:
    sec = _mapping(where, "", section)
    if "unsupported" in sec:
        if set(sec) != {"unsupported"} or not isinstance(sec["unsupported"], str):
            raise _err(where, "unsupported", "only 'unsupported: <reason string>' in the section", sec)
        return _Section(section, True)
    _mapping(where, "", sec, _TOP_KEYS)
    for k in _REQUIRED_TOP:
        if k not in sec:
            raise BatchPrefillSpecError(f"{where(k)}: missing required key {k!r}")
    defaults = {
        "pipeline": _token(where, "pipeline", sec["pipeline"], Pipeline) if "pipeline" in sec else None,
        "vlayout": _token(where, "vlayout", sec["vlayout"], VLayout) if "vlayout" in sec else VLayout.ROW,
        "pads": _pads(where, "pads", sec["pads"]) if "pads" in sec else (0, 0, 0, 0),
    }
    modes = tuple(_token(where, f"modes[{i}]", m, Mode) for i, m in enumerate(_list(where, "modes", sec["modes"])))
    pages = tuple(
        _int(where, f"page_sizes[{i}]", p, positive=True)
        for i, p in enumerate(_list(where, "page_sizes", sec["page_sizes"]))
    )
    exclude = tuple(
        _expr(where, f"exclude[{i}]", e)
        for i, e in enumerate(_list(where, "exclude", sec.get("exclude", []), nonempty=False))
    )
    gl = None
    if "global_load_when" in sec:
        gl = _expr(where, "global_load_when", sec["global_load_when"])
        if gl.level == _LEVEL_LOAD:
            raise _err(where, "global_load_when", "an expression that does not read kv_load", gl.source)
    dtypes_raw = _mapping(where, "dtypes", sec["dtypes"])
    dtypes = tuple(
        _dtype_entry(where, f"dtypes.{k}", _token(where, f"dtypes.{k} (key)", k, DType), v, defaults)
        for k, v in dtypes_raw.items()
    )
    return _Section(section, False, modes, pages, exclude, gl, dtypes)


# Compiled sections, keyed by the id of the raw section object (the entry keeps the object alive, so the id
# cannot be reused while cached). Archs that inherit a section share its entry.
_COMPILED: dict[int, _Section] = {}
_MAX_COMPILED = 8


def _compiled(ctx) -> _Section:
    section = ctx.section
    entry = _COMPILED.get(id(section))
    if entry is None or entry.section is not section:
        entry = _compile_section(section, ctx.where)
        if len(_COMPILED) >= _MAX_COMPILED:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[id(section)] = entry
    return entry


# ------------------------------------------------------------------------------------------ product
def _fails(exprs: tuple[_Expr, ...], probe: _Probe) -> None:
    """Re-run ``exprs`` on the probe one by one to name the one that cannot be evaluated."""
    for e in exprs:
        try:
            e.fn(probe)
        except (TypeError, AttributeError, IndexError, KeyError) as exc:
            raise BatchPrefillSpecError(f"{e.where}: cannot evaluate {e.source!r}: {exc}") from None


def _any_fn(exprs: tuple[_Expr, ...]) -> Callable[[Any], bool] | None:
    """One function that is true when any of ``exprs`` holds (None when there are none)."""
    fns = tuple(e.fn for e in exprs)
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        f0, f1 = fns
        return lambda c: f0(c) or f1(c)
    return lambda c: any(f(c) for f in fns)


def _product(sec: _Section, masks: tuple, named: _Named | None = None) -> list[tuple[Any, Any]]:
    """The section's kernels (:func:`_product_loops`), naming the expression that cannot be evaluated."""
    probe = _Probe()
    # Only new, acyclic objects are made here: pausing the cyclic GC saves its repeated scans of them.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _product_loops(sec, masks, probe, named)
    except (TypeError, AttributeError, IndexError, KeyError):
        # an expression read a field it cannot use (e.g. indexed a scalar): name it
        _fails(sec.exclude + ((sec.global_load,) if sec.global_load else ()), probe)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()


class _Named:
    """The names mode of :func:`_product_loops`: a signature stands for the (head, tail) of its names
    (:func:`ckfmha.naming.ck_name_parts`; the tail reads only the pads of the algorithm, which every tile of a
    dtype entry shares) or for None when the receipt's signature filter ``keep`` drops it, and an algorithm for
    its name's middle."""

    __slots__ = ("keep",)

    def __init__(self, keep: Callable[[Any], Any]) -> None:
        self.keep = keep

    def signature(self, sig: KernelSignature, alg: KernelAlgorithm) -> tuple[str, str] | None:
        if not self.keep(sig):
            return None
        head, _, tail = ck_name_parts(sig, alg)
        return head, tail

    @staticmethod
    def algorithms(t: _Tile) -> tuple[str, str]:
        family = Family.BATCH_PREFILL
        return ck_name_middle(t.algorithm_bload, family), ck_name_middle(t.algorithm_gload, family)


def _product_loops(sec: _Section, masks: tuple, probe: _Probe, named: _Named | None) -> list[tuple[Any, Any]]:
    """The section's kernels in generator order: dtype, hdim, mode, tile, feature combination, page size, kv
    load; each exclude level is tested on ``probe`` as soon as the fields it reads are set.  The kernels are
    (signature, algorithm) pairs, or with ``named`` ((head, tail), middle) of their names (:class:`_Named`).

    Long because it is the enumeration's hot loop nest: every level sets fields on the one shared ``probe`` that
    the deeper levels' exclude rules read, and the signature and prefix caches of a (dtype, hdim, mode) are shared
    by its tiles; splitting the levels into functions would pass the probe, the caches and the bound rule
    functions down on every iteration."""
    levels = [tuple(e for e in sec.exclude if e.level == lv) for lv in range(4)]
    ex_feat, ex_tile, ex_page, ex_load = (_any_fn(x) for x in levels)
    gl = sec.global_load.fn if sec.global_load is not None else None
    for name in CONFIG_FIELDS:
        setattr(probe, name, _FIELD_DEFAULTS.get(name))
    probe.family = Family.BATCH_PREFILL
    probe.arch_tag = ArchTag.NONE
    probe.paged_kv = True
    out: list[tuple[Any, Any]] = []
    append = out.append
    named_sig = named.signature if named is not None else None
    block, global_lds = KVLoad.BLOCK, KVLoad.GLOBAL_LDS
    for d in sec.dtypes:
        for name in _FEATURES:  # a feature a dtype leaves out keeps its default
            setattr(probe, name, _FIELD_DEFAULTS[name])
        probe.dtype = d.dtype
        probe.pipeline = d.pipeline
        probe.vlayout = d.vlayout
        probe.pad_s, probe.pad_sk, probe.pad_d, probe.pad_dv = d.pads
        axes = [masks if v == ("mode",) else v for v in d.feature_values]
        names = d.feature_names
        combos = [tuple(zip(names, combo)) for combo in itertools.product(*axes)]
        for hdim, tiles in d.tiles:
            probe.hdim_q = hdim
            for mode in sec.modes:
                probe.mode = mode
                base = {
                    "family": Family.BATCH_PREFILL,
                    "dtype": d.dtype,
                    "mode": mode,
                    "hdim_q": hdim,
                    "arch_tag": ArchTag.NONE,
                    "vlayout": d.vlayout,
                    "paged_kv": True,
                }
                # feature level: the combinations every tile of this (dtype, hdim, mode) starts from
                kept: list[tuple[int, tuple]] = []
                for idx, combo in enumerate(combos):
                    for n, v in combo:
                        setattr(probe, n, v)
                    if ex_feat is None or not ex_feat(probe):
                        kept.append((idx, combo))
                signatures: dict[tuple[int, int, int], Any] = {}  # None: dropped by the receipt
                prefixes: dict[tuple[int, int], tuple] = {}
                for t in tiles:
                    for n, v in t.values:
                        setattr(probe, n, v)
                    alg_b, alg_g = (t.algorithm_bload, t.algorithm_gload) if named is None else named.algorithms(t)
                    hdim_v = t.hdim_v
                    for idx, combo in kept:
                        for n, v in combo:
                            setattr(probe, n, v)
                        if ex_tile is not None and ex_tile(probe):
                            continue
                        for ps in sec.page_sizes:
                            probe.page_size = ps
                            if ex_page is not None and ex_page(probe):
                                continue
                            key = (idx, hdim_v, ps)
                            sig = signatures.get(key, _NEW)
                            if sig is _NEW:
                                pre = prefixes.get((idx, hdim_v))
                                if pre is None:
                                    kw = {**_PREFIX_DEFAULTS, **base, "hdim_v": hdim_v, **dict(combo)}
                                    pre = prefixes[(idx, hdim_v)] = _PREFIX_OF(kw)
                                # positional: ~30% faster (one tuple: mypy miscounts ``f(*pre, ps)`` as too many)
                                sig = new_signature(*(*pre, ps))
                                if named_sig is not None:
                                    sig = named_sig(sig, t.algorithm_bload)
                                signatures[key] = sig
                            if sig is None:
                                continue
                            if ex_load is None:
                                append((sig, alg_b))
                                if gl is not None and gl(probe):
                                    append((sig, alg_g))
                                continue
                            probe.kv_load = block
                            if not ex_load(probe):
                                append((sig, alg_b))
                            if gl is not None and gl(probe):
                                probe.kv_load = global_lds
                                if not ex_load(probe):
                                    append((sig, alg_g))
    return out


def enumerate_api(ctx) -> list[KernelConfig]:
    """The configs of :func:`enumerate_pairs`."""
    return configs(enumerate_pairs(ctx))


def enumerate_pairs(ctx) -> list[Pair]:
    """The batch_prefill kernels CK's generator emits for ``ctx`` (arch, receipt, mask mode), in its order."""
    sec = _compiled(ctx)
    if sec.unsupported:
        return []
    full = sec.products.get(ctx.mask_mode)
    if full is None:
        full = sec.products[ctx.mask_mode] = tuple(_product(sec, ctx.masks))
    return kept(full, ctx.keep)


def enumerate_names(ctx) -> list[str]:
    """The CK instance names of :func:`enumerate_pairs`' kernels, in the same order, without making the pairs:
    each name is head + middle + tail (:func:`ckfmha.naming.ck_name_parts`), the head and tail made once per
    signature, the middle once per algorithm.  A receipt filter that reads more than signature fields names the
    pairs instead."""
    if not reads_signature_only(ctx.keep):
        return render_ck_names(enumerate_pairs(ctx))
    sec = _compiled(ctx)
    if sec.unsupported:
        return []
    return [head + middle + tail for (head, tail), middle in _product(sec, ctx.masks, _Named(ctx.keep))]
