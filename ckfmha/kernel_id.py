"""The canonical kernel id: one string per KernelConfig, complete and parseable.

Layout (``.``-separated)::

    {family}.{dtype}.{mode}.d{hdim_q}x{hdim_v}.{pipeline}.b{tile}.r{warps}.w{warp_tiles}.p{pads}.o{occupancy}.{arch_tag}[.flag ...]

* ``b``: tile entries joined by ``x``; ``r``/``w``: one ``MxNxK`` triple per GEMM stage, stages joined by ``-``
  (empty when the family has none); ``p``: the four pads (s, sk, d, dv) as digits 0/1/8.
* Flags follow in a fixed order and only when they differ from the default: boolean fields as their bare
  short name (``lse``), other fields as ``name=value`` (``mask=causal``). Defaults are omitted, so two
  configs that differ in any field always differ in their ids.

Example: ``fwd.fp16.batch.d128x128.qr_async.b128x128x32x128x32x128.r4x1x1-4x1x1.w32x32x16-32x32x16.p1011.o-1.gfx9.mask=any.lse``
"""

from __future__ import annotations

from typing import Any

from ckfmha.kernel import (
    BOOL_FIELDS,
    ENUM_FIELDS,
    INT_FIELDS,
    PAD_VALUES,
    ArchTag,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    Mode,
    Pipeline,
)

# (config field, id short name), in id order. Every field not in the positional core is here.
_FLAG_FIELDS: tuple[tuple[str, str], ...] = (
    ("vlayout", "vlayout"),
    ("mask", "mask"),
    ("bias", "bias"),
    ("dbias", "dbias"),
    ("lse", "lse"),
    ("dropout", "dropout"),
    ("logits_soft_cap", "softcap"),
    ("skip_min_seqlen_q", "skip"),
    ("qscale", "qscale"),
    ("fp8_static_quant", "squant"),
    ("sink", "sink"),
    ("paged_kv", "pagedkv"),
    ("rope", "rope"),
    ("deterministic", "det"),
    ("kv_memory_layout", "kvlayout"),
    ("kv_lookup_table", "kvtable"),
    ("page_size", "ps"),
    ("trload", "trload"),
    ("kv_load", "kvload"),
    ("max_seq_len_q", "maxq"),
    ("num_stages", "stages"),
)
_SHORT_TO_FIELD = {short: f for f, short in _FLAG_FIELDS}
_FLAG_ORDER = {short: i for i, (_, short) in enumerate(_FLAG_FIELDS)}

_SIG_DEFAULTS = {f: getattr(KernelSignature, f, None) for f in KernelSignature.__dataclass_fields__}
_DEFAULTS: dict[str, Any] = {}
for _cls in (KernelSignature, KernelAlgorithm):
    for _name, _f in _cls.__dataclass_fields__.items():
        _DEFAULTS[_name] = _f.default


class KernelIdError(ValueError):
    pass


def _triples(stages: tuple[tuple[int, int, int], ...]) -> str:
    return "-".join("x".join(str(v) for v in s) for s in stages)


def render_kernel_id(c: KernelConfig) -> str:
    s, a = c.signature, c.algorithm
    parts = [
        s.family.value,
        s.dtype.value,
        s.mode.value,
        f"d{s.hdim_q}x{s.hdim_v}",
        a.pipeline.value,
        "b" + "x".join(str(v) for v in a.tile),
        "r" + _triples(a.warps),
        "w" + _triples(a.warp_tiles),
        f"p{a.pad_s}{a.pad_sk}{a.pad_d}{a.pad_dv}",
        f"o{a.occupancy}",
        s.arch_tag.value,
    ]
    for fname, short in _FLAG_FIELDS:
        v = getattr(s, fname) if fname in _SIG_DEFAULTS else getattr(a, fname)
        if v == _DEFAULTS[fname]:
            continue
        if fname in BOOL_FIELDS:
            parts.append(short)
        else:
            parts.append(f"{short}={v.value if hasattr(v, 'value') else v}")
    return ".".join(parts)


def _int(text: str, what: str, kid: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise KernelIdError(f"kernel id {kid!r}: {what} must be an integer, found {text!r}") from None


def _parse_triples(text: str, what: str, kid: str) -> tuple[tuple[int, int, int], ...]:
    if text == "":
        return ()
    out: list[tuple[int, int, int]] = []
    for stage in text.split("-"):
        vals = stage.split("x")
        if len(vals) != 3:
            raise KernelIdError(f"kernel id {kid!r}: {what} stage {stage!r} must be MxNxK")
        m, n, k = vals
        out.append((_int(m, what, kid), _int(n, what, kid), _int(k, what, kid)))
    return tuple(out)


def parse_kernel_id(kid: str) -> KernelConfig:
    parts = kid.split(".")
    if len(parts) < 11:
        raise KernelIdError(
            f"kernel id {kid!r}: expected at least 11 '.'-separated parts "
            "(family.dtype.mode.dQxV.pipeline.bTILE.rWARPS.wWARPTILES.pPADS.oOCC.arch), found {len(parts)}"
        )
    fam, dt, mode, dims, pipe, tile, warps, wtiles, pads, occ, arch = parts[:11]
    try:
        fields: dict[str, Any] = dict(
            family=Family.parse(fam, "family"),
            dtype=DType.parse(dt, "dtype"),
            mode=Mode.parse(mode, "mode"),
            pipeline=Pipeline.parse(pipe, "pipeline"),
            arch_tag=ArchTag.parse(arch, "arch_tag"),
        )
    except ValueError as e:
        raise KernelIdError(f"kernel id {kid!r}: {e}") from None
    if not dims.startswith("d") or "x" not in dims:
        raise KernelIdError(f"kernel id {kid!r}: head dims part must look like d128x128, found {dims!r}")
    hq, hv = dims[1:].split("x", 1)
    fields["hdim_q"] = _int(hq, "hdim_q", kid)
    fields["hdim_v"] = _int(hv, "hdim_v", kid)
    for text, prefix, what in (
        (tile, "b", "tile"),
        (warps, "r", "warps"),
        (wtiles, "w", "warp_tiles"),
        (pads, "p", "pads"),
        (occ, "o", "occupancy"),
    ):
        if not text.startswith(prefix):
            raise KernelIdError(f"kernel id {kid!r}: {what} part must start with {prefix!r}, found {text!r}")
    fields["tile"] = tuple(_int(v, "tile", kid) for v in tile[1:].split("x")) if tile != "b" else ()
    fields["warps"] = _parse_triples(warps[1:], "warps", kid)
    fields["warp_tiles"] = _parse_triples(wtiles[1:], "warp_tiles", kid)
    if len(pads) != 5 or any(ch not in "018" for ch in pads[1:]):
        raise KernelIdError(f"kernel id {kid!r}: pads must be 'p' + four digits from {PAD_VALUES}, found {pads!r}")
    fields["pad_s"], fields["pad_sk"], fields["pad_d"], fields["pad_dv"] = (int(ch) for ch in pads[1:])
    fields["occupancy"] = _int(occ[1:], "occupancy", kid)
    _parse_flags(parts[11:], kid, fields)
    try:
        return KernelConfig.make(**fields)
    except ValueError as e:
        raise KernelIdError(f"kernel id {kid!r}: {e}") from None


def _parse_flags(flags: list[str], kid: str, fields: dict[str, Any]) -> None:
    """Set ``fields`` from the id's trailing flags: bare switches and ``short=value`` pairs, each in canonical
    order, at most once, and never spelling a field's default."""
    last = -1
    for flag in flags:
        short, eq, value = flag.partition("=")
        if short not in _SHORT_TO_FIELD:
            raise KernelIdError(f"kernel id {kid!r}: unknown flag {short!r}; known: {', '.join(_SHORT_TO_FIELD)}")
        order = _FLAG_ORDER[short]
        if order <= last:
            raise KernelIdError(f"kernel id {kid!r}: flag {short!r} is out of canonical order or repeated")
        last = order
        fname = _SHORT_TO_FIELD[short]
        if fname in BOOL_FIELDS:
            if eq:
                raise KernelIdError(f"kernel id {kid!r}: flag {short!r} is a bare switch and takes no value")
            fields[fname] = True
        elif not eq:
            raise KernelIdError(f"kernel id {kid!r}: flag {short!r} needs a value ({short}=...)")
        elif fname in ENUM_FIELDS:
            try:
                fields[fname] = ENUM_FIELDS[fname].parse(value, fname)
            except ValueError as e:
                raise KernelIdError(f"kernel id {kid!r}: {e}") from None
        elif fname in INT_FIELDS:
            fields[fname] = _int(value, fname, kid)
        if fields.get(fname) == _DEFAULTS[fname]:
            raise KernelIdError(f"kernel id {kid!r}: flag {short!r} repeats the default and is not canonical")
