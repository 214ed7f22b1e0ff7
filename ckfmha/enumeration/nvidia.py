"""Enumerator for NVIDIA arch specs (vendor: nvidia), e.g. ``sm90``: the Triton backend's kernel space.

Section schema (one per api)::

    families: [fwd]                     # families the section emits (fwd_splitkv also emits its combine)
    dtypes: [fp16, bf16, ...]
    hdims: [[hdim_q, hdim_v], ...]
    modes: [batch, group]
    masks: [none, causal, generic]      # kernel mask implementations
    biases: [none, elementwise, alibi]
    lse / dropout / logits_soft_cap / sink / skip_min_seqlen_q / paged_kv: [false, true]   # axes (absent = [false])
    dbias / deterministic: [false, true]       # backward axes (absent = [false])
    rope: [none, interleaved, half_rotated]    # fwd_appendkv axis (absent = [none])
    vlayouts: [row, col]                       # V layout axis (absent = [row]); col = CK's column-major V
                                               #   (-vlayout=c), which a problem gives for the fwd family only
    kv_memory_layout: [linear, vectorized]     # batch_prefill axes (absent = [none]): CK's KV pool layouts,
    kv_lookup_table: [vllm, sglang]            #   page-table formats
    page_sizes: [1, 16, 128]                   #   and page sizes (absent = [0]), as the gfx942 batch_prefill section
    qscale: {dtype: [pertensor, blockscale]}   # dtypes not listed: [none]
    pads: [[pad_s, pad_sk, pad_d, pad_dv], ...]
    exclude: ["<filter expression>", ...]      # configs matching any rule are not emitted
    tiles: {hdim_q: [[bm0, bn0, warps, stages], ...]}
    tiles_fp32: {...}                   # optional: tiles for fp32 (else `tiles`)
    combine_tile: 32                    # fwd_splitkv only: hdim_v tile of the combine kernels
    one_d_tile: 64                      # bwd only: bm0 of the 1-D kernels (bwd_dot_do_o, bwd_convert_dq)

Configs carry pipeline ``triton``, ArchTag ``sm90`` (the arch name), warps ``((warps,1,1), (warps,1,1))``
and ``num_stages``; the warp tiles are empty (Triton picks the MMA shape).

The ``bwd`` section mirrors CK's (ckfmha/enumeration/bwd.py) as far as the dispatcher reads it: ``bwd_dq_dk_dv``
kernels from the feature product (dropout on = CK's ``wg16`` variant, the one dropout the backward rules accept
besides wg32 and the store-randval forms; tile (bm0 = query block, bn0 = key block)); for every (dtype, hdim pair,
mode) one ``bwd_dot_do_o`` kernel of head dim ``hdim_v`` (pads s and dv) and one ``bwd_convert_dq`` kernel of head
dim ``hdim_q`` per ``deterministic`` value (pads s and d), each with tile ``(one_d_tile,)``, as CK pairs its 1-D
kernels with the dq_dk_dv traits.

Receipts: receipt 0 (CK's default build) keeps the whole space — it is this arch's default; any other receipt
applies its per-api rules (data/receipt_rules/<api>.yaml) as a filter, e.g. ``--profile pytorch``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ckfmha.filters import FilterError, compile_filter
from ckfmha.kernel import (
    ArchTag,
    Bias,
    Dropout,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    KVLookupTable,
    KVMemoryLayout,
    MaskImpl,
    Mode,
    Pipeline,
    QScale,
    Rope,
    VLayout,
)

_KEYS = {
    "families",
    "dtypes",
    "hdims",
    "modes",
    "masks",
    "biases",
    "lse",
    "dropout",
    "logits_soft_cap",
    "sink",
    "skip_min_seqlen_q",
    "paged_kv",
    "qscale",
    "pads",
    "exclude",
    "tiles",
    "tiles_fp32",
    "combine_tile",
    "dbias",
    "deterministic",
    "one_d_tile",
    "rope",
    "kv_memory_layout",
    "kv_lookup_table",
    "page_sizes",
    "vlayouts",
}
_BWD_ONE_D = (Family.BWD_DOT_DO_O, Family.BWD_CONVERT_DQ)
# CK's backward kernels name their dropout variant; wg16 is the one an sm90 kernel with dropout carries
_DROPOUT_ON = {Family.BWD_DQ_DK_DV: Dropout.WG16}


class NvidiaSpecError(ValueError):
    pass


def _list(sec: dict, key: str, ctx, default=None) -> list:
    v = sec.get(key, default)
    if not isinstance(v, list) or not v:
        raise NvidiaSpecError(f"{ctx.where(key)}: expected a non-empty list, found {v!r}")
    return v


def _enum_list(sec, key, cls, ctx, default=None):
    out = []
    for i, v in enumerate(_list(sec, key, ctx, default)):
        try:
            out.append(cls.parse(v, key))
        except ValueError as e:
            raise NvidiaSpecError(f"{ctx.where(f'{key}[{i}]')}: {e}") from None
    return out


def _bools(sec, key, ctx) -> list[bool]:
    vals = _list(sec, key, ctx, [False])
    for i, v in enumerate(vals):
        if not isinstance(v, bool):
            raise NvidiaSpecError(f"{ctx.where(f'{key}[{i}]')}: expected true or false, found {v!r}")
    return vals


def _tiles(sec: dict, key: str, ctx) -> dict[int, list[tuple[int, int, int, int]]]:
    raw = sec.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise NvidiaSpecError(f"{ctx.where(key)}: expected a mapping hdim -> list of [bm0, bn0, warps, stages]")
    out = {}
    for hd, lst in raw.items():
        if not isinstance(hd, int) or not isinstance(lst, list):
            raise NvidiaSpecError(f"{ctx.where(f'{key}.{hd}')}: expected an int head dim and a list")
        for i, t in enumerate(lst):
            if not (isinstance(t, list) and len(t) == 4 and all(isinstance(x, int) and x > 0 for x in t)):
                raise NvidiaSpecError(
                    f"{ctx.where(f'{key}.{hd}[{i}]')}: expected [bm0, bn0, warps, stages], found {t!r}"
                )
        out[hd] = [tuple(t) for t in lst]
    return out


def _excludes(sec: dict, ctx) -> list[Callable[[KernelConfig], bool]]:
    """The compiled ``exclude`` rules (a config matching any is not emitted)."""
    excludes = []
    for i, rule in enumerate(sec.get("exclude", []) or []):
        try:
            excludes.append(compile_filter(rule).fast)  # type: ignore[attr-defined]
        except FilterError as e:
            raise NvidiaSpecError(f"{ctx.where(f'exclude[{i}]')}: {e}") from None
    return excludes


def _qscales(qscale: dict, dt: DType) -> list[QScale]:
    """The qscale modes of a dtype (``[none]`` for a dtype the section's ``qscale`` does not list)."""
    return [QScale.parse(q, "qscale") for q in qscale.get(dt.value, ["none"])]


def _triton_algorithms(launch: list[tuple[int, int, int, int]], pads: list) -> list[KernelAlgorithm]:
    """One algorithm per (launch tile [bm0, bn0, warps, stages], pads), tiles outermost."""
    return [
        KernelAlgorithm(
            Pipeline.TRITON,
            (bm0, bn0),
            ((w, 1, 1), (w, 1, 1)),
            (),
            -1,
            pad_s=pad[0],
            pad_sk=pad[1],
            pad_d=pad[2],
            pad_dv=pad[3],
            num_stages=st,
        )
        for (bm0, bn0, w, st) in launch
        for pad in pads
    ]


def _combine_configs(
    sec: dict, dtypes: list, hdims: list, modes: list, qscale: dict, arch_tag: ArchTag, keep
) -> list[KernelConfig]:
    """The fwd_splitkv_combine kernels: per dtype, hdim_v, mode, lse and qscale, with the ``combine_tile``."""
    out: list[KernelConfig] = []
    bn1 = sec.get("combine_tile", 32)
    for dt, (_hq, hv), mode, lse in itertools.product(dtypes, hdims, modes, [False, True]):
        for q in _qscales(qscale, dt):
            sig = KernelSignature(
                Family.FWD_SPLITKV_COMBINE,
                dt,
                mode,
                hv,
                hv,
                arch_tag,
                lse=lse,
                fp8_static_quant=q is QScale.PERTENSOR,
            )
            c = KernelConfig(sig, KernelAlgorithm(Pipeline.SPLITKV_COMBINE, (bn1,), (), (), -1, 1, 0, 0, 1))
            if keep(c):
                out.append(c)
    return out


def enumerate_pairs(ctx) -> list[tuple[KernelSignature, KernelAlgorithm]]:
    """The (signature, algorithm) pairs of :func:`enumerate_api`'s configs (this enumerator tests each config with
    its exclude rules, so it builds the configs first)."""
    return [(c.signature, c.algorithm) for c in enumerate_api(ctx)]


def enumerate_api(ctx) -> list[KernelConfig]:
    """The section's configs: per main family, dtype, hdim pair and mode, every feature combination x algorithm
    that no ``exclude`` rule matches and the receipt keeps; then the combine kernels (see the module doc)."""
    sec: Any = ctx.section
    if not isinstance(sec, dict):
        raise NvidiaSpecError(f"{ctx.where('')}: expected a mapping")
    unknown = set(sec) - _KEYS
    if unknown:
        raise NvidiaSpecError(f"{ctx.where('')}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    arch_tag = ArchTag.parse(ctx.arch, "arch")
    families = _enum_list(sec, "families", Family, ctx)
    dtypes = _enum_list(sec, "dtypes", DType, ctx)
    modes = _enum_list(sec, "modes", Mode, ctx)
    masks = _enum_list(sec, "masks", MaskImpl, ctx)
    biases = _enum_list(sec, "biases", Bias, ctx)
    lses, drops, caps, sinks = (_bools(sec, k, ctx) for k in ("lse", "dropout", "logits_soft_cap", "sink"))
    pageds, skips, dbiases, dets = (
        _bools(sec, k, ctx) for k in ("paged_kv", "skip_min_seqlen_q", "dbias", "deterministic")
    )
    hdims = _list(sec, "hdims", ctx)
    pads = _list(sec, "pads", ctx)
    qscale = sec.get("qscale", {}) or {}
    tiles, tiles32 = _tiles(sec, "tiles", ctx), _tiles(sec, "tiles_fp32", ctx)
    excludes = _excludes(sec, ctx)
    keep = (lambda c: True) if ctx.receipt == 0 else ctx.keep
    main = [f for f in families if f is not Family.FWD_SPLITKV_COMBINE and f not in _BWD_ONE_D]
    out: list[KernelConfig] = []
    for fam in main:
        for dt, (hq, hv), mode in itertools.product(dtypes, hdims, modes):
            table = tiles32 if dt is DType.FP32 and tiles32 else tiles
            qs = _qscales(qscale, dt)
            algs = _triton_algorithms(table.get(hq, []), pads)
            for mask, bias, lse, drop, cap, sink, paged, skip, q, dbias, det, kv in itertools.product(
                masks, biases, lses, drops, caps, sinks, pageds, skips, qs, dbiases, dets, _kv_axes(sec, ctx)
            ):
                sig = KernelSignature(
                    fam,
                    dt,
                    mode,
                    hq,
                    hv,
                    arch_tag,
                    mask=mask,
                    bias=bias,
                    lse=lse,
                    dropout=_DROPOUT_ON.get(fam, Dropout.ENABLED) if drop else Dropout.NONE,
                    logits_soft_cap=cap,
                    sink=sink,
                    paged_kv=paged,
                    skip_min_seqlen_q=skip,
                    qscale=q,
                    fp8_static_quant=q is QScale.PERTENSOR and fam is not Family.FWD,
                    dbias=dbias,
                    deterministic=det,
                    **kv,
                )
                out += [c for c in (KernelConfig(sig, alg) for alg in algs) if _kept(c, excludes, keep)]
    if Family.FWD_SPLITKV_COMBINE in families:
        out += _combine_configs(sec, dtypes, hdims, modes, qscale, arch_tag, keep)
    return out + _bwd_one_d_configs(ctx, families, dtypes, hdims, modes, dets, arch_tag, excludes, keep)


def _kv_axes(sec: dict, ctx) -> list[dict[str, Any]]:
    """The (rope, kv_memory_layout, kv_lookup_table, page_size, vlayout) combinations of a section as signature
    keywords (module doc; each axis absent = its one default value)."""
    ropes = _enum_list(sec, "rope", Rope, ctx, ["none"])
    layouts = _enum_list(sec, "kv_memory_layout", KVMemoryLayout, ctx, ["none"])
    lookups = _enum_list(sec, "kv_lookup_table", KVLookupTable, ctx, ["none"])
    pages = _list(sec, "page_sizes", ctx, [0])
    for i, n in enumerate(pages):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise NvidiaSpecError(f"{ctx.where(f'page_sizes[{i}]')}: expected a page size (int >= 0), found {n!r}")
    vlayouts = _enum_list(sec, "vlayouts", VLayout, ctx, ["row"])
    others = [f for f in _enum_list(sec, "families", Family, ctx) if f is not Family.FWD]
    if VLayout.COL in vlayouts and others:
        # a Problem gives column-major V to the forward family only (ckfmha/problem.py): col kernels of another
        # family could never be chosen
        raise NvidiaSpecError(
            f"{ctx.where('vlayouts')}: col is defined for the fwd family only; this section also lists "
            f"{[f.value for f in others]}"
        )
    names = ("rope", "kv_memory_layout", "kv_lookup_table", "page_size", "vlayout")
    return [dict(zip(names, combo)) for combo in itertools.product(ropes, layouts, lookups, pages, vlayouts)]


def _kept(c: KernelConfig, excludes: list[Callable[[KernelConfig], bool]], keep) -> bool:
    return not any(x(c) for x in excludes) and keep(c)


def _bwd_one_d_configs(
    ctx,
    families: list,
    dtypes: list,
    hdims: list,
    modes: list,
    dets: list[bool],
    arch_tag: ArchTag,
    excludes: list[Callable[[KernelConfig], bool]],
    keep,
) -> list[KernelConfig]:
    """The backward's 1-D kernels of ``families`` (module doc): ``bwd_dot_do_o`` per (dtype, hdim_v, mode),
    ``bwd_convert_dq`` per (dtype, hdim_q, mode, deterministic); tile ``(one_d_tile,)``, padded seqlen and head
    dim; deduplicated; those no ``exclude`` rule matches and the receipt keeps."""
    one_d = [f for f in families if f in _BWD_ONE_D]
    bm0 = ctx.section.get("one_d_tile", 64)
    if one_d and (isinstance(bm0, bool) or not isinstance(bm0, int) or bm0 < 1):
        raise NvidiaSpecError(
            f"{ctx.where('one_d_tile')}: expected a positive int (the 1-D kernels' bm0), found {bm0!r}"
        )
    out: dict[KernelConfig, None] = {}
    for fam, dt, (hq, hv), mode in itertools.product(one_d, dtypes, hdims, modes):
        dot = fam is Family.BWD_DOT_DO_O
        hd = hv if dot else hq
        for det in [False] if dot else dets:
            sig = KernelSignature(fam, dt, mode, hd, hd, arch_tag, deterministic=det)
            alg = KernelAlgorithm(Pipeline.TRITON, (bm0,), (), (), -1, pad_s=1, pad_d=0 if dot else 1, pad_dv=int(dot))
            c = KernelConfig(sig, alg)
            if _kept(c, excludes, keep):
                out[c] = None
    return list(out)
