"""Enumerator for NVIDIA arch specs (vendor: nvidia), e.g. ``sm90``: the Triton backend's kernel space.

Section schema (one per api)::

    families: [fwd]                     # families the section emits (fwd_splitkv also emits its combine)
    dtypes: [fp16, bf16, ...]
    hdims: [[hdim_q, hdim_v], ...]
    modes: [batch, group]
    masks: [none, causal, generic]      # kernel mask implementations
    biases: [none, elementwise, alibi]
    lse / dropout / logits_soft_cap / sink / skip_min_seqlen_q / paged_kv: [false, true]   # axes (absent = [false])
    qscale: {dtype: [pertensor, blockscale]}   # dtypes not listed: [none]
    pads: [[pad_s, pad_sk, pad_d, pad_dv], ...]
    exclude: ["<filter expression>", ...]      # configs matching any rule are not emitted
    tiles: {hdim_q: [[bm0, bn0, warps, stages], ...]}
    tiles_fp32: {...}                   # optional: tiles for fp32 (else `tiles`)
    combine_tile: 32                    # fwd_splitkv only: hdim_v tile of the combine kernels

Configs carry pipeline ``triton``, ArchTag ``sm90`` (the arch name), warps ``((warps,1,1), (warps,1,1))``
and ``num_stages``; the warp tiles are empty (Triton picks the MMA shape).

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
    MaskImpl,
    Mode,
    Pipeline,
    QScale,
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
}


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
    pageds = _bools(sec, "paged_kv", ctx)
    skips = _bools(sec, "skip_min_seqlen_q", ctx)
    hdims = _list(sec, "hdims", ctx)
    pads = _list(sec, "pads", ctx)
    qscale = sec.get("qscale", {}) or {}
    tiles, tiles32 = _tiles(sec, "tiles", ctx), _tiles(sec, "tiles_fp32", ctx)
    excludes = _excludes(sec, ctx)
    keep = (lambda c: True) if ctx.receipt == 0 else ctx.keep
    main = [f for f in families if f is not Family.FWD_SPLITKV_COMBINE]
    out: list[KernelConfig] = []
    for fam in main:
        for dt, (hq, hv), mode in itertools.product(dtypes, hdims, modes):
            table = tiles32 if dt is DType.FP32 and tiles32 else tiles
            qs = _qscales(qscale, dt)
            algs = _triton_algorithms(table.get(hq, []), pads)
            for mask, bias, lse, drop, cap, sink, paged, skip, q in itertools.product(
                masks, biases, lses, drops, caps, sinks, pageds, skips, qs
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
                    dropout=Dropout.ENABLED if drop else Dropout.NONE,
                    logits_soft_cap=cap,
                    sink=sink,
                    paged_kv=paged,
                    skip_min_seqlen_q=skip,
                    qscale=q,
                    fp8_static_quant=q is QScale.PERTENSOR and fam is not Family.FWD,
                )
                for alg in algs:
                    c = KernelConfig(sig, alg)
                    if any(x(c) for x in excludes) or not keep(c):
                        continue
                    out.append(c)
    if Family.FWD_SPLITKV_COMBINE in families:
        out += _combine_configs(sec, dtypes, hdims, modes, qscale, arch_tag, keep)
    return out
