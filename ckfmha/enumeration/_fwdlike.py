"""Shared data schema and product enumerator for the forward-like auxiliary apis.

Used by :mod:`ckfmha.enumeration.splitkv`, :mod:`ckfmha.enumeration.pagedkv` and
:mod:`ckfmha.enumeration.appendkv`. CK's factories for these apis all follow one pattern -- per data type a
table ``hdim -> tile`` and a list of "pipelines" (a product over feature switches times a list of pad
variants) -- crossed with the modes and then pruned by a few generator-wide rules. The section of an arch data
file holds exactly that as data; this module checks it and expands it.

Section schema (one api section = a mapping ``family -> family block``; families are listed in the order the
generator emits them)::

    <family>:                       # fwd_splitkv | fwd_splitkv_combine | fwd_pagedkv | fwd_appendkv
      arch_tag: gfx9                # the generator factory (CK's file-name suffix)
      modes: [batch, group]         # in generator order
      constraints:                  # optional; filter expressions (ckfmha.filters) every config must meet
        - "c.mode == 'batch' or (c.pad_s == 1 and c.pad_sk == 1)"
      pipeline_sets:                # named lists of pipeline entries
        <set name>:
          - pipeline: qr            # a ckfmha Pipeline token
            set: {vlayout: row, lse: true}          # optional: fixed feature fields
            product:                # optional: feature fields crossed in this order (itertools.product)
              logits_soft_cap: [true, false]
              mask: masks           # the mask implementations of the run's mask mode (CK's get_mask_map)
              bias: [none, elementwise, alibi]
            pads: [psk, ps, pssk, psskddv]          # CK pad tokens over s, sk, d, dv (npad = none); innermost
      dtypes:                       # in generator order
        <dtype>:
          pipelines: <set name>
          tiles:                    # hdim -> tile, in generator order
            128: {block: [64, 128, 32, 128, 32, 128], warps: [[4, 1, 1], [4, 1, 1]],
                  warp_tiles: [[16, 16, 16], [16, 16, 16]], occupancy: -1}

Feature fields allowed in ``set``/``product``: vlayout, mask, bias, lse, logits_soft_cap, fp8_static_quant,
sink, paged_kv, skip_min_seqlen_q, rope (values are ckfmha's tokens; booleans are YAML booleans).
``block`` has 6 entries for fwd_splitkv/fwd_pagedkv (bm0, bn0, bk0, bn1, bk1, bk0max; ``warps`` and
``warp_tiles`` then give 2 triples each), 4 for fwd_appendkv (bs, bsk, bd, bdv) and 1 for
fwd_splitkv_combine (bn1); ``occupancy`` defaults to -1. hdim_v is ``block[3]`` for 6- and 4-entry tiles and
the hdim itself for combine tiles. An empty section (``{}``) emits nothing.

A section may be ``{inherit: <arch>}`` (see :mod:`ckfmha.archs`).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from ckfmha.archs import ArchSpecError, load_arch_spec
from ckfmha.enumeration._pairs import Pair, kept, reads_signature_only
from ckfmha.filters import FilterError, compile_filter
from ckfmha.kernel import (
    ALGORITHM_FIELDS,
    SIGNATURE_FIELDS,
    ArchTag,
    Bias,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    MaskImpl,
    Mode,
    Pipeline,
    Rope,
    VLayout,
    new_config,
    new_signature,
)
from ckfmha.naming import (
    NAME_PIECES_FAMILIES,
    ck_name_algorithm_pieces,
    ck_name_signature_pieces,
    join_name_pieces,
    render_ck_names,
)

_FEATURE_FIELDS: dict[str, Any] = {
    "vlayout": VLayout,
    "mask": MaskImpl,
    "bias": Bias,
    "lse": bool,
    "logits_soft_cap": bool,
    "fp8_static_quant": bool,
    "sink": bool,
    "paged_kv": bool,
    "skip_min_seqlen_q": bool,
    "rope": Rope,
}
_MASKS_TOKEN = "masks"
# block length and whether warps/warp_tiles are required, per family
_TILE_SHAPE: dict[Family, tuple[int, bool]] = {
    Family.FWD_SPLITKV: (6, True),
    Family.FWD_PAGEDKV: (6, True),
    Family.FWD_SPLITKV_COMBINE: (1, False),
    Family.FWD_APPENDKV: (4, False),
}
_PAD_RE = re.compile(r"^p(s)?(sk)?(d)?(dv)?\Z")


class SectionError(ArchSpecError):
    """A malformed api section: the message names the file, the key path, what was expected and found."""


# ------------------------------------------------------------------------------------------------ parsed
@dataclass(frozen=True)
class PipelineEntry:
    pipeline: Pipeline
    fixed: tuple[tuple[str, Any], ...]
    product: tuple[tuple[str, tuple[Any, ...] | None], ...]  # None values = the run's masks
    pads: tuple[tuple[int, int, int, int], ...]

    def variants(self, masks: tuple[MaskImpl, ...]) -> list[dict[str, Any]]:
        """The feature dicts of this entry's product, in product order."""
        names = [n for n, _ in self.product]
        pools = [masks if vals is None else vals for _, vals in self.product]
        base = dict(self.fixed)
        out = []
        for combo in itertools.product(*pools):
            d = dict(base)
            d.update(zip(names, combo))
            out.append(d)
        return out


@dataclass(frozen=True)
class TileEntry:
    hdim: int
    hdim_v: int
    algorithm_fields: dict[str, Any]  # tile, warps, warp_tiles, occupancy


@dataclass(frozen=True)
class DTypeEntry:
    dtype: DType
    pipelines: tuple[PipelineEntry, ...]
    tiles: tuple[TileEntry, ...]


@dataclass(frozen=True)
class FamilyBlock:
    family: Family
    arch_tag: ArchTag
    modes: tuple[Mode, ...]
    constraints: tuple[Callable[[KernelConfig], bool], ...]
    dtypes: tuple[DTypeEntry, ...]
    # KernelSignature / KernelAlgorithm fields the constraints read (their results are memoized on these)
    constraint_sig_fields: tuple[str, ...] = ()
    constraint_alg_fields: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------------ checks
class _Where:
    """Formats error locations as ``<file>: <key path>``."""

    def __init__(self, source: str, prefix: str) -> None:
        self.source = source  # the file
        self.prefix = prefix  # key path of the section inside that file ('' for a per-api part file)

    def __call__(self, path: str) -> str:
        full = ".".join(p for p in (self.prefix, path) if p)
        return f"{self.source}: {full or 'top level'}"


def _tname(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _mapping(
    v: Any, where: _Where, path: str, allowed: set[str] | None = None, required: AbstractSet[str] = frozenset()
) -> dict:
    if not isinstance(v, dict):
        raise SectionError(f"{where(path)}: expected a mapping, found {_tname(v)} {v!r}")
    if allowed is not None:
        unknown = sorted(str(k) for k in v if k not in allowed)
        if unknown:
            raise SectionError(f"{where(path)}: unknown key(s) {unknown}; expected keys: {sorted(allowed)}")
    missing = sorted(required - set(v))
    if missing:
        raise SectionError(f"{where(path)}: missing key(s) {missing}")
    return v


def _list(v: Any, where: _Where, path: str) -> list:
    if not isinstance(v, list):
        raise SectionError(f"{where(path)}: expected a list, found {_tname(v)} {v!r}")
    return v


def _int(v: Any, where: _Where, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SectionError(f"{where(path)}: expected an int, found {_tname(v)} {v!r}")
    return v


def _ints(v: Any, n: int, where: _Where, path: str) -> tuple[int, ...]:
    lst = _list(v, where, path)
    if len(lst) != n:
        raise SectionError(f"{where(path)}: expected a list of {n} ints, found {len(lst)} entries {v!r}")
    return tuple(_int(x, where, f"{path}[{i}]") for i, x in enumerate(lst))


def _enum(cls: Any, v: Any, where: _Where, path: str) -> Any:
    try:
        return cls(v)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise SectionError(f"{where(path)}: expected one of {allowed}; found {v!r}") from None


def _feature(name: str, v: Any, where: _Where, path: str) -> Any:
    kind = _FEATURE_FIELDS[name]
    if kind is bool:
        if not isinstance(v, bool):
            raise SectionError(f"{where(path)}: expected a boolean (true/false), found {_tname(v)} {v!r}")
        return v
    return _enum(kind, v, where, path)


def _pad_token(tok: Any, where: _Where, path: str) -> tuple[int, int, int, int]:
    if not isinstance(tok, str):
        raise SectionError(
            f"{where(path)}: expected a pad token (npad or p[s][sk][d][dv]), found {_tname(tok)} {tok!r}"
        )
    if tok == "npad":
        return (0, 0, 0, 0)
    m = _PAD_RE.match(tok)
    if m is None or not any(m.groups()):
        raise SectionError(
            f"{where(path)}: expected a pad token (npad or p[s][sk][d][dv] in that order), found {tok!r}"
        )
    g = m.groups()
    return (int(bool(g[0])), int(bool(g[1])), int(bool(g[2])), int(bool(g[3])))


def _pipeline_entry(v: Any, where: _Where, path: str) -> PipelineEntry:
    m = _mapping(v, where, path, {"pipeline", "set", "product", "pads"}, {"pipeline", "pads"})
    pipe = _enum(Pipeline, m["pipeline"], where, f"{path}.pipeline")
    fixed: list[tuple[str, Any]] = []
    for k, val in _mapping(m.get("set", {}) or {}, where, f"{path}.set", set(_FEATURE_FIELDS)).items():
        fixed.append((k, _feature(k, val, where, f"{path}.set.{k}")))
    product: list[tuple[str, tuple[Any, ...] | None]] = []
    for k, vals in _mapping(m.get("product", {}) or {}, where, f"{path}.product", set(_FEATURE_FIELDS)).items():
        if k == "mask" and vals == _MASKS_TOKEN:
            product.append((k, None))
            continue
        lst = _list(vals, where, f"{path}.product.{k}")
        product.append((k, tuple(_feature(k, x, where, f"{path}.product.{k}[{i}]") for i, x in enumerate(lst))))
    both = {k for k, _ in fixed} & {k for k, _ in product}
    if both:
        raise SectionError(f"{where(path)}: field(s) {sorted(both)} given both in set and in product")
    pads = tuple(
        _pad_token(t, where, f"{path}.pads[{i}]") for i, t in enumerate(_list(m["pads"], where, f"{path}.pads"))
    )
    if not pads:
        raise SectionError(f"{where(path + '.pads')}: expected at least one pad token, found an empty list")
    return PipelineEntry(pipe, tuple(fixed), tuple(product), pads)


def _tile_entry(family: Family, hdim_key: Any, v: Any, where: _Where, path: str) -> TileEntry:
    hdim = _int(hdim_key, where, path)
    n, gemm = _TILE_SHAPE[family]
    allowed = {"block", "warps", "warp_tiles", "occupancy"} if gemm else {"block", "occupancy"}
    required = {"block", "warps", "warp_tiles"} if gemm else {"block"}
    m = _mapping(v, where, path, allowed, required)
    block = _ints(m["block"], n, where, f"{path}.block")
    occ = _int(m.get("occupancy", -1), where, f"{path}.occupancy")
    fields: dict[str, Any] = {"tile": block, "occupancy": occ}
    if gemm:
        for key in ("warps", "warp_tiles"):
            lst = _list(m[key], where, f"{path}.{key}")
            if len(lst) != 2:
                raise SectionError(
                    f"{where(path + '.' + key)}: expected 2 [m, n, k] triples (gemm0, gemm1), found {lst!r}"
                )
            fields[key] = tuple(_ints(t, 3, where, f"{path}.{key}[{i}]") for i, t in enumerate(lst))
    hdim_v = hdim if n == 1 else block[3]
    return TileEntry(hdim, hdim_v, fields)


def _constraints(m: dict, where: _Where, path: str) -> tuple[list[Callable[[KernelConfig], bool]], set[str]]:
    """The block's compiled constraint expressions, and the ``c.<field>`` names they read."""
    constraints: list[Callable[[KernelConfig], bool]] = []
    used: set[str] = set()
    for i, expr in enumerate(_list(m.get("constraints", []) or [], where, f"{path}.constraints")):
        if not isinstance(expr, str):
            raise SectionError(
                f"{where(f'{path}.constraints[{i}]')}: expected a filter expression string, found {_tname(expr)} {expr!r}"
            )
        try:
            constraints.append(compile_filter(expr).fast)  # type: ignore[attr-defined]
        except FilterError as e:
            raise SectionError(f"{where(f'{path}.constraints[{i}]')}: {e}") from None
        used |= {
            n.attr
            for n in ast.walk(ast.parse(expr.strip(), mode="eval"))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "c"
        }
    return constraints, used


def _dtype_entries(
    family: Family, m: dict, sets: dict[str, tuple[PipelineEntry, ...]], where: _Where, path: str
) -> list[DTypeEntry]:
    """The block's ``dtypes`` mapping: per dtype, its named pipeline set and its tiles per head dim."""
    dtypes = []
    for dt_key, dv in _mapping(m["dtypes"], where, f"{path}.dtypes").items():
        p = f"{path}.dtypes.{dt_key}"
        dtype = _enum(DType, dt_key, where, p)
        dm = _mapping(dv, where, p, {"pipelines", "tiles"}, {"pipelines", "tiles"})
        set_name = dm["pipelines"]
        if set_name not in sets:
            raise SectionError(
                f"{where(p + '.pipelines')}: expected the name of a pipeline set "
                f"({', '.join(sorted(sets)) or 'none defined'}), found {set_name!r}"
            )
        tiles = tuple(
            _tile_entry(family, h, t, where, f"{p}.tiles.{h}")
            for h, t in _mapping(dm["tiles"], where, f"{p}.tiles").items()
        )
        dtypes.append(DTypeEntry(dtype, sets[set_name], tiles))
    return dtypes


def _family_block(fam_key: Any, v: Any, where: _Where) -> FamilyBlock:
    path = str(fam_key)
    try:
        family = Family(fam_key)
    except ValueError:
        family = None
    if family not in _TILE_SHAPE:
        raise SectionError(f"{where(path)}: unknown family key; expected one of {[f.value for f in _TILE_SHAPE]}")
    m = _mapping(
        v,
        where,
        path,
        {"arch_tag", "modes", "constraints", "pipeline_sets", "dtypes"},
        {"arch_tag", "modes", "pipeline_sets", "dtypes"},
    )
    arch_tag = _enum(ArchTag, m["arch_tag"], where, f"{path}.arch_tag")
    modes = tuple(
        _enum(Mode, x, where, f"{path}.modes[{i}]") for i, x in enumerate(_list(m["modes"], where, f"{path}.modes"))
    )
    constraints, used = _constraints(m, where, path)
    sets: dict[str, tuple[PipelineEntry, ...]] = {}
    for name, entries in _mapping(m["pipeline_sets"], where, f"{path}.pipeline_sets").items():
        p = f"{path}.pipeline_sets.{name}"
        sets[str(name)] = tuple(_pipeline_entry(e, where, f"{p}[{i}]") for i, e in enumerate(_list(entries, where, p)))
    dtypes = _dtype_entries(family, m, sets, where, path)
    return FamilyBlock(
        family,
        arch_tag,
        modes,
        tuple(constraints),
        tuple(dtypes),
        tuple(f for f in SIGNATURE_FIELDS if f in used),
        tuple(f for f in ALGORITHM_FIELDS if f in used),
    )


def parse_section(section: Any, families: tuple[Family, ...], source: str, prefix: str = "") -> tuple[FamilyBlock, ...]:
    """Check an api section and return its family blocks (in the section's order).

    ``source`` names the file and ``prefix`` the section's key path inside it, for error messages.
    """
    where = _Where(source, prefix)
    if section is None:
        section = {}
    m = _mapping(section, where, "", {f.value for f in families})
    return tuple(_family_block(k, v, where) for k, v in m.items())


# ------------------------------------------------------------------------------------------------ context
def section_source(ctx: Any) -> tuple[str, str]:
    """(file, key path of the section in it) where ``ctx``'s api section really lives (following ``inherit``)."""
    owner = ctx.spec.section_owner(ctx.api)
    path = ctx.spec.path if owner == ctx.spec.name else load_arch_spec(owner).path
    return str(path), f"apis.{ctx.api.value}"


_PARSED: dict[int, tuple[Any, tuple[FamilyBlock, ...]]] = {}


def parsed_blocks(ctx: Any, families: tuple[Family, ...]) -> tuple[FamilyBlock, ...]:
    """The checked family blocks of ``ctx``'s section.

    Cached per section object, so archs that inherit a section (gfx90a/gfx950 -> gfx942) share one parse.
    """
    section = ctx.section
    hit = _PARSED.get(id(section))
    if hit is not None and hit[0] is section:
        return hit[1]
    blocks = parse_section(section, families, *section_source(ctx))
    _PARSED[id(section)] = (section, blocks)
    return blocks


_CANDIDATES: dict[tuple[int, tuple[MaskImpl, ...]], tuple[Any, tuple[Pair, ...]]] = {}


def enumerate_api_blocks(ctx: Any, families: tuple[Family, ...]) -> list[Pair]:
    """What an api enumerator returns: the section's kernels that the receipt keeps.

    The kernels before the receipt filter depend only on the section and the mask mode; they are built once
    per (section, mask mode) and shared by every receipt and by inheriting archs.
    """
    blocks = parsed_blocks(ctx, families)
    masks = tuple(ctx.masks)
    hit = _CANDIDATES.get((id(blocks), masks))
    if hit is None or hit[0] is not blocks:
        hit = (blocks, tuple(enumerate_blocks(blocks, masks)))
        _CANDIDATES[(id(blocks), masks)] = hit
    return kept(hit[1], ctx.keep)


def enumerate_api_names(ctx: Any, families: tuple[Family, ...]) -> list[str]:
    """The CK names of :func:`enumerate_api_blocks`' kernels, in order.  A family whose names split into pieces
    (:func:`ckfmha.naming.ck_name_signature_pieces`) is named without its pairs: each signature's pieces are made
    once (when the receipt's signature filter keeps it), each algorithm's once per tile; the other families, and
    all with a receipt filter that reads more than signature fields, name their pairs."""
    keep = ctx.keep
    if not reads_signature_only(keep):
        return render_ck_names(enumerate_api_blocks(ctx, families))
    masks = tuple(ctx.masks)
    names: list[str] = []
    for blk in parsed_blocks(ctx, families):
        if blk.family in NAME_PIECES_FAMILIES:
            pieces = _Pieces(keep, blk.family)
            names += join_name_pieces(enumerate_blocks((blk,), masks, pieces))
        else:
            names += render_ck_names(kept(enumerate_blocks((blk,), masks), keep))
    return names


class _Pieces:
    """The names mode of :func:`enumerate_blocks`: a kernel is (signature pieces, algorithm pieces) of its name,
    a signature that the receipt's signature filter ``keep`` drops has None."""

    __slots__ = ("keep", "family")

    def __init__(self, keep: Callable[[Any], Any], family: Family) -> None:
        self.keep, self.family = keep, family

    def signature(self, sig: KernelSignature) -> tuple[str, ...] | None:
        return ck_name_signature_pieces(sig) if self.keep(sig) else None

    def algorithm(self, alg: KernelAlgorithm) -> tuple[str, str, str]:
        return ck_name_algorithm_pieces(alg, self.family)


def clear_caches() -> None:
    """Forget parsed sections and pre-receipt config lists (for cold-start benchmarks and tests)."""
    _PARSED.clear()
    _CANDIDATES.clear()


# ------------------------------------------------------------------------------------------------ expand
_SIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(KernelSignature)}
_ABSENT = object()  # a field a feature combination does not set


def _tile_algorithms(
    tile: TileEntry,
    expanded: list[tuple[Pipeline, Any, tuple[tuple[int, int, int, int], ...]]],
    alg_fields: tuple[str, ...],
    alg_ids: dict[tuple, int],
    pieces: _Pieces | None,
) -> dict[tuple[Pipeline, tuple[int, int, int, int]], tuple[KernelAlgorithm, int, Any]]:
    """The algorithms of one tile: per (pipeline, pads) of the dtype's pipeline entries, the algorithm, the id
    of the values its constraint fields ``alg_fields`` take (interned in ``alg_ids``, shared by the block) and
    what a kernel holds of it (the algorithm, or its name pieces with ``pieces``)."""
    af = tile.algorithm_fields
    algs: dict[tuple[Pipeline, tuple[int, int, int, int]], tuple[KernelAlgorithm, int, Any]] = {}
    for pipe, _, pads in expanded:
        for p in pads:
            if (pipe, p) not in algs:
                alg = KernelAlgorithm(
                    pipe,
                    af["tile"],
                    af.get("warps", ()),
                    af.get("warp_tiles", ()),
                    af["occupancy"],
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                )
                akey = tuple(getattr(alg, f) for f in alg_fields)
                held = alg if pieces is None else pieces.algorithm(alg)
                algs[(pipe, p)] = (alg, alg_ids.setdefault(akey, len(alg_ids)), held)
    return algs


def enumerate_blocks(
    blocks: tuple[FamilyBlock, ...], masks: tuple[MaskImpl, ...], pieces: _Pieces | None = None
) -> list[tuple[Any, Any]]:
    """Expand family blocks into kernels, in generator order: dtype, hdim, mode, pipeline entry, product, pads.
    A kernel is a (signature, algorithm) pair, or with ``pieces`` the pieces of its name (:class:`_Pieces`).

    Long because it is the hot loop nest: a signature is built once per feature combination and only when some
    pad variant survives the constraints; algorithms are built once per tile/pipeline/pads; constraint results
    are memoized on the field values they read.
    """
    out: list[tuple[Any, Any]] = []
    append = out.append
    for blk in blocks:
        family, arch_tag, fns = blk.family, blk.arch_tag, blk.constraints
        sig_fields, alg_fields = blk.constraint_sig_fields, blk.constraint_alg_fields
        # constraint results, memoized on (signature-part key id, algorithm-part key id); the ids intern the
        # tuples of field values the constraints read, so the hot loop hashes small ints only
        memo: dict[tuple[int, int], bool] = {}
        sig_ids: dict[tuple, int] = {}
        alg_ids: dict[tuple, int] = {}
        # each feature combination with the id of the values it gives the constraints' signature fields (absent
        # ones come from the mode, tile and dtype): the signature-part key id is then found per (tile, mode) by
        # that id, made once per distinct one
        feat_ids: dict[tuple, int] = {}
        for dt in blk.dtypes:
            dtype = dt.dtype
            expanded = [
                (
                    e.pipeline,
                    [
                        (feats, feat_ids.setdefault(tuple(feats.get(f, _ABSENT) for f in sig_fields), len(feat_ids)))
                        for feats in e.variants(masks)
                    ],
                    e.pads,
                )
                for e in dt.pipelines
            ]
            for tile in dt.tiles:
                hdim, hdim_v = tile.hdim, tile.hdim_v
                algs = _tile_algorithms(tile, expanded, alg_fields, alg_ids, pieces)
                for mode in blk.modes:
                    base = {
                        "family": family,
                        "dtype": dtype,
                        "mode": mode,
                        "hdim_q": hdim,
                        "hdim_v": hdim_v,
                        "arch_tag": arch_tag,
                    }
                    sids: dict[int, int] = {}  # signature-part key id per feature-value id, for this tile and mode
                    for pipe, variants, pads in expanded:
                        pad_algs = [algs[(pipe, p)] for p in pads]
                        # per signature-part key id: what the kernels hold of the pad variants the constraints
                        # keep (all answers known), for this tile, mode and pipeline entry
                        kept_algs: dict[int, list] = {}
                        for feats, fid in variants:
                            sid = sids.get(fid)
                            if sid is None:
                                skey = tuple(
                                    feats[f] if f in feats else base.get(f, _SIG_DEFAULTS[f]) for f in sig_fields
                                )
                                sid = sids[fid] = sig_ids.setdefault(skey, len(sig_ids))
                            sig: KernelSignature | None = None
                            held_sig: Any = None
                            known = kept_algs.get(sid)
                            if known is not None:  # the loop below, with every answer known
                                if known:
                                    sig = held_sig = new_signature(family, dtype, mode, hdim, hdim_v, arch_tag, **feats)
                                    if pieces is not None:
                                        held_sig = pieces.signature(sig)
                                    if held_sig is not None:
                                        out.extend([(held_sig, held_alg) for held_alg in known])
                                continue
                            kept: list = []
                            for alg, aid, held_alg in pad_algs:
                                k = (sid, aid)
                                ok = memo.get(k)
                                if ok is False:
                                    continue
                                if sig is None:
                                    sig = held_sig = new_signature(family, dtype, mode, hdim, hdim_v, arch_tag, **feats)
                                    if pieces is not None:
                                        held_sig = pieces.signature(sig)
                                        if held_sig is None:  # the receipt drops it
                                            break
                                if ok is None:
                                    c = new_config(sig, alg)
                                    ok = memo[k] = all(fn(c) for fn in fns)
                                    if not ok:
                                        continue
                                append((held_sig, held_alg))
                                kept.append(held_alg)
                            else:
                                kept_algs[sid] = kept
    return out
