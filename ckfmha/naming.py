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
"""

from __future__ import annotations

import re
from typing import Any

from ckfmha.kernel import (
    ArchTag,
    Bias,
    Dropout,
    DType,
    Family,
    KernelConfig,
    MaskImpl,
    Mode,
    Pipeline,
    QScale,
    Rope,
    VLayout,
)


class CKNameError(ValueError):
    pass


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
        tile = (f"b{_xs(a.tile)}_r{_xs(a.warps[0])}_r{_xs(a.warps[1])}_w{_xs(a.warp_tiles[0])}"
                f"_w{_xs(a.warp_tiles[1])}")
        if a.occupancy != -1:
            tile += f"_o{a.occupancy}"
    pad = _pad_token((("s", a.pad_s), ("sk", a.pad_sk), ("d", a.pad_d), ("dv", a.pad_dv)))
    if len(_ALG_TOKENS) >= _ALG_TOKENS_MAX:
        _ALG_TOKENS.clear()
    _ALG_TOKENS[id(a)] = (a, tile, pad)
    return tile, pad


def _fwd_tile(c: KernelConfig) -> str:
    return _alg_tokens(c.algorithm)[0]


def _arch_suffix(c: KernelConfig) -> str:
    return "" if c.signature.arch_tag is ArchTag.NONE else "_" + c.signature.arch_tag.value


def _fwd_pad(c: KernelConfig) -> str:
    return _alg_tokens(c.algorithm)[1]


# ------------------------------------------------------------------------------------------- render
# Signature parts of the three big families, cached by identity like the algorithm tokens above.
_SIG_PARTS: dict[int, tuple[object, tuple[str, ...]]] = {}


# Pieces shared by many signatures, keyed by the ids of their (singleton) enum members and plain values:
# cheap to hash, unlike enum members, whose __hash__ runs Python code.
_HEADS: dict[tuple, str] = {}
_FEATS: dict[tuple, tuple[str, ...]] = {}


def _sig_parts(s) -> tuple[str, ...]:
    """The four signature pieces of a name (P0..P3, see _FAST_FAMILIES), cached per signature object; on a miss
    they are assembled from a head piece (family, hdim, dtype, mode, page size) and the feature pieces (every
    other named field), both shared by many signatures."""
    hit = _SIG_PARTS.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1]
    f = s.family
    hkey = (id(f), s.hdim_q, id(s.dtype), id(s.mode), s.page_size)
    p0 = _HEADS.get(hkey)
    if p0 is None:
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
    fkey = (id(f), id(s.arch_tag), id(s.vlayout), s.logits_soft_cap, id(s.bias), id(s.mask), s.lse, id(s.dropout),
            s.skip_min_seqlen_q, id(s.qscale), s.sink, s.dbias, s.deterministic, s.paged_kv, s.fp8_static_quant,
            id(s.kv_memory_layout), id(s.kv_lookup_table))
    rest = _FEATS.get(fkey)
    if rest is None:
        rest = _FEATS[fkey] = _feature_pieces(s)
    parts = (p0,) + rest
    if len(_SIG_PARTS) >= _ALG_TOKENS_MAX:
        _SIG_PARTS.clear()
    _SIG_PARTS[id(s)] = (s, parts)
    return parts


def _feature_pieces(s) -> tuple[str, str, str]:
    """P1..P3 of a name: everything of the signature but the head (family, hdim, dtype, mode, page size)."""
    f = s.family
    vl = _VLAYOUT_TOKEN[s.vlayout]
    arch = "" if s.arch_tag is ArchTag.NONE else "_" + s.arch_tag
    common = (("logits_" if s.logits_soft_cap else "nlogits_") + _BIAS_TOKEN[s.bias] + "_" + _MASK_TOKEN[s.mask]
              + ("_lse_" if s.lse else "_nlse_") + _FWD_DROPOUT_TOKEN.get(s.dropout, "?") + "_")
    if f is Family.FWD:
        feats = common + ("skip_" if s.skip_min_seqlen_q else "nskip_") + _QSCALE_TOKEN[s.qscale]
        return "_" + vl + "_", "_" + feats + "_", ("_sink" if s.sink else "_nsink") + arch + ".cpp"
    if f is Family.FWD_SPLITKV:
        feats = (("logits_" if s.logits_soft_cap else "nlogits_") + _BIAS_TOKEN[s.bias] + "_" + _MASK_TOKEN[s.mask]
                 + ("_lse" if s.lse else "_nlse") + ("_squant" if s.fp8_static_quant else "_nsquant")
                 + ("_pagedkv" if s.paged_kv else "_npagedkv") + ("_sink" if s.sink else "_nsink"))
        return "_" + vl + "_", "_" + feats + arch + ".cpp", ""
    if f is Family.BATCH_PREFILL:
        feats = (common + _QSCALE_TOKEN[s.qscale] + ("_sink_" if s.sink else "_nsink_") + s.kv_memory_layout + "_"
                 + s.kv_lookup_table)
        return "_" + vl + "_", "_" + feats + ".cpp", ""
    # BWD_DQ_DK_DV
    return ("_" + _BIAS_TOKEN[s.bias] + ("_dbias_" if s.dbias else "_ndbias_") + _MASK_TOKEN[s.mask] + "_"
            + _BWD_DROPOUT_TOKEN[s.dropout] + ("_deterministic_" if s.deterministic else "_ndeterministic_"),
            arch + ".cpp", "")


_BWD_ALG: dict[int, tuple[object, str]] = {}


def _bwd_alg(a) -> str:
    hit = _BWD_ALG.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1]
    w, wt = a.warps, a.warp_tiles
    pad = "".join(f"{tok}{v}" for tok, v in (("d", a.pad_d), ("dv", a.pad_dv)) if v)
    pad = "p" + pad if pad else "npad"
    txt = (f"{_xs(a.tile)}_r{_xs(w[0])}_r{_xs(w[1])}_r{_xs(w[2])}_w{_xs(wt[0])}_w{_xs(wt[1])}_o{a.occupancy}"
           f"_maxq{a.max_seq_len_q}_{pad}")
    if len(_BWD_ALG) >= _ALG_TOKENS_MAX:
        _BWD_ALG.clear()
    _BWD_ALG[id(a)] = (a, txt)
    return txt


# The three big families render as P0 + A0 + P1 + A1 + P2 + A2 + P3: four signature pieces (_sig_parts, shared by
# all configs of a signature) interleaved with three algorithm pieces (_alg_pieces, shared by all configs of an
# algorithm object), so a name costs two cache lookups and six concatenations.
_FAST_FAMILIES = frozenset((Family.FWD, Family.FWD_SPLITKV, Family.BATCH_PREFILL, Family.BWD_DQ_DK_DV))
_ALG_PIECES: dict[int, tuple[object, tuple[str, str, str]]] = {}


def _alg_pieces(a, family: Family) -> tuple[str, str, str]:
    hit = _ALG_PIECES.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1]
    tr = "trload" if a.trload else "ntrload"
    if family is Family.BWD_DQ_DK_DV:
        pieces = (_bwd_alg(a), tr, "")
    else:
        tile, pad = _alg_tokens(a)
        if family is Family.FWD:
            pieces = (tile + "_" + a.pipeline, pad, tr)
        elif family is Family.FWD_SPLITKV:
            pieces = (tile + "_" + a.pipeline, pad, "")
        else:  # BATCH_PREFILL
            pieces = (a.kv_load + "_" + tile + "_" + a.pipeline, pad, "")
    if len(_ALG_PIECES) >= _ALG_TOKENS_MAX:
        _ALG_PIECES.clear()
    _ALG_PIECES[id(a)] = (a, pieces)
    return pieces


def render_ck_names(configs) -> list[str]:
    """``[ck_instance_name(c) for c in configs]``, faster for long lists (the enumeration's hot path)."""
    out: list[str] = []
    append = out.append
    sig_get, alg_get = _SIG_PARTS.get, _ALG_PIECES.get
    for c in configs:
        s, a = c.signature, c.algorithm
        f = s.family
        if f not in _FAST_FAMILIES:
            append(ck_instance_name(c))
            continue
        hit = sig_get(id(s))
        sp = hit[1] if hit is not None and hit[0] is s else _sig_parts(s)
        hit = alg_get(id(a))
        ap = hit[1] if hit is not None and hit[0] is a else _alg_pieces(a, f)
        append(sp[0] + ap[0] + sp[1] + ap[1] + sp[2] + ap[2] + sp[3])
    return out


def ck_instance_name(c: KernelConfig) -> str:
    """CK's instance file name (with ``.cpp``) for a config."""
    s, a, f = c.signature, c.algorithm, c.signature.family
    if f in _FAST_FAMILIES:
        sp, ap = _sig_parts(s), _alg_pieces(a, f)
        return sp[0] + ap[0] + sp[1] + ap[1] + sp[2] + ap[2] + sp[3]
    head = f"d{s.hdim_q}_{s.dtype.value}"
    if f is Family.FWD_PAGEDKV:
        body = (
            f"fmha_fwd_pagedkv_{head}_{s.mode.value}_{_fwd_tile(c)}_{a.pipeline.value}_{_VLAYOUT_TOKEN[s.vlayout]}"
            f"_{_fwd_pad(c)}_{_flag(s.logits_soft_cap, 'logits')}_{_BIAS_TOKEN[s.bias]}_{_MASK_TOKEN[s.mask]}"
            f"_{_flag(s.lse, 'lse')}_{_flag(s.skip_min_seqlen_q, 'skip')}_{_flag(s.fp8_static_quant, 'squant')}"
            f"_{_flag(s.paged_kv, 'pagedkv')}_{_flag(s.sink, 'sink')}"
        )
    elif f is Family.FWD_SPLITKV_COMBINE:
        occ = f"_o{a.occupancy}" if a.occupancy != -1 else ""
        pad = _pad_token((("s", a.pad_s), ("dv", a.pad_dv)))
        body = (
            f"fmha_fwd_splitkv_combine_d{s.hdim_v}_{s.dtype.value}_{s.mode.value}_b{a.tile[0]}{occ}_unused_{pad}"
            f"_{_flag(s.lse, 'lse')}_{_flag(s.fp8_static_quant, 'squant')}"
        )
    elif f is Family.FWD_APPENDKV:
        occ = f"_o{a.occupancy}" if a.occupancy != -1 else ""
        pad = _fwd_pad(c)
        pad = "" if pad == "npad" else "_" + pad
        rope = "" if s.rope is Rope.NONE else "_" + _ROPE_TOKEN[s.rope]
        paged = "_pagedkv" if s.paged_kv else ""
        body = f"fmha_fwd_appendkv_{head}_b{_xs(a.tile)}{occ}_{_VLAYOUT_TOKEN[s.vlayout]}{pad}{rope}{paged}"
    elif f is Family.BWD_DOT_DO_O:
        pad = _pad_token((("s", a.pad_s), ("dv", a.pad_dv)))
        body = f"fmha_bwd_dot_do_o_d{s.hdim_v}_{s.dtype.value}_b{a.tile[0]}_{s.mode.value}_o{a.occupancy}_{pad}"
    elif f is Family.BWD_CONVERT_DQ:
        pad = _pad_token((("s", a.pad_s), ("d", a.pad_d)))
        body = (
            f"fmha_bwd_convert_dq_{head}_b{a.tile[0]}_{s.mode.value}_o{a.occupancy}_{pad}"
            f"_{_flag(s.deterministic, 'deterministic')}"
        )
    else:  # pragma: no cover - every family is handled above
        raise CKNameError(f"family {f.value!r} has no CK instance name")
    return body + _arch_suffix(c) + ".cpp"


# -------------------------------------------------------------------------------------------- parse
_D = r"(\d+)"
_T3 = r"(\d+x\d+x\d+)"
_FWD_TILE = rf"b(\d+(?:x\d+){{5}})_r{_T3}_r{_T3}_w{_T3}_w{_T3}(?:_o(-?\d+))?"
_PAD4 = r"(npad|p(?:s)?(?:sk)?(?:d)?(?:dv)?)"
_DTYPE = "(" + "|".join(sorted((d.value for d in DType), key=len, reverse=True)) + ")"
_MODE = r"(batch|group)"
_MASK = r"(nmask|mask|mc|mg)"
_BIAS = r"(nbias|bias|alibi)"
_ARCH = r"(gfx950|gfx9|gfx115|gfx11|gfx125|gfx12)"


def _nflag(tok: str) -> str:
    return rf"(n?{tok})"


_PATTERNS: dict[Family, re.Pattern[str]] = {
    Family.FWD: re.compile(
        rf"^fmha_fwd_d{_D}_{_DTYPE}_{_MODE}_{_FWD_TILE}_(qr_async_trload_v3|qr_async_trload|qr_async|qr_hpad|qr_tdm|qr|qs)"
        rf"_(vr|vc)_{_PAD4}_{_nflag('logits')}_{_BIAS}_{_MASK}_{_nflag('lse')}_{_nflag('dropout')}_{_nflag('skip')}"
        rf"_(nqscale|pertensor|blockscale|kv_blockscale|mx)_{_nflag('trload')}_{_nflag('sink')}_{_ARCH}\.cpp$"
    ),
    Family.FWD_SPLITKV: re.compile(
        rf"^fmha_fwd_splitkv_d{_D}_{_DTYPE}_{_MODE}_{_FWD_TILE}_(qr_nwarp_sshuffle|qr)_(vr|vc)_{_PAD4}"
        rf"_{_nflag('logits')}_{_BIAS}_{_MASK}_{_nflag('lse')}_{_nflag('squant')}_{_nflag('pagedkv')}_{_nflag('sink')}_{_ARCH}\.cpp$"
    ),
    Family.FWD_PAGEDKV: re.compile(
        rf"^fmha_fwd_pagedkv_d{_D}_{_DTYPE}_{_MODE}_{_FWD_TILE}_(qr_pagedkv)_(vr|vc)_{_PAD4}_{_nflag('logits')}_{_BIAS}"
        rf"_{_MASK}_{_nflag('lse')}_{_nflag('skip')}_{_nflag('squant')}_{_nflag('pagedkv')}_{_nflag('sink')}_{_ARCH}\.cpp$"
    ),
    Family.FWD_SPLITKV_COMBINE: re.compile(
        rf"^fmha_fwd_splitkv_combine_d{_D}_{_DTYPE}_{_MODE}_b(\d+)(?:_o(-?\d+))?_unused_(npad|p(?:s)?(?:dv)?)"
        rf"_{_nflag('lse')}_{_nflag('squant')}_{_ARCH}\.cpp$"
    ),
    Family.FWD_APPENDKV: re.compile(
        rf"^fmha_fwd_appendkv_d{_D}_{_DTYPE}_b(\d+x\d+x\d+x\d+)(?:_o(-?\d+))?_(vr|vc)(?:_(p(?:s)?(?:sk)?(?:d)?(?:dv)?))?"
        rf"(?:_(inter|half))?(_pagedkv)?_{_ARCH}\.cpp$"
    ),
    Family.BATCH_PREFILL: re.compile(
        rf"^fmha_batch_prefill_d{_D}_{_DTYPE}_{_MODE}_ps(\d+)_(bload|gload)_{_FWD_TILE}_(qr_async)_(vr|vc)_{_PAD4}"
        rf"_{_nflag('logits')}_{_BIAS}_{_MASK}_{_nflag('lse')}_{_nflag('dropout')}"
        rf"_(nqscale|pertensor|blockscale|kv_blockscale|mx)_{_nflag('sink')}_(vectorized|linear)_(vllm|sglang)\.cpp$"
    ),
    Family.BWD_DQ_DK_DV: re.compile(
        rf"^fmha_bwd_d{_D}_{_DTYPE}_{_MODE}_b(\d+(?:x\d+){{8}})_r{_T3}_r{_T3}_r{_T3}_w{_T3}_w{_T3}_o(-?\d+)_maxq(\d+)"
        rf"_(npad|p(?:d[18])?(?:dv[18])?)_{_BIAS}_{_nflag('dbias')}_{_MASK}"
        rf"_(ndropout|dropout_wg16_storerandval|dropout_wg16|dropout_wg32_storerandval|dropout_wg32)"
        rf"_{_nflag('deterministic')}_{_nflag('trload')}_{_ARCH}\.cpp$"
    ),
    Family.BWD_DOT_DO_O: re.compile(
        rf"^fmha_bwd_dot_do_o_d{_D}_{_DTYPE}_b(\d+)_{_MODE}_o(-?\d+)_(npad|p(?:s)?(?:dv)?)_{_ARCH}\.cpp$"
    ),
    Family.BWD_CONVERT_DQ: re.compile(
        rf"^fmha_bwd_convert_dq_d{_D}_{_DTYPE}_b(\d+)_{_MODE}_o(-?\d+)_(npad|p(?:s)?(?:d)?)_{_nflag('deterministic')}_{_ARCH}\.cpp$"
    ),
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


def parse_ck_instance_name(name: str) -> KernelConfig:
    """Parse a CK instance file name (with or without ``.cpp``) into a KernelConfig."""
    if not name.endswith(".cpp"):
        name = name + ".cpp"
    fam = family_of_ck_name(name)
    m = _PATTERNS[fam].match(name)
    if not m:
        raise CKNameError(f"CK instance name {name!r} does not follow the {fam.value} naming scheme")
    g = m.groups()
    f: dict[str, Any] = {"family": fam}
    if fam in (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV):
        hq, dt, mode, tile, r0, r1, w0, w1, occ, pipe, vl, pad = g[:12]
        tile_t = tuple(int(v) for v in tile.split("x"))
        f.update(hdim_q=int(hq), dtype=dt, mode=mode, tile=tile_t, warps=(_t3(r0), _t3(r1)),
                 warp_tiles=(_t3(w0), _t3(w1)), occupancy=int(occ) if occ else -1, pipeline=pipe,
                 vlayout=_TOKEN_VLAYOUT[vl], hdim_v=tile_t[3], **_pads(pad, ("s", "sk", "d", "dv")))
        rest = g[12:]
        f["logits_soft_cap"] = rest[0] == "logits"
        f["bias"] = _TOKEN_BIAS[rest[1]]
        f["mask"] = _TOKEN_MASK[rest[2]]
        f["lse"] = rest[3] == "lse"
        if fam is Family.FWD:
            f["dropout"] = _TOKEN_FWD_DROPOUT[rest[4]]
            f["skip_min_seqlen_q"] = rest[5] == "skip"
            f["qscale"] = _TOKEN_QSCALE[rest[6]]
            f["trload"] = rest[7] == "trload"
            f["sink"] = rest[8] == "sink"
            f["arch_tag"] = rest[9]
        elif fam is Family.FWD_SPLITKV:
            f["fp8_static_quant"] = rest[4] == "squant"
            f["paged_kv"] = rest[5] == "pagedkv"
            f["sink"] = rest[6] == "sink"
            f["arch_tag"] = rest[7]
        else:
            f["skip_min_seqlen_q"] = rest[4] == "skip"
            f["fp8_static_quant"] = rest[5] == "squant"
            f["paged_kv"] = rest[6] == "pagedkv"
            f["sink"] = rest[7] == "sink"
            f["arch_tag"] = rest[8]
    elif fam is Family.FWD_SPLITKV_COMBINE:
        hv, dt, mode, bn1, occ, pad, lse, squant, arch = g
        f.update(hdim_q=int(hv), hdim_v=int(hv), dtype=dt, mode=mode, tile=(int(bn1),),
                 occupancy=int(occ) if occ else -1, pipeline=Pipeline.SPLITKV_COMBINE, lse=lse == "lse",
                 fp8_static_quant=squant == "squant", arch_tag=arch, **_pads(pad, ("s", "dv")))
    elif fam is Family.FWD_APPENDKV:
        hq, dt, tile, occ, vl, pad, rope, paged, arch = g
        tile_t = tuple(int(v) for v in tile.split("x"))
        f.update(hdim_q=int(hq), hdim_v=tile_t[3], dtype=dt, mode=Mode.BATCH, tile=tile_t,
                 occupancy=int(occ) if occ else -1, pipeline=Pipeline.APPENDKV, vlayout=_TOKEN_VLAYOUT[vl],
                 rope=_TOKEN_ROPE[rope] if rope else Rope.NONE, paged_kv=bool(paged), arch_tag=arch,
                 **_pads(pad, ("s", "sk", "d", "dv")))
    elif fam is Family.BATCH_PREFILL:
        hq, dt, mode, ps, load, tile, r0, r1, w0, w1, occ, pipe, vl, pad = g[:14]
        tile_t = tuple(int(v) for v in tile.split("x"))
        rest = g[14:]
        f.update(hdim_q=int(hq), hdim_v=tile_t[3], dtype=dt, mode=mode, page_size=int(ps), kv_load=load,
                 tile=tile_t, warps=(_t3(r0), _t3(r1)), warp_tiles=(_t3(w0), _t3(w1)),
                 occupancy=int(occ) if occ else -1, pipeline=pipe, vlayout=_TOKEN_VLAYOUT[vl],
                 logits_soft_cap=rest[0] == "logits", bias=_TOKEN_BIAS[rest[1]], mask=_TOKEN_MASK[rest[2]],
                 lse=rest[3] == "lse", dropout=_TOKEN_FWD_DROPOUT[rest[4]], qscale=_TOKEN_QSCALE[rest[5]],
                 sink=rest[6] == "sink", kv_memory_layout=rest[7], kv_lookup_table=rest[8],
                 paged_kv=True, arch_tag=ArchTag.NONE, **_pads(pad, ("s", "sk", "d", "dv")))
    elif fam is Family.BWD_DQ_DK_DV:
        hq, dt, mode, tile, r0, r1, r2, w0, w1, occ, maxq, pad, bias, dbias, mask, drop, det, trl, arch = g
        tile_t = tuple(int(v) for v in tile.split("x"))
        pm = re.fullmatch(r"npad|p(?:d([18]))?(?:dv([18]))?", pad)
        assert pm is not None
        f.update(hdim_q=int(hq), hdim_v=tile_t[8], dtype=dt, mode=mode, tile=tile_t,
                 warps=(_t3(r0), _t3(r1), _t3(r2)), warp_tiles=(_t3(w0), _t3(w1)), occupancy=int(occ),
                 # CK's bwd traits hard-code seqlen padding (kPadSeqLenQ = kPadSeqLenK = true): the name
                 # carries only the head-dim pads
                 max_seq_len_q=int(maxq), pad_s=1, pad_sk=1, pad_d=int(pm.group(1) or 0), pad_dv=int(pm.group(2) or 0),
                 pipeline=Pipeline.BWD_DQ_DK_DV, bias=_TOKEN_BIAS[bias], dbias=dbias == "dbias",
                 mask=_TOKEN_MASK[mask], dropout=_TOKEN_BWD_DROPOUT[drop], deterministic=det == "deterministic",
                 trload=trl == "trload", arch_tag=arch)
    elif fam is Family.BWD_DOT_DO_O:
        hv, dt, bm0, mode, occ, pad, arch = g
        f.update(hdim_q=int(hv), hdim_v=int(hv), dtype=dt, mode=mode, tile=(int(bm0),), occupancy=int(occ),
                 pipeline=Pipeline.BWD_DOT_DO_O, arch_tag=arch, **_pads(pad, ("s", "dv")))
    else:
        hq, dt, bm0, mode, occ, pad, det, arch = g
        f.update(hdim_q=int(hq), hdim_v=int(hq), dtype=dt, mode=mode, tile=(int(bm0),), occupancy=int(occ),
                 pipeline=Pipeline.BWD_CONVERT_DQ, deterministic=det == "deterministic", arch_tag=arch,
                 **_pads(pad, ("s", "d")))
    try:
        cfg = KernelConfig.make(**f)
    except ValueError as e:
        raise CKNameError(f"CK instance name {name!r}: {e}") from None
    return cfg
