"""The kernel model: one complete, frozen description of an FMHA kernel specialization.

A :class:`KernelConfig` is made of two parts, as in CK's own vocabulary:

* :class:`KernelSignature` -- *what* the kernel computes: family, data type, mode, head dims and every
  feature switch (mask, bias, lse, dropout, soft-cap, sink, quantization, paging, RoPE, ...).
* :class:`KernelAlgorithm` -- *how* it computes it: pipeline, block tile, warps per block and warp tiles per
  GEMM stage, occupancy, the four pads, trload, batch-prefill load strategy, bwd max_seq_len_q.

Every enum is a ``str`` enum whose value is ckfmha's canonical token, so filter expressions may compare with
plain strings (``c.pipeline == 'qr_async'``).  CK's own spellings (``nmask``, ``vr``, ``psskddv``...) live in
:mod:`ckfmha.naming`, not here.

Every configuration has exactly one canonical **kernel id** (:meth:`KernelConfig.kernel_id`) that names every
field and parses back (:meth:`KernelConfig.from_id`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TokenEnum(str, Enum):
    """A str-valued enum whose str() is its token.

    Members hash like their token (``str.__hash__``, in C): consistent with their ``str`` equality (Enum's own
    ``__hash__`` hashes the *name*, so ``{'fp16': 1}[DType.FP16]`` would miss), and fast in the dict lookups of
    the enumeration hot paths."""

    __hash__ = str.__hash__

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, value: Any, field_name: str | None = None):
        """Return the member for ``value`` (a member or its token) or raise a ValueError naming the rule."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            name = field_name or cls.__name__
            raise ValueError(f"{name}: unknown value {value!r}; allowed: {allowed}") from None


class Family(TokenEnum):
    FWD = "fwd"
    FWD_SPLITKV = "fwd_splitkv"
    FWD_SPLITKV_COMBINE = "fwd_splitkv_combine"
    FWD_APPENDKV = "fwd_appendkv"
    FWD_PAGEDKV = "fwd_pagedkv"
    BATCH_PREFILL = "batch_prefill"
    BWD_DOT_DO_O = "bwd_dot_do_o"
    BWD_DQ_DK_DV = "bwd_dq_dk_dv"
    BWD_CONVERT_DQ = "bwd_convert_dq"

    @property
    def is_backward(self) -> bool:
        return self.value.startswith("bwd")


class Api(TokenEnum):
    """The ``-d`` values of CK's generator; each api emits one or more families."""

    FWD = "fwd"
    FWD_SPLITKV = "fwd_splitkv"
    FWD_APPENDKV = "fwd_appendkv"
    PAGEDKV_PREFILL = "pagedkv_prefill"
    BATCH_PREFILL = "batch_prefill"
    BWD = "bwd"

    @property
    def families(self) -> tuple[Family, ...]:
        return API_FAMILIES[self]


API_FAMILIES: dict[Api, tuple[Family, ...]] = {
    Api.FWD: (Family.FWD,),
    Api.FWD_SPLITKV: (Family.FWD_SPLITKV, Family.FWD_SPLITKV_COMBINE),
    Api.FWD_APPENDKV: (Family.FWD_APPENDKV,),
    Api.PAGEDKV_PREFILL: (Family.FWD_PAGEDKV,),
    Api.BATCH_PREFILL: (Family.BATCH_PREFILL,),
    Api.BWD: (Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ),
}
FAMILY_API: dict[Family, Api] = {f: a for a, fs in API_FAMILIES.items() for f in fs}


class DType(TokenEnum):
    """Kernel data-type token. Mixed tokens name (Q,K,V storage)+(output type)."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"
    FP8 = "fp8"
    BF8 = "bf8"
    FP8FP16 = "fp8fp16"
    FP8BF16 = "fp8bf16"
    FP8FP32 = "fp8fp32"
    MXFP8 = "mxfp8"
    MXFP4 = "mxfp4"

    @property
    def is_fp8_family(self) -> bool:
        return self not in (DType.FP16, DType.BF16, DType.FP32)


class Mode(TokenEnum):
    BATCH = "batch"
    GROUP = "group"  # variable-length sequences given as seqstart offsets


class VLayout(TokenEnum):
    ROW = "row"
    COL = "col"


class MaskImpl(TokenEnum):
    """Which mask *implementation* a kernel is compiled with.

    ``any`` is CK's simplified mask (``-m simplified``, name token ``mask``): one kernel serves causal
    top-left/bottom-right and sliding windows.  With ``-m generic`` CK splits masks into ``causal`` (token
    ``mc``) and ``generic`` (token ``mg``).
    """

    NONE = "none"
    ANY = "any"
    CAUSAL = "causal"
    GENERIC = "generic"


class MaskMode(TokenEnum):
    """The generator's ``-m`` option."""

    SIMPLIFIED = "simplified"
    GENERIC = "generic"


class Bias(TokenEnum):
    NONE = "none"
    ELEMENTWISE = "elementwise"
    ALIBI = "alibi"


class QScale(TokenEnum):
    NONE = "none"
    PERTENSOR = "pertensor"
    BLOCKSCALE = "blockscale"
    KV_BLOCKSCALE = "kv_blockscale"
    MX = "mx"


class Rope(TokenEnum):
    NONE = "none"
    INTERLEAVED = "interleaved"
    HALF_ROTATED = "half_rotated"


class Dropout(TokenEnum):
    """Dropout variant. Forward kernels use ``none``/``enabled``; backward kernels name the workgroup
    variant (``wg16``/``wg32``) and whether the random values are stored."""

    NONE = "none"
    ENABLED = "enabled"
    WG16 = "wg16"
    WG16_STORE_RANDVAL = "wg16_store_randval"
    WG32 = "wg32"
    WG32_STORE_RANDVAL = "wg32_store_randval"


class KVMemoryLayout(TokenEnum):
    NONE = "none"  # not a paged batch-prefill kernel
    VECTORIZED = "vectorized"
    LINEAR = "linear"


class KVLookupTable(TokenEnum):
    NONE = "none"
    VLLM = "vllm"  # 2-D block table [batch, max_blocks]
    SGLANG = "sglang"  # 1-D page table with per-sequence offsets


class KVLoad(TokenEnum):
    """Batch-prefill K/V load strategy."""

    NONE = "none"
    BLOCK = "bload"
    GLOBAL_LDS = "gload"  # GLOBAL_LOAD_LDS variant, emitted where page_size < bn0


class Pipeline(TokenEnum):
    QR = "qr"
    QR_ASYNC = "qr_async"
    QR_ASYNC_TRLOAD = "qr_async_trload"
    QR_ASYNC_TRLOAD_V3 = "qr_async_trload_v3"
    QR_HPAD = "qr_hpad"
    QS = "qs"
    QR_TDM = "qr_tdm"
    QR_NWARP_SSHUFFLE = "qr_nwarp_sshuffle"
    QR_PAGEDKV = "qr_pagedkv"
    APPENDKV = "appendkv"
    SPLITKV_COMBINE = "splitkv_combine"
    BWD_DOT_DO_O = "bwd_dot_do_o"
    BWD_DQ_DK_DV = "bwd_dq_dk_dv"
    BWD_CONVERT_DQ = "bwd_convert_dq"
    # Triton backend kernels (NVIDIA/AMD through Triton's compiler)
    TRITON = "triton"


class ArchTag(TokenEnum):
    """The generator factory a kernel comes from (CK's file-name suffix), not the target GPU."""

    NONE = "none"  # batch_prefill names carry no arch suffix
    GFX9 = "gfx9"
    GFX950 = "gfx950"
    GFX11 = "gfx11"
    GFX115 = "gfx115"
    GFX12 = "gfx12"
    GFX125 = "gfx125"
    SM90 = "sm90"


PAD_VALUES = (0, 1, 8)  # 0 = no pad, 1 = pad, 8 = bwd's pad with 8-element alignment


@dataclass(frozen=True, slots=True)
class KernelSignature:
    """What a kernel computes. Fields that do not apply to a family keep their defaults."""

    family: Family
    dtype: DType
    mode: Mode
    hdim_q: int
    hdim_v: int
    arch_tag: ArchTag
    vlayout: VLayout = VLayout.ROW
    mask: MaskImpl = MaskImpl.NONE
    bias: Bias = Bias.NONE
    dbias: bool = False
    lse: bool = False
    dropout: Dropout = Dropout.NONE
    logits_soft_cap: bool = False
    skip_min_seqlen_q: bool = False
    qscale: QScale = QScale.NONE
    fp8_static_quant: bool = False
    sink: bool = False
    paged_kv: bool = False
    rope: Rope = Rope.NONE
    deterministic: bool = False
    kv_memory_layout: KVMemoryLayout = KVMemoryLayout.NONE
    kv_lookup_table: KVLookupTable = KVLookupTable.NONE
    page_size: int = 0


@dataclass(frozen=True, slots=True)
class KernelAlgorithm:
    """How a kernel computes.

    ``tile``: fwd-style families have 6 entries (bm0, bn0, bk0, bn1, bk1, bk0max); bwd dq_dk_dv has 9
    (bm0, bn0, bk0, bk1, bk2, bk3, bk4, bhdq, bhdv); appendkv has 4 (bs, bsk, bd, bdv); split-KV combine
    (bn1), dot_do_o and convert_dq (bm0) have 1.
    ``warps``: warps per block for each GEMM stage (2 stages fwd, 3 bwd), each (m, n, k).
    ``warp_tiles``: per-warp MFMA/WMMA tile for each stage, each (m, n, k).
    ``occupancy``: CK's ``kBlockPerCu``; -1 = let the compiler decide.
    Pads: 0 none, 1 padded, 8 padded with 8-element alignment (bwd head dims).
    ``num_stages``: software-pipelining depth of GPU backends that expose it (Triton); 0 = derived from the
    pipeline. CK configs leave it 0.
    """

    pipeline: Pipeline
    tile: tuple[int, ...]
    warps: tuple[tuple[int, int, int], ...] = ()
    warp_tiles: tuple[tuple[int, int, int], ...] = ()
    occupancy: int = -1
    pad_s: int = 0
    pad_sk: int = 0
    pad_d: int = 0
    pad_dv: int = 0
    trload: bool = False
    kv_load: KVLoad = KVLoad.NONE
    max_seq_len_q: int = 0
    num_stages: int = 0


def _install_fast_init(cls: type) -> None:
    """Replace a frozen slots dataclass's generated ``__init__`` by one that stores through the slot descriptors
    directly: the same signature and defaults, about twice as fast (enumeration builds ~10^5 of these).  A field
    with ``init=False`` is set to its default, as the generated ``__init__`` does."""
    fields = dataclasses.fields(cls)
    ns: dict[str, Any] = {}
    params, body = [], []
    for i, f in enumerate(fields):
        ns[f"_s{i}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            ns[f"_d{i}"] = f.default
        if not f.init:
            body.append(f"    _s{i}(self, _d{i})")
            continue
        params.append(f.name if f.default is dataclasses.MISSING else f"{f.name}=_d{i}")
        body.append(f"    _s{i}(self, {f.name})")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n", ns)  # noqa: S102 - our own code
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = vars(cls)["__init__"].__doc__
    cls.__init__ = init  # type: ignore[misc]


_install_fast_init(KernelSignature)
_install_fast_init(KernelAlgorithm)


def _fast_factory(cls: type) -> Any:
    """A function that builds ``cls`` instances exactly as ``cls(...)`` does (same parameters and defaults, no
    checks, like the constructor), about three times faster for a wide frozen slots dataclass: it fills an
    unfrozen twin class of the same slot layout by plain attribute stores (which the interpreter specializes),
    then gives the object its real class.  Only the enumeration hot paths use it; ``cls(...)`` stays the
    constructor."""
    twin = type(f"_{cls.__name__}Builder", (), {"__slots__": cls.__slots__})  # type: ignore[attr-defined]
    ns: dict[str, Any] = {"_new": object.__new__, "_twin": twin, "_cls": cls}
    params, body = [], []
    for i, f in enumerate(dataclasses.fields(cls)):
        if f.default is not dataclasses.MISSING:
            ns[f"_d{i}"] = f.default
        params.append(f.name if f.default is dataclasses.MISSING else f"{f.name}=_d{i}")
        body.append(f"    o.{f.name} = {f.name}")
    src = f"def new({', '.join(params)}):\n    o = _new(_twin)\n" + "\n".join(body)
    exec(src + "\n    o.__class__ = _cls\n    return o\n", ns)  # noqa: S102 - our own code
    fn = ns["new"]
    fn.__qualname__ = fn.__name__ = f"new_{cls.__name__}"
    return fn


new_signature: Callable[..., KernelSignature] = _fast_factory(KernelSignature)
"""``KernelSignature(...)``, three times faster, for the enumerators (about 5 * 10^4 signatures a run)."""

SIGNATURE_FIELDS = tuple(f.name for f in dataclasses.fields(KernelSignature))
ALGORITHM_FIELDS = tuple(f.name for f in dataclasses.fields(KernelAlgorithm))
_SIGNATURE_FIELD_SET = frozenset(SIGNATURE_FIELDS)
_ALGORITHM_FIELD_SET = frozenset(ALGORITHM_FIELDS)
CONFIG_FIELDS = SIGNATURE_FIELDS + ALGORITHM_FIELDS

_FIELD_TYPES: dict[str, Any] = {}
for _cls in (KernelSignature, KernelAlgorithm):
    for _f in dataclasses.fields(_cls):
        _FIELD_TYPES[_f.name] = _f.type
_ENUM_FIELDS: dict[str, type[TokenEnum]] = {
    name: globals()[t]
    for name, t in _FIELD_TYPES.items()
    if isinstance(t, str) and t in globals() and isinstance(globals()[t], type) and issubclass(globals()[t], TokenEnum)
}
_BOOL_FIELDS = frozenset(n for n, t in _FIELD_TYPES.items() if t == "bool")
_INT_FIELDS = frozenset(n for n, t in _FIELD_TYPES.items() if t == "int")


@dataclass(frozen=True, slots=True)
class KernelConfig:
    """A complete kernel specialization: signature + algorithm.

    Every field of both parts is also readable directly on the config (``c.hdim_q``, ``c.pipeline``).
    """

    signature: KernelSignature
    algorithm: KernelAlgorithm
    _kid: str | None = field(default=None, init=False, compare=False, hash=False, repr=False)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: delegate to the two parts.
        if name in _SIGNATURE_FIELD_SET:
            return getattr(self.signature, name)
        if name in _ALGORITHM_FIELD_SET:
            return getattr(self.algorithm, name)
        raise AttributeError(f"KernelConfig has no field {name!r}; fields: {', '.join(CONFIG_FIELDS)}")

    # ---------------------------------------------------------------- construction helpers
    @classmethod
    def make(cls, **fields: Any) -> "KernelConfig":
        """Build a config from flat keyword fields; enum fields accept tokens; unknown names are errors."""
        unknown = set(fields) - set(CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"KernelConfig: unknown field(s) {sorted(unknown)}; fields: {', '.join(CONFIG_FIELDS)}")
        norm = {k: _normalize_field(k, v) for k, v in fields.items()}
        sig = KernelSignature(**{k: v for k, v in norm.items() if k in _SIGNATURE_FIELD_SET})
        alg = KernelAlgorithm(**{k: v for k, v in norm.items() if k in _ALGORITHM_FIELD_SET})
        return cls(sig, alg)

    def replace(self, **fields: Any) -> "KernelConfig":
        """A copy with some flat fields changed."""
        unknown = set(fields) - set(CONFIG_FIELDS)
        if unknown:
            raise ValueError(f"KernelConfig.replace: unknown field(s) {sorted(unknown)}")
        norm = {k: _normalize_field(k, v) for k, v in fields.items()}
        sig_changes = {k: v for k, v in norm.items() if k in _SIGNATURE_FIELD_SET}
        alg_changes = {k: v for k, v in norm.items() if k in _ALGORITHM_FIELD_SET}
        sig = dataclasses.replace(self.signature, **sig_changes) if sig_changes else self.signature
        alg = dataclasses.replace(self.algorithm, **alg_changes) if alg_changes else self.algorithm
        return KernelConfig(sig, alg)

    def as_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict (enum tokens, lists for tuples)."""
        out: dict[str, Any] = {}
        for part in (self.signature, self.algorithm):
            for name in SIGNATURE_FIELDS if part is self.signature else ALGORITHM_FIELDS:
                v = getattr(part, name)
                if isinstance(v, TokenEnum):
                    v = v.value
                elif isinstance(v, tuple):
                    v = [list(x) if isinstance(x, tuple) else x for x in v]
                out[name] = v
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelConfig":
        return cls.make(**data)

    def fields(self) -> Iterator[tuple[str, Any]]:
        for name in SIGNATURE_FIELDS:
            yield name, getattr(self.signature, name)
        for name in ALGORITHM_FIELDS:
            yield name, getattr(self.algorithm, name)

    # ---------------------------------------------------------------- identity
    @property
    def kernel_id(self) -> str:
        """The canonical id (rendered once per config object, then cached)."""
        kid = self._kid
        if kid is None:
            kid = render_kernel_id(self)
            object.__setattr__(self, "_kid", kid)
        return kid

    @classmethod
    def from_id(cls, kernel_id: str) -> "KernelConfig":
        """The config of a canonical id (:func:`parse_kernel_id`)."""
        return parse_kernel_id(kernel_id)

    def __str__(self) -> str:
        return self.kernel_id


_install_fast_init(KernelConfig)  # enumeration builds ~2.5 * 10^5 configs
new_config: Callable[[KernelSignature, KernelAlgorithm], KernelConfig] = _fast_factory(KernelConfig)
"""``KernelConfig(signature, algorithm)``, a third faster, for the enumerators' hot loops."""


def _install_flat_properties() -> None:
    """Flat read access (``c.hdim_q``) through real properties: much faster than ``__getattr__``, which stays as
    the fallback that names the known fields in its error."""
    from operator import attrgetter

    for part, names in (("signature", SIGNATURE_FIELDS), ("algorithm", ALGORITHM_FIELDS)):
        for name in names:
            setattr(KernelConfig, name, property(attrgetter(f"{part}.{name}"), doc=f"{part}.{name}"))


_install_flat_properties()


def _normalize_field(name: str, value: Any) -> Any:
    if name in _ENUM_FIELDS:
        return _ENUM_FIELDS[name].parse(value, name)
    if name in _BOOL_FIELDS:
        if not isinstance(value, bool):
            raise ValueError(f"{name}: expected a bool, found {value!r}")
        return value
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}: expected an int, found {value!r}")
        if name.startswith("pad_") and value not in PAD_VALUES:
            raise ValueError(f"{name}: pad must be one of {PAD_VALUES}, found {value!r}")
        return value
    if name == "tile":
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value
        ):
            raise ValueError(f"tile: expected a list of ints, found {value!r}")
        return tuple(value)
    if name in ("warps", "warp_tiles"):
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and len(s) == 3 and all(isinstance(x, int) for x in s) for s in value
        ):
            raise ValueError(f"{name}: expected a list of [m, n, k] int triples, found {value!r}")
        return tuple(tuple(s) for s in value)
    return value


ENUM_FIELDS = _ENUM_FIELDS
BOOL_FIELDS = _BOOL_FIELDS
INT_FIELDS = _INT_FIELDS


# ---------------------------------------------------------------------------------------------- the kernel id
# The canonical id of a config (:meth:`KernelConfig.kernel_id`, :meth:`KernelConfig.from_id`); its layout is
# documented in :mod:`ckfmha.kernel_id`, which re-exports these functions (it imports this module, never the
# reverse).

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

_ID_DEFAULTS: dict[str, Any] = {
    f.name: f.default for cls in (KernelSignature, KernelAlgorithm) for f in dataclasses.fields(cls)
}


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
        v = getattr(s, fname) if fname in _SIGNATURE_FIELD_SET else getattr(a, fname)
        if v == _ID_DEFAULTS[fname]:
            continue
        if fname in _BOOL_FIELDS:
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
        if fname in _BOOL_FIELDS:
            if eq:
                raise KernelIdError(f"kernel id {kid!r}: flag {short!r} is a bare switch and takes no value")
            fields[fname] = True
        elif not eq:
            raise KernelIdError(f"kernel id {kid!r}: flag {short!r} needs a value ({short}=...)")
        elif fname in _ENUM_FIELDS:
            try:
                fields[fname] = _ENUM_FIELDS[fname].parse(value, fname)
            except ValueError as e:
                raise KernelIdError(f"kernel id {kid!r}: {e}") from None
        elif fname in _INT_FIELDS:
            fields[fname] = _int(value, fname, kid)
        if fields.get(fname) == _ID_DEFAULTS[fname]:
            raise KernelIdError(f"kernel id {kid!r}: flag {short!r} repeats the default and is not canonical")
