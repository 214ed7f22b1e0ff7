"""The fault catalogue: CK's bug history as faults injected into the cpu and Triton backends (issue 29,
docs/faults.md).

Each entry of ``ckfmha/data/faults.yaml`` (schema ``faults``) names a bug class, its upstream reference, the
problem families whose plans run the faulty code, the **hook points** of the cpu backend its injector perturbs
(:mod:`ckfmha.faults.injectors`) and, under ``triton:``, either the Triton backend's hook points with the model
of the Triton injection (:mod:`ckfmha.faults.triton_injectors`) or why the fault cannot be injected there.  A
hook point is one call in the backend's own code::

    start, end = faults.perturb("mask.key_range", (start, end), sk=sk)

which returns ``value`` unchanged unless the active fault hooks that point: injection costs one global read per
hook when off and never copies a kernel.  Both backends go through :func:`perturb`; the per-backend tables are
:data:`INJECTION_BACKENDS` (backend -> its hook points and its injector table).  Nothing is active unless a
caller activates a fault:

==============================  ====================================================================================
:func:`catalogue`               the faults (name -> :class:`Fault`), checked against the schema, the problem
                                families, the hook points and the injectors; loaded once
:func:`get_fault`               one fault by name (a :class:`FaultError` naming the known ones)
:func:`injectable_fault`        one fault by name that ``backend`` can host (a :class:`FaultError` naming the
                                backend and, where the catalogue says it cannot, the catalogue's reason)
:meth:`Fault.injection`         the fault's :class:`Injection` on a backend: its points and model, or the reason
:func:`active`                  the active :class:`Fault`, or None
:func:`activate`                make a fault (by name; None: none) the active one; returns the previous one
:func:`injected`                context manager: the fault active inside the ``with`` block, the previous after
:func:`perturb`                 the hook: ``value``, or the active fault's perturbation of it at this point
==============================  ====================================================================================

Hook points (:data:`HOOK_POINTS`; the value each passes and the context it adds):

======================  ====================================  ==========================================================
point                   where (ckfmha/backends/cpu/)           value (context)
======================  ====================================  ==========================================================
``splitkv.ranges``      stages.run_attention                  the splits' key ranges ``[(lo, hi), ...]`` (sk)
``splitkv.sink``        stages.run_attention                  whether split ``i`` counts the sink (split)
``mask.key_range``      engine.mask_key_range (fwd, bwd)      ``(start, end)`` key bounds per query row (sk)
``tiles.key_end``       engine (fwd and bwd key-tile loops)   the end of the key range walked (lo, bn0)
``kv.sources``          stages (every K/V read)               the (K, V) source per sequence (problem)
``rows.start``          sequences.query_rows / key_rows       a group-mode sequence's first row (problem, b, side)
``appendkv.offset``     stages.run_appendkv                   the key at which knew/vnew are written (cache, capacity)
``gqa.heads``           engine (every GQA GEMM)               None = CK's ``h // (hq / hk)`` (hq, hk)
``dropout.keep``        engine (fwd and bwd)                  the keep mask (randval, p_drop)
``dropout.seed``        engine                                ``(seed, offset)`` of the Philox generator
``dropout.rescale``     engine (fwd finish, bwd)              ``1 / (1 - p_drop)``
``softmax.start``       engine                                ``(m, l)`` a query tile starts from (sink)
``softmax.finish``      engine                                ``(o, lse)`` of a query tile (empty: rows with no key)
``alibi.slopes``        engine                                the ALiBi slopes of a sequence
``attention.out``       stages.run_attention                  one sequence's ``o`` (hq, sq, dv) (kernel, bm0)
``bwd.lse``             engine.backward_tiled                 the LSE P is recomputed with (guarded: -inf -> +inf)
``bwd.d_term``          engine.backward_tiled                 ``D`` of ``dS = P (dP - D)``
``bwd.dk_scale``        engine.backward_tiled                 the scale of ``dK += scale dS^T Q``
``bwd.dq_scale``        engine.backward_tiled                 the scale of ``dQ += scale dS K``
``bwd.dq_update``       engine.backward_tiled                 ``"add"`` (accumulate into dq_acc) or ``"store"``
``bwd.sequence_out``    engine.backward_tiled                 ``(dk, dv)`` of one sequence (sq)
``convert.slices``      stages.run_convert_dq                 how many dq_acc slices are summed
``rope.input``          stages.run_appendkv                   q / knew before rotation (rope, rotary_dim)
``rope.dim``            stages.run_appendkv                   ``(rotary_dim, cos, sin)`` (hdim)
``rope.q_rows``         stages.run_appendkv                   whether q row ``i`` uses table row ``cache + i``
======================  ====================================  ==========================================================

Hook points of the Triton backend (:data:`TRITON_HOOK_POINTS`; all in the launchers, ckfmha/backends/triton/,
at the argument level: the value is what the launcher hands the kernel):

===============================  ==================================  ===================================================
point                            where (ckfmha/backends/triton/)     value (context)
===============================  ==================================  ===================================================
``triton.mask.window``           launch.attention_launcher,          ``(mask_kind, left, right, y, x, alibi_mode)``
                                 launch_bwd.dq_dk_dv_launcher        of device.mask_args
``triton.splitkv.num_splits``    launch.attention_launcher (split)   the kernel's ``num_splits`` argument (the grid
                                                                     keeps the plan's)
``triton.seqlen_k``              launch.attention_launcher,          the scalar ``seqlen_k`` argument (block_n)
                                 launch_bwd.dq_dk_dv_launcher
``triton.kv.page_table``         launch.attention_launcher (paged)   the page table tensor (pages: the pool's)
``triton.kv.paged_seqlens``      launch.attention_launcher (paged)   the per-sequence key counts tensor (SGLang
                                                                     tables: ``kv_last_page_lens``)
``triton.group.seqstarts``       launch.attention_launcher,          ``(seqstart_q, seqstart_k)`` tensors (problem)
                                 launch_bwd.dq_dk_dv_launcher
``triton.alibi.slopes``          launch.attention_launcher,          the ALiBi slopes tensor
                                 launch_bwd.dq_dk_dv_launcher
``triton.dropout``               launch.attention_launcher,          ``(seed, offset, p_undrop, rp_keep)``
                                 launch_bwd.dq_dk_dv_launcher
``triton.sink``                  launch.attention_launcher (sink)    the sink tensor (per q-head logits)
``triton.bwd.d``                 launch_bwd.dq_dk_dv_launcher        the ``D`` tensor dq_dk_dv reads
``triton.convert.slices``        launch_bwd.convert_dq_launcher      how many dq_acc slices convert_dq sums
``triton.append.cache_seqlens``  launch_kvcache._launch_rows         the key counts knew / vnew are written at
``triton.rope.per_row``          launch_kvcache._append_launches     whether q row ``i`` uses table row ``cache + i``
``triton.kernel.fault``          launch.attention_launcher,          the kernel's ``FAULT`` constexpr: ``""``, or an
                                 launch_bwd.dq_dk_dv_launcher,       in-kernel fault's name (kernel: ``attn_fwd``,
                                 launch_kvcache._launch_rows         ``dq_dk_dv``, ``append_rows``); passed to the
                                                                     kernel only when not ``""``
===============================  ==================================  ===================================================

``triton.kernel.fault`` is for the bug classes no launch argument can express (a compile-time switch in the kernel,
as issue 29 allows where no launch-time perturbation exists): with no fault active the launchers pass no
``FAULT``, so every production launch compiles and runs the kernels it did before.

Errors (:class:`FaultError`, a :class:`~ckfmha.datafile.DataFileError`) name the file, the fault, the field and
the rule: an unknown family, hook point or injector (of either backend), an injector whose points differ from the
entry's, a repeated name, a fault the named backend cannot host.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ckfmha.datafile import DataFileError, check_schema, load_yaml

HOOK_POINTS: tuple[str, ...] = (
    "splitkv.ranges",
    "splitkv.sink",
    "mask.key_range",
    "tiles.key_end",
    "kv.sources",
    "rows.start",
    "appendkv.offset",
    "gqa.heads",
    "dropout.keep",
    "dropout.seed",
    "dropout.rescale",
    "softmax.start",
    "softmax.finish",
    "alibi.slopes",
    "attention.out",
    "bwd.lse",
    "bwd.d_term",
    "bwd.dk_scale",
    "bwd.dq_scale",
    "bwd.dq_update",
    "bwd.sequence_out",
    "convert.slices",
    "rope.input",
    "rope.dim",
    "rope.q_rows",
)
"""Every hook point of the cpu backend (module doc)."""

TRITON_HOOK_POINTS: tuple[str, ...] = (
    "triton.mask.window",
    "triton.splitkv.num_splits",
    "triton.seqlen_k",
    "triton.kv.page_table",
    "triton.kv.paged_seqlens",
    "triton.group.seqstarts",
    "triton.alibi.slopes",
    "triton.dropout",
    "triton.sink",
    "triton.bwd.d",
    "triton.convert.slices",
    "triton.append.cache_seqlens",
    "triton.rope.per_row",
    "triton.kernel.fault",
)
"""Every hook point of the Triton backend (module doc)."""

INJECTION_BACKENDS: dict[str, tuple[tuple[str, ...], str]] = {
    "cpu": (HOOK_POINTS, "ckfmha.faults.injectors:INJECTORS"),
    "triton": (TRITON_HOOK_POINTS, "ckfmha.faults.triton_injectors:TRITON_INJECTORS"),
}
"""The backends faults are injected into: name -> (its hook points, ``module:table`` of its injectors, fault
name -> {hook point -> function}).  The catalogue's top-level ``points`` are cpu's, its ``triton:`` rows Triton's."""


def injector_table(backend: str) -> dict[str, dict[str, Any]]:
    """The injector table of ``backend`` (:data:`INJECTION_BACKENDS`)."""
    import importlib

    module, _, table = INJECTION_BACKENDS[backend][1].partition(":")
    return dict(getattr(importlib.import_module(module), table))


class FaultError(DataFileError):
    """A bad fault catalogue or an unknown fault name; the message names the file or option, the value and the rule."""


@dataclass(frozen=True)
class Injection:
    """How a fault is injected into one backend: its hook ``points``, the ``model`` (what the faulty kernel of that
    backend computes), the problem ``families`` run for it, or the ``reason`` it cannot be injected (then no
    points)."""

    backend: str
    points: frozenset[str]
    model: str
    families: tuple[str, ...]
    reason: str | None = None

    @property
    def injectable(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class Fault:
    """One catalogued fault: ``name``, the bug ``title``, ``upstream`` references (issue / PR addresses; empty when
    the class has none named), the problem ``families`` whose plans run the hooked code, the cpu backend's hook
    ``points``, the kernel condition ``when`` (``{"hdim_q": 256, "dtype": "bf16"}``: only kernels with those
    values), the per-backend :class:`Injection` rows (``backends``) and the per-point injector functions
    ``(value, context) -> value`` of every backend that hosts it (point names are distinct across backends)."""

    name: str
    title: str
    model: str
    upstream: tuple[str, ...]
    families: tuple[str, ...]
    points: frozenset[str]
    when: Mapping[str, Any] = field(default_factory=dict)
    injectors: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    backends: Mapping[str, Injection] = field(default_factory=dict, repr=False, compare=False)
    hooked: frozenset[str] = field(default_factory=frozenset, repr=False, compare=False)

    def injection(self, backend: str) -> Injection:
        """The fault's :class:`Injection` on ``backend``; a :class:`FaultError` for a backend with no hooks."""
        row = self.backends.get(backend)
        if row is None:
            raise FaultError(
                f"backend: {backend!r} has no fault hooks; faults are injected into: {', '.join(INJECTION_BACKENDS)}"
            )
        return row

    def applies(self, context: Mapping[str, Any]) -> bool:
        """Whether the kernel of ``context`` (key ``kernel``, a KernelConfig) meets :attr:`when`."""
        if not self.when:
            return True
        kernel = context.get("kernel")
        if kernel is None:
            return False
        have = {"hdim_q": kernel.hdim_q, "hdim_v": kernel.hdim_v, "dtype": kernel.dtype.value}
        return all(have.get(k) == v for k, v in self.when.items())

    def inject(self, point: str, value: Any, context: Mapping[str, Any]) -> Any:
        """``value`` perturbed at ``point`` (unchanged where the fault does not hook it or its kernel condition
        fails)."""
        fn = self.injectors.get(point)
        if fn is None or not self.applies(context):
            return value
        return fn(value, context)


@dataclass(frozen=True)
class NotInjectable:
    """A bug class of issue 29 no backend hosts as a fault, and why."""

    name: str
    title: str
    upstream: tuple[str, ...]
    reason: str


def default_catalogue_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "faults.yaml"


def _rows(backend: str, points: list[str], injector: str, where: str, field_name: str) -> dict[str, Any]:
    """The injector functions of one backend row, checked: every point a hook point of ``backend``, the injector
    in its table and hooking exactly the row's points."""
    known, table_name = INJECTION_BACKENDS[backend]
    for point in points:
        if point not in known:
            raise FaultError(
                f"{where}: {field_name}: {point!r} is not a hook point of the {backend} backend; known: "
                f"{', '.join(known)}"
            )
    table = injector_table(backend).get(injector)
    if table is None:
        raise FaultError(
            f"{where}: {field_name.rpartition('points')[0]}injector: {injector!r} is not in "
            f"{table_name.replace(':', '.')}"
        )
    if set(table) != set(points):
        raise FaultError(
            f"{where}: {field_name}: {sorted(points)} must be the points injector {injector!r} hooks: {sorted(table)}"
        )
    return dict(table)


def _fault(doc: Mapping[str, Any], i: int, source: str) -> Fault:
    from ckfmha.families import PROBLEM_FAMILIES

    name = doc["name"]
    where = f"{source}: faults[{i}] ({name})"
    tri = doc["triton"]
    for key, fams in (("families", doc["families"]), ("triton.families", tri.get("families", ()))):
        for fam in fams:
            if fam not in PROBLEM_FAMILIES:
                raise FaultError(
                    f"{where}: {key}: {fam!r} is not a problem family; allowed: {', '.join(PROBLEM_FAMILIES)}"
                )
    extra = sorted(set(tri.get("families", ())) - set(doc["families"]))
    if extra:
        raise FaultError(f"{where}: triton.families: {extra} must be among the fault's families {doc['families']}")
    injectors = _rows("cpu", doc["points"], doc.get("injector", name), where, "points")
    backends = {
        "cpu": Injection("cpu", frozenset(doc["points"]), doc["model"], tuple(doc["families"])),
    }
    if "not_injectable" in tri:
        backends["triton"] = Injection("triton", frozenset(), "", (), reason=tri["not_injectable"])
    else:
        injectors.update(_rows("triton", tri["points"], tri.get("injector", name), where, "triton.points"))
        fams = tuple(tri.get("families", doc["families"]))
        backends["triton"] = Injection("triton", frozenset(tri["points"]), tri["model"], fams)
    return Fault(
        name=name,
        title=doc["title"],
        model=doc["model"],
        upstream=tuple(doc.get("upstream", ())),
        families=tuple(doc["families"]),
        points=frozenset(doc["points"]),
        when=dict(doc.get("when", {})),
        injectors=injectors,
        backends=backends,
        hooked=frozenset(injectors),
    )


def load_catalogue(path: str | Path | None = None) -> tuple[dict[str, Fault], tuple[NotInjectable, ...]]:
    """The faults of ``path`` (default: the packaged catalogue) by name, in file order, and the bug classes listed as
    not injectable; a :class:`FaultError` (or the schema's :class:`~ckfmha.datafile.SchemaError`) names the file,
    the entry and the rule."""
    source = str(path or default_catalogue_path())
    doc = load_yaml(source)
    check_schema(doc, "faults", source)
    faults: dict[str, Fault] = {}
    for i, entry in enumerate(doc["faults"]):
        f = _fault(entry, i, source)
        if f.name in faults:
            raise FaultError(f"{source}: faults[{i}]: name {f.name!r} appears more than once")
        faults[f.name] = f
    skipped = tuple(
        NotInjectable(e["name"], e["title"], tuple(e.get("upstream", ())), e["reason"])
        for e in doc.get("not_injectable", ())
    )
    return faults, skipped


@lru_cache(maxsize=1)
def _packaged() -> tuple[dict[str, Fault], tuple[NotInjectable, ...]]:
    return load_catalogue()


def catalogue() -> dict[str, Fault]:
    """The packaged faults by name (a new dict each call; the faults are loaded once)."""
    return dict(_packaged()[0])


def not_injectable() -> tuple[NotInjectable, ...]:
    """The packaged catalogue's bug classes no backend hosts as a fault."""
    return _packaged()[1]


def get_fault(name: str, where: str = "fault") -> Fault:
    """The packaged fault ``name``; a :class:`FaultError` naming ``where``, the value and the known names."""
    faults = _packaged()[0]
    f = faults.get(name)
    if f is None:
        raise FaultError(f"{where}: {name!r} is not a catalogued fault; known: {', '.join(faults)}")
    return f


def injectable_fault(name: str, backend: str, where: str = "fault") -> Fault:
    """The packaged fault ``name`` when ``backend`` can host it; a :class:`FaultError` naming ``where``, the value and
    the rule otherwise (an unknown fault, a backend with no hooks, or the catalogue's reason the fault cannot be
    injected into ``backend``)."""
    f = get_fault(name, where)
    try:
        row = f.injection(backend)
    except FaultError as e:
        raise FaultError(f"{where}: {name!r}: {e}") from None
    if row.reason is not None:
        raise FaultError(f"{where}: {name!r} cannot be injected into the {backend} backend: {row.reason}")
    return f


_active: Fault | None = None


def active() -> Fault | None:
    """The active fault, or None (the normal case)."""
    return _active


def activate(fault: Fault | str | None) -> Fault | None:
    """Make ``fault`` (a :class:`Fault`, a catalogued name, or None for none) the active one; return the previous.
    The state is the process's: a forked child (the plugin's kernel process) inherits it."""
    global _active
    previous = _active
    _active = get_fault(fault) if isinstance(fault, str) else fault
    return previous


@contextmanager
def injected(fault: Fault | str | None) -> Iterator[Fault | None]:
    """``with injected("gqa_head_map"): ...``: the fault active inside the block, the previous state after."""
    previous = activate(fault)
    try:
        yield _active
    finally:
        activate(previous)


def perturb(point: str, value: Any, **context: Any) -> Any:
    """The hook of a backend at ``point``: ``value`` itself unless the active fault hooks ``point``."""
    f = _active
    if f is None or point not in f.hooked:
        return value
    return f.inject(point, value, context)


__all__ = [
    "HOOK_POINTS",
    "INJECTION_BACKENDS",
    "TRITON_HOOK_POINTS",
    "Fault",
    "FaultError",
    "Injection",
    "NotInjectable",
    "activate",
    "active",
    "catalogue",
    "default_catalogue_path",
    "get_fault",
    "injectable_fault",
    "injected",
    "injector_table",
    "load_catalogue",
    "not_injectable",
    "perturb",
]
