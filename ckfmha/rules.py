"""Does kernel ``c`` serve problem ``p`` in stage role ``r``, and if not, which rule fails -- the one place that says.

:func:`fits` answers with ``None`` (it fits) or the first failed rule in the dispatcher's words (what
:meth:`ckfmha.dispatcher.Dispatcher.explain` shows); :func:`misfit` returns the same failure as a :class:`Misfit`,
which also names the launch argument at fault for the host checks of the backends (the cpu backend raises
:class:`ckfmha.backends.base.PreconditionError` / ``BackendError`` with it, every backend alike). The dispatcher,
the backends' host checks and the pytest plugin's collection all use these rules, so a kernel the dispatcher
would never choose for a problem is also refused when it is launched on it.

The rules, in the order they are checked (numbers as in :mod:`ckfmha.dispatcher`'s table):

1. family: the kernel's family serves the role (:data:`ckfmha.plan.ROLE_FAMILY`);
2. dtype; 3. mode: batch/group as the problem (append-KV kernels are batch-mode kernels whatever the problem);
4.-7. :func:`requirements` -- exact feature match per role: V layout, mask (as CK serves it: no mask -> a no-mask
   kernel; causal top-left/bottom-right -> ``causal`` or ``any``; windows and generic masks -> ``generic`` or
   ``any``), bias, lse, dropout, logits soft-cap, sink, skip_min_seqlen_q, qscale / fp8 static quant, paged KV,
   RoPE, deterministic, dbias, KV memory layout / lookup table / page size; a combine kernel paired with a split
   kernel (``paired``) must also reuse its ``pad_s`` and ``pad_dv`` (fmha_fwd_splitkv.py static_asserts that);
   then the pairing of a convert_dq kernel with its dq_dk_dv kernel (``paired``, :meth:`RoleRules._pairing_misfit`):
   for a deterministic problem, a two-entry convert tile ``(bm0, kN0)`` (the older CK, naming scheme ``ck-2025-11``)
   needs ``kN0`` == the dq_dk_dv kernel's ``bn0`` -- the convert kernel sums ``ceil(seqlen_k / kN0)`` dq_acc
   slices per sequence (fmha_bwd_kernel.hpp ``FmhaBwdConvertQGradKernel``), the dq_dk_dv kernel writes one per
   ``bn0`` keys, and CK's api pairs them per trait (codegen/ops/fmha_bwd.py ``convert_dq_bn0``); one-entry tiles
   (the current CK) and non-deterministic problems have no such rule, and without ``paired`` it is not checked;
5. head dims (:func:`head_dims`): not above the kernel's; different only with the hdim pad; the bwd kernels' pad
   8 needs a multiple of 8 (CK's ``kPadHeadDimQ``/``kPadHeadDimV`` of 8: 8-element aligned loads);
8. sequence padding (:func:`pad_rules`): group mode needs every seqlen pad of the role; the attention after
   append-KV needs the seqlen_k pad (it reads the post-append seqlen_k per batch from a device array: CK's
   tile_example passes ``seqlen_k_ptr`` for every KV-cache run and fmha_fwd_splitkv.py's ``skcheck`` admits a
   kernel without seqlen_k padding only when ``a.seqlen_k_ptr == nullptr``); a kernel without a seqlen pad only
   where every such length is a positive multiple of its tile (``bm0``/``bn0``; append-KV ``bs``/``bsk``);
9. bwd ``max_seq_len_q``: a short-query dq_dk_dv kernel only where seqlen_q <= its limit;
9b. CK findings (:mod:`ckfmha.ck_findings`, ``data/ck_findings.yaml``): a CK kernel a finding affects is refused
   for a problem that triggers the finding (``ck_finding alibi_sad_u16: ...``: ALiBi positions at or beyond 2^16
   wrap in the fwd, paged-KV, batch-prefill and bwd kernels); the rule names the finding.  ``waive_findings``
   (a dispatcher's, :class:`ckfmha.dispatcher.Dispatcher`) drops this rule: the plugin's item that exposes a
   finding pins an affected kernel on purpose (docs/ck_findings.md).

(Head dims are checked before the feature requirements, as the dispatcher always has; the numbering follows the
dispatcher's table.) Whether a backend can realize a kernel at all (rule 10) is the backend's ``supports``.

``paired`` (the kernel chosen for the role's :data:`ckfmha.plan.PAIRED_ROLE`) is given by the dispatcher; the
pairing rules are feature rules (no launch argument is at fault: the kernels would compute something else).

For many candidates of one stage, build :class:`RoleRules` once (it precomputes the requirements and the
sequence lengths) and call its :meth:`~RoleRules.misfit` / :meth:`~RoleRules.reason` per kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ckfmha.ck_findings import finding_misfit, load_findings
from ckfmha.kernel import Dropout, Family, KernelConfig, MaskImpl, Mode, QScale, Rope
from ckfmha.plan import ROLE_FAMILY, StageRole

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem


class Requirement(NamedTuple):
    """What a stage needs of one kernel field: the allowed values and how to say it."""

    field: str
    allowed: frozenset
    what: str


class PadRule(NamedTuple):
    """A sequence-length pad of a role: the pad field, the tile it guards (name and size) and the length."""

    pad_field: str  # pad_s / pad_sk
    tile_name: str  # bm0 / bn0 (append-KV: bs / bsk)
    tile: int
    length: str  # seqlen_q / seqlen_k / seqlen_knew


@dataclass(frozen=True)
class Misfit:
    """Why a kernel does not serve a problem in a role.

    ``reason``: the dispatcher's words (``"<rule>: ..."``). ``argument``/``value``/``host``: for the rules a
    kernel's host-side launch check enforces (head dims, sequence padding, max_seq_len_q) the launch argument at
    fault, its value and what the check says about it; ``None`` for the feature rules (the kernel would compute
    something else: dtype, mode, family, features)."""

    reason: str
    argument: str | None = None
    value: Any = None
    host: str = ""

    @property
    def launch_check(self) -> bool:
        """True for a rule a real kernel's host check enforces (an argument it would refuse)."""
        return self.argument is not None

    def message(self, kernel_id: str) -> str:
        """The error text of a launch of ``kernel_id`` that breaks this rule."""
        if self.argument is None:
            return f"{kernel_id}: {self.reason}"
        return f"{kernel_id}: {self.argument}={self.value}: {self.host}"


# --------------------------------------------------------------------------------------------- requirements
def mask_kernels(problem: "Problem") -> frozenset[MaskImpl]:
    """The mask implementations that serve the problem's mask, as CK serves it (rule 6)."""
    from ckfmha.masking import MaskKind

    m = problem.mask
    if m.kind is MaskKind.NONE:
        return frozenset({MaskImpl.NONE})
    if m.is_causal:
        return frozenset({MaskImpl.CAUSAL, MaskImpl.ANY})
    return frozenset({MaskImpl.GENERIC, MaskImpl.ANY})


def _fwd_dropout(problem: "Problem") -> frozenset[Dropout]:
    return frozenset({Dropout.ENABLED}) if problem.p_drop > 0 else frozenset({Dropout.NONE})


def _bwd_dropout(problem: "Problem") -> frozenset[Dropout]:
    if problem.p_drop <= 0:
        return frozenset({Dropout.NONE})
    return frozenset({Dropout.WG16, Dropout.WG16_STORE_RANDVAL, Dropout.WG32, Dropout.WG32_STORE_RANDVAL})


def _squant(problem: "Problem") -> bool:
    return problem.dtype.is_fp8_family and problem.qscale is QScale.PERTENSOR


def _on_off(flag: bool, what: str) -> str:
    return what if flag else f"no {what}"


def _attention_requirements(p: "Problem", role: StageRole, need) -> None:
    """Rules 4-7 of the attention roles (fwd, splitkv, pagedkv, batch_prefill)."""
    softcap = p.logits_soft_cap > 0
    paged = p.page_block_size > 0
    need("vlayout", {p.vlayout}, f"V layout {p.vlayout.value}")
    need("mask", mask_kernels(p), f"mask {p.mask.to_ck()}")
    need("bias", {p.bias}, f"bias {p.bias.value}")
    need("logits_soft_cap", {softcap}, _on_off(softcap, "logits soft-cap"))
    need("sink", {p.sink}, _on_off(p.sink, "sink"))
    if role is StageRole.FWD:
        skip = p.min_seqlen_q > 0
        need(
            "skip_min_seqlen_q",
            {skip},
            f"skip_min_seqlen_q (min_seqlen_q={p.min_seqlen_q})" if skip else "no skip_min_seqlen_q",
        )
        need("lse", {p.lse}, _on_off(p.lse, "LSE output"))
        need("dropout", _fwd_dropout(p), _on_off(p.p_drop > 0, "dropout"))
        need("qscale", {p.qscale}, f"qscale {p.qscale.value}")
    elif role is StageRole.PAGEDKV:
        need("skip_min_seqlen_q", {False}, "no skip_min_seqlen_q")
        need("lse", {p.lse}, _on_off(p.lse, "LSE output"))
        need("fp8_static_quant", {_squant(p)}, _on_off(_squant(p), "fp8 static quant"))
        need("paged_kv", {True}, "paged KV")
    elif role is StageRole.SPLITKV:
        need("lse", {True}, "split-KV partial LSE")
        need("fp8_static_quant", {_squant(p)}, _on_off(_squant(p), "fp8 static quant"))
        need("paged_kv", {paged}, "paged KV" if paged else "contiguous KV")
    elif role is StageRole.BATCH_PREFILL:
        need("lse", {p.lse}, _on_off(p.lse, "LSE output"))
        need("dropout", _fwd_dropout(p), _on_off(p.p_drop > 0, "dropout"))
        need("qscale", {p.qscale}, f"qscale {p.qscale.value}")
        need("kv_memory_layout", {p.kv_layout}, f"KV memory layout {p.kv_layout.value}")
        need("kv_lookup_table", {p.kv_lookup}, f"KV lookup table {p.kv_lookup.value}")
        need("page_size", {p.page_block_size}, f"page size {p.page_block_size}")


def requirements(problem: "Problem", role: StageRole, *, paired: KernelConfig | None = None) -> list[Requirement]:
    """The exact-match feature requirements (rules 4-7) of ``role`` for ``problem``; ``paired``: the split
    kernel a combine kernel is paired with (its ``pad_s`` and ``pad_dv`` must be reused). The convert_dq pairing
    is no exact match of a field (it compares one tile entry): :meth:`RoleRules.misfit` checks it."""
    p = problem
    req: list[Requirement] = []

    def need(fname: str, allowed: Iterable[Any], what: str) -> None:
        req.append(Requirement(fname, frozenset(allowed), what))

    paged = p.page_block_size > 0
    if role in (StageRole.FWD, StageRole.SPLITKV, StageRole.PAGEDKV, StageRole.BATCH_PREFILL):
        _attention_requirements(p, role, need)
    elif role is StageRole.COMBINE:
        need("lse", {p.lse}, _on_off(p.lse, "LSE output"))
        need("fp8_static_quant", {_squant(p)}, _on_off(_squant(p), "fp8 static quant"))
        if paired is not None:
            need("pad_s", {paired.pad_s}, f"pad_s={paired.pad_s} like the split kernel")
            need("pad_dv", {paired.pad_dv}, f"pad_dv={paired.pad_dv} like the split kernel")
    elif role is StageRole.APPENDKV:
        rope = p.rope if p.rotary_dim > 0 else Rope.NONE
        need("vlayout", {p.vlayout}, f"V layout {p.vlayout.value}")
        need("rope", {rope}, f"RoPE {rope.value}")
        need("paged_kv", {paged}, "paged KV cache" if paged else "contiguous KV cache")
    elif role is StageRole.DQ_DK_DV:
        need("mask", mask_kernels(p), f"mask {p.mask.to_ck()}")
        need("bias", {p.bias}, f"bias {p.bias.value}")
        need("dbias", {p.dbias}, _on_off(p.dbias, "dbias output"))
        need("dropout", _bwd_dropout(p), _on_off(p.p_drop > 0, "dropout"))
        need("deterministic", {p.deterministic}, "deterministic" if p.deterministic else "non-deterministic")
    elif role is StageRole.CONVERT_DQ:
        need("deterministic", {p.deterministic}, "deterministic" if p.deterministic else "non-deterministic")
    return req


# --------------------------------------------------------------------------------------------- dims and pads
_HDIM_PAD = (("hdim_q", "pad_d"), ("hdim_v", "pad_dv"))


def head_dims(role: StageRole) -> tuple[tuple[str, str], ...]:
    """(head dim, its pad field) a role's kernel sees: dot_do_o and combine see only hdim_v, convert_dq only
    hdim_q, every other role both."""
    if role in (StageRole.DOT_DO_O, StageRole.COMBINE):
        return _HDIM_PAD[1:]
    if role is StageRole.CONVERT_DQ:
        return _HDIM_PAD[:1]
    return _HDIM_PAD


def pad_rules(role: StageRole, config: KernelConfig) -> tuple[PadRule, ...]:
    """The sequence-length pads of ``role`` and the tiles they guard. dq_dk_dv handles any sequence length; the
    split-KV combine kernel reuses the pads of the split kernel it is paired with (CK static_asserts that), so
    neither has a rule of its own here."""
    t = config.algorithm.tile
    if role in (StageRole.FWD, StageRole.SPLITKV, StageRole.PAGEDKV, StageRole.BATCH_PREFILL):
        return (PadRule("pad_s", "bm0", t[0], "seqlen_q"), PadRule("pad_sk", "bn0", t[1], "seqlen_k"))
    if role is StageRole.APPENDKV:
        return (PadRule("pad_s", "bs", t[0], "seqlen_q"), PadRule("pad_sk", "bsk", t[1], "seqlen_knew"))
    if role in (StageRole.DOT_DO_O, StageRole.CONVERT_DQ):
        return (PadRule("pad_s", "bm0", t[0], "seqlen_q"),)
    return ()


def sequence_lengths(problem: "Problem") -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(query lengths, key lengths): one each in batch mode, one per sequence in group mode."""
    if problem.mode is Mode.GROUP:
        return problem.seqlens_q_list, problem.seqlens_k_list
    return (problem.seqlen_q,), (problem.seqlen_k,)


def _describe(v: Any) -> str:
    return v.value if hasattr(v, "value") else str(v)


# --------------------------------------------------------------------------------------------- the check
class RoleRules:
    """The rules of one (problem, role[, paired kernel]), prepared once for many candidate kernels; ``paired``:
    the split kernel of a combine kernel, the dq_dk_dv kernel of a convert_dq kernel (:data:`ckfmha.plan.
    PAIRED_ROLE`)."""

    def __init__(
        self, problem: "Problem", role: StageRole, *, paired: KernelConfig | None = None, waive_findings: bool = False
    ) -> None:
        self.problem = problem
        self.role = role
        self.family = ROLE_FAMILY[role]
        self.mode = Mode.BATCH if role is StageRole.APPENDKV else problem.mode
        self.requirements = requirements(problem, role, paired=paired)
        self.paired = paired
        self.head_dims = head_dims(role)
        qs, ks = sequence_lengths(problem)
        self.lengths = {"seqlen_q": qs, "seqlen_k": ks, "seqlen_knew": (problem.seqlen_knew,)}
        # the findings it can trigger (rule 9b); waived: none (a finding's exposing item pins an affected kernel)
        self.findings = () if waive_findings else tuple(f for f in load_findings() if f.bias is problem.bias)
        self.after_append = problem.family is Family.FWD_APPENDKV and role is not StageRole.APPENDKV

    def reason(self, c: KernelConfig) -> str | None:
        """None when ``c`` fits, else the first failed rule in the dispatcher's words."""
        m = self.misfit(c)
        return None if m is None else m.reason

    def misfit(self, c: KernelConfig) -> Misfit | None:
        """None when ``c`` fits, else the first failed rule (see the module doc for the order)."""
        s, p = c.signature, self.problem
        if s.family is not self.family:
            return Misfit(f"family: a {s.family.value} kernel cannot run stage {self.role.value}")
        if s.dtype is not p.dtype:
            return Misfit(f"dtype: kernel is {s.dtype.value}, problem is {p.dtype.value}")
        if s.mode is not self.mode:
            return Misfit(f"mode: kernel is {s.mode.value}, problem needs {self.mode.value}")
        m = self._head_dim_misfit(c)
        if m is not None:
            return m
        for fname, allowed, what in self.requirements:
            v = getattr(c, fname)
            if v not in allowed:
                return Misfit(f"{fname}: problem needs {what}, kernel has {fname}={_describe(v)}")
        m = self._pairing_misfit(c)
        if m is not None:
            return m
        m = self._padding_misfit(c)
        if m is not None:
            return m
        a = c.algorithm
        if self.role is StageRole.DQ_DK_DV and a.max_seq_len_q and p.seqlen_q > a.max_seq_len_q:
            return Misfit(
                f"max_seq_len_q: problem seqlen_q {p.seqlen_q} > the kernel's limit {a.max_seq_len_q}",
                "seqlen_q",
                p.seqlen_q,
                f"exceeds the kernel's max_seq_len_q={a.max_seq_len_q}",
            )
        if self.findings:
            found = finding_misfit(p, c, self.findings)
            if found is not None:
                return Misfit(found)
        return None

    def _head_dim_misfit(self, c: KernelConfig) -> Misfit | None:
        s, a, p = c.signature, c.algorithm, self.problem
        for fname, pad_field in self.head_dims:
            kd, pd, pad = getattr(s, fname), getattr(p, fname), getattr(a, pad_field)
            if pd > kd:
                return Misfit(
                    f"{fname}: problem {pd} exceeds the kernel's {kd}",
                    fname,
                    pd,
                    f"exceeds the kernel's head dim {kd} (rule: {fname} <= {kd})",
                )
            if pd != kd and not pad:
                return Misfit(
                    f"{fname}: problem {pd} != kernel {kd} and the kernel has no {fname} padding",
                    fname,
                    pd,
                    f"differs from the kernel's head dim {kd} and the kernel has no {fname} padding "
                    f"({pad_field}=0; rule: {fname} == {kd})",
                )
            if pad == 8 and pd % 8:
                return Misfit(
                    f"{fname}: problem {pd} is not a multiple of 8 (the kernel pads with 8-element alignment)",
                    fname,
                    pd,
                    f"is not a multiple of 8 ({pad_field}=8 pads with 8-element alignment)",
                )
        return None

    def _pairing_misfit(self, c: KernelConfig) -> Misfit | None:
        """A deterministic convert_dq kernel with a two-entry tile ``(bm0, kN0)`` must have ``kN0`` == the paired
        dq_dk_dv kernel's ``bn0`` (see the module doc; codegen/ops/fmha_bwd.py ``convert_dq_bn0``)."""
        if self.role is not StageRole.CONVERT_DQ or self.paired is None or not self.problem.deterministic:
            return None
        tile = c.algorithm.tile
        bn0 = self.paired.algorithm.tile[1]
        if len(tile) < 2 or tile[1] == bn0:
            return None
        return Misfit(
            f"convert_dq_bn0: a deterministic convert_dq kernel sums dq_acc slices of kN0={tile[1]} keys, the "
            f"paired dq_dk_dv kernel writes one per bn0={bn0} keys (CK pairs them: kN0 == bn0, "
            f"codegen/ops/fmha_bwd.py convert_dq_bn0)"
        )

    def _padding_misfit(self, c: KernelConfig) -> Misfit | None:
        a, p = c.algorithm, self.problem
        pads = pad_rules(self.role, c)
        unpadded = [r for r in pads if getattr(a, r.pad_field) == 0]
        if not unpadded:
            return None
        if p.mode is Mode.GROUP:
            r = unpadded[0]
            return Misfit(
                "padding: group mode needs a kernel with seqlen padding",
                "mode",
                "group",
                f"variable-length sequences need {r.length} padding and the kernel has {r.pad_field}=0",
            )
        if self.after_append and any(r.pad_field == "pad_sk" for r in unpadded):
            return Misfit(
                "padding: after append-KV the attention reads seqlen_k per batch (the post-append cache "
                "lengths, CK's seqlen_k_ptr), which needs a kernel with seqlen_k padding",
                "seqlen_k",
                p.seqlen_k,
                "after append-KV the attention reads seqlen_k per batch from a device array "
                "(CK's seqlen_k_ptr), which needs seqlen_k padding and the kernel has pad_sk=0",
            )
        for r in unpadded:
            bad = [n for n in self.lengths[r.length] if n == 0 or n % r.tile]
            if bad:
                return Misfit(
                    f"padding: {r.length}={bad[0]} is not a multiple of the kernel's tile {r.tile} and "
                    f"the kernel has no {r.pad_field[4:]} padding",
                    r.length,
                    bad[0],
                    f"is not a multiple of the kernel's {r.tile_name}={r.tile} and the kernel has no "
                    f"{r.length} padding ({r.pad_field}=0: a {r.length} not a multiple of {r.tile_name} "
                    f"needs a padded kernel; rule: {r.length} % {r.tile} == 0, {r.length} > 0)",
                )
        return None


def misfit(
    problem: "Problem", role: StageRole, config: KernelConfig, *, paired: KernelConfig | None = None
) -> Misfit | None:
    """None when ``config`` serves ``problem`` in ``role``, else the first failed rule as a :class:`Misfit`.
    ``paired``: for a combine kernel the split kernel it runs after, for a convert_dq kernel its dq_dk_dv kernel."""
    return RoleRules(problem, role, paired=paired).misfit(config)


def fits(
    problem: "Problem", role: StageRole, config: KernelConfig, *, paired: KernelConfig | None = None
) -> str | None:
    """None when ``config`` serves ``problem`` in ``role``, else the first failed rule in the dispatcher's words
    (e.g. ``"padding: seqlen_q=200 is not a multiple of the kernel's tile 128 and the kernel has no s padding"``).
    ``paired``: for a combine kernel the split kernel it runs after, for a convert_dq kernel its dq_dk_dv kernel
    (e.g. ``"convert_dq_bn0: a deterministic convert_dq kernel sums dq_acc slices of kN0=192 keys, ..."``)."""
    return RoleRules(problem, role, paired=paired).reason(config)
