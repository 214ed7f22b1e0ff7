"""The fault catalogue: CK's bug history as faults injected into the cpu backend (issue 29, docs/faults.md).

Each entry of ``ckfmha/data/faults.yaml`` (schema ``faults``) names a bug class, its upstream reference, the
problem families whose plans run the faulty code, and the **hook points** of the cpu backend its injector
perturbs (:mod:`ckfmha.faults.injectors`).  A hook point is one call in the backend's own code::

    start, end = faults.perturb("mask.key_range", (start, end), sk=sk)

which returns ``value`` unchanged unless the active fault hooks that point: injection costs one global read per
hook when off and never copies a kernel.  Nothing is active unless a caller activates a fault:

==============================  ====================================================================================
:func:`catalogue`               the faults (name -> :class:`Fault`), checked against the schema, the problem
                                families, the hook points and the injectors; loaded once
:func:`get_fault`               one fault by name (a :class:`FaultError` naming the known ones)
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

Errors (:class:`FaultError`, a :class:`~ckfmha.datafile.DataFileError`) name the file, the fault, the field and
the rule: an unknown family, hook point or injector, an injector whose points differ from the entry's, a repeated
name.
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


class FaultError(DataFileError):
    """A bad fault catalogue or an unknown fault name; the message names the file or option, the value and the rule."""


@dataclass(frozen=True)
class Fault:
    """One catalogued fault: ``name``, the bug ``title``, ``upstream`` references (issue / PR addresses; empty when
    the class has none named), the problem ``families`` whose plans run the hooked code, the hook ``points``, the
    kernel condition ``when`` (``{"hdim_q": 256, "dtype": "bf16"}``: only kernels with those values) and the
    per-point injector functions ``(value, context) -> value``."""

    name: str
    title: str
    model: str
    upstream: tuple[str, ...]
    families: tuple[str, ...]
    points: frozenset[str]
    when: Mapping[str, Any] = field(default_factory=dict)
    injectors: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

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
    """A bug class of issue 29 the cpu backend cannot host, and why."""

    name: str
    title: str
    upstream: tuple[str, ...]
    reason: str


def default_catalogue_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "faults.yaml"


def _fault(doc: Mapping[str, Any], i: int, source: str) -> Fault:
    from ckfmha.families import PROBLEM_FAMILIES
    from ckfmha.faults.injectors import INJECTORS

    name = doc["name"]
    where = f"{source}: faults[{i}] ({name})"
    for fam in doc["families"]:
        if fam not in PROBLEM_FAMILIES:
            raise FaultError(
                f"{where}: families: {fam!r} is not a problem family; allowed: {', '.join(PROBLEM_FAMILIES)}"
            )
    for point in doc["points"]:
        if point not in HOOK_POINTS:
            raise FaultError(
                f"{where}: points: {point!r} is not a hook point of the cpu backend; known: {', '.join(HOOK_POINTS)}"
            )
    injector = doc.get("injector", name)
    table = INJECTORS.get(injector)
    if table is None:
        raise FaultError(f"{where}: injector: {injector!r} is not in ckfmha.faults.injectors.INJECTORS")
    if set(table) != set(doc["points"]):
        raise FaultError(
            f"{where}: points: {sorted(doc['points'])} must be the points injector {injector!r} hooks: {sorted(table)}"
        )
    return Fault(
        name=name,
        title=doc["title"],
        model=doc["model"],
        upstream=tuple(doc.get("upstream", ())),
        families=tuple(doc["families"]),
        points=frozenset(doc["points"]),
        when=dict(doc.get("when", {})),
        injectors=dict(table),
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
    """The packaged catalogue's bug classes the cpu backend cannot host."""
    return _packaged()[1]


def get_fault(name: str, where: str = "fault") -> Fault:
    """The packaged fault ``name``; a :class:`FaultError` naming ``where``, the value and the known names."""
    faults = _packaged()[0]
    f = faults.get(name)
    if f is None:
        raise FaultError(f"{where}: {name!r} is not a catalogued fault; known: {', '.join(faults)}")
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
    """The hook of the cpu backend at ``point``: ``value`` itself unless the active fault hooks ``point``."""
    f = _active
    if f is None or point not in f.points:
        return value
    return f.inject(point, value, context)


__all__ = [
    "HOOK_POINTS",
    "Fault",
    "FaultError",
    "NotInjectable",
    "activate",
    "active",
    "catalogue",
    "default_catalogue_path",
    "get_fault",
    "injected",
    "load_catalogue",
    "not_injectable",
    "perturb",
]
