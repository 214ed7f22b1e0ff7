"""The dispatcher: problem -> plan of one or more stages, each a kernel plus its arguments.

Plans per problem family
------------------------
============  ==================================================================================================
fwd           ``fwd``; ``splitkv`` -> ``combine`` where a CK finding refuses the fwd kernels for the problem
              (:mod:`ckfmha.ck_findings`: ALiBi positions at or beyond 2^16; split-KV kernels use 32 bits)
fwd_splitkv   ``splitkv`` (num_splits partial O + LSE) -> ``combine``
fwd_pagedkv   ``pagedkv``
fwd_appendkv  ``appendkv`` (write knew/vnew into the cache, RoPE) -> attention over the cache: split-KV
              (``splitkv`` -> ``combine``) when num_splits > 1 or cache_batch_idx is used, else ``pagedkv``
              when the cache is paged, else ``fwd``. With ``num_splits == 1`` the number of splits comes from
              :func:`num_splits_heuristic` (KV-cache decode is where splitting pays).
batch_prefill ``batch_prefill``
backward      ``dot_do_o`` -> ``dq_dk_dv`` -> ``convert_dq``; the last only where the fp32 dq accumulator
              needs converting (any dtype but fp32, and fp32 when deterministic: the per-split slices must be
              summed).
============  ==================================================================================================

Selection rules (a candidate is rejected by the first rule it fails; :meth:`Dispatcher.explain` says which)
--------------------------------------------------------------------------------------------------------
Rules 1-9 are :mod:`ckfmha.rules` (:func:`ckfmha.rules.fits`), which the backends' host checks use too; head dims
(5) are checked right after the mode, before the feature rules 4, 6 and 7.

1. family of the stage; 2. dtype; 3. mode (batch/group); 4. V layout;
5. head dims: equal, or larger with the hdim pad (pad 8 additionally needs a multiple of 8);
6. mask, as CK serves it: no mask -> a no-mask kernel; causal top-left and bottom-right -> one causal kernel
   (``causal`` under ``-m generic``, ``any`` under ``-m simplified``); sliding windows and generic masks -> the
   generic-mask kernel (``generic`` or ``any``);
7. exact feature match: bias, lse, dropout, logits soft-cap, sink, skip_min_seqlen_q, qscale/static quant,
   paged KV, RoPE, deterministic, dbias, KV memory layout / lookup table / page size; then pairing with the kernel
   chosen for the stage before it (:data:`~ckfmha.plan.PAIRED_ROLE`; the stages are chosen in plan order): a
   combine kernel reuses its split kernel's ``pad_s`` and ``pad_dv``; with a deterministic problem a convert_dq
   kernel with a two-entry tile ``(bm0, kN0)`` (the older CK's ``b64x128``) needs ``kN0`` == the chosen dq_dk_dv
   kernel's ``bn0`` (rule ``convert_dq_bn0``: it sums ``ceil(seqlen_k / kN0)`` dq_acc slices, CK's api pairs them
   per trait, codegen/ops/fmha_bwd.py);
8. padding: a kernel without seqlen_q (seqlen_k) padding only where every sequence length divides bm0 (bn0);
   group mode needs both seqlen pads; the attention stage after append-KV needs the seqlen_k pad whatever the
   lengths: it reads the post-append seqlen_k per batch from a device array (CK's tile_example passes
   ``seqlen_k_ptr`` for every KV-cache run, and fmha_fwd_splitkv.py's ``skcheck`` admits a kernel without
   seqlen_k padding only when ``a.seqlen_k_ptr == nullptr``);
9. bwd ``max_seq_len_q``: a kernel specialized for short queries only where seqlen_q <= maxq;
9b. CK findings: a CK kernel a finding affects (``data/ck_findings.yaml``) is refused for a problem that
    triggers it, naming the finding (:mod:`ckfmha.ck_findings`);
10. the backend can realize the config (``backend.supports``), when a backend is given.

Ranking of the candidates that pass
-----------------------------------
1. measured: in the main stage, the kernel the tie-break table's ``tuned`` section names for the problem's shape
   class on the registry's arch (``ckfmha tune``; ckfmha/heuristics.py) before any other (every candidate here
   passed the rules; a measurement outranks the static preferences below);
2. the smallest head-dim bucket (no wasted head-dim padding);
3. fewer pads (a no-pad kernel wins when the shape is aligned);
4. seqtune: the tile that best fits the sequence lengths — the padded fraction of the last query (key) block,
   then for long sequences the larger tile, for short ones the smaller (short: the query fits in one tile, or
   a ``short_query_tiles`` rule of the table says so for this kernel, e.g. masked Triton kernels up to 2k
   queries);
5. the table's ``rules`` (first matching rule's priority, lower first);
6. the kernel id, so the choice is deterministic.

The table is ``data/heuristics.yaml`` unless a Dispatcher is given another (``heuristics=``,
``--ckfmha-heuristics FILE``). Its ``launch_variants`` (how the Triton backend launches a forward-attention
kernel) travel on the plan: a stage whose kernel a rule matches carries ``qk_ahead`` / ``lpt_heads`` in its
``launch.variant`` (printed ``fwd: <kernel> qk_ahead=True lpt_heads=8``), and the launcher applies them where the
problem can take them.  Each stage also carries its other launch choices (``launch.num_splits``,
``launch.workspace_bytes``) and the outputs it writes (``stage.outputs``, from :mod:`ckfmha.family_records`).

Public API: :meth:`Dispatcher.select` (the plan), :meth:`Dispatcher.explain` (every candidate with its verdict),
:meth:`Dispatcher.ranked_candidates` (the kernels that can serve one stage, best first; fast for many problems),
:class:`PinnedRegistry` (a registry view that pins one kernel: the plan around it). The plan types
(:class:`~ckfmha.plan.StageRole`, :data:`~ckfmha.plan.ROLE_FAMILY`, :class:`~ckfmha.plan.Stage`,
:class:`~ckfmha.plan.Plan`) live in :mod:`ckfmha.plan` and are re-exported here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ckfmha.ck_findings import triggered_findings
from ckfmha.family_records import stage_outputs
from ckfmha.heuristics import DEFAULT_PRIORITY, Heuristics, HeuristicsError, load_heuristics  # noqa: F401
from ckfmha.kernel import Dropout, DType, Family, KernelConfig, KVLoad
from ckfmha.plan import (  # noqa: F401  (re-exported: older imports)
    PAIRED_ROLE,
    ROLE_FAMILY,
    Launch,
    LaunchVariant,
    Plan,
    Stage,
    StageRole,
    main_role,
    needs_convert,
)
from ckfmha.registry import Registry
from ckfmha.rules import Requirement, RoleRules, sequence_lengths  # noqa: F401  (Requirement: re-exported)
from ckfmha.workspace import bwd_workspace_upper_bound

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.backends.base import Backend
    from ckfmha.problem import Problem


@dataclass(frozen=True)
class Verdict:
    config: KernelConfig
    reason: str | None  # None: the candidate can serve the stage
    rank: tuple = ()

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class StageExplanation:
    role: StageRole
    verdicts: tuple[Verdict, ...]  # passing candidates first, in rank order

    @property
    def chosen(self) -> KernelConfig | None:
        return self.verdicts[0].config if self.verdicts and self.verdicts[0].ok else None

    def summary(
        self, show: int = 5, detail: Callable[[KernelConfig], str] | None = None, mark_chosen: bool = False
    ) -> str:
        """The candidates that can serve the stage (up to ``show``; ``detail``: a second line for each, e.g. its CK
        instance name; ``mark_chosen``: ``*`` on the one the plan picks, the best-ranked), then the others grouped
        by the first rule they fail."""
        ok = [v for v in self.verdicts if v.ok]
        bad = [v for v in self.verdicts if not v.ok]
        head = f"stage {self.role.value}: {len(self.verdicts)} candidate(s), {len(ok)} can serve it"
        lines = [head + ("; * = the kernel the plan picks" if mark_chosen and ok else "")]
        for i, v in enumerate(ok[:show]):
            lines.append(f"  OK {'*' if mark_chosen and i == 0 else ' '}  {v.config.kernel_id}")
            if detail is not None:
                lines.append(f"        {detail(v.config)}")
        if len(ok) > show:
            lines.append(f"  ... and {len(ok) - show} more that can serve it")
        # Group rejections by reason so a long list stays readable.
        by_reason: dict[str, list[KernelConfig]] = {}
        for v in bad:
            by_reason.setdefault(v.reason or "", []).append(v.config)
        for reason, cs in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  NO    {len(cs)} x {reason}  (e.g. {cs[0].kernel_id})")
        if not self.verdicts:
            lines.append(f"  the registry holds no {ROLE_FAMILY[self.role].value} kernels")
        return "\n".join(lines)


@dataclass(frozen=True)
class Explanation:
    problem: "Problem"
    stages: tuple[StageExplanation, ...]

    def __str__(self) -> str:
        return f"problem: {self.problem}\n" + "\n".join(s.summary() for s in self.stages)


class NoKernelError(LookupError):
    """No kernel in the registry can serve a stage; the message holds the explanation."""

    def __init__(self, explanation: Explanation) -> None:
        self.explanation = explanation
        missing = [s.role.value for s in explanation.stages if s.chosen is None]
        super().__init__(f"no kernel can serve stage(s) {', '.join(missing)}\n{explanation}")


class PinnedRegistry:
    """A registry view whose family of ``kernel`` holds just that kernel (the other families as in ``base``): a
    :class:`Dispatcher` over it plans the other stages around the pinned kernel, or explains why it cannot serve
    (the pytest plugin's kernel items)."""

    def __init__(self, base, kernel: KernelConfig) -> None:
        self.arch = base.arch
        self.base = base
        self.kernel = kernel

    def candidates(self, family: Family, dtype: DType | None = None, mode=None) -> list[KernelConfig]:
        if family is self.kernel.signature.family:
            return [self.kernel]
        return self.base.candidates(family, dtype, mode)


# the stages whose kernel the forward attention launcher runs: the ones a launch_variants rule can apply to
LAUNCH_VARIANT_ROLES = (StageRole.FWD, StageRole.SPLITKV, StageRole.PAGEDKV, StageRole.BATCH_PREFILL)


# --------------------------------------------------------------------------------------------- heuristics
def heuristic_priority(c: KernelConfig) -> int:
    """The packaged tie-break table's priority of ``c`` (ckfmha.heuristics; lower wins)."""
    return load_heuristics().priority(c)


def short_query_limit(c: KernelConfig) -> int:
    """Up to how many query rows a problem counts as short for ``c``'s seqtune (the smaller query tile ranks
    first): the first matching ``short_query_tiles`` rule of the packaged table, else 0 (only a query shorter than
    the tile is short)."""
    return load_heuristics().short_query_limit(c)


# --------------------------------------------------------------------------------------------- helpers
def num_splits_heuristic(
    batch: int, nhead_q: int, seqlen_q: int, seqlen_k: int, bm0: int, bn0: int, num_cus: int, max_splits: int = 128
) -> int:
    """Number of KV splits for split-KV attention (FlashAttention's rule, which CK's example follows).

    With ``blocks = batch * nhead_q * ceil(seqlen_q / bm0)`` work-groups, a grid that already fills 80% of the
    compute units gets no split. Otherwise, for each candidate ``s`` (1..min(max_splits, key blocks)) the wave
    efficiency is ``n_waves / ceil(n_waves)`` with ``n_waves = blocks * s / num_cus``; the smallest ``s`` whose
    efficiency is at least 85% of the best is chosen. Splits that would leave a split without key blocks are
    skipped.
    """
    blocks = batch * nhead_q * -(-seqlen_q // bm0)
    if blocks >= 0.8 * num_cus:
        return 1
    key_blocks = max(1, -(-seqlen_k // bn0))
    limit = min(max_splits, num_cus, key_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or -(-key_blocks // s) != -(-key_blocks // (s - 1))

    effs = {}
    for s in range(1, limit + 1):
        if not eligible(s):
            continue
        waves = blocks * s / num_cus
        effs[s] = waves / math.ceil(waves)
    best = max(effs.values())
    for s in sorted(effs):
        if effs[s] >= 0.85 * best:
            return s
    return 1  # pragma: no cover - the loop always returns


def decode_num_splits(
    batch: int,
    nhead_k: int,
    seqlen_k: int,
    bn0: int,
    num_cus: int,
    *,
    programs_per_cu: int = 2,
    min_blocks_per_split: int = 4,
    max_splits: int = 128,
) -> int:
    """Splits for memory-bound decode (one query block per kv-head, the q-heads of a group packed into it).

    Decode reads the whole K/V cache once; what limits it is how many loads are in flight, so the grid should
    hold about ``programs_per_cu`` programs per compute unit: ``ceil(programs_per_cu * num_cus /
    (batch * nhead_k))`` splits, but every split keeps at least ``min_blocks_per_split`` key blocks of ``bn0``
    keys (the combine's cost and each split's pipeline warm-up stay small), and at most ``max_splits``.
    """
    programs = max(1, batch * nhead_k)
    want = -(-programs_per_cu * num_cus // programs)
    key_blocks = max(1, -(-seqlen_k // bn0))
    return max(1, min(want, max_splits, key_blocks // min_blocks_per_split))


class Dispatcher:
    """Selects kernels from a registry for problems; optionally restricted to what a backend can realize.

    ``num_cus``: the compute units (SMs) the split-KV heuristics size grids for; by default the ``num_cus`` of the
    registry's arch data file (:class:`ckfmha.archs.ArchSpec`), read when a plan first needs it."""

    def __init__(
        self,
        registry: Registry,
        backend: "Backend | None" = None,
        *,
        num_cus: int | None = None,
        heuristics: Heuristics | None = None,
        waive_findings: bool = False,
    ) -> None:
        if num_cus is not None and (isinstance(num_cus, bool) or not isinstance(num_cus, int) or num_cus < 1):
            raise ValueError(f"num_cus: expected a positive int (compute units), found {num_cus!r}")
        self.registry = registry
        self.backend = backend
        self._heuristics = heuristics
        self._num_cus = num_cus
        self.waive_findings = waive_findings  # rule 9b off: a CK finding's exposing item (docs/ck_findings.md)
        self._buckets: dict[tuple, tuple[int, dict]] = {}

    @property
    def heuristics(self) -> Heuristics:
        """The tie-break table: the one given, else the packaged data/heuristics.yaml (read on first use)."""
        if self._heuristics is None:
            self._heuristics = load_heuristics()
        return self._heuristics

    @property
    def num_cus(self) -> int:
        """The compute units (SMs) of the registry's arch (its arch data's ``num_cus``) unless given."""
        if self._num_cus is None:
            from ckfmha.archs import load_arch_spec

            # load_arch_spec requires a positive int num_cus (ArchSpec's None is for hand-built specs only)
            self._num_cus = cast(int, load_arch_spec(self.registry.arch).num_cus)
        return self._num_cus

    # ------------------------------------------------------------------ public API
    def select(self, problem: "Problem") -> Plan:
        explanation = self.explain(problem)
        chosen: dict[StageRole, KernelConfig] = {}
        for s in explanation.stages:
            if s.chosen is None:
                raise NoKernelError(explanation)
            chosen[s.role] = s.chosen
        stages = [self._stage(problem, role, c) for role, c in chosen.items()]
        return Plan(problem, tuple(stages))

    def explain(self, problem: "Problem") -> Explanation:
        """Explain the first plan structure whose every stage has a kernel (a KV-cache decode may fall back
        from its preferred attention path to split-KV); when none has, the preferred structure's explanation."""
        first: Explanation | None = None
        for roles in self.structures(problem):
            stages: list[StageExplanation] = []
            chosen: dict[StageRole, KernelConfig | None] = {}
            for role in roles:
                exp = self._explain_stage(problem, role, chosen)
                chosen[role] = exp.chosen
                stages.append(exp)
            explanation = Explanation(problem, tuple(stages))
            if all(s.chosen is not None for s in stages):
                return explanation
            first = first or explanation
        assert first is not None
        return first

    def ranked_candidates(
        self, problem: "Problem", role: StageRole, *, paired: KernelConfig | None = None
    ) -> list[KernelConfig]:
        """The kernels that can serve ``role`` of ``problem``'s plan (every selection rule, the backend's
        included), best first -- the OK verdicts of :meth:`explain`'s stage, without judging the candidates
        that cannot match. ``paired``: the kernel chosen for the role's :data:`~ckfmha.plan.PAIRED_ROLE` (for
        ``combine`` the split kernel it runs after, for ``convert_dq`` the dq_dk_dv kernel), as :meth:`explain`
        passes it.

        Fast for many problems on one registry: the registry's kernels of the stage's family, dtype and mode are
        bucketed once per set of exact-match requirement fields (a dict lookup per allowed combination replaces a
        rule check per kernel); the buckets are rebuilt when the registry's size changes."""
        rules = RoleRules(problem, role, paired=paired, waive_findings=self.waive_findings)
        ok = [c for c in self._prefiltered(rules) if self._reason(rules, c) is None]
        return sorted(ok, key=lambda c: self._rank(problem, role, c))

    # ------------------------------------------------------------------ plan structure
    def structures(self, problem: "Problem") -> list[list[StageRole]]:
        """The plan structures that can serve the problem, in order of preference."""
        f = problem.family
        if f is Family.FWD:
            # a CK finding that refuses the fwd kernels (ckfmha.ck_findings: ALiBi past 2^16) leaves split-KV
            fallback = [[StageRole.SPLITKV, StageRole.COMBINE]] if triggered_findings(problem, Family.FWD) else []
            return [[StageRole.FWD], *fallback]
        if f is Family.FWD_SPLITKV:
            return [[StageRole.SPLITKV, StageRole.COMBINE]]
        if f is Family.FWD_PAGEDKV:
            # fmha_fwd_runner.hpp run_fwd: "If there is no instance for these args, fallback to fmha_fwd_splitkv"
            return [[StageRole.PAGEDKV], [StageRole.SPLITKV, StageRole.COMBINE]]
        if f is Family.BATCH_PREFILL:
            return [[StageRole.BATCH_PREFILL]]
        if f is Family.FWD_APPENDKV:
            return [[StageRole.APPENDKV] + a for a in self._decode_attention_roles(problem)]
        # backward
        roles = [StageRole.DOT_DO_O, StageRole.DQ_DK_DV]
        if needs_convert(problem):
            roles.append(StageRole.CONVERT_DQ)
        return [roles]

    def roles(self, problem: "Problem") -> list[StageRole]:
        """The preferred plan structure."""
        return self.structures(problem)[0]

    def plan_num_splits(self, problem: "Problem") -> int:
        """num_splits of a KV-cache decode plan: the problem's when > 1, else :func:`decode_num_splits` for
        decode-sized queries (seqlen_q x group <= 16) and :func:`num_splits_heuristic` otherwise (both with a
        typical split-KV tile of bm0 64 x bn0 128; only the grid size matters)."""
        if problem.num_splits > 1:
            return problem.num_splits
        group = problem.nhead_q // problem.nhead_k
        if problem.seqlen_q * group <= 16:
            return decode_num_splits(problem.batch, problem.nhead_k, problem.seqlen_k, 128, self.num_cus)
        return num_splits_heuristic(
            problem.batch, problem.nhead_q, problem.seqlen_q, problem.seqlen_k, 64, 128, self.num_cus
        )

    def _decode_attention_roles(self, problem: "Problem") -> list[list[StageRole]]:
        split = [StageRole.SPLITKV, StageRole.COMBINE]
        if problem.cache_batch_idx or self.plan_num_splits(problem) > 1:
            return [split]
        return [[StageRole.PAGEDKV] if problem.page_block_size else [StageRole.FWD], split]

    def _stage(self, problem: "Problem", role: StageRole, c: KernelConfig) -> Stage:
        """The plan stage of ``role`` played by ``c``: its launch choices (:class:`~ckfmha.plan.Launch`) and the
        outputs it writes (:func:`ckfmha.family_records.stage_outputs`)."""
        num_splits = workspace = None
        if role in (StageRole.SPLITKV, StageRole.COMBINE):
            num_splits = problem.num_splits if problem.family is Family.FWD_SPLITKV else self.plan_num_splits(problem)
        variant = self.heuristics.launch_variant(c) if role in LAUNCH_VARIANT_ROLES else LaunchVariant()
        if role is StageRole.DQ_DK_DV:
            # Allocated once from host-known maxima: no device-to-host read of seqstart arrays.
            workspace = bwd_workspace_upper_bound(
                problem.batch,
                problem.hdim_q,
                problem.nhead_q,
                problem.seqlen_q,
                problem.seqlen_k,
                deterministic=problem.deterministic,
                bn0=c.algorithm.tile[1],
            )
        launch = Launch(num_splits=num_splits, workspace_bytes=workspace, variant=variant)
        return Stage(role, c, launch, stage_outputs(problem, role, c, num_splits))

    # ------------------------------------------------------------------ matching
    def _explain_stage(
        self, problem: "Problem", role: StageRole, chosen: Mapping[StageRole, KernelConfig | None]
    ) -> StageExplanation:
        # combine reuses its split kernel's pads; convert_dq's kN0 is its dq_dk_dv kernel's bn0 (ckfmha.rules)
        paired_role = PAIRED_ROLE.get(role)
        paired = None if paired_role is None else chosen.get(paired_role)
        rules = RoleRules(problem, role, paired=paired, waive_findings=self.waive_findings)
        verdicts = []
        for c in self.registry.candidates(ROLE_FAMILY[role]):
            reason = self._reason(rules, c)
            verdicts.append(Verdict(c, reason, self._rank(problem, role, c) if reason is None else ()))
        ok = sorted((v for v in verdicts if v.ok), key=lambda v: v.rank)
        bad = sorted((v for v in verdicts if not v.ok), key=lambda v: v.config.kernel_id)
        return StageExplanation(role, tuple(ok + bad))

    def _reason(self, rules: RoleRules, c: KernelConfig) -> str | None:
        """Rules 1-9 (:mod:`ckfmha.rules`), then rule 10: the backend can realize the kernel."""
        reason = rules.reason(c)
        if reason is None and self.backend is not None:
            why = self.backend.supports(c)
            if why is not None:
                return f"backend {self.backend.name}: {why}"
        return reason

    def _prefiltered(self, rules: RoleRules) -> list[KernelConfig]:
        """The candidates whose exact-match requirement fields hold allowed values (a necessary condition of
        rules 1-7), from the buckets of :meth:`_bucketed`."""
        reqs = rules.requirements
        buckets = self._bucketed(rules.family, rules.problem.dtype, rules.mode, tuple(r.field for r in reqs))
        pool: list[KernelConfig] = []
        for key in itertools.product(*(sorted(r.allowed, key=str) for r in reqs)):
            pool.extend(buckets.get(key, ()))
        return pool

    def _bucketed(self, family: Family, dtype: DType, mode, names: tuple[str, ...]) -> dict:
        """The registry's (family, dtype, mode) kernels by their values of ``names``; cached while the registry
        keeps its size (registries only grow), not cached for registry views without a size."""
        size = len(self.registry) if hasattr(self.registry, "__len__") else None
        key = (family, dtype, mode, names)
        hit = self._buckets.get(key)
        if hit is not None and hit[0] == size:
            return hit[1]
        buckets: dict[tuple, list[KernelConfig]] = {}
        for c in self.registry.candidates(family, dtype, mode):
            if c.signature.dtype is dtype and c.signature.mode is mode:
                buckets.setdefault(tuple(getattr(c, n) for n in names), []).append(c)
        if size is not None:
            self._buckets[key] = (size, buckets)
        return buckets

    def _rank(self, problem: "Problem", role: StageRole, c: KernelConfig) -> tuple:
        s, a = c.signature, c.algorithm
        hdim_waste = (s.hdim_q - problem.hdim_q) + (s.hdim_v - problem.hdim_v)
        pads = sum(1 for v in (a.pad_s, a.pad_sk, a.pad_d, a.pad_dv) if v)
        fit = 0.0
        size_pref = 0
        if len(a.tile) >= 2 and role in (StageRole.FWD, StageRole.SPLITKV, StageRole.PAGEDKV, StageRole.BATCH_PREFILL):
            qs, ks = sequence_lengths(problem)
            bm0, bn0 = a.tile[0], a.tile[1]
            sq, sk = max(qs), max(ks) if ks else 0
            fit = _waste(sq, bm0) + _waste(sk, bn0)
            # long sequences prefer the bigger tile (fewer blocks), short ones the smaller
            short = sq <= bm0 or sq <= self.heuristics.short_query_limit(c)
            size_pref = bm0 if short else -bm0
        tuned = self.heuristics.tuned_kernel(self.registry.arch, problem) if role is main_role(problem) else None
        not_tuned = 0 if tuned is None or tuned == c.kernel_id else 1
        kv_load = 0 if a.kv_load in (KVLoad.NONE, KVLoad.BLOCK) else 1
        randval = 1 if s.dropout in (Dropout.WG16_STORE_RANDVAL, Dropout.WG32_STORE_RANDVAL) else 0
        prio = self.heuristics.priority(c)
        return (not_tuned, hdim_waste, pads, round(fit, 6), size_pref, randval, kv_load, prio, c.kernel_id)


def _waste(n: int, tile: int) -> float:
    if n <= 0:
        return 0.0
    padded = -(-n // tile) * tile
    return (padded - n) / padded
