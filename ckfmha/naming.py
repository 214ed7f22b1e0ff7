"""CK instance file names: render them from a KernelConfig and parse them back.

CK's generator writes one ``.cpp`` per kernel instance; its basename spells the whole kernel in CK's own
tokens (``fmha_fwd_d128_fp16_batch_b128x128x32x128x32x128_r4x1x1_..._qr_async_vr_psskddv_..._gfx9.cpp``).
This module is the only place that knows those tokens. The round trip ``render(parse(name)) == name`` holds
for every name in the golden lists (tests/test_naming.py).

Per family (``{x}`` = field, ``[..]`` = present only when it applies):

* fwd: ``fmha_fwd_d{hq}_{dtype}_{mode}_{tile}_{pipeline}_v{r|c}_{pad}_{logits}_{bias}_{mask}_{lse}_{dropout}_{skip}_{qscale}_{trload}_{sink}_{arch}``
* fwd_splitkv: ``..._{tile}_{pipeline}_v{r|c}_{pad}_{logits}_{bias}_{mask}_{lse}_{squant}_{pagedkv}_{sink}_{arch}``
* fwd_splitkv_combine: ``fmha_fwd_splitkv_combine_d{hv}_{dtype}_{mode}_b{bn1}[_o{occ}]_unused_{pad(s,dv)}_{lse}_{squant}_{arch}``
* fwd_pagedkv: ``..._{tile}_qr_pagedkv_v{r|c}_{pad}_{logits}_{bias}_{mask}_{lse}_{skip}_{squant}_{pagedkv}_{sink}_{arch}``
* fwd_appendkv: ``fmha_fwd_appendkv_d{hq}_{dtype}_b{bs}x{bsk}x{bd}x{bdv}[_o{occ}]_v{r|c}[_{pad}][_{inter|half}][_pagedkv]_{arch}``
* batch_prefill: ``fmha_batch_prefill_d{hq}_{dtype}_{mode}_ps{page}_{bload|gload}_{tile}_qr_async_v{r|c}_{pad}_{logits}_{bias}_{mask}_{lse}_{dropout}_{qscale}_{sink}_{vectorized|linear}_{vllm|sglang}`` (no arch)
* bwd_dq_dk_dv: ``fmha_bwd_d{hq}_{dtype}_{mode}_b{9}_r{3}_r{3}_r{3}_w{3}_w{3}_o{occ}_maxq{n}_{pad(d,dv with 1|8)}_{bias}_{dbias}_{mask}_{dropout}_{deterministic}_{trload}_{arch}``
* bwd_dot_do_o: ``fmha_bwd_dot_do_o_d{hv}_{dtype}_b{bm0}_{mode}_o{occ}_{pad(s,dv)}_{arch}``
* bwd_convert_dq: ``fmha_bwd_convert_dq_d{hq}_{dtype}_b{bm0}_{mode}_o{occ}_{pad(s,d)}_{deterministic}_{arch}``

fwd-style tile: ``b{bm0}x{bn0}x{bk0}x{bn1}x{bk1}x{bk0max}_r{m}x{n}x{k}_r{m}x{n}x{k}_w{m}x{n}x{k}_w{m}x{n}x{k}[_o{occ}]``
(``_o`` only when occupancy != -1). Pad tokens: ``p`` followed by the padded dims in the order s, sk, d, dv,
or ``npad``. Mask tokens: ``nmask`` none, ``mask`` any (simplified), ``mc`` causal, ``mg`` generic.

Naming schemes (:class:`CKNamingScheme`)
---------------------------------------
CK renamed tokens over time, so the same kernel has different file names in different CK checkouts. ckfmha reads
and writes each generation it knows; the list above is :attr:`CKNamingScheme.CURRENT` (the scheme of the golden
lists, tests/data/golden/). :attr:`CKNamingScheme.CK_2025_11` is the scheme of the CK generator as shipped in
the ``amd-aiter`` 0.1.7.post2.dev18 wheel (tree built 2025-11-18); it differs in five families (the other four
are spelled the same in both schemes):

* fwd: ``..._{skip}_{squant}_{trload}_{arch}`` -- no ``qscale`` and no ``sink`` token. ``squant`` is that CK's
  ``do_fp8_static_quant`` (fp8 static per-tensor scales scale_s/scale_p/scale_o, codegen/ops/fmha_fwd.py
  ``F_squant``); newer CK replaced the switch by ``qscale`` with ``pertensor`` as its "on" value (tile_example
  ``-squant=1`` became ``-qscale=pt``). So ``nsquant`` = qscale ``none``, ``squant`` = qscale ``pertensor``.
* fwd_splitkv / fwd_pagedkv: as current but without the trailing ``sink`` token.
* batch_prefill: ``fmha_batch_prefill_d{hq}_{dtype}_{mode}_{tile}_qr_async_v{r|c}_{pad}_{logits}_{bias}_{mask}
  _{lse}_{dropout}_{squant}`` -- no page-size, load, sink, kv-layout or lookup tokens: that CK's kernel
  (fmha_batch_prefill_kernel.hpp) hard-wires ``page_block_size = 1`` (``// we assume page_block_size=1 for
  now``), an SGLang-style page table (``kv_indptr``/``kv_page_indices``) over a linear K/V pool, and has a
  single load path: a parse gives page_size 1, kv_lookup_table ``sglang``, kv_memory_layout ``linear``,
  kv_load ``none``. ``squant`` maps to qscale as in fwd.
* bwd_convert_dq: ``..._b{bm0}x{bn0}_...`` -- that CK's convert_dq kernel also carries the dq_dk_dv tile's
  ``bn0`` when deterministic, else 0 (codegen/ops/fmha_bwd.py ``convert_dq_bn0``): ``tile = (bm0, bn0)``; the
  current scheme spells only ``b{bm0}`` (``tile = (bm0,)``).

A field a scheme does not spell takes the value that generation of CK hard-wires (:data:`IMPLIED_FIELDS`); a
config with another value (e.g. ``sink=True`` in the 2025-11 scheme) has no name in that scheme and rendering
it raises :class:`CKNameError` naming the field, the value and the scheme. :func:`parse_ck_name` returns the
config with every scheme that spells it exactly so; :func:`parse_ck_instance_name` returns the config alone.
Round trip: ``ck_instance_name(parse_ck_name(n).config, scheme=s) == n`` for every scheme ``s`` of the parse
(tests/test_naming.py, tests/test_ck_versions.py against the amd-aiter tree).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from operator import attrgetter
from typing import Any, NamedTuple

from ckfmha.kernel import (
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
    MaskImpl,
    Mode,
    Pipeline,
    QScale,
    Rope,
    TokenEnum,
    VLayout,
)


class CKNameError(ValueError):
    pass


class CKNamingScheme(TokenEnum):
    """A generation of CK's instance file names (newest first; see the module doc)."""

    CURRENT = "current"  # the golden lists' CK (qscale and sink tokens, convert_dq b{bm0}, paged batch_prefill)
    CK_2025_11 = "ck-2025-11"  # CK in amd-aiter 0.1.7.post2.dev18: squant, no sink, convert_dq b{bm0}x{bn0}


IMPLIED_FIELDS: dict[CKNamingScheme, dict[Family, dict[str, Any]]] = {
    CKNamingScheme.CURRENT: {},
    CKNamingScheme.CK_2025_11: {
        Family.FWD: {"sink": False},
        Family.FWD_SPLITKV: {"sink": False},
        Family.FWD_PAGEDKV: {"sink": False},
        Family.BATCH_PREFILL: {
            "sink": False,
            "page_size": 1,
            "kv_load": KVLoad.NONE,
            "kv_memory_layout": KVMemoryLayout.LINEAR,
            "kv_lookup_table": KVLookupTable.SGLANG,
        },
    },
}
"""Per scheme and family: the fields its names do not spell, with the value that generation of CK hard-wires."""

# The 2025-11 scheme's fp8 static-quant switch, as the qscale value newer CK gives it (see the module doc).
_SQUANT_QSCALE = {"nsquant": QScale.NONE, "squant": QScale.PERTENSOR}
_QSCALE_SQUANT = {v: k for k, v in _SQUANT_QSCALE.items()}


_MASK_TOKEN = {MaskImpl.NONE: "nmask", MaskImpl.ANY: "mask", MaskImpl.CAUSAL: "mc", MaskImpl.GENERIC: "mg"}
_TOKEN_MASK = {v: k for k, v in _MASK_TOKEN.items()}
_BIAS_TOKEN = {Bias.NONE: "nbias", Bias.ELEMENTWISE: "bias", Bias.ALIBI: "alibi"}
_TOKEN_BIAS = {v: k for k, v in _BIAS_TOKEN.items()}
_QSCALE_TOKEN = {
    QScale.NONE: "nqscale",
    QScale.PERTENSOR: "pertensor",
    QScale.BLOCKSCALE: "blockscale",
    QScale.KV_BLOCKSCALE: "kv_blockscale",
    QScale.MX: "mx",
}
_TOKEN_QSCALE = {v: k for k, v in _QSCALE_TOKEN.items()}
_ROPE_TOKEN = {Rope.INTERLEAVED: "inter", Rope.HALF_ROTATED: "half"}
_TOKEN_ROPE = {v: k for k, v in _ROPE_TOKEN.items()}
_BWD_DROPOUT_TOKEN = {
    Dropout.NONE: "ndropout",
    Dropout.WG16: "dropout_wg16",
    Dropout.WG16_STORE_RANDVAL: "dropout_wg16_storerandval",
    Dropout.WG32: "dropout_wg32",
    Dropout.WG32_STORE_RANDVAL: "dropout_wg32_storerandval",
}
_TOKEN_BWD_DROPOUT = {v: k for k, v in _BWD_DROPOUT_TOKEN.items()}
_VLAYOUT_TOKEN = {VLayout.ROW: "vr", VLayout.COL: "vc"}
_TOKEN_VLAYOUT = {v: k for k, v in _VLAYOUT_TOKEN.items()}
_FWD_DROPOUT_TOKEN = {Dropout.NONE: "ndropout", Dropout.ENABLED: "dropout"}
_TOKEN_FWD_DROPOUT = {v: k for k, v in _FWD_DROPOUT_TOKEN.items()}


def _flag(value: bool, token: str) -> str:
    return token if value else "n" + token


def _pad_token(dims: tuple[tuple[str, int], ...]) -> str:
    present = "".join(tok for tok, v in dims if v)
    return "p" + present if present else "npad"


def _xs(vals) -> str:
    return "x".join(str(v) for v in vals)


# Enumerators share a few algorithm objects among thousands of configs: remember each one's tile and pad
# tokens (keyed by identity; the entry keeps the object alive, so the id cannot be reused while cached).
_ALG_TOKENS: dict[int, tuple[object, str, str]] = {}
_ALG_TOKENS_MAX = 1 << 16


def _alg_tokens(a) -> tuple[str, str]:
    hit = _ALG_TOKENS.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1], hit[2]
    tile = ""
    if len(a.warps) >= 2 and len(a.warp_tiles) >= 2:
        tile = f"b{_xs(a.tile)}_r{_xs(a.warps[0])}_r{_xs(a.warps[1])}_w{_xs(a.warp_tiles[0])}_w{_xs(a.warp_tiles[1])}"
        if a.occupancy != -1:
            tile += f"_o{a.occupancy}"
    pad = _pad_token((("s", a.pad_s), ("sk", a.pad_sk), ("d", a.pad_d), ("dv", a.pad_dv)))
    if len(_ALG_TOKENS) >= _ALG_TOKENS_MAX:
        _ALG_TOKENS.clear()
    _ALG_TOKENS[id(a)] = (a, tile, pad)
    return tile, pad


def _arch_suffix(c: KernelConfig) -> str:
    return "" if c.signature.arch_tag is ArchTag.NONE else "_" + c.signature.arch_tag.value


# ------------------------------------------------------------------------------------------- render
# Pieces shared by many signatures, keyed by the values they depend on (token enum members hash and compare as their
# str, in C; one attrgetter call builds each key tuple).
_HEADS: dict[tuple, str] = {}
_FEATS: dict[tuple, tuple[str, ...]] = {}
NAME_HEAD_FIELDS = ("family", "hdim_q", "dtype", "mode", "page_size")
# the other signature fields the seven-piece names spell (not hdim_v, rope)
NAME_TAIL_SIGNATURE_FIELDS = (
    "arch_tag",
    "vlayout",
    "logits_soft_cap",
    "bias",
    "mask",
    "lse",
    "dropout",
    "skip_min_seqlen_q",
    "qscale",
    "sink",
    "dbias",
    "deterministic",
    "paged_kv",
    "fp8_static_quant",
    "kv_memory_layout",
    "kv_lookup_table",
)
_HEAD_KEY = attrgetter(*NAME_HEAD_FIELDS)
_FEAT_KEY = attrgetter("family", *NAME_TAIL_SIGNATURE_FIELDS)


def _sig_parts(s) -> tuple[str, ...]:
    """The four signature pieces of a name (P0..P3, see _FAST_FAMILIES), assembled from a head piece (family, hdim,
    dtype, mode, page size) and the feature pieces (every other named field), both shared by many signatures."""
    hkey = _HEAD_KEY(s)
    p0 = _HEADS.get(hkey)
    if p0 is None:
        f = s.family
        head = "d" + str(s.hdim_q) + "_" + s.dtype + "_" + s.mode
        if f is Family.FWD:
            p0 = "fmha_fwd_" + head + "_"
        elif f is Family.FWD_SPLITKV:
            p0 = "fmha_fwd_splitkv_" + head + "_"
        elif f is Family.BATCH_PREFILL:
            p0 = "fmha_batch_prefill_" + head + "_ps" + str(s.page_size) + "_"
        else:  # BWD_DQ_DK_DV
            p0 = "fmha_bwd_" + head + "_b"
        _HEADS[hkey] = p0
    fkey = _FEAT_KEY(s)
    rest = _FEATS.get(fkey)
    if rest is None:
        rest = _FEATS[fkey] = _feature_pieces(s)
    return (p0,) + rest


def _feature_pieces(s) -> tuple[str, str, str]:
    """P1..P3 of a name: everything of the signature but the head (family, hdim, dtype, mode, page size)."""
    f = s.family
    vl = _VLAYOUT_TOKEN[s.vlayout]
    arch = "" if s.arch_tag is ArchTag.NONE else "_" + s.arch_tag
    common = (
        ("logits_" if s.logits_soft_cap else "nlogits_")
        + _BIAS_TOKEN[s.bias]
        + "_"
        + _MASK_TOKEN[s.mask]
        + ("_lse_" if s.lse else "_nlse_")
        + _FWD_DROPOUT_TOKEN.get(s.dropout, "?")
        + "_"
    )
    if f is Family.FWD:
        feats = common + ("skip_" if s.skip_min_seqlen_q else "nskip_") + _QSCALE_TOKEN[s.qscale]
        return "_" + vl + "_", "_" + feats + "_", ("_sink" if s.sink else "_nsink") + arch + ".cpp"
    if f is Family.FWD_SPLITKV:
        return "_" + vl + "_", "_" + _kv_feats(s, skip=False) + arch + ".cpp", ""
    if f is Family.BATCH_PREFILL:
        for name in ("kv_memory_layout", "kv_lookup_table"):
            if getattr(s, name) == "none":
                raise CKSchemeError(
                    CKNamingScheme.CURRENT,
                    f,
                    name,
                    getattr(s, name),
                    "this scheme names the kv layout (vectorized|linear) and lookup (vllm|sglang)",
                )
        feats = (
            common
            + _QSCALE_TOKEN[s.qscale]
            + ("_sink_" if s.sink else "_nsink_")
            + s.kv_memory_layout
            + "_"
            + s.kv_lookup_table
        )
        return "_" + vl + "_", "_" + feats + ".cpp", ""
    # BWD_DQ_DK_DV
    return (
        "_"
        + _BIAS_TOKEN[s.bias]
        + ("_dbias_" if s.dbias else "_ndbias_")
        + _MASK_TOKEN[s.mask]
        + "_"
        + _BWD_DROPOUT_TOKEN[s.dropout]
        + ("_deterministic_" if s.deterministic else "_ndeterministic_"),
        arch + ".cpp",
        "",
    )


def _kv_feats(s, skip: bool) -> str:
    """The feature tokens fwd_splitkv and fwd_pagedkv names share (logits, bias, mask, lse, [skip,] squant, pagedkv,
    sink); ``skip``: with pagedkv's skip token after lse."""
    return (
        ("logits_" if s.logits_soft_cap else "nlogits_")
        + _BIAS_TOKEN[s.bias]
        + "_"
        + _MASK_TOKEN[s.mask]
        + ("_lse" if s.lse else "_nlse")
        + (("_skip" if s.skip_min_seqlen_q else "_nskip") if skip else "")
        + ("_squant" if s.fp8_static_quant else "_nsquant")
        + ("_pagedkv" if s.paged_kv else "_npagedkv")
        + ("_sink" if s.sink else "_nsink")
    )


def _other_sig_pieces(s) -> tuple[str, str, str, str]:
    """P0..P3 of a name of a family outside :data:`_FAST_FAMILIES` (P3 empty; see :func:`_alg_pieces` for A0..A2).
    Not cached: its callers make them once per signature object."""
    f = s.family
    arch = "" if s.arch_tag is ArchTag.NONE else "_" + s.arch_tag
    if f is Family.FWD_PAGEDKV:
        head = "fmha_fwd_pagedkv_d" + str(s.hdim_q) + "_" + s.dtype + "_" + s.mode + "_"
        return head, "_" + _VLAYOUT_TOKEN[s.vlayout] + "_", "_" + _kv_feats(s, skip=True) + arch + ".cpp", ""
    if f is Family.FWD_SPLITKV_COMBINE:
        head = "fmha_fwd_splitkv_combine_d" + str(s.hdim_v) + "_" + s.dtype + "_" + s.mode + "_"
        feats = ("_lse" if s.lse else "_nlse") + ("_squant" if s.fp8_static_quant else "_nsquant")
        return head, feats + arch + ".cpp", "", ""
    if f is Family.FWD_APPENDKV:
        rope = "" if s.rope is Rope.NONE else "_" + _ROPE_TOKEN[s.rope]
        paged = "_pagedkv" if s.paged_kv else ""
        head = "fmha_fwd_appendkv_d" + str(s.hdim_q) + "_" + s.dtype + "_"
        return head, "_" + _VLAYOUT_TOKEN[s.vlayout], rope + paged + arch + ".cpp", ""
    if f is Family.BWD_DOT_DO_O:
        return "fmha_bwd_dot_do_o_d" + str(s.hdim_v) + "_" + s.dtype + "_", "_" + s.mode + "_", arch + ".cpp", ""
    if f is Family.BWD_CONVERT_DQ:
        det = "_deterministic" if s.deterministic else "_ndeterministic"
        return (
            "fmha_bwd_convert_dq_d" + str(s.hdim_q) + "_" + s.dtype + "_",
            "_" + s.mode + "_",
            det + arch + ".cpp",
            "",
        )
    raise CKNameError(f"family {f.value!r} has no CK instance name")  # pragma: no cover - every family is above


def _signature_pieces(s) -> tuple[str, ...]:
    """P0..P3 of a name of any family."""
    return _sig_parts(s) if s.family in _FAST_FAMILIES else _other_sig_pieces(s)


_BWD_ALG: dict[int, tuple[object, str]] = {}


def _bwd_alg(a) -> str:
    hit = _BWD_ALG.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1]
    w, wt = a.warps, a.warp_tiles
    pad = "".join(f"{tok}{v}" for tok, v in (("d", a.pad_d), ("dv", a.pad_dv)) if v)
    pad = "p" + pad if pad else "npad"
    txt = (
        f"{_xs(a.tile)}_r{_xs(w[0])}_r{_xs(w[1])}_r{_xs(w[2])}_w{_xs(wt[0])}_w{_xs(wt[1])}_o{a.occupancy}"
        f"_maxq{a.max_seq_len_q}_{pad}"
    )
    if len(_BWD_ALG) >= _ALG_TOKENS_MAX:
        _BWD_ALG.clear()
    _BWD_ALG[id(a)] = (a, txt)
    return txt


# A name renders as P0 + A0 + P1 + A1 + P2 + A2 + P3: four signature pieces (_signature_pieces, shared by all configs
# of a signature) interleaved with three algorithm pieces (_alg_pieces, shared by all configs of an algorithm
# object), so a name costs two cache lookups and six concatenations.  The four big families' signature pieces
# (_sig_parts) are assembled from a head and feature pieces, each cached by the values it spells; the other
# families' (_other_sig_pieces) are made directly.
_FAST_FAMILIES = frozenset((Family.FWD, Family.FWD_SPLITKV, Family.BATCH_PREFILL, Family.BWD_DQ_DK_DV))
# the families whose names split into pieces (ck_name_parts, ck_name_signature_pieces)
NAME_PIECES_FAMILIES = _FAST_FAMILIES
_ALG_PIECES: dict[int, tuple[object, Family, tuple[str, str, str]]] = {}


def _alg_pieces(a, family: Family) -> tuple[str, str, str]:
    """The three algorithm pieces of a name of ``family`` (A0..A2), cached per algorithm object and family."""
    hit = _ALG_PIECES.get(id(a))
    if hit is not None and hit[0] is a and hit[1] is family:
        return hit[2]
    tr = "trload" if a.trload else "ntrload"
    if family is Family.BWD_DQ_DK_DV:
        pieces = (_bwd_alg(a), tr, "")
    elif family not in _FAST_FAMILIES:
        pieces = _other_alg_pieces(a, family)
    else:
        tile, pad = _alg_tokens(a)
        if family is Family.FWD:
            pieces = (tile + "_" + a.pipeline, pad, tr)
        elif family is Family.FWD_SPLITKV:
            pieces = (tile + "_" + a.pipeline, pad, "")
        else:  # BATCH_PREFILL
            if a.kv_load is KVLoad.NONE:
                raise CKSchemeError(
                    CKNamingScheme.CURRENT,
                    family,
                    "kv_load",
                    a.kv_load,
                    "this scheme names the load strategy (bload|gload)",
                )
            pieces = (a.kv_load + "_" + tile + "_" + a.pipeline, pad, "")
    if len(_ALG_PIECES) >= _ALG_TOKENS_MAX:
        _ALG_PIECES.clear()
    _ALG_PIECES[id(a)] = (a, family, pieces)
    return pieces


def _other_alg_pieces(a, family: Family) -> tuple[str, str, str]:
    """A0..A2 of a name of a family outside :data:`_FAST_FAMILIES` (see :func:`_other_sig_pieces`)."""
    if family is Family.FWD_PAGEDKV:
        tile, pad = _alg_tokens(a)
        return tile + "_" + a.pipeline, pad, ""
    occ = "_o" + str(a.occupancy) if a.occupancy != -1 else ""
    if family is Family.FWD_SPLITKV_COMBINE:
        return "b" + str(a.tile[0]) + occ + "_unused_" + _pad_token((("s", a.pad_s), ("dv", a.pad_dv))), "", ""
    if family is Family.FWD_APPENDKV:
        pad = _alg_tokens(a)[1]
        return "b" + _xs(a.tile) + occ, "" if pad == "npad" else "_" + pad, ""
    if family is Family.BWD_DOT_DO_O:
        return "b" + str(a.tile[0]), "o" + str(a.occupancy) + "_" + _pad_token((("s", a.pad_s), ("dv", a.pad_dv))), ""
    if family is Family.BWD_CONVERT_DQ:
        if len(a.tile) != 1:
            raise CKSchemeError(
                CKNamingScheme.CURRENT,
                family,
                "tile",
                a.tile,
                "this scheme spells a convert_dq tile as b{bm0} (tile = (bm0,))",
            )
        return "b" + str(a.tile[0]), "o" + str(a.occupancy) + "_" + _pad_token((("s", a.pad_s), ("d", a.pad_d))), ""
    raise CKNameError(f"family {family.value!r} has no CK instance name")  # pragma: no cover - every family is above


class CKSchemeError(CKNameError):
    """A config that a naming scheme cannot spell: ``field`` has ``value``, which ``scheme`` has no token for."""

    def __init__(self, scheme: CKNamingScheme, family: Family, field_name: str, value: Any, rule: str) -> None:
        self.scheme, self.family, self.field, self.value, self.rule = scheme, family, field_name, value, rule
        shown = value.value if isinstance(value, TokenEnum) else value
        super().__init__(
            f"{field_name}: {shown!r} has no spelling in the {scheme.value} naming scheme of "
            f"{family.value} names ({rule})"
        )


def cross_scheme_config(c: KernelConfig) -> KernelConfig:
    """The config with what only some naming schemes determine erased, so that names of different schemes can be
    compared: a convert_dq tile keeps only ``bm0`` (the current scheme has no ``bn0``), a batch_prefill kernel
    loses its load strategy (the 2025-11 scheme has none). Fields a scheme hard-wires (:data:`IMPLIED_FIELDS`)
    are kept: a ``sink`` kernel is not the 2025-11 kernel without one."""
    f = c.signature.family
    if f is Family.BWD_CONVERT_DQ and len(c.algorithm.tile) > 1:
        return c.replace(tile=c.algorithm.tile[:1])
    if f is Family.BATCH_PREFILL and c.algorithm.kv_load is not KVLoad.NONE:
        return c.replace(kv_load=KVLoad.NONE)
    return c


def _check_implied(c: KernelConfig, scheme: CKNamingScheme) -> None:
    f = c.signature.family
    for name, want in IMPLIED_FIELDS[scheme].get(f, {}).items():
        have = getattr(c, name)
        if have != want:
            shown = want.value if isinstance(want, TokenEnum) else want
            raise CKSchemeError(
                scheme, f, name, have, f"its names have no {name} token: that CK hard-wires {name}={shown!r}"
            )


def _squant(c: KernelConfig, scheme: CKNamingScheme) -> str:
    """The 2025-11 scheme's ``squant``/``nsquant`` token for a fwd or batch_prefill config's qscale."""
    tok = _QSCALE_SQUANT.get(c.signature.qscale)
    if tok is None:
        raise CKSchemeError(
            scheme,
            c.signature.family,
            "qscale",
            c.signature.qscale,
            "its squant token spells only qscale none (nsquant) and pertensor (squant)",
        )
    return tok


def _name_2025_11(c: KernelConfig) -> str:
    """The name in :attr:`CKNamingScheme.CK_2025_11` (see the module doc for how it differs)."""
    scheme = CKNamingScheme.CK_2025_11
    _check_implied(c, scheme)
    s, a, f = c.signature, c.algorithm, c.signature.family
    if f is Family.FWD:
        squant = _squant(c, scheme)
        name = ck_instance_name(c)  # the current spelling, then the two tokens that differ
        head, tail = name.rsplit("_" + _QSCALE_TOKEN[s.qscale] + "_", 1)
        tail = tail.replace("_nsink", "", 1)  # sink is False (checked above)
        return head + "_" + squant + "_" + tail
    if f in (Family.FWD_SPLITKV, Family.FWD_PAGEDKV):
        name = ck_instance_name(c)
        return name.replace("_nsink" + _arch_suffix(c) + ".cpp", _arch_suffix(c) + ".cpp")
    if f is Family.BATCH_PREFILL:
        tile, pad = _alg_tokens(a)
        return (
            f"fmha_batch_prefill_d{s.hdim_q}_{s.dtype.value}_{s.mode.value}_{tile}_{a.pipeline.value}"
            f"_{_VLAYOUT_TOKEN[s.vlayout]}_{pad}_{_flag(s.logits_soft_cap, 'logits')}_{_BIAS_TOKEN[s.bias]}"
            f"_{_MASK_TOKEN[s.mask]}_{_flag(s.lse, 'lse')}_{_FWD_DROPOUT_TOKEN[s.dropout]}"
            f"_{_squant(c, scheme)}.cpp"
        )
    if f is Family.BWD_CONVERT_DQ:
        if len(a.tile) != 2:
            raise CKSchemeError(
                scheme,
                f,
                "tile",
                a.tile,
                "this scheme spells a convert_dq tile as b{bm0}x{bn0} "
                "(tile = (bm0, bn0), bn0 = the dq_dk_dv tile's bn0 when deterministic, else 0)",
            )
        pad = _pad_token((("s", a.pad_s), ("d", a.pad_d)))
        return (
            f"fmha_bwd_convert_dq_d{s.hdim_q}_{s.dtype.value}_b{_xs(a.tile)}_{s.mode.value}_o{a.occupancy}"
            f"_{pad}_{_flag(s.deterministic, 'deterministic')}{_arch_suffix(c)}.cpp"
        )
    return ck_instance_name(c)  # spelled the same in both schemes


def render_ck_names(pairs: Iterable[tuple[KernelSignature, KernelAlgorithm]]) -> list[str]:
    """``[ck_instance_name(KernelConfig(s, a)) for s, a in pairs]``, faster for long lists (the enumeration's hot
    path; an enumerator's kernels are (signature, algorithm) pairs, :mod:`ckfmha.enumeration._pairs`).

    The pieces of each distinct signature object and of each distinct (algorithm object, family) are made once
    (:func:`_signature_pieces`, :func:`_alg_pieces`), so a name costs two dictionary look-ups and one join."""
    # keyed by id: the caller holds every pair (so every part) meanwhile, so an id names one object
    sig_pieces: dict[int, tuple[Family, tuple[str, ...]]] = {}
    alg_pieces: dict[int, tuple[Family, tuple[str, str, str]]] = {}
    names: list[str] = []
    append = names.append
    for s, a in pairs:
        sp = sig_pieces.get(id(s))
        if sp is None:
            sp = sig_pieces[id(s)] = (s.family, _signature_pieces(s))
        family, (p0, p1, p2, p3) = sp
        ap = alg_pieces.get(id(a))
        if ap is None or ap[0] is not family:  # (an algorithm object shared by two families: made again)
            ap = alg_pieces[id(a)] = (family, _alg_pieces(a, family))
        a0, a1, a2 = ap[1]
        append(f"{p0}{a0}{p1}{a1}{p2}{a2}{p3}")  # one string built at once (six + would build six)
    return names


# Of the algorithm, the tail of a split name (ck_name_parts) reads only these fields, per family.
NAME_TAIL_ALGORITHM_FIELDS: dict[Family, tuple[str, ...]] = {
    Family.FWD: ("pad_s", "pad_sk", "pad_d", "pad_dv", "trload"),
    Family.FWD_SPLITKV: ("pad_s", "pad_sk", "pad_d", "pad_dv"),
    Family.BATCH_PREFILL: ("pad_s", "pad_sk", "pad_d", "pad_dv"),
    Family.BWD_DQ_DK_DV: ("trload",),
}


def ck_name_parts(s: KernelSignature, a: KernelAlgorithm) -> tuple[str, str, str]:
    """``(head, middle, tail)`` of the current-scheme name of a kernel of the fwd, fwd_splitkv, batch_prefill or
    bwd_dq_dk_dv family: ``head + middle + tail == ck_instance_name(KernelConfig(s, a))``.  Raises
    :class:`CKNameError` for the other families.

    What each part depends on (an enumerator naming many kernels makes each part once per distinct value of it):
    the head only on the signature's :data:`NAME_HEAD_FIELDS`; the middle only on the algorithm (and the family,
    :func:`ck_name_middle`); the tail only on the family, the signature's :data:`NAME_TAIL_SIGNATURE_FIELDS` and
    the algorithm's fields :data:`NAME_TAIL_ALGORITHM_FIELDS` lists for the family
    (tests/test_enumeration_names.py checks this on the enumerated kernels of those families)."""
    f = s.family
    if f not in _FAST_FAMILIES:
        raise CKNameError(f"family {f.value!r}: its names are not split into head, middle and tail")
    p0, p1, p2, p3 = _sig_parts(s)
    a0, a1, a2 = _alg_pieces(a, f)
    return p0, a0, p1 + a1 + p2 + a2 + p3


def ck_name_signature_pieces(s: KernelSignature) -> tuple[str, ...]:
    """The four signature pieces (P0..P3) of the current-scheme names of a kernel of the fwd, fwd_splitkv,
    batch_prefill or bwd_dq_dk_dv family (:func:`join_name_pieces`); :class:`CKNameError` for the other families."""
    if s.family not in _FAST_FAMILIES:
        raise CKNameError(f"family {s.family.value!r}: its names are not split into pieces")
    return _sig_parts(s)


def ck_name_algorithm_pieces(a: KernelAlgorithm, family: Family) -> tuple[str, str, str]:
    """The three algorithm pieces (A0..A2) of the current-scheme names of ``family``'s kernels of algorithm ``a``
    (cached per algorithm object and family; the families of :func:`ck_name_signature_pieces`)."""
    return _alg_pieces(a, family)


def join_name_pieces(pieces: Iterable[tuple[tuple[str, ...], tuple[str, str, str]]]) -> list[str]:
    """The names of (signature pieces, algorithm pieces) pairs: ``P0 A0 P1 A1 P2 A2 P3``, for an enumerator that
    makes each signature's and each algorithm's pieces once (``ck_name_signature_pieces(s)``,
    ``ck_name_algorithm_pieces(a, family)``): ``ck_instance_name(KernelConfig(s, a))``."""
    return [f"{p0}{a0}{p1}{a1}{p2}{a2}{p3}" for (p0, p1, p2, p3), (a0, a1, a2) in pieces]


def ck_name_middle(a: KernelAlgorithm, family: Family) -> str:
    """The middle part of :func:`ck_name_parts` (cached per algorithm object and family)."""
    return _alg_pieces(a, family)[0]


def ck_instance_name(c: KernelConfig, scheme: CKNamingScheme | str = CKNamingScheme.CURRENT) -> str:
    """CK's instance file name (with ``.cpp``) for a config, in a naming scheme (default: the current one).
    A config the scheme cannot spell (a field it does not name with another value than its CK hard-wires, or a
    value it has no token for) raises :class:`CKNameError` naming the field, the value and the scheme."""
    if scheme is not CKNamingScheme.CURRENT:
        try:
            scheme = CKNamingScheme.parse(scheme, "scheme")
        except ValueError as e:
            raise CKNameError(str(e)) from None
        if scheme is CKNamingScheme.CK_2025_11:
            return _name_2025_11(c)
    s, a = c.signature, c.algorithm
    p0, p1, p2, p3 = _signature_pieces(s)
    a0, a1, a2 = _alg_pieces(a, s.family)
    return f"{p0}{a0}{p1}{a1}{p2}{a2}{p3}"


# -------------------------------------------------------------------------------------------- parse
_T3 = r"\d+x\d+x\d+"
_FWD_TILE = (
    rf"b(?P<tile>\d+(?:x\d+){{5}})_r(?P<r0>{_T3})_r(?P<r1>{_T3})_w(?P<w0>{_T3})_w(?P<w1>{_T3})"
    r"(?:_o(?P<occ>-?\d+))?"
)
_PAD4 = r"(?P<pad>npad|p(?:s)?(?:sk)?(?:d)?(?:dv)?)"
_DTYPE = "(?P<dtype>" + "|".join(sorted((d.value for d in DType), key=len, reverse=True)) + ")"
_HEAD = rf"d(?P<hq>\d+)_{_DTYPE}_(?P<mode>batch|group)"
_MASK = r"(?P<mask>nmask|mask|mc|mg)"
_BIAS = r"(?P<bias>nbias|bias|alibi)"
_ARCH = r"(?P<arch>gfx950|gfx9|gfx115|gfx11|gfx125|gfx12)"
_QSCALE = "(?P<qscale>" + "|".join(sorted(_TOKEN_QSCALE, key=len, reverse=True)) + ")"
_FWD_PIPES = "(?P<pipe>qr_async_trload_v3|qr_async_trload|qr_async|qr_hpad|qr_tdm|qr|qs)"


def _nflag(tok: str) -> str:
    return rf"(?P<{tok}>n?{tok})"


_FWD_COMMON = rf"_(?P<vl>vr|vc)_{_PAD4}_{_nflag('logits')}_{_BIAS}_{_MASK}_{_nflag('lse')}"


def _rx(text: str) -> re.Pattern[str]:
    return re.compile("^" + text + r"\.cpp$")


# Families the 2025-11 scheme spells like the current one share one pattern.
_SHARED: dict[Family, re.Pattern[str]] = {
    Family.FWD_SPLITKV_COMBINE: _rx(
        rf"fmha_fwd_splitkv_combine_{_HEAD}_b(?P<tile>\d+)(?:_o(?P<occ>-?\d+))?_unused_(?P<pad>npad|p(?:s)?(?:dv)?)"
        rf"_{_nflag('lse')}_{_nflag('squant')}_{_ARCH}"
    ),
    Family.FWD_APPENDKV: _rx(
        rf"fmha_fwd_appendkv_d(?P<hq>\d+)_{_DTYPE}_b(?P<tile>\d+x\d+x\d+x\d+)(?:_o(?P<occ>-?\d+))?_(?P<vl>vr|vc)"
        r"(?:_(?P<pad>p(?:s)?(?:sk)?(?:d)?(?:dv)?))?(?:_(?P<rope>inter|half))?(?P<pagedkv>_pagedkv)?_" + _ARCH
    ),
    Family.BWD_DQ_DK_DV: _rx(
        rf"fmha_bwd_{_HEAD}_b(?P<tile>\d+(?:x\d+){{8}})_r(?P<r0>{_T3})_r(?P<r1>{_T3})_r(?P<r2>{_T3})"
        rf"_w(?P<w0>{_T3})_w(?P<w1>{_T3})_o(?P<occ>-?\d+)_maxq(?P<maxq>\d+)_(?P<pad>npad|p(?:d[18])?(?:dv[18])?)"
        rf"_{_BIAS}_{_nflag('dbias')}_{_MASK}"
        r"_(?P<dropout>ndropout|dropout_wg16_storerandval|dropout_wg16|dropout_wg32_storerandval|dropout_wg32)"
        rf"_{_nflag('deterministic')}_{_nflag('trload')}_{_ARCH}"
    ),
    Family.BWD_DOT_DO_O: _rx(
        rf"fmha_bwd_dot_do_o_d(?P<hq>\d+)_{_DTYPE}_b(?P<tile>\d+)_(?P<mode>batch|group)_o(?P<occ>-?\d+)"
        rf"_(?P<pad>npad|p(?:s)?(?:dv)?)_{_ARCH}"
    ),
}

_PATTERNS: dict[CKNamingScheme, dict[Family, re.Pattern[str]]] = {
    CKNamingScheme.CURRENT: {
        **_SHARED,
        Family.FWD: _rx(
            rf"fmha_fwd_{_HEAD}_{_FWD_TILE}_{_FWD_PIPES}{_FWD_COMMON}_{_nflag('dropout')}_{_nflag('skip')}"
            rf"_{_QSCALE}_{_nflag('trload')}_{_nflag('sink')}_{_ARCH}"
        ),
        Family.FWD_SPLITKV: _rx(
            rf"fmha_fwd_splitkv_{_HEAD}_{_FWD_TILE}_(?P<pipe>qr_nwarp_sshuffle|qr){_FWD_COMMON}_{_nflag('squant')}"
            rf"_{_nflag('pagedkv')}_{_nflag('sink')}_{_ARCH}"
        ),
        Family.FWD_PAGEDKV: _rx(
            rf"fmha_fwd_pagedkv_{_HEAD}_{_FWD_TILE}_(?P<pipe>qr_pagedkv){_FWD_COMMON}_{_nflag('skip')}"
            rf"_{_nflag('squant')}_{_nflag('pagedkv')}_{_nflag('sink')}_{_ARCH}"
        ),
        Family.BATCH_PREFILL: _rx(
            rf"fmha_batch_prefill_{_HEAD}_ps(?P<ps>\d+)_(?P<load>bload|gload)_{_FWD_TILE}_(?P<pipe>qr_async)"
            rf"{_FWD_COMMON}_{_nflag('dropout')}_{_QSCALE}_{_nflag('sink')}_(?P<layout>vectorized|linear)"
            r"_(?P<lookup>vllm|sglang)"
        ),
        Family.BWD_CONVERT_DQ: _rx(
            rf"fmha_bwd_convert_dq_d(?P<hq>\d+)_{_DTYPE}_b(?P<tile>\d+)_(?P<mode>batch|group)_o(?P<occ>-?\d+)"
            rf"_(?P<pad>npad|p(?:s)?(?:d)?)_{_nflag('deterministic')}_{_ARCH}"
        ),
    },
    CKNamingScheme.CK_2025_11: {
        **_SHARED,
        Family.FWD: _rx(
            rf"fmha_fwd_{_HEAD}_{_FWD_TILE}_{_FWD_PIPES}{_FWD_COMMON}_{_nflag('dropout')}_{_nflag('skip')}"
            rf"_{_nflag('squant')}_{_nflag('trload')}_{_ARCH}"
        ),
        Family.FWD_SPLITKV: _rx(
            rf"fmha_fwd_splitkv_{_HEAD}_{_FWD_TILE}_(?P<pipe>qr_nwarp_sshuffle|qr){_FWD_COMMON}_{_nflag('squant')}"
            rf"_{_nflag('pagedkv')}_{_ARCH}"
        ),
        Family.FWD_PAGEDKV: _rx(
            rf"fmha_fwd_pagedkv_{_HEAD}_{_FWD_TILE}_(?P<pipe>qr_pagedkv){_FWD_COMMON}_{_nflag('skip')}"
            rf"_{_nflag('squant')}_{_nflag('pagedkv')}_{_ARCH}"
        ),
        Family.BATCH_PREFILL: _rx(
            rf"fmha_batch_prefill_{_HEAD}_{_FWD_TILE}_(?P<pipe>qr_async){_FWD_COMMON}_{_nflag('dropout')}"
            rf"_{_nflag('squant')}"
        ),
        Family.BWD_CONVERT_DQ: _rx(
            rf"fmha_bwd_convert_dq_d(?P<hq>\d+)_{_DTYPE}_b(?P<tile>\d+x\d+)_(?P<mode>batch|group)_o(?P<occ>-?\d+)"
            rf"_(?P<pad>npad|p(?:s)?(?:d)?)_{_nflag('deterministic')}_{_ARCH}"
        ),
    },
}

# Longest prefixes first so that fmha_fwd_splitkv_combine is not taken for fmha_fwd_splitkv, etc.
_PREFIXES: tuple[tuple[str, Family], ...] = (
    ("fmha_fwd_splitkv_combine_", Family.FWD_SPLITKV_COMBINE),
    ("fmha_fwd_splitkv_", Family.FWD_SPLITKV),
    ("fmha_fwd_appendkv_", Family.FWD_APPENDKV),
    ("fmha_fwd_pagedkv_", Family.FWD_PAGEDKV),
    ("fmha_batch_prefill_", Family.BATCH_PREFILL),
    ("fmha_bwd_dot_do_o_", Family.BWD_DOT_DO_O),
    ("fmha_bwd_convert_dq_", Family.BWD_CONVERT_DQ),
    ("fmha_bwd_", Family.BWD_DQ_DK_DV),
    ("fmha_fwd_", Family.FWD),
)


def family_of_ck_name(name: str) -> Family:
    for prefix, fam in _PREFIXES:
        if name.startswith(prefix):
            return fam
    raise CKNameError(f"CK instance name {name!r}: unknown prefix; expected one of {[p for p, _ in _PREFIXES]}")


def _t3(text: str) -> tuple[int, int, int]:
    a, b, c = (int(v) for v in text.split("x"))
    return (a, b, c)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


_PAD_RES: dict[tuple[str, ...], re.Pattern[str]] = {}


def _pads(token: str | None, dims: tuple[str, ...]) -> dict[str, int]:
    """Decode ``p{...}``/``npad`` over the given dim tokens (in order) into pad_* fields (1 where present)."""
    out = {f"pad_{d}": 0 for d in dims}
    if not token or token == "npad":
        return out
    rx = _PAD_RES.get(dims)
    if rx is None:
        rx = _PAD_RES[dims] = re.compile("^p" + "".join(f"({d})?" for d in dims) + "$")
    m = rx.match(token)
    if not m or not any(m.groups()):
        raise CKNameError(f"pad token {token!r} does not decode over the dims {dims}")
    for d, hit in zip(dims, m.groups()):
        out[f"pad_{d}"] = 1 if hit else 0
    return out


def required_group(g: dict[str, str | None], key: str) -> str:
    """The text of the named group ``key`` of a name's match (``g``: its ``groupdict()``), a group that every
    pattern reaching this use has and always matches (by construction of :data:`_PATTERNS`); a pattern without it
    is a defect of this module, reported as such (:class:`CKNameError`)."""
    text = g.get(key)
    if text is None:
        raise CKNameError(f"naming pattern defect: group {key!r} is required here but did not match")
    return text


# the named groups of switch flags (``lse`` / ``nlse``, ...) -> the config field each one sets
_FLAG_GROUP_FIELDS = {
    "logits": "logits_soft_cap",
    "lse": "lse",
    "skip": "skip_min_seqlen_q",
    "trload": "trload",
    "sink": "sink",
    "squant": "fp8_static_quant",
    "pagedkv": "paged_kv",
    "dbias": "dbias",
    "deterministic": "deterministic",
}


def _fields(fam: Family, g: dict[str, str | None], scheme: CKNamingScheme) -> dict[str, Any]:
    """KernelConfig fields of a matched name (``g``: the pattern's named groups): the fields every family spells
    alike, then the family's own (:func:`_family_fields`)."""
    f: dict[str, Any] = {"family": fam, **IMPLIED_FIELDS[scheme].get(fam, {})}
    occ = g.get("occ")
    f["occupancy"] = int(occ) if occ else -1
    f["hdim_q"] = int(required_group(g, "hq"))
    f["dtype"] = g["dtype"]
    if g.get("mode"):
        f["mode"] = g["mode"]
    if g.get("arch"):
        f["arch_tag"] = g["arch"]
    if vl := g.get("vl"):
        f["vlayout"] = _TOKEN_VLAYOUT[vl]
    for flag, field_name in _FLAG_GROUP_FIELDS.items():
        tok = g.get(flag)
        if tok is not None:
            f[field_name] = tok == flag
    if bias := g.get("bias"):
        f["bias"] = _TOKEN_BIAS[bias]
    if mask := g.get("mask"):
        f["mask"] = _TOKEN_MASK[mask]
    if qscale := g.get("qscale"):
        f["qscale"] = _TOKEN_QSCALE[qscale]
    if g.get("r0"):  # fwd-style and bwd block tiles
        f["warps"] = tuple(_t3(r) for k in ("r0", "r1", "r2") if (r := g.get(k)))
        f["warp_tiles"] = (_t3(required_group(g, "w0")), _t3(required_group(g, "w1")))
    _family_fields(fam, g, f)
    return f


def _family_fields(fam: Family, g: dict[str, str | None], f: dict[str, Any]) -> None:
    """Add to ``f`` the fields the family's own name parts spell: tile, pipeline, hdim_v, pads and the family's
    flags."""
    tile = _ints(required_group(g, "tile"))
    f["tile"] = tile
    if fam in (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV, Family.BATCH_PREFILL):
        f.update(pipeline=g["pipe"], hdim_v=tile[3], **_pads(g["pad"], ("s", "sk", "d", "dv")))
        if fam in (Family.FWD, Family.BATCH_PREFILL):
            f["dropout"] = _TOKEN_FWD_DROPOUT[required_group(g, "dropout")]
            if "squant" in g:  # the 2025-11 scheme's fp8 static quant is today's qscale (module doc)
                f.pop("fp8_static_quant")
                f["qscale"] = _SQUANT_QSCALE[required_group(g, "squant")]
        if fam is Family.BATCH_PREFILL:
            f.update(paged_kv=True, arch_tag=ArchTag.NONE)
            if ps := g.get("ps"):
                f.update(
                    page_size=int(ps), kv_load=g["load"], kv_memory_layout=g["layout"], kv_lookup_table=g["lookup"]
                )
    elif fam is Family.FWD_SPLITKV_COMBINE:
        f.update(hdim_v=f["hdim_q"], pipeline=Pipeline.SPLITKV_COMBINE, **_pads(g["pad"], ("s", "dv")))
    elif fam is Family.FWD_APPENDKV:
        f.update(
            hdim_v=tile[3],
            mode=Mode.BATCH,
            pipeline=Pipeline.APPENDKV,
            paged_kv=bool(g["pagedkv"]),
            rope=_TOKEN_ROPE[g["rope"]] if g["rope"] else Rope.NONE,
            **_pads(g["pad"], ("s", "sk", "d", "dv")),
        )
    elif fam is Family.BWD_DQ_DK_DV:
        pm = re.fullmatch(r"npad|p(?:d([18]))?(?:dv([18]))?", g["pad"] or "")
        assert pm is not None
        # CK's bwd traits hard-code seqlen padding (kPadSeqLenQ = kPadSeqLenK = true): the name carries only the
        # head-dim pads
        f.update(
            hdim_v=tile[8],
            max_seq_len_q=int(required_group(g, "maxq")),
            pad_s=1,
            pad_sk=1,
            pad_d=int(pm.group(1) or 0),
            pad_dv=int(pm.group(2) or 0),
            pipeline=Pipeline.BWD_DQ_DK_DV,
            dropout=_TOKEN_BWD_DROPOUT[required_group(g, "dropout")],
        )
    elif fam is Family.BWD_DOT_DO_O:
        f.update(hdim_v=f["hdim_q"], pipeline=Pipeline.BWD_DOT_DO_O, **_pads(g["pad"], ("s", "dv")))
    else:  # BWD_CONVERT_DQ
        f.update(hdim_v=f["hdim_q"], pipeline=Pipeline.BWD_CONVERT_DQ, **_pads(g["pad"], ("s", "d")))


class ParsedCKName(NamedTuple):
    """A parsed instance name: the config, and every naming scheme that spells that config exactly so (newest
    first; families both schemes spell alike list both)."""

    config: KernelConfig
    schemes: tuple[CKNamingScheme, ...]

    @property
    def scheme(self) -> CKNamingScheme:
        """The newest scheme the name belongs to."""
        return self.schemes[0]


def parse_ck_name(name: str, scheme: CKNamingScheme | str | None = None) -> ParsedCKName:
    """Parse a CK instance file name (with or without ``.cpp``) in any known naming scheme (or only in
    ``scheme``); the result names the schemes it belongs to."""
    if not name.endswith(".cpp"):
        name = name + ".cpp"
    fam = family_of_ck_name(name)
    if scheme is None:
        schemes: tuple[CKNamingScheme, ...] = tuple(CKNamingScheme)
    else:
        try:
            schemes = (CKNamingScheme.parse(scheme, "scheme"),)
        except ValueError as e:
            raise CKNameError(str(e)) from None
    hits = [(sc, m) for sc in schemes if (m := _PATTERNS[sc][fam].match(name))]
    if not hits:
        which = " or ".join(sc.value for sc in schemes)
        raise CKNameError(
            f"CK instance name {name!r} does not follow the {fam.value} naming scheme ({which}; see ckfmha.naming)"
        )
    sc0, m0 = hits[0]
    try:
        cfg = KernelConfig.make(**_fields(fam, m0.groupdict(), sc0))
    except ValueError as e:
        raise CKNameError(f"CK instance name {name!r}: {e}") from None
    return ParsedCKName(cfg, tuple(sc for sc, _ in hits))


def parse_ck_instance_name(name: str, scheme: CKNamingScheme | str | None = None) -> KernelConfig:
    """Parse a CK instance file name (with or without ``.cpp``) into a KernelConfig (any known naming scheme, or
    only ``scheme``)."""
    return parse_ck_name(name, scheme).config
