"""The problem model: one attention problem a kernel is run on (shapes, features, numerics).

A :class:`Problem` is frozen and validated on construction (:meth:`Problem.validate`): every impossible or
CK-undefined combination raises :class:`ProblemError` naming the field, the value and the rule.  Sizes are
Python ints (arbitrary precision); products of sizes are never formed in int32.

CK holds every size and count as ``ck_tile::index_t`` (int32_t) and the group-mode ``seqstart`` arrays as int32
(``fmha_fwd_args`` / ``fmha_bwd_args`` in example/ck_tile/01_fmha/fmha_fwd.hpp and fmha_bwd.hpp).  So every field
of :data:`INT32_FIELDS`, every entry of :data:`INT32_LIST_FIELDS` and, in group mode, the total number of physical
query tokens (``sum(s_qpad)``, else ``sum(seqlens_q)``) and of physical key tokens (``sum(s_kpad)``, else
``sum(seqlens_k)``) must be ``<= INT32_MAX`` (:mod:`ckfmha.limits`); this is checked before anything is expanded per
sequence.

Logical and physical lengths.  A sequence's *logical* length is what attention sees (:attr:`Problem.seqlens_q_list`
/ :attr:`Problem.seqlens_k_list`); its *physical* length is the rows its tensors hold (:attr:`Problem.qpad_list` /
:attr:`Problem.kpad_list`, whose running sums are ``seqstart_q`` / ``seqstart_k``).  They differ where CK pads:

* group mode ``s_qpad`` / ``s_kpad``: per-sequence physical lengths (CK's ``-s_qpad`` / ``-s_kpad``; the kernels get
  the padded ``seqstart`` arrays and the logical lengths: fmha_fwd_runner.hpp ``seqstart_q_padded_buf`` /
  ``seqlen_q_buf``); the rows between a sequence's logical end and the next start are never written;
* batch mode ``q_eff_lens`` / ``kv_eff_lens``: per-batch logical lengths inside the batch stride ``seqlen_q`` /
  ``seqlen_k`` (CK's ``-q_eff_lens`` / ``-kv_eff_lens``, passed to the kernel as ``cu_seqlen_q_ptr`` /
  ``cu_seqlen_k_ptr``; and the per-batch KV-cache lengths CK's runner draws for an append-KV batch, passed as
  ``seqlen_k_ptr``); query rows past a batch's effective length are never written.

``family`` is one of the user-facing :class:`ckfmha.kernel.Family` values ``fwd``, ``fwd_splitkv``,
``fwd_pagedkv``, ``fwd_appendkv``, ``batch_prefill`` and ``bwd_dq_dk_dv``, which here means *the whole
backward* (dot_do_o + dq_dk_dv + convert_dq); the token ``bwd`` is accepted for it.

CK's tile_example command-line dialect (``-key=value`` arguments of ``tile_example_fmha_fwd`` / ``_bwd``) is
:mod:`ckfmha.ck_args` (public names, semantics) over :mod:`ckfmha.ck_dialect`, which reads a command line into a
Problem's constructor fields and renders a problem, and never imports this module.  :func:`ck_run_from_args` /
:func:`problem_from_ck_args` (and :meth:`Problem.from_ck_args`, :meth:`Problem.ck_run_from_args`) build the Problem
from those fields; :meth:`Problem.to_ck_args` and :meth:`Problem.to_ck_command` delegate to the dialect
(``Problem.from_ck_args(p.to_ck_args(), binary=p.ck_binary) == p``).  The error class, the layouts and the
per-binary dtypes live in :mod:`ckfmha.problem_base`, below both, and are re-exported here.

:meth:`Problem.validate` runs the rule groups of :data:`Problem._RULE_GROUPS` in a fixed order (int32 bounds, family
and dtype, sizes, lengths, numerics, bias, fp8, family features, paging, append-KV, V layout) and raises for the
first violated rule; single-field rules are tables (:data:`INT32_FIELDS`, :data:`POSITIVE_FIELDS`,
:data:`NUMERIC_RANGES`...).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ckfmha.kernel import Bias, DType, Family, KVLookupTable, KVMemoryLayout, Mode, QScale, Rope, VLayout
from ckfmha.limits import INT32_MAX
from ckfmha.masking import MaskError, MaskKind, MaskSpec
from ckfmha.problem_base import BWD, BWD_DTYPES, FWD_DTYPES, Layout, ProblemError

PROBLEM_FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV, Family.FWD_APPENDKV, Family.BATCH_PREFILL, BWD)
MAX_HDIM = 256
BLOCK_SCALE_SIZE = 128  # rows of Q (and of K/V) sharing one descale in the block-scale mode
_U64 = (1 << 64) - 1
INT32_FIELDS = (
    "batch",
    "nhead_q",
    "nhead_k",
    "seqlen_q",
    "seqlen_k",
    "hdim_q",
    "hdim_v",
    "bias_rank",
    "page_block_size",
    "seqlen_knew",
    "rotary_dim",
    "num_splits",
    "min_seqlen_q",
)
"""Scalar sizes and counts CK holds as ``ck_tile::index_t`` (int32): each must be ``<= INT32_MAX``."""
LENGTH_LIST_FIELDS = ("seqlens_q", "seqlens_k", "s_kpad", "s_qpad")
"""Per-sequence lengths: defined in group mode only."""
EFF_LENGTH_FIELDS = ("q_eff_lens", "kv_eff_lens")
"""Per-batch logical lengths inside the batch stride: defined in batch mode only."""
INT32_LIST_FIELDS = LENGTH_LIST_FIELDS + EFF_LENGTH_FIELDS
"""Per-sequence / per-batch lengths: each entry must be ``<= INT32_MAX``."""
Q_EFF_FAMILIES = (Family.FWD,)
"""Families with per-batch effective query lengths (CK's ``cu_seqlen_q_ptr`` of ``fmha_fwd_args``; the runner refuses
padding with the append-KV / split-KV / paged-KV pipelines)."""
KV_EFF_FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV, Family.FWD_APPENDKV)
"""Families with per-batch key lengths: fwd (``cu_seqlen_k_ptr``) and the KV-cache families (``seqlen_k_ptr``, the
cache lengths of each batch)."""
QPAD_FAMILIES = (Family.FWD, Family.BWD_DQ_DK_DV)
"""Families with group-mode physical query lengths ``s_qpad`` (fmha_fwd_runner.hpp: plain fwd only; fmha_bwd_runner.hpp)."""
_INT32_RULE = f"exceeds INT32_MAX = {INT32_MAX} (CK holds sizes and counts as ck_tile::index_t = int32_t)"
POSITIVE_FIELDS = ("batch", "nhead_q", "nhead_k", "hdim_q", "hdim_v")
"""Counts and head dims: each must be ``>= 1``."""
HDIM_FIELDS = ("hdim_q", "hdim_v")
"""Head dims: each must be ``<= MAX_HDIM``, the largest CK generates."""
NUMERIC_RANGES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("scale", lambda v: v >= 0, "must be >= 0 (0 means 1/sqrt(hdim_q))"),
    ("p_drop", lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    ("drop_seed", lambda v: 0 <= v <= _U64, "must fit in uint64"),
    ("drop_offset", lambda v: 0 <= v <= _U64, "must fit in uint64"),
    ("logits_soft_cap", lambda v: v >= 0, "must be >= 0 (0 = off)"),
)
"""(field, whether a value is in range, the rule in words), checked in this order."""
BWD_UNDEFINED_FIELDS = (
    "lse",
    "sink",
    "logits_soft_cap",
    "page_block_size",
    "seqlen_knew",
    "rotary_dim",
    "cache_batch_idx",
)
"""Forward-only features: each must be off (false / 0) for the backward."""
APPENDKV_ONLY_FIELDS = ("seqlen_knew", "rotary_dim")
"""Features of fwd_appendkv alone: each must be 0 for the other families."""
# The field types :meth:`Problem.__post_init__` normalises, in the order they are checked.
_ENUM_FIELDS = (
    ("family", Family),
    ("dtype", DType),
    ("mode", Mode),
    ("bias", Bias),
    ("qscale", QScale),
    ("kv_lookup", KVLookupTable),
    ("kv_layout", KVMemoryLayout),
    ("rope", Rope),
    ("vlayout", VLayout),
)
_LAYOUT_FIELDS = ("input_layout", "output_layout")
_INT_FIELDS = (
    "batch",
    "nhead_q",
    "seqlen_q",
    "hdim_q",
    "bias_rank",
    "drop_seed",
    "drop_offset",
    "page_block_size",
    "seqlen_knew",
    "rotary_dim",
    "num_splits",
    "min_seqlen_q",
)
_OPTIONAL_INT_FIELDS = ("nhead_k", "seqlen_k", "hdim_v")  # None: the default of the Problem docstring
_BOOL_FIELDS = ("lse", "sink", "cache_batch_idx", "deterministic", "dbias")
_FLOAT_FIELDS = ("scale", "p_drop", "logits_soft_cap")  # finite; ints are taken as floats


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
    physical lengths ``s_qpad`` / ``s_kpad``); ``seqlen_q`` / ``seqlen_k`` then become the maxima.  Batch mode takes
    optional per-batch logical lengths ``q_eff_lens`` / ``kv_eff_lens`` inside the batch stride ``seqlen_q`` /
    ``seqlen_k`` (module doc)."""

    family: Family = Family.FWD
    dtype: DType = DType.FP16
    mode: Mode = Mode.BATCH
    batch: int = 1
    nhead_q: int = 1
    # nhead_k / seqlen_k / hdim_v take None (their default), which __post_init__ always replaces by an int: they
    # are typed as every reader sees them, and mypy cannot know that __post_init__ resolves the None default.
    nhead_k: int = None  # type: ignore[assignment]  # None: see above
    seqlen_q: int = 1
    seqlen_k: int = None  # type: ignore[assignment]  # None: see above
    hdim_q: int = 64
    hdim_v: int = None  # type: ignore[assignment]  # None: see above
    seqlens_q: tuple[int, ...] | None = None
    seqlens_k: tuple[int, ...] | None = None
    s_kpad: tuple[int, ...] | None = None
    s_qpad: tuple[int, ...] | None = None
    q_eff_lens: tuple[int, ...] | None = None
    kv_eff_lens: tuple[int, ...] | None = None
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
        """Normalise the fields (tokens to enums, ints, bools, floats; ``None`` defaults; group-mode lengths) and
        validate; each step raises :class:`ProblemError` naming the field."""
        self._coerce_tokens()
        self._coerce_numbers()
        if self.nhead_k is None:
            self._set("nhead_k", self.nhead_q)
        if self.hdim_v is None:
            self._set("hdim_v", self.hdim_q)
        self._check_int32()  # before the per-sequence tuples below are built from batch
        self._expand_lengths()
        self.validate()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # the dataclass is frozen; only normalisation writes

    def _coerce_tokens(self) -> None:
        """Enum fields from their tokens (``family`` also from ``bwd``), the layouts and the mask."""
        if isinstance(self.family, str) and self.family == "bwd":
            self._set("family", BWD)
        for name, cls in _ENUM_FIELDS:
            try:
                self._set(name, cls.parse(getattr(self, name), name))
            except ValueError as e:
                raise ProblemError(str(e)) from None
        for name in _LAYOUT_FIELDS:
            v = getattr(self, name)
            try:
                self._set(name, Layout(v))
            except ValueError:
                raise _err(name, v, "is not a layout; allowed: bhsd, bshd") from None
        try:
            self._set("mask", MaskSpec.parse(self.mask))
        except MaskError as e:
            raise ProblemError(str(e)) from None

    def _coerce_numbers(self) -> None:
        """Ints (``bool`` is not one), bools, finite floats and the per-sequence length tuples."""
        for name in _INT_FIELDS:
            self._set(name, self._as_int(name, getattr(self, name)))
        for name in _OPTIONAL_INT_FIELDS:
            v = getattr(self, name)
            if v is not None:
                self._set(name, self._as_int(name, v))
        for name in _BOOL_FIELDS:
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise _err(name, v, "is not a bool")
        for name in _FLOAT_FIELDS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise _err(name, v, "is not a finite number")
            self._set(name, float(v))
        for name in INT32_LIST_FIELDS:
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, (int, str)) or not isinstance(v, Iterable):
                    raise _err(name, v, "is not a sequence of ints")
                self._set(name, tuple(self._as_int(name, x) for x in v))

    def _expand_lengths(self) -> None:
        """Group mode: one length per sequence (``seqlen_q`` / ``seqlen_k`` broadcast; the keys default to the
        queries) and ``seqlen_q`` / ``seqlen_k`` become the maxima.  Batch mode: ``seqlen_k`` defaults to
        ``seqlen_q``."""
        if self.mode is not Mode.GROUP:
            if self.seqlen_k is None:
                self._set("seqlen_k", self.seqlen_q)
            return
        if self.seqlens_q is None:
            self._set("seqlens_q", (self.seqlen_q,) * self.batch)
        if self.seqlens_k is None:
            self._set("seqlens_k", self.seqlens_q if self.seqlen_k is None else (self.seqlen_k,) * self.batch)
        for name in ("seqlens_q", "seqlens_k"):
            v = getattr(self, name)
            if len(v) != self.batch:
                raise _err(
                    name, v, f"has {len(v)} entries, batch={self.batch} (group mode needs one length per sequence)"
                )
        self._set("seqlen_q", max(self.seqlens_q) if self.seqlens_q else 0)
        self._set("seqlen_k", max(self.seqlens_k) if self.seqlens_k else 0)

    @staticmethod
    def _as_int(name: str, v: Any) -> int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise _err(name, v, "is not an int")
        return int(v.__index__())

    def validate(self) -> None:
        """Raise :class:`ProblemError` for the first violated rule: the groups of :data:`_RULE_GROUPS` run in
        their order, each raising for its first violated rule."""
        for check in self._RULE_GROUPS:
            check(self)

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
        if self.s_qpad is not None:
            q_name, q_values, q_total = "s_qpad", self.s_qpad, sum(self.s_qpad)
        elif self.seqlens_q is not None:
            q_name, q_values, q_total = "seqlens_q", self.seqlens_q, sum(self.seqlens_q)
        else:
            q_name, q_values, q_total = "seqlens_q", None, self.seqlen_q * self.batch
        if q_total > INT32_MAX:
            raise _err(
                q_name,
                _brief(q_values, self.seqlen_q, self.batch),
                f"sums to {q_total} query tokens, which exceeds INT32_MAX = {INT32_MAX} (group mode's "
                "seqstart_q is an int32 array)",
            )
        if self.s_kpad is not None:
            k_name, k_values, k_total = "s_kpad", self.s_kpad, sum(self.s_kpad)
        elif self.seqlens_k is not None:
            k_name, k_values, k_total = "seqlens_k", self.seqlens_k, sum(self.seqlens_k)
        elif self.seqlen_k is not None:
            k_name, k_values, k_total = "seqlens_k", None, self.seqlen_k * self.batch
        else:
            return  # the keys are the queries
        if k_total > INT32_MAX:
            raise _err(
                k_name,
                _brief(k_values, self.seqlen_k, self.batch),
                f"sums to {k_total} physical key "
                f"tokens, which exceeds INT32_MAX = {INT32_MAX} (group mode's seqstart_k is an int32 array)",
            )

    def _check_family_and_dtype(self) -> None:
        f, d = self.family, self.dtype
        if f not in PROBLEM_FAMILIES:
            raise _err(
                "family",
                f.value,
                "is an internal kernel stage, not a problem family; allowed: "
                + ", ".join(x.value for x in PROBLEM_FAMILIES)
                + " (bwd_dq_dk_dv = the whole backward)",
            )
        allowed_dtypes = BWD_DTYPES if f is BWD else FWD_DTYPES
        if d not in allowed_dtypes:
            raise _err(
                "dtype",
                d.value,
                f"is not defined for family {f.value}; allowed: " + ", ".join(x.value for x in allowed_dtypes),
            )

    def _check_sizes(self) -> None:
        """Counts and head dims (:data:`POSITIVE_FIELDS`, :data:`HDIM_FIELDS`) and GQA's head ratio."""
        for name in POSITIVE_FIELDS:
            if getattr(self, name) < 1:
                raise _err(name, getattr(self, name), "must be >= 1")
        if self.nhead_q % self.nhead_k:
            raise _err(
                "nhead_k",
                self.nhead_k,
                f"does not divide nhead_q={self.nhead_q} (GQA/MQA needs nhead_q % nhead_k == 0)",
            )
        for name in HDIM_FIELDS:
            if getattr(self, name) > MAX_HDIM:
                raise _err(name, getattr(self, name), f"exceeds {MAX_HDIM}, the largest head dim CK generates")

    def _check_lengths(self) -> None:
        """Sequence lengths: batch mode's ``seqlen_q`` / ``seqlen_k`` and effective lengths; group mode's lists and
        physical lengths ``s_qpad`` / ``s_kpad``."""
        if self.mode is Mode.BATCH:
            for name in LENGTH_LIST_FIELDS:
                if getattr(self, name) is not None:
                    raise _err(name, getattr(self, name), "is only defined in group mode (mode=group)")
            if self.seqlen_q < 1:
                raise _err("seqlen_q", self.seqlen_q, "must be >= 1 in batch mode")
            if self.seqlen_k < 0:
                raise _err("seqlen_k", self.seqlen_k, "must be >= 0")
            self._validate_eff_lengths()
            return
        for name in EFF_LENGTH_FIELDS:
            if getattr(self, name) is not None:
                raise _err(name, getattr(self, name), "is only defined in batch mode (group mode gives seqlens)")
        for name in ("seqlens_q", "seqlens_k"):
            if any(x < 0 for x in getattr(self, name)):
                raise _err(name, getattr(self, name), "has a negative length")
        if sum(self.seqlens_q_list) < 1:
            raise _err("seqlens_q", self.seqlens_q, "must contain at least one query")
        for name, lengths, what in (("s_kpad", "seqlens_k", "key"), ("s_qpad", "seqlens_q", "query")):
            pads = getattr(self, name)
            if pads is None:
                continue
            if len(pads) != self.batch:
                raise _err(name, pads, f"has {len(pads)} entries, batch={self.batch}")
            for i, (p, n) in enumerate(zip(pads, getattr(self, lengths))):
                if p < n:
                    raise _err(
                        name,
                        pads,
                        f"entry {i} = {p} < {lengths}[{i}] = {n} ({name[2]}pad must be >= the sequence's {what} "
                        "length)",
                    )
        if self.s_qpad is not None and self.family not in QPAD_FAMILIES:
            raise _err(
                "s_qpad",
                self.s_qpad,
                f"is not defined for {self.family.value} (CK pads query rows in the plain fwd and the backward only)",
            )

    def _validate_eff_lengths(self) -> None:
        """Batch mode's per-batch logical lengths: one per batch, each within the batch stride, and only for the
        families whose kernels take them (:data:`Q_EFF_FAMILIES`, :data:`KV_EFF_FAMILIES`)."""
        for name, stride_name, families in (
            ("q_eff_lens", "seqlen_q", Q_EFF_FAMILIES),
            ("kv_eff_lens", "seqlen_k", KV_EFF_FAMILIES),
        ):
            lens = getattr(self, name)
            if lens is None:
                continue
            if self.family not in families:
                raise _err(
                    name,
                    lens,
                    f"is not defined for {self.family.value}; allowed: " + ", ".join(f.value for f in families),
                )
            if len(lens) != self.batch:
                raise _err(name, lens, f"has {len(lens)} entries, batch={self.batch} (one length per batch)")
            stride = getattr(self, stride_name)
            for i, n in enumerate(lens):
                if not 0 <= n <= stride:
                    raise _err(
                        name,
                        lens,
                        f"entry {i} = {n} is not in 0..{stride_name}={stride} (a batch's effective length lies "
                        "within its rows)",
                    )

    def _check_numerics(self) -> None:
        """:data:`NUMERIC_RANGES`."""
        for name, in_range, rule in NUMERIC_RANGES:
            if not in_range(getattr(self, name)):
                raise _err(name, getattr(self, name), rule)

    def _check_bias(self) -> None:
        """Bias kind vs rank (CK's ``bias_info``, example/ck_tile/01_fmha/bias.hpp), mode, mask, soft-cap; dbias."""
        b, rank = self.bias, self.bias_rank
        if b is Bias.NONE and rank != 0:
            raise _err("bias_rank", rank, "must be 0 without a bias")
        if b is Bias.ELEMENTWISE and rank not in (0, 1, 2):
            raise _err("bias_rank", rank, "must be 0 (1,1,sq,sk), 1 (1,h,sq,sk) or 2 (b,h,sq,sk)")
        if b is Bias.ELEMENTWISE and rank == 2 and self.mode is Mode.GROUP:
            raise _err("bias_rank", 2, "(per-batch elementwise bias) is not defined in group mode")
        if b is Bias.ALIBI and rank not in (0, 1):
            raise _err("bias_rank", rank, "must be 0 (slopes 1*h) or 1 (slopes b*h) for ALiBi")
        if b is Bias.ALIBI and self.mask.kind is MaskKind.GENERIC:
            raise _err(
                "mask",
                self.mask.to_ck(),
                "(generic) cannot be combined with ALiBi (CK defines ALiBi "
                "positions only for no mask, top-left or bottom-right masks)",
            )
        if self.logits_soft_cap > 0 and b is not Bias.NONE:
            raise _err(
                "logits_soft_cap",
                self.logits_soft_cap,
                f"cannot be combined with bias={b.value} (CK generates no kernel with both)",
            )
        if self.dbias and not (self.family is BWD and b is Bias.ELEMENTWISE):
            raise _err("dbias", True, "needs family bwd_dq_dk_dv and an elementwise bias")

    def _check_fp8(self) -> None:
        """The fp8 dtypes (no LSE or dropout) and the quantization scales.  A bias is defined: CK's generator emits
        fp8 fwd kernels with elementwise bias and ALiBi (codegen/ops/fmha_fwd.py ``get_pipelines``, fp8 branch, of
        the amd-aiter 0.1.7.post2.dev18 tree; its smoke_test_fwd.sh runs them); a kernel space without such kernels
        says so through the dispatcher."""
        d = self.dtype
        if d.is_fp8_family:
            if self.lse:
                raise _err("lse", True, f"is not defined for dtype {d.value}")
            if self.p_drop > 0:
                raise _err("p_drop", self.p_drop, f"dropout is not defined for dtype {d.value}")
        elif self.qscale is not QScale.NONE:
            raise _err("qscale", self.qscale.value, f"needs an fp8 dtype, dtype is {d.value}")
        if self.qscale is QScale.MX:
            raise _err("qscale", "mx", "(microscaling) is not modelled by the reference")
        if self.qscale is QScale.KV_BLOCKSCALE and self.family is not Family.BATCH_PREFILL:
            raise _err("qscale", "kv_blockscale", "is only defined for batch_prefill")

    def _check_family_features(self) -> None:
        """Backward vs forward options (:data:`BWD_UNDEFINED_FIELDS`), dropout, min_seqlen_q and num_splits by
        family."""
        f = self.family
        if f is BWD:
            for name in BWD_UNDEFINED_FIELDS:
                if getattr(self, name):
                    raise _err(
                        name,
                        getattr(self, name),
                        "is not defined for the backward (the bwd reference always computes LSE)",
                    )
            if self.vlayout is not VLayout.ROW:
                raise _err("vlayout", self.vlayout.value, "is not defined for the backward")
        elif self.deterministic:
            raise _err("deterministic", True, "is a backward-only option")
        if self.p_drop > 0 and f not in (Family.FWD, Family.BATCH_PREFILL, BWD):
            raise _err(
                "p_drop",
                self.p_drop,
                f"dropout is not defined for {f.value} (CK ignores it on the split-KV / KV-cache paths)",
            )
        if self.min_seqlen_q < 0:
            raise _err("min_seqlen_q", self.min_seqlen_q, "must be >= 0 (0 = no sequence is skipped)")
        if self.min_seqlen_q and (f is not Family.FWD or self.mode is not Mode.GROUP):
            raise _err(
                "min_seqlen_q",
                self.min_seqlen_q,
                "is only defined for fwd in group mode (CK's "
                "skip_min_seqlen_q kernels skip whole sequences of a varlen batch)",
            )
        if self.num_splits < 1 or self.num_splits > 128:
            raise _err("num_splits", self.num_splits, "must be in 1..128 (0 = CK's heuristic is not modelled)")
        if f is Family.FWD_SPLITKV:
            if self.num_splits < 2 and not self.cache_batch_idx:
                raise _err("num_splits", self.num_splits, "must be >= 2 for fwd_splitkv (or use cache_batch_idx)")
        elif f is not Family.FWD_APPENDKV and self.num_splits != 1:
            raise _err("num_splits", self.num_splits, f"must be 1 for {f.value} (only fwd_splitkv/appendkv split)")

    def _check_paged_kv(self) -> None:
        """``page_block_size``: which families page the KV cache, and CK's block-size rules."""
        f, page = self.family, self.page_block_size
        if page < 0:
            raise _err("page_block_size", page, "must be >= 0 (0 = contiguous KV)")
        if page:
            if f in (Family.FWD, BWD):
                raise _err("page_block_size", page, f"paged KV is not defined for {f.value}")
            if f is not Family.BATCH_PREFILL and page % 128:
                raise _err(
                    "page_block_size", page, f"must be a multiple of 128 for {f.value} (CK's split-KV/paged-KV kernels)"
                )
        if f is Family.FWD_PAGEDKV and not page:
            raise _err("page_block_size", 0, "must be > 0 for fwd_pagedkv")

    def _check_batch_prefill(self) -> None:
        """batch_prefill's group mode, pages and KV tables; the KV tables belong to batch_prefill alone."""
        if self.family is not Family.BATCH_PREFILL:
            if self.kv_lookup is not KVLookupTable.NONE:
                raise _err("kv_lookup", self.kv_lookup.value, "is only defined for batch_prefill")
            if self.kv_layout is not KVMemoryLayout.NONE:
                raise _err("kv_layout", self.kv_layout.value, "is only defined for batch_prefill")
            return
        if self.mode is not Mode.GROUP:
            raise _err("mode", self.mode.value, "must be group for batch_prefill (ragged queries)")
        if not self.page_block_size:
            raise _err("page_block_size", 0, "must be > 0 for batch_prefill")
        if self.kv_lookup is KVLookupTable.NONE:
            raise _err("kv_lookup", "none", "must be vllm (2-D block table) or sglang (1-D page table)")
        if self.kv_layout is KVMemoryLayout.NONE:
            raise _err("kv_layout", "none", "must be vectorized or linear for batch_prefill")
        if self.kv_layout is KVMemoryLayout.VECTORIZED:
            vec = _vec_size(self.dtype)
            if self.hdim_q % vec or self.hdim_v % vec or self.page_block_size % vec:
                raise _err(
                    "kv_layout",
                    "vectorized",
                    f"needs hdim_q, hdim_v and page_block_size divisible "
                    f"by the vector size {vec} (16 bytes of {self.dtype.value})",
                )

    def _check_cache_batch_idx(self) -> None:
        if self.cache_batch_idx:
            if self.family not in (Family.FWD_SPLITKV, Family.FWD_APPENDKV):
                raise _err("cache_batch_idx", True, "is only defined for fwd_splitkv and fwd_appendkv")
            if self.page_block_size or self.mode is Mode.GROUP:
                raise _err("cache_batch_idx", True, "cannot be combined with paged KV or group mode")

    def _check_append_kv(self) -> None:
        """fwd_appendkv's appended keys and RoPE; both belong to fwd_appendkv alone (:data:`APPENDKV_ONLY_FIELDS`)."""
        if self.family is not Family.FWD_APPENDKV:
            for name in APPENDKV_ONLY_FIELDS:
                if getattr(self, name):
                    raise _err(name, getattr(self, name), "is only defined for fwd_appendkv")
            if self.rope is not Rope.NONE:
                raise _err("rope", self.rope.value, "is only defined for fwd_appendkv")
            return
        if self.mode is not Mode.BATCH:
            raise _err("mode", self.mode.value, "must be batch for fwd_appendkv")
        if self.seqlen_knew == 0 and self.rotary_dim == 0:
            raise _err("seqlen_knew", 0, "fwd_appendkv needs seqlen_knew > 0 or rotary_dim > 0")
        if not 0 <= self.seqlen_knew <= min(self.seqlens_k_list):
            raise _err(
                "seqlen_knew",
                self.seqlen_knew,
                f"must be in 0..seqlen_k={min(self.seqlens_k_list)} (each batch's seqlen_k includes the appended keys)",
            )
        if self.rotary_dim:
            if self.rotary_dim < 0 or self.rotary_dim > self.hdim_q or self.rotary_dim % 16:
                raise _err("rotary_dim", self.rotary_dim, f"must be a multiple of 16 and <= hdim_q={self.hdim_q}")
            if self.rope is Rope.NONE:
                raise _err("rope", "none", "must be interleaved or half_rotated when rotary_dim > 0")
            if self.dtype not in (DType.FP16, DType.BF16):
                raise _err(
                    "rotary_dim", self.rotary_dim, f"RoPE is only defined for fp16/bf16, dtype is {self.dtype.value}"
                )
        elif self.rope is not Rope.NONE:
            raise _err("rope", self.rope.value, "needs rotary_dim > 0")

    def _check_v_layout(self) -> None:
        if self.vlayout is VLayout.COL and self.family is not Family.FWD:
            raise _err("vlayout", "col", "column-major V is only defined for fwd")

    _RULE_GROUPS = (
        _check_int32,
        _check_family_and_dtype,
        _check_sizes,
        _check_lengths,
        _check_numerics,
        _check_bias,
        _check_fp8,
        _check_family_features,
        _check_paged_kv,
        _check_batch_prefill,
        _check_cache_batch_idx,
        _check_append_kv,
        _check_v_layout,
    )
    """:meth:`validate`'s rule groups in their order: the first violated rule is the error."""

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
        """Logical query length per sequence (group mode ``seqlens_q``; batch mode ``q_eff_lens``, else
        ``seqlen_q`` for every batch)."""
        if self.mode is Mode.GROUP:
            return cast("tuple[int, ...]", self.seqlens_q)  # group mode: always set by _expand_lengths
        return self.q_eff_lens if self.q_eff_lens is not None else (self.seqlen_q,) * self.batch

    @property
    def seqlens_k_list(self) -> tuple[int, ...]:
        """Logical key length per sequence (group mode ``seqlens_k``; batch mode ``kv_eff_lens``, else
        ``seqlen_k`` for every batch)."""
        if self.mode is Mode.GROUP:
            return cast("tuple[int, ...]", self.seqlens_k)  # group mode: always set by _expand_lengths
        return self.kv_eff_lens if self.kv_eff_lens is not None else (self.seqlen_k,) * self.batch

    @property
    def qpad_list(self) -> tuple[int, ...]:
        """Physical query length per sequence (group mode ``s_qpad``, else the logical length; batch mode the
        batch stride ``seqlen_q``)."""
        if self.s_qpad is not None:
            return self.s_qpad
        return self.seqlens_q_list if self.mode is Mode.GROUP else (self.seqlen_q,) * self.batch

    @property
    def kpad_list(self) -> tuple[int, ...]:
        """Physical key length per sequence (group mode ``s_kpad``, else the logical length; batch mode the
        batch stride ``seqlen_k``)."""
        if self.s_kpad is not None:
            return self.s_kpad
        return self.seqlens_k_list if self.mode is Mode.GROUP else (self.seqlen_k,) * self.batch

    @property
    def seqstart_q(self) -> tuple[int, ...]:
        """Physical query offsets (use ``s_qpad`` when given, as CK's padded group mode)."""
        out = [0]
        for n in self.qpad_list:
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
        """Physical query rows of all sequences (group mode: the rows of the packed query tensor)."""
        return sum(self.qpad_list)

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

    # ------------------------------------------------------------------ CK command lines (ckfmha.ck_args)
    def to_ck_args(self) -> list[str]:
        """``-key=value`` tokens for ``tile_example_fmha_fwd`` / ``_bwd`` (non-default values only):
        :func:`ckfmha.ck_dialect.problem_to_ck_args`."""
        from ckfmha.ck_dialect import problem_to_ck_args  # on first use: the module is only needed here

        return problem_to_ck_args(self)

    def to_ck_command(self) -> str:
        """The tile_example command line: :func:`ckfmha.ck_dialect.problem_to_ck_command`."""
        from ckfmha.ck_dialect import problem_to_ck_command

        return problem_to_ck_command(self)

    @classmethod
    def from_ck_args(
        cls, args: "str | Iterable[str]", binary: str | None = None, *, fwd_apis: str = "all"
    ) -> "Problem":
        """The problem tile_example arguments (a string or a list of ``-key=value`` tokens) effectively run, after
        the runner's normalizations.  A leading program name (``tile_example_fmha_fwd`` / ``..._bwd``) selects the
        binary; otherwise ``binary`` (default ``fwd``).  :func:`problem_from_ck_args`; the normalizations too:
        :meth:`ck_run_from_args`."""
        return problem_from_ck_args(args, binary, fwd_apis=fwd_apis)

    @staticmethod
    def ck_run_from_args(args: "str | Iterable[str]", binary: str | None = None, *, fwd_apis: str = "all") -> "CKRun":
        """What tile_example arguments run: a :class:`CKRun` (the effective ``problem`` and the ``normalizations``
        the runner announces).  :func:`ck_run_from_args`."""
        return ck_run_from_args(args, binary, fwd_apis=fwd_apis)


@dataclass(frozen=True)
class CKRun:
    """What one tile_example command line runs: ``problem`` (the effective problem), ``normalizations`` (what the
    runner announces on stderr, verbatim and in its order) and ``unannounced`` (what it changes or ignores
    without a word, in ckfmha's words naming the argument)."""

    binary: str
    problem: Problem
    normalizations: tuple[str, ...] = ()
    unannounced: tuple[str, ...] = ()


def ck_run_from_args(args: "str | Iterable[str]", binary: str | None = None, *, fwd_apis: str = "all") -> CKRun:
    """What tile_example arguments (a string or a list of ``-key=value`` tokens) run: the runner's semantics are
    :func:`ckfmha.ck_dialect.parse_ck_args` (:mod:`ckfmha.ck_args`' module doc), which gives the effective
    problem's fields; the :class:`Problem` is built here.  A leading program name (``tile_example_fmha_fwd`` /
    ``..._bwd``) selects the binary; otherwise ``binary`` (default ``fwd``).  ``fwd_apis``: the forward binary's
    build (:data:`ckfmha.ck_dialect.FWD_APIS`)."""
    from ckfmha.ck_dialect import parse_ck_args  # on first use: the module is only needed here

    parsed = parse_ck_args(args, binary, fwd_apis=fwd_apis)
    return CKRun(parsed.binary, Problem(**parsed.fields), parsed.normalizations, parsed.unannounced)


def problem_from_ck_args(args: "str | Iterable[str]", binary: str | None = None, *, fwd_apis: str = "all") -> Problem:
    """The problem tile_example arguments effectively run (:func:`ck_run_from_args`'s ``problem``)."""
    return ck_run_from_args(args, binary, fwd_apis=fwd_apis).problem
