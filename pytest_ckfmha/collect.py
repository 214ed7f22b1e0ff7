"""What to collect: shapes of the category -> the kernels that can serve each (the dispatcher's rules) -> capped.

Kernel choice per shape (deterministic, documented in docs/plugin.md):

1. the kernel set of the arch: the ``pytest_ckfmha_kernels`` hook's answer if a plugin/conftest gives one, else
   the CK checkout's own kernel space when ``--ckfmha-ck-root`` / ``$CK_ROOT`` names one (its generator's lists
   for the arch, receipt/profile and mask mode: :func:`ckfmha.cktree.select_checkout_kernels`), else the
   enumeration under the receipt/profile and mask mode; then the sweep, the filter expression and the filter
   file (all AND-ed, applied to every stage's kernels);
2. the candidates of the shape's *main* stage (fwd, splitkv, pagedkv, appendkv, batch_prefill, dq_dk_dv:
   :func:`ckfmha.plan.main_role`) that pass every dispatcher rule (mask, bias, features, padding, ... -- not just
   hdim/dtype), in dispatcher rank order (:meth:`ckfmha.dispatcher.Dispatcher.ranked_candidates`, one dispatcher
   per dtype view so its buckets serve every shape of that dtype);
3. capped at ``--ckfmha-max-kernels-per-shape``: the best-ranked kernel first, then the best-ranked kernel of each
   (pipeline, tile) not chosen yet, then the rest in rank order; 0 = no cap;
4. a shape that triggers a CK finding (:mod:`ckfmha.ck_findings`; rule 9b refuses the affected kernels, so step 2
   has none of them) also gets, after those, the best-ranked affected kernel that passes every other rule, one per
   finding (:func:`exposing_kernels`, :attr:`ShapeSpec.exposes`): its item runs it with rule 9b waived and is
   ``xfail`` on the hip backend, naming the finding (docs/ck_findings.md).

The other stages of a kernel item (combine, dot_do_o, convert_dq, the attention after appendkv) are chosen by the
dispatcher at run time with the item's kernel pinned.

Each shape keeps where it was written (:attr:`ShapeSpec.location`: the matrix file and the line of its entry's
``name:``, :func:`entry_lines`), which the items give pytest as their location (skip and failure lines name the
matrix entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckfmha.plan import main_role  # noqa: F401  (public here too)

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.kernel import KernelConfig
    from ckfmha.matrix import Shape
    from pytest_ckfmha.options import Settings


@dataclass(frozen=True)
class ShapeSpec:
    shape: "Shape"
    shape_id: str
    kernels: tuple["KernelConfig", ...]  # chosen kernels of the main stage, in item order
    # the matrix file and the 0-based line of the entry's ``name:`` (None: not found in the file)
    location: tuple[str, int | None] | None = None
    # (kernel id, finding id) of the kernels (among ``kernels``) that expose a CK finding the shape triggers
    exposes: tuple[tuple[str, str], ...] = ()

    def finding_of(self, kernel: "KernelConfig | None") -> str | None:
        """The CK finding ``kernel``'s item exposes (see :func:`exposing_kernels`), else None."""
        if kernel is None:
            return None
        return dict(self.exposes).get(kernel.kernel_id)

    @property
    def where(self) -> str:
        """``<matrix file name>:<line> entry <name> (combination <i>)``: the shape in words, for failure texts."""
        s = self.shape
        at = f"{s.file}:{self.location[1] + 1}" if self.location and self.location[1] is not None else s.file
        return f"{at} entry {s.entry!r} (combination {s.index})"


def entry_lines(path: str) -> dict[str, int]:
    """The 0-based line of each entry's ``name:`` in the matrix file ``path`` (block ``- name: x`` or flow
    ``- {name: x, ...}`` style); an unreadable file gives none."""
    import re
    from pathlib import Path

    pattern = re.compile(r"^\s*-\s*\{?\s*name:\s*['\"]?([A-Za-z0-9_]+)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, int] = {}
    for i, line in enumerate(text.splitlines()):
        m = pattern.match(line)
        if m:
            out.setdefault(m.group(1), i)
    return out


class DtypeView:
    """A read-only registry view holding only one dtype's kernels: the dispatcher's first rule rejects every
    other dtype anyway, so the view changes no answer and saves most of the work."""

    def __init__(self, registry, dtype) -> None:
        self.arch = registry.arch
        self._by_family: dict = {}
        self._size = 0
        for c in registry:
            if c.signature.dtype is dtype:
                self._by_family.setdefault(c.signature.family, []).append(c)
                self._size += 1

    def candidates(self, family, dtype=None, mode=None):
        return [c for c in self._by_family.get(family, ()) if mode is None or c.signature.mode is mode]

    def __iter__(self):
        for cs in self._by_family.values():
            yield from cs

    def __len__(self) -> int:
        return self._size


def kernel_set(config, settings: "Settings") -> list["KernelConfig"]:
    """The arch's kernels after receipt/profile/mask mode/sweep/filters: the hook's, the checkout's or the
    enumeration's (see the module doc)."""
    from ckfmha.filters import combine
    from ckfmha.selection import KernelQuery

    q = KernelQuery.build(
        settings.arch,
        receipt=settings.receipt,
        profile=settings.profile,
        mask_mode=settings.mask_mode,
        sweep=settings.sweep,
        filter_expr=settings.filter,
        filter_file=settings.filter_file,
    )
    given = config.hook.pytest_ckfmha_kernels(config=config, arch=settings.arch)
    if given is None and settings.ck_root is not None:
        from ckfmha.cktree import select_checkout_kernels

        return [k.config for k in select_checkout_kernels(settings.ck_root, q, allow_empty=settings.allow_empty)]
    if given is None:
        from pytest_ckfmha.kernel_set_cache import cached_kernel_set

        # EmptySelectionError names the selection (an empty selection is never stored)
        return cached_kernel_set(settings, lambda: q.run(allow_empty=settings.allow_empty))
    pred = combine([q.sweep, *q.filters])
    return [c for c in given if pred is None or pred(c)]


def choose(ranked: Sequence["KernelConfig"], cap: int) -> list["KernelConfig"]:
    if cap <= 0 or len(ranked) <= cap:
        return list(ranked)
    chosen = [ranked[0]]
    seen = {(ranked[0].algorithm.pipeline, ranked[0].algorithm.tile)}
    for c in ranked[1:]:
        if len(chosen) >= cap:
            break
        key = (c.algorithm.pipeline, c.algorithm.tile)
        if key not in seen:
            seen.add(key)
            chosen.append(c)
    for c in ranked:
        if len(chosen) >= cap:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


class Views:
    """Per-dtype registry views of one kernel set and a dispatcher over each (built lazily)."""

    def __init__(self, registry, heuristics=None) -> None:
        self.registry = registry
        self.heuristics = heuristics  # the tie-break table (None: the packaged one)
        self._views: dict = {}
        self._dispatchers: dict = {}

    def for_dtype(self, dtype) -> DtypeView:
        v = self._views.get(dtype)
        if v is None:
            v = self._views[dtype] = DtypeView(self.registry, dtype)
        return v

    def dispatcher(self, dtype):
        """A backend-free dispatcher over the dtype's view (kept: its candidate buckets serve every shape)."""
        from ckfmha.dispatcher import Dispatcher

        d = self._dispatchers.get(dtype)
        if d is None:
            d = self._dispatchers[dtype] = Dispatcher(self.for_dtype(dtype), heuristics=self.heuristics)
        return d


def heuristics_of(settings: "Settings"):
    """The tie-break table of ``--ckfmha-heuristics`` (None: the packaged one)."""
    if settings.heuristics is None:
        return None
    from ckfmha.heuristics import load_heuristics

    return load_heuristics(settings.heuristics)


def ranked_candidates(views: Views, problem) -> list["KernelConfig"]:
    """The main stage's candidates that pass every dispatcher rule, in dispatcher rank order."""
    return views.dispatcher(problem.dtype).ranked_candidates(problem, main_role(problem))


def exposing_kernels(views: Views, problem) -> list[tuple["KernelConfig", str]]:
    """Per CK finding the problem triggers for its main stage: the best-ranked affected kernel that passes every
    other rule (the dispatcher's ranking with rule 9b waived), with the finding's id."""
    from ckfmha.ck_findings import triggered_findings
    from ckfmha.dispatcher import ROLE_FAMILY, Dispatcher

    role = main_role(problem)
    findings = triggered_findings(problem, ROLE_FAMILY[role])
    if not findings:
        return []
    view = views.for_dtype(problem.dtype)  # read as a Registry: .arch and .candidates() (as Views.dispatcher)
    waived = Dispatcher(view, heuristics=views.heuristics, waive_findings=True)  # type: ignore[arg-type]
    out: list[tuple["KernelConfig", str]] = []
    for c in waived.ranked_candidates(problem, role):
        for f in findings:
            a = f.affects(c)
            if a is not None and f.triggers(problem, a.order) and f.id not in {fid for _, fid in out}:
                out.append((c, f.id))
    return out


def build_specs(config, settings: "Settings", registry) -> list[ShapeSpec]:
    from ckfmha.matrix import load_matrices, matrix_files, select
    from pytest_ckfmha.ids import shape_id

    if settings.category is None:  # State.specs() is called only when --ckfmha-category is given
        raise ValueError("build_specs: settings.category is None; the shapes are a category's (--ckfmha-category)")
    shapes = select(load_matrices(settings.matrices), settings.category, settings.families)
    views = Views(registry, heuristics_of(settings))
    specs = []
    seen: dict[str, object] = {}
    files = {p.name: str(p) for p in matrix_files(settings.matrices)}
    lines = {name: entry_lines(path) for name, path in files.items()}
    for s in shapes:
        sid = shape_id(s.problem)
        if sid in seen:  # pragma: no cover - ids name every non-default field
            raise ValueError(f"shape id {sid!r} is shared by two problems ({seen[sid]} and {s.problem})")
        seen[sid] = s.problem
        ranked = ranked_candidates(views, s.problem)
        location = (files[s.file], lines[s.file].get(s.entry)) if s.file in files else None
        chosen = choose(ranked, settings.max_kernels_per_shape)
        exposing = [(c, fid) for c, fid in exposing_kernels(views, s.problem) if c not in chosen]
        kernels = tuple(chosen + [c for c, _ in exposing])
        specs.append(ShapeSpec(s, sid, kernels, location, tuple((c.kernel_id, fid) for c, fid in exposing)))
    return specs
