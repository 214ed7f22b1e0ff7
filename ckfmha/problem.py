"""The problem model: one attention problem a kernel is run on (shapes, features, numerics).

A :class:`Problem` is frozen and validated on construction (:meth:`Problem.validate`): every impossible or
CK-undefined combination raises :class:`ProblemError` naming the field, the value and the rule.  Sizes are
Python ints (arbitrary precision); products of sizes are never formed in int32.

CK holds every size and count as ``ck_tile::index_t`` (int32_t) and the group-mode ``seqstart`` arrays as int32
(``fmha_fwd_args`` / ``fmha_bwd_args`` in example/ck_tile/01_fmha/fmha_fwd.hpp and fmha_bwd.hpp).  So every field
of :data:`INT32_FIELDS`, every entry of :data:`INT32_LIST_FIELDS` and, in group mode, the total number of query
tokens (``sum(seqlens_q)``) and of physical key tokens (``sum(s_kpad)``, else ``sum(seqlens_k)``) must be
``<= INT32_MAX`` (:mod:`ckfmha.limits`); this is checked before anything is expanded per sequence.

``family`` is one of the user-facing :class:`ckfmha.kernel.Family` values ``fwd``, ``fwd_splitkv``,
``fwd_pagedkv``, ``fwd_appendkv``, ``batch_prefill`` and ``bwd_dq_dk_dv``, which here means *the whole
backward* (dot_do_o + dq_dk_dv + convert_dq); the token ``bwd`` is accepted for it.

Round trip with CK's tile_example command lines: ``Problem.from_ck_args(p.to_ck_args(), binary=p.ck_binary)
== p`` (``batch_prefill`` has no tile_example binary).  Runner-only arguments (``-v -kname -init -seed -warmup
-repeat -timer -json -jsonfile -drop_prefs``) are accepted and ignored; CK arguments Problem has no field for
(``-q_eff_lens -kv_eff_lens -s_qpad``, bwd ``-s_qpad -s_kpad``) are an error saying so; any other unknown argument
is an error.  Values are read as CK's ArgParser (ck_tile/host/arg_parser.hpp) reads them: a scalar (``-d``,
``-b``, ``-p_drop``...; ``atoi``/``atof``) may end in one trailing comma (``-d=16,`` is 16, a form CK's own smoke
logs use) but a list where one number belongs (``-d=16,32``) is an error; a list (``-s``, ``-s_k``, ``-s_kpad``;
``get_int_vec``) splits at every comma and reads an empty item as 0, as CK does (``-s=16,`` is ``16, 0``).
``-mask`` takes newer CK's ``t:l,r,sink`` / ``b:l,r,sink`` with sink 0 only (:mod:`ckfmha.masking`: sink tokens
are not modelled; a non-zero sink is an error naming it).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable

from ckfmha.kernel import (Bias, DType, Family, KVLookupTable, KVMemoryLayout, Mode, QScale, Rope, TokenEnum,
                           VLayout)
from ckfmha.limits import INT32_MAX
from ckfmha.masking import MaskError, MaskKind, MaskSpec


class ProblemError(ValueError):
    """An impossible or CK-undefined problem; the message names the field, the value and the rule."""


class Layout(TokenEnum):
    """Tensor layout of Q/K/V (input) or O (output): CK's ``-iperm`` / ``-operm`` 1 = bhsd, 0 = bshd."""

    BHSD = "bhsd"
    BSHD = "bshd"


BWD = Family.BWD_DQ_DK_DV
PROBLEM_FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV, Family.FWD_APPENDKV,
                    Family.BATCH_PREFILL, BWD)
FWD_DTYPES = (DType.FP16, DType.BF16, DType.FP32, DType.FP8, DType.FP8BF16, DType.FP8FP32)
BWD_DTYPES = (DType.FP16, DType.BF16, DType.FP32)
MAX_HDIM = 256
BLOCK_SCALE_SIZE = 128  # rows of Q (and of K/V) sharing one descale in the block-scale mode
RUNNER_ONLY_ARGS = frozenset({"v", "kname", "init", "seed", "warmup", "repeat", "timer", "json", "jsonfile",
                              "drop_prefs"})
_U64 = (1 << 64) - 1
INT32_FIELDS = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v", "bias_rank",
                "page_block_size", "seqlen_knew", "rotary_dim", "num_splits", "min_seqlen_q")
"""Scalar sizes and counts CK holds as ``ck_tile::index_t`` (int32): each must be ``<= INT32_MAX``."""
INT32_LIST_FIELDS = ("seqlens_q", "seqlens_k", "s_kpad")
"""Per-sequence lengths (group mode): each entry must be ``<= INT32_MAX``."""
_INT32_RULE = f"exceeds INT32_MAX = {INT32_MAX} (CK holds sizes and counts as ck_tile::index_t = int32_t)"


def _err(field_name: str, value: Any, rule: str) -> ProblemError:
    return ProblemError(f"{field_name}: {value!r} {rule}")


class _Shown(str):
    """A value rendered for a message as written (its repr is the text itself)."""

    def __repr__(self) -> str:
        return str(self)


def _brief(values: "tuple[int, ...] | None", length: int, batch: int) -> Any:
    """A length list for a message: short lists as they are, long ones abbreviated, one length broadcast to
    every sequence as ``(length,) * batch``."""
    if values is None:
        return _Shown(f"({length},) * {batch}")
    if len(values) <= 8:
        return values
    return _Shown(f"({', '.join(map(str, values[:3]))}, ... {len(values)} lengths)")


def _vec_size(dtype: DType) -> int:
    """CK's kVectorSize = 16 bytes / sizeof(KDataType) of the vectorized KV-cache layout."""
    return 16 // storage_itemsize(dtype)


def storage_itemsize(dtype: DType) -> int:
    """Bytes per Q/K/V element."""
    return {DType.FP32: 4, DType.FP16: 2, DType.BF16: 2}.get(dtype, 1)


def output_itemsize(dtype: DType) -> int:
    """Bytes per O element (fp8bf16 writes bf16, fp8fp32 writes fp32, fp8 writes fp8)."""
    return {DType.FP32: 4, DType.FP16: 2, DType.BF16: 2, DType.FP8BF16: 2, DType.FP8FP32: 4}.get(dtype, 1)


@dataclass(frozen=True)
class Problem:
    """An attention problem.  ``None`` defaults: ``nhead_k = nhead_q``, ``seqlen_k = seqlen_q``,
    ``hdim_v = hdim_q``.  Group mode takes per-sequence ``seqlens_q`` / ``seqlens_k`` (and optionally CK's padded
    physical key lengths ``s_kpad``); ``seqlen_q`` / ``seqlen_k`` then become the maxima."""

    family: Family = Family.FWD
    dtype: DType = DType.FP16
    mode: Mode = Mode.BATCH
    batch: int = 1
    nhead_q: int = 1
    nhead_k: int | None = None
    seqlen_q: int = 1
    seqlen_k: int | None = None
    hdim_q: int = 64
    hdim_v: int | None = None
    seqlens_q: tuple[int, ...] | None = None
    seqlens_k: tuple[int, ...] | None = None
    s_kpad: tuple[int, ...] | None = None
    input_layout: Layout = Layout.BHSD
    output_layout: Layout = Layout.BHSD
    vlayout: VLayout = VLayout.ROW
    scale: float = 0.0  # 0 -> 1/sqrt(hdim_q), as CK's -scale_s=0
    mask: MaskSpec = field(default_factory=MaskSpec)
    bias: Bias = Bias.NONE
    bias_rank: int = 0  # elementwise: 0 (1,1,s,s) / 1 (1,h,s,s) / 2 (b,h,s,s); alibi: 0 (1,h) / 1 (b,h)
    lse: bool = False
    p_drop: float = 0.0
    drop_seed: int = 1
    drop_offset: int = 0
    logits_soft_cap: float = 0.0
    sink: bool = False
    qscale: QScale = QScale.NONE
    page_block_size: int = 0
    kv_lookup: KVLookupTable = KVLookupTable.NONE
    kv_layout: KVMemoryLayout = KVMemoryLayout.NONE
    cache_batch_idx: bool = False
    seqlen_knew: int = 0
    rotary_dim: int = 0
    rope: Rope = Rope.NONE
    num_splits: int = 1
    deterministic: bool = False
    dbias: bool = False
    min_seqlen_q: int = 0  # group-mode fwd: skip sequences with seqlen_q <= min_seqlen_q (CK's skip_min_seqlen_q)

    # ------------------------------------------------------------------ normalisation + validation
    def __post_init__(self) -> None:
        s = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        fam = self.family
        if isinstance(fam, str) and fam == "bwd":
            fam = BWD
        for name, cls in (("family", Family), ("dtype", DType), ("mode", Mode), ("bias", Bias),
                          ("qscale", QScale), ("kv_lookup", KVLookupTable), ("kv_layout", KVMemoryLayout),
                          ("rope", Rope), ("vlayout", VLayout)):
            v = fam if name == "family" else getattr(self, name)
            try:
                s(name, cls.parse(v, name))
            except ValueError as e:
                raise ProblemError(str(e)) from None
        for name in ("input_layout", "output_layout"):
            v = getattr(self, name)
            try:
                s(name, Layout(v))
            except ValueError:
                raise _err(name, v, "is not a layout; allowed: bhsd, bshd") from None
        try:
            s("mask", MaskSpec.parse(self.mask))
        except MaskError as e:
            raise ProblemError(str(e)) from None
        for name in ("batch", "nhead_q", "seqlen_q", "hdim_q", "bias_rank", "drop_seed", "drop_offset",
                     "page_block_size", "seqlen_knew", "rotary_dim", "num_splits", "min_seqlen_q"):
            s(name, self._as_int(name, getattr(self, name)))
        for name in ("nhead_k", "seqlen_k", "hdim_v"):
            v = getattr(self, name)
            if v is not None:
                s(name, self._as_int(name, v))
        for name in ("lse", "sink", "cache_batch_idx", "deterministic", "dbias"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise _err(name, v, "is not a bool")
        for name in ("scale", "p_drop", "logits_soft_cap"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise _err(name, v, "is not a finite number")
            s(name, float(v))
        if self.nhead_k is None:
            s("nhead_k", self.nhead_q)
        if self.hdim_v is None:
            s("hdim_v", self.hdim_q)
        for name in ("seqlens_q", "seqlens_k", "s_kpad"):
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, (int, str)) or not isinstance(v, Iterable):
                    raise _err(name, v, "is not a sequence of ints")
                s(name, tuple(self._as_int(name, x) for x in v))
        self._check_int32()  # before the per-sequence tuples below are built from batch
        if self.mode is Mode.GROUP:
            if self.seqlens_q is None:
                s("seqlens_q", (self.seqlen_q,) * self.batch)
            if self.seqlens_k is None:
                s("seqlens_k", self.seqlens_q if self.seqlen_k is None else (self.seqlen_k,) * self.batch)
            if len(self.seqlens_q) != self.batch:
                raise _err("seqlens_q", self.seqlens_q, f"has {len(self.seqlens_q)} entries, batch={self.batch} "
                           "(group mode needs one length per sequence)")
            if len(self.seqlens_k) != self.batch:
                raise _err("seqlens_k", self.seqlens_k, f"has {len(self.seqlens_k)} entries, batch={self.batch} "
                           "(group mode needs one length per sequence)")
            s("seqlen_q", max(self.seqlens_q) if self.seqlens_q else 0)
            s("seqlen_k", max(self.seqlens_k) if self.seqlens_k else 0)
        elif self.seqlen_k is None:
            s("seqlen_k", self.seqlen_q)
        self.validate()

    @staticmethod
    def _as_int(name: str, v: Any) -> int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise _err(name, v, "is not an int")
        return int(v.__index__())

    def _check_int32(self) -> None:
        """CK's int32 bounds (module doc): the fields of :data:`INT32_FIELDS` and :data:`INT32_LIST_FIELDS` and
        the group-mode token totals.  Works before the group-mode lengths are expanded (``None`` = not yet)."""
        for name in INT32_FIELDS:
            v = getattr(self, name)
            if v is not None and v > INT32_MAX:
                raise _err(name, v, _INT32_RULE)
        for name in INT32_LIST_FIELDS:
            for i, v in enumerate(getattr(self, name) or ()):
                if v > INT32_MAX:
                    raise _err(f"{name}[{i}]", v, _INT32_RULE)
        if self.mode is not Mode.GROUP:
            return
        q_total = sum(self.seqlens_q) if self.seqlens_q is not None else self.seqlen_q * self.batch
        if q_total > INT32_MAX:
            raise _err("seqlens_q", _brief(self.seqlens_q, self.seqlen_q, self.batch),
                       f"sums to {q_total} query tokens, which exceeds INT32_MAX = {INT32_MAX} (group mode's "
                       "seqstart_q is an int32 array)")
        if self.s_kpad is not None:
            k_name, k_values, k_total = "s_kpad", self.s_kpad, sum(self.s_kpad)
        elif self.seqlens_k is not None:
            k_name, k_values, k_total = "seqlens_k", self.seqlens_k, sum(self.seqlens_k)
        elif self.seqlen_k is not None:
            k_name, k_values, k_total = "seqlens_k", None, self.seqlen_k * self.batch
        else:
            return  # the keys are the queries
        if k_total > INT32_MAX:
            raise _err(k_name, _brief(k_values, self.seqlen_k, self.batch), f"sums to {k_total} physical key "
                       f"tokens, which exceeds INT32_MAX = {INT32_MAX} (group mode's seqstart_k is an int32 array)")

    def validate(self) -> None:
        """Raise :class:`ProblemError` for the first violated rule."""
        self._check_int32()
        f, d = self.family, self.dtype
        if f not in PROBLEM_FAMILIES:
            raise _err("family", f.value, "is an internal kernel stage, not a problem family; allowed: "
                       + ", ".join(x.value for x in PROBLEM_FAMILIES) + " (bwd_dq_dk_dv = the whole backward)")
        is_bwd = f is BWD
        allowed_dtypes = BWD_DTYPES if is_bwd else FWD_DTYPES
        if d not in allowed_dtypes:
            raise _err("dtype", d.value, f"is not defined for family {f.value}; allowed: "
                       + ", ".join(x.value for x in allowed_dtypes))
        for name in ("batch", "nhead_q", "nhead_k", "hdim_q", "hdim_v"):
            if getattr(self, name) < 1:
                raise _err(name, getattr(self, name), "must be >= 1")
        if self.nhead_q % self.nhead_k:
            raise _err("nhead_k", self.nhead_k, f"does not divide nhead_q={self.nhead_q} "
                       "(GQA/MQA needs nhead_q % nhead_k == 0)")
        for name in ("hdim_q", "hdim_v"):
            if getattr(self, name) > MAX_HDIM:
                raise _err(name, getattr(self, name), f"exceeds {MAX_HDIM}, the largest head dim CK generates")
        # ---- lengths
        if self.mode is Mode.BATCH:
            for name in ("seqlens_q", "seqlens_k", "s_kpad"):
                if getattr(self, name) is not None:
                    raise _err(name, getattr(self, name), "is only defined in group mode (mode=group)")
            if self.seqlen_q < 1:
                raise _err("seqlen_q", self.seqlen_q, "must be >= 1 in batch mode")
            if self.seqlen_k < 0:
                raise _err("seqlen_k", self.seqlen_k, "must be >= 0")
        else:
            if any(x < 0 for x in self.seqlens_q):
                raise _err("seqlens_q", self.seqlens_q, "has a negative length")
            if any(x < 0 for x in self.seqlens_k):
                raise _err("seqlens_k", self.seqlens_k, "has a negative length")
            if sum(self.seqlens_q) < 1:
                raise _err("seqlens_q", self.seqlens_q, "must contain at least one query")
            if self.s_kpad is not None:
                if len(self.s_kpad) != self.batch:
                    raise _err("s_kpad", self.s_kpad, f"has {len(self.s_kpad)} entries, batch={self.batch}")
                for i, (p, k) in enumerate(zip(self.s_kpad, self.seqlens_k)):
                    if p < k:
                        raise _err("s_kpad", self.s_kpad, f"entry {i} = {p} < seqlens_k[{i}] = {k} "
                                   "(kpad must be >= the sequence's key length)")
        # ---- numerics
        if self.scale < 0:
            raise _err("scale", self.scale, "must be >= 0 (0 means 1/sqrt(hdim_q))")
        if not 0.0 <= self.p_drop < 1.0:
            raise _err("p_drop", self.p_drop, "must be in [0, 1)")
        if not 0 <= self.drop_seed <= _U64:
            raise _err("drop_seed", self.drop_seed, "must fit in uint64")
        if not 0 <= self.drop_offset <= _U64:
            raise _err("drop_offset", self.drop_offset, "must fit in uint64")
        if self.logits_soft_cap < 0:
            raise _err("logits_soft_cap", self.logits_soft_cap, "must be >= 0 (0 = off)")
        # ---- bias
        if self.bias is Bias.NONE and self.bias_rank != 0:
            raise _err("bias_rank", self.bias_rank, "must be 0 without a bias")
        if self.bias is Bias.ELEMENTWISE and self.bias_rank not in (0, 1, 2):
            raise _err("bias_rank", self.bias_rank, "must be 0 (1,1,sq,sk), 1 (1,h,sq,sk) or 2 (b,h,sq,sk)")
        if self.bias is Bias.ELEMENTWISE and self.bias_rank == 2 and self.mode is Mode.GROUP:
            raise _err("bias_rank", 2, "(per-batch elementwise bias) is not defined in group mode")
        if self.bias is Bias.ALIBI and self.bias_rank not in (0, 1):
            raise _err("bias_rank", self.bias_rank, "must be 0 (slopes 1*h) or 1 (slopes b*h) for ALiBi")
        if self.bias is Bias.ALIBI and self.mask.kind is MaskKind.GENERIC:
            raise _err("mask", self.mask.to_ck(), "(generic) cannot be combined with ALiBi (CK defines ALiBi "
                       "positions only for no mask, top-left or bottom-right masks)")
        if self.logits_soft_cap > 0 and self.bias is not Bias.NONE:
            raise _err("logits_soft_cap", self.logits_soft_cap, f"cannot be combined with bias={self.bias.value} "
                       "(CK generates no kernel with both)")
        if self.dbias and not (is_bwd and self.bias is Bias.ELEMENTWISE):
            raise _err("dbias", True, "needs family bwd_dq_dk_dv and an elementwise bias")
        # ---- fp8 / quantization
        if d.is_fp8_family:
            if self.bias is not Bias.NONE:
                raise _err("bias", self.bias.value, f"is not defined for dtype {d.value} (fp8 kernels have no bias)")
            if self.lse:
                raise _err("lse", True, f"is not defined for dtype {d.value}")
            if self.p_drop > 0:
                raise _err("p_drop", self.p_drop, f"dropout is not defined for dtype {d.value}")
        elif self.qscale is not QScale.NONE:
            raise _err("qscale", self.qscale.value, f"needs an fp8 dtype, dtype is {d.value}")
        if self.qscale is QScale.MX:
            raise _err("qscale", "mx", "(microscaling) is not modelled by the reference")
        if self.qscale is QScale.KV_BLOCKSCALE and f is not Family.BATCH_PREFILL:
            raise _err("qscale", "kv_blockscale", "is only defined for batch_prefill")
        # ---- family-specific features
        if is_bwd:
            for name, bad in (("lse", self.lse), ("sink", self.sink), ("logits_soft_cap", self.logits_soft_cap),
                              ("page_block_size", self.page_block_size), ("seqlen_knew", self.seqlen_knew),
                              ("rotary_dim", self.rotary_dim), ("cache_batch_idx", self.cache_batch_idx)):
                if bad:
                    raise _err(name, bad, "is not defined for the backward (the bwd reference always computes LSE)")
            if self.vlayout is not VLayout.ROW:
                raise _err("vlayout", self.vlayout.value, "is not defined for the backward")
        else:
            if self.deterministic:
                raise _err("deterministic", True, "is a backward-only option")
        if self.p_drop > 0 and f not in (Family.FWD, Family.BATCH_PREFILL, BWD):
            raise _err("p_drop", self.p_drop, f"dropout is not defined for {f.value} (CK ignores it on the "
                       "split-KV / KV-cache paths)")
        if self.min_seqlen_q < 0:
            raise _err("min_seqlen_q", self.min_seqlen_q, "must be >= 0 (0 = no sequence is skipped)")
        if self.min_seqlen_q:
            if f is not Family.FWD or self.mode is not Mode.GROUP:
                raise _err("min_seqlen_q", self.min_seqlen_q, "is only defined for fwd in group mode (CK's "
                           "skip_min_seqlen_q kernels skip whole sequences of a varlen batch)")
        if self.num_splits < 1 or self.num_splits > 128:
            raise _err("num_splits", self.num_splits, "must be in 1..128 (0 = CK's heuristic is not modelled)")
        if f is Family.FWD_SPLITKV:
            if self.num_splits < 2 and not self.cache_batch_idx:
                raise _err("num_splits", self.num_splits, "must be >= 2 for fwd_splitkv (or use cache_batch_idx)")
        elif f is not Family.FWD_APPENDKV and self.num_splits != 1:
            raise _err("num_splits", self.num_splits, f"must be 1 for {f.value} (only fwd_splitkv/appendkv split)")
        if self.page_block_size < 0:
            raise _err("page_block_size", self.page_block_size, "must be >= 0 (0 = contiguous KV)")
        if self.page_block_size:
            if f in (Family.FWD, BWD):
                raise _err("page_block_size", self.page_block_size, f"paged KV is not defined for {f.value}")
            if f is not Family.BATCH_PREFILL and self.page_block_size % 128:
                raise _err("page_block_size", self.page_block_size, "must be a multiple of 128 for "
                           f"{f.value} (CK's split-KV/paged-KV kernels)")
        if f is Family.FWD_PAGEDKV and not self.page_block_size:
            raise _err("page_block_size", 0, "must be > 0 for fwd_pagedkv")
        if f is Family.BATCH_PREFILL:
            if self.mode is not Mode.GROUP:
                raise _err("mode", self.mode.value, "must be group for batch_prefill (ragged queries)")
            if not self.page_block_size:
                raise _err("page_block_size", 0, "must be > 0 for batch_prefill")
            if self.kv_lookup is KVLookupTable.NONE:
                raise _err("kv_lookup", "none", "must be vllm (2-D block table) or sglang (1-D page table)")
            if self.kv_layout is KVMemoryLayout.NONE:
                raise _err("kv_layout", "none", "must be vectorized or linear for batch_prefill")
            if self.kv_layout is KVMemoryLayout.VECTORIZED:
                vec = _vec_size(d)
                if self.hdim_q % vec or self.hdim_v % vec or self.page_block_size % vec:
                    raise _err("kv_layout", "vectorized", f"needs hdim_q, hdim_v and page_block_size divisible "
                               f"by the vector size {vec} (16 bytes of {d.value})")
        else:
            if self.kv_lookup is not KVLookupTable.NONE:
                raise _err("kv_lookup", self.kv_lookup.value, "is only defined for batch_prefill")
            if self.kv_layout is not KVMemoryLayout.NONE:
                raise _err("kv_layout", self.kv_layout.value, "is only defined for batch_prefill")
        if self.cache_batch_idx:
            if f not in (Family.FWD_SPLITKV, Family.FWD_APPENDKV):
                raise _err("cache_batch_idx", True, "is only defined for fwd_splitkv and fwd_appendkv")
            if self.page_block_size or self.mode is Mode.GROUP:
                raise _err("cache_batch_idx", True, "cannot be combined with paged KV or group mode")
        if f is Family.FWD_APPENDKV:
            if self.mode is not Mode.BATCH:
                raise _err("mode", self.mode.value, "must be batch for fwd_appendkv")
            if self.seqlen_knew == 0 and self.rotary_dim == 0:
                raise _err("seqlen_knew", 0, "fwd_appendkv needs seqlen_knew > 0 or rotary_dim > 0")
            if not 0 <= self.seqlen_knew <= self.seqlen_k:
                raise _err("seqlen_knew", self.seqlen_knew, f"must be in 0..seqlen_k={self.seqlen_k} "
                           "(seqlen_k includes the appended keys)")
            if self.rotary_dim:
                if self.rotary_dim < 0 or self.rotary_dim > self.hdim_q or self.rotary_dim % 16:
                    raise _err("rotary_dim", self.rotary_dim, f"must be a multiple of 16 and <= hdim_q={self.hdim_q}")
                if self.rope is Rope.NONE:
                    raise _err("rope", "none", "must be interleaved or half_rotated when rotary_dim > 0")
                if d not in (DType.FP16, DType.BF16):
                    raise _err("rotary_dim", self.rotary_dim, f"RoPE is only defined for fp16/bf16, dtype is {d.value}")
            elif self.rope is not Rope.NONE:
                raise _err("rope", self.rope.value, "needs rotary_dim > 0")
        else:
            for name in ("seqlen_knew", "rotary_dim"):
                if getattr(self, name):
                    raise _err(name, getattr(self, name), "is only defined for fwd_appendkv")
            if self.rope is not Rope.NONE:
                raise _err("rope", self.rope.value, "is only defined for fwd_appendkv")
        if self.vlayout is VLayout.COL and f is not Family.FWD:
            raise _err("vlayout", "col", "column-major V is only defined for fwd")

    # ------------------------------------------------------------------ derived values
    def replace(self, **changes: Any) -> "Problem":
        return dataclasses.replace(self, **changes)

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale > 0 else 1.0 / math.sqrt(self.hdim_q)

    @property
    def is_backward(self) -> bool:
        return self.family is BWD

    @property
    def ck_binary(self) -> str:
        return "bwd" if self.is_backward else "fwd"

    @property
    def nhead_ratio(self) -> int:
        return self.nhead_q // self.nhead_k

    @property
    def seqlens_q_list(self) -> tuple[int, ...]:
        return self.seqlens_q if self.mode is Mode.GROUP else (self.seqlen_q,) * self.batch

    @property
    def seqlens_k_list(self) -> tuple[int, ...]:
        return self.seqlens_k if self.mode is Mode.GROUP else (self.seqlen_k,) * self.batch

    @property
    def kpad_list(self) -> tuple[int, ...]:
        """Physical key length per sequence (group mode ``s_kpad``, else the logical length)."""
        return self.s_kpad if self.s_kpad is not None else self.seqlens_k_list

    @property
    def seqstart_q(self) -> tuple[int, ...]:
        out = [0]
        for n in self.seqlens_q_list:
            out.append(out[-1] + n)
        return tuple(out)

    @property
    def seqstart_k(self) -> tuple[int, ...]:
        """Physical key offsets (use ``s_kpad`` when given, as CK's padded group mode)."""
        out = [0]
        for n in self.kpad_list:
            out.append(out[-1] + n)
        return tuple(out)

    @property
    def total_q(self) -> int:
        return sum(self.seqlens_q_list)

    @property
    def cache_seqlens(self) -> tuple[int, ...]:
        """fwd_appendkv: keys already in the cache before the append, per batch."""
        return tuple(k - self.seqlen_knew for k in self.seqlens_k_list)

    @property
    def vector_size(self) -> int:
        return _vec_size(self.dtype)

    def __str__(self) -> str:
        try:
            args = " ".join(self.to_ck_args())
        except ProblemError:
            args = repr(self)
        return f"{self.family.value}: {args}"

    # ------------------------------------------------------------------ CK command lines
    def to_ck_args(self) -> list[str]:
        """``-key=value`` tokens for ``tile_example_fmha_fwd`` / ``_bwd`` (non-default values only)."""
        f = self.family
        if f is Family.BATCH_PREFILL:
            raise ProblemError("family: 'batch_prefill' has no tile_example command line")
        bwd = self.is_backward
        if self.min_seqlen_q:
            raise ProblemError(f"min_seqlen_q: {self.min_seqlen_q} cannot be given to tile_example_fmha_fwd, which has "
                               "no argument for it")
        a: list[str] = []
        add = lambda k, v: a.append(f"-{k}={v}")  # noqa: E731
        add("prec", self.dtype.value)
        if self.mode is Mode.GROUP:
            add("mode", 1)
        add("b", self.batch)
        add("h", self.nhead_q)
        if self.nhead_k != self.nhead_q:
            add("h_k", self.nhead_k)
        if self.mode is Mode.GROUP:
            add("s", ",".join(map(str, self.seqlens_q)))
            add("s_k", ",".join(map(str, self.seqlens_k)))
            if self.s_kpad is not None:
                if self.is_backward:
                    raise ProblemError(f"s_kpad: {self.s_kpad!r} cannot be given to tile_example_fmha_bwd, which has no "
                                       "-s_kpad argument")
                add("s_kpad", ",".join(map(str, self.s_kpad)))
        else:
            add("s", self.seqlen_q)
            add("s_k", self.seqlen_k)
        add("d", self.hdim_q)
        if self.hdim_v != self.hdim_q:
            add("d_v", self.hdim_v)
        if self.scale:
            add("scale" if bwd else "scale_s", repr(self.scale))
        if self.input_layout is not Layout.BHSD:
            add("iperm", 0)
        if self.output_layout is not Layout.BHSD:
            add("operm", 0)
        if self.bias is not Bias.NONE:
            tok = "e" if self.bias is Bias.ELEMENTWISE else "a"
            add("bias", tok if self.bias_rank == 0 else f"{tok}:{self.bias_rank}")
        if self.mask.kind is not MaskKind.NONE:
            add("mask", self.mask.to_ck())
        if self.p_drop:
            add("p_drop", repr(self.p_drop))
        if self.drop_seed != 1:
            add("drop_seed", self.drop_seed)
        if self.drop_offset:
            add("drop_offset", self.drop_offset)
        if bwd:
            if self.dbias:
                add("dbias", 1)
            if self.deterministic:
                add("deterministic", 1)
            return a
        if self.lse:
            add("lse", 1)
        if self.vlayout is VLayout.COL:
            add("vlayout", "c")
        if self.logits_soft_cap:
            add("logits_soft_cap", repr(self.logits_soft_cap))
        if self.sink:
            add("init_sink", 1)
        if self.qscale is not QScale.NONE:
            add("qscale", {QScale.PERTENSOR: "pt", QScale.BLOCKSCALE: "bs"}[self.qscale])
        if self.seqlen_knew:
            add("s_knew", self.seqlen_knew)
        if self.rotary_dim:
            add("rotary_dim", self.rotary_dim)
            add("rotary_interleaved", 1 if self.rope is Rope.INTERLEAVED else 0)
        if self.num_splits != 1:
            add("num_splits", self.num_splits)
        if self.page_block_size:
            add("page_block_size", self.page_block_size)
        if self.cache_batch_idx:
            add("cache_batch_idx", 1)
        return a

    def to_ck_command(self) -> str:
        return " ".join([f"tile_example_fmha_{self.ck_binary}"] + self.to_ck_args())

    @classmethod
    def from_ck_args(cls, args: "str | Iterable[str]", binary: str | None = None) -> "Problem":
        """Parse tile_example arguments (a string or a list of ``-key=value`` tokens).  A leading program name
        (``tile_example_fmha_fwd`` / ``..._bwd``) selects the binary; otherwise ``binary`` (default ``fwd``)."""
        toks = shlex.split(args) if isinstance(args, str) else list(args)
        if toks and not toks[0].startswith("-"):
            prog = toks.pop(0).rsplit("/", 1)[-1]
            if prog.endswith("bwd"):
                binary = binary or "bwd"
            elif prog.endswith("fwd"):
                binary = binary or "fwd"
            else:
                raise ProblemError(f"args: illegal input {prog!r} (arguments must look like -key=value)")
        binary = binary or "fwd"
        if binary not in ("fwd", "bwd"):
            raise ProblemError(f"binary: {binary!r} is not a tile_example binary; allowed: fwd, bwd")
        kv: dict[str, str] = {}
        for t in toks:
            if not t.startswith("-"):
                raise ProblemError(f"args: illegal input {t!r} (arguments must look like -key=value)")
            if "=" not in t:
                raise ProblemError(f"args: {t!r} should be a -key=value pair")
            k, v = t[1:].split("=", 1)
            if v == "":
                raise ProblemError(f"args: no value after '=' in {t!r}")
            kv[k] = v
        return _from_kv(kv, binary)


# ---------------------------------------------------------------------- argument parsing
_FWD_KEYS = {"mode", "b", "h", "h_k", "s", "s_k", "s_kpad", "d", "d_v", "scale_s", "iperm", "operm", "bias", "prec",
             "mask", "vlayout", "lse", "p_drop", "drop_seed", "drop_offset", "logits_soft_cap", "squant", "qscale",
             "s_knew", "rotary_dim", "rotary_interleaved", "num_splits", "page_block_size", "cache_batch_idx",
             "init_sink"}
_BWD_KEYS = {"mode", "b", "h", "h_k", "s", "s_k", "d", "d_v", "scale", "iperm", "operm", "bias", "dbias", "prec",
             "mask", "p_drop", "drop_seed", "drop_offset", "deterministic"}
# Arguments CK's tile_example binaries take (example_fmha_fwd.cpp / example_fmha_bwd.cpp, and CK's smoke scripts use
# them) that Problem has no field for: an error that says so, not "no such argument".
_UNMODELLED_FWD = {"q_eff_lens": "per-batch effective query lengths (batch-mode padding)",
                   "kv_eff_lens": "per-batch effective key lengths (batch-mode padding)",
                   "s_qpad": "per-sequence physical query lengths (group-mode query padding)"}
_UNMODELLED_BWD = {"s_qpad": "per-sequence physical query lengths (group-mode query padding)",
                   "s_kpad": "per-sequence physical key lengths (group-mode key padding)"}


def _scalar(k: str, v: str) -> str:
    """The number text of a scalar argument. CK's ArgParser (ck_tile/host/arg_parser.hpp) reads scalars with
    ``atoi`` / ``strtoul`` / ``atof``: the leading number, so ``-d=16,`` (a trailing comma, as in CK's own smoke
    logs) is 16. A trailing comma is accepted; more after it (``16,32``) is an error, not CK's silent 16."""
    if v.endswith(",") and "," not in v[:-1] and len(v) > 1:
        return v[:-1]
    if "," in v and v.split(",", 1)[0]:
        raise ProblemError(f"-{k}: {v!r} is a list, but -{k} takes one number (CK's parser would read the leading "
                           f"{v.split(',', 1)[0]!r} and ignore the rest)")
    return v


def _to_int(k: str, v: str) -> int:
    t = _scalar(k, v)
    try:
        return int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t)
    except ValueError:
        raise ProblemError(f"-{k}: {v!r} is not an integer") from None


def _to_float(k: str, v: str) -> float:
    t = _scalar(k, v)
    try:
        return float(t)
    except ValueError:
        raise ProblemError(f"-{k}: {v!r} is not a number") from None


def _to_bool(k: str, v: str) -> bool:
    lv = v.lower()
    if lv in ("t", "true"):
        return True
    if lv in ("f", "false"):
        return False
    return _to_int(k, v) != 0


def _int_list(k: str, v: str) -> list[int]:
    """A comma-separated int list as CK's ``ArgParser::get_int_vec`` reads it: split at every comma, each item with
    ``atoi`` -- so an empty item (``-s=16,``) is 0, a length CK then uses."""
    out = []
    for x in v.split(","):
        if x == "":
            out.append(0)
            continue
        try:
            out.append(int(x, 0) if x.lower().startswith(("0x", "-0x")) else int(x))
        except ValueError:
            raise ProblemError(f"-{k}: {v!r} has {x!r}, which is not an integer") from None
    return out


def _from_kv(kv: dict[str, str], binary: str) -> Problem:
    keys = _BWD_KEYS if binary == "bwd" else _FWD_KEYS
    unmodelled = _UNMODELLED_BWD if binary == "bwd" else _UNMODELLED_FWD
    for k in kv:
        if k in unmodelled:
            raise ProblemError(f"-{k}: {kv[k]!r}: tile_example_fmha_{binary} takes -{k} ({unmodelled[k]}), which "
                               "ckfmha's Problem does not model")
        if k not in keys and k not in RUNNER_ONLY_ARGS:
            raise ProblemError(f"-{k}: no such argument for tile_example_fmha_{binary}")
    g = kv.get
    mode = _to_int("mode", g("mode", "0"))
    if mode not in (0, 1):
        raise ProblemError(f"-mode: {mode} is not a mode; allowed: 0 (batch), 1 (group)")
    group = mode == 1
    b = _to_int("b", g("b", "2"))
    h = _to_int("h", g("h", "8"))
    h_k = _to_int("h_k", g("h_k", "-1"))
    sq = _int_list("s", g("s", "3328"))
    sk = _int_list("s_k", g("s_k", "-1"))
    d = _to_int("d", g("d", "128"))
    dv = _to_int("d_v", g("d_v", "-1"))
    kw: dict[str, Any] = dict(batch=b, nhead_q=h, nhead_k=None if h_k < 0 else h_k, hdim_q=d,
                              hdim_v=None if dv < 0 else dv)
    if group:
        kw["mode"] = Mode.GROUP
        # One length is used for every sequence (CK draws random lengths around -s); Problem broadcasts it
        # after its int32 checks, so a huge -b is an error, not a huge list.
        if len(sq) == 1:
            kw["seqlen_q"] = sq[0]
        else:
            kw["seqlens_q"] = tuple(sq)
        if len(sk) == 1:
            if sk != [-1]:
                kw["seqlen_k"] = sk[0]  # -1: the keys are the queries
        else:
            kw["seqlens_k"] = tuple(sk)
        if "s_kpad" in kv:
            kp = _int_list("s_kpad", kv["s_kpad"])
            if kp != [-1]:
                if len(kp) == 1 and b <= INT32_MAX:  # a larger -b is Problem's error (batch exceeds INT32_MAX)
                    kp = kp * b
                kw["s_kpad"] = tuple(kp)
    else:
        if len(sq) != 1:
            raise ProblemError(f"-s: {g('s')!r} lists several lengths {tuple(sq)} (an empty item is 0, as CK reads "
                               "it); per-sequence lengths need -mode=1")
        if len(sk) != 1:
            raise ProblemError(f"-s_k: {g('s_k')!r} lists several lengths {tuple(sk)} (an empty item is 0, as CK "
                               "reads it); per-sequence lengths need -mode=1")
        kw["seqlen_q"] = sq[0]
        kw["seqlen_k"] = None if sk[0] < 0 else sk[0]
        if "s_kpad" in kv and _int_list("s_kpad", kv["s_kpad"]) != [-1]:
            raise ProblemError(f"-s_kpad: {kv['s_kpad']!r} is only modelled in group mode (-mode=1)")
    prec = g("prec", "fp16")
    try:
        kw["dtype"] = DType(prec)
    except ValueError:
        raise ProblemError(f"-prec: {prec!r} unsupported precision; allowed: "
                           + ", ".join(x.value for x in (BWD_DTYPES if binary == "bwd" else FWD_DTYPES))) from None
    scale_key = "scale" if binary == "bwd" else "scale_s"
    kw["scale"] = _to_float(scale_key, g(scale_key, "0"))
    kw["input_layout"] = Layout.BHSD if _to_bool("iperm", g("iperm", "1")) else Layout.BSHD
    kw["output_layout"] = Layout.BHSD if _to_bool("operm", g("operm", "1")) else Layout.BSHD
    bias = g("bias", "n")
    btype, _, brank = bias.partition(":")
    if btype in ("n", "0"):
        kw["bias"] = Bias.NONE
    elif btype in ("e", "1", "elementwise"):
        kw["bias"] = Bias.ELEMENTWISE
    elif btype in ("a", "2", "alibi"):
        kw["bias"] = Bias.ALIBI
    else:
        raise ProblemError(f"-bias: invalid bias value {bias!r}; allowed: n, e, e:1, e:2, a, a:1")
    kw["bias_rank"] = _to_int("bias", brank) if brank else 0
    try:
        kw["mask"] = MaskSpec.parse(g("mask", "0"))
    except MaskError as e:
        raise ProblemError(f"-mask: {e}") from None
    kw["p_drop"] = _to_float("p_drop", g("p_drop", "0"))
    kw["drop_seed"] = _to_int("drop_seed", g("drop_seed", "1"))
    kw["drop_offset"] = _to_int("drop_offset", g("drop_offset", "0"))
    if binary == "bwd":
        kw["family"] = BWD
        kw["dbias"] = _to_bool("dbias", g("dbias", "0"))
        kw["deterministic"] = _to_bool("deterministic", g("deterministic", "0"))
        return Problem(**kw)
    kw["lse"] = _to_bool("lse", g("lse", "0"))
    vl = g("vlayout", "r")
    if vl not in ("r", "c"):
        raise ProblemError(f"-vlayout: {vl!r} must be r or c")
    kw["vlayout"] = VLayout.ROW if vl == "r" else VLayout.COL
    kw["logits_soft_cap"] = _to_float("logits_soft_cap", g("logits_soft_cap", "0"))
    kw["sink"] = _to_bool("init_sink", g("init_sink", "0"))
    qs = g("qscale")
    if qs is not None:
        qmap = {"n": QScale.NONE, "0": QScale.NONE, "pt": QScale.PERTENSOR, "1": QScale.PERTENSOR,
                "bs": QScale.BLOCKSCALE, "2": QScale.BLOCKSCALE, "mx": QScale.MX}
        if qs not in qmap:
            raise ProblemError(f"-qscale: {qs!r} unknown; allowed: n, pt, bs, mx")
        kw["qscale"] = qmap[qs]
    elif "squant" in kv:
        sq_v = kv["squant"]
        on = kw["dtype"].is_fp8_family if sq_v == "auto" else _to_bool("squant", sq_v)
        kw["qscale"] = QScale.PERTENSOR if on else QScale.NONE
    s_knew = _to_int("s_knew", g("s_knew", "0"))
    if s_knew < 0:
        raise ProblemError(f"-s_knew: {s_knew} (random length) is not modelled; give an explicit length")
    kw["seqlen_knew"] = s_knew
    kw["rotary_dim"] = _to_int("rotary_dim", g("rotary_dim", "0"))
    if kw["rotary_dim"]:
        kw["rope"] = Rope.INTERLEAVED if _to_bool("rotary_interleaved", g("rotary_interleaved", "1")) \
            else Rope.HALF_ROTATED
    kw["num_splits"] = _to_int("num_splits", g("num_splits", "1"))
    kw["page_block_size"] = _to_int("page_block_size", g("page_block_size", "0"))
    kw["cache_batch_idx"] = _to_bool("cache_batch_idx", g("cache_batch_idx", "0"))
    if kw["seqlen_knew"] or kw["rotary_dim"]:
        kw["family"] = Family.FWD_APPENDKV
    elif kw["num_splits"] != 1 or kw["cache_batch_idx"]:
        kw["family"] = Family.FWD_SPLITKV
    elif kw["page_block_size"]:
        kw["family"] = Family.FWD_PAGEDKV
    else:
        kw["family"] = Family.FWD
    return Problem(**kw)
