"""The dispatcher's tie-break table: ``data/heuristics.yaml``, or a file ``ckfmha tune`` wrote from measurements.

Schema (``data/schemas/heuristics.schema.yaml``)::

    schema: 1
    rules:                      # kernel priorities: the first rule whose `when` matches gives it; lower wins
      - {when: "c.pipeline == 'qr_async'", priority: 20, why: "..."}
    short_query_tiles:          # seqtune exceptions: up to max_seqlen_q query rows count as short for `when`
      - {when: "c.pipeline == 'triton'", max_seqlen_q: 2048, why: "..."}
    launch_variants:            # Triton forward launch variants: the first rule whose `when` matches gives them
      - {when: "c.hdim_q >= 256 and c.mask != 'none'", qk_ahead: true, lpt_heads: 8, why: "..."}
    tuned:                      # measured: the fastest kernel of each shape class (ckfmha tune)
      - arch: sm90
        class: {family: fwd, dtype: fp16, mode: batch, hdim_q: 128, hdim_v: 128, mask: causal, seqlen_q: 1024,
                seqlen_k: 1024}
        kernel_id: fwd.fp16.batch.d128x128.triton.b64x64....
        why: "..."

A **launch variant** (:class:`LaunchVariant`) changes how the Triton backend launches a kernel, not which kernel
runs: ``qk_ahead`` issues Q.K one key block ahead of the softmax, ``lpt_heads`` orders the grid longest-first over
groups of that many heads. The dispatcher puts the first matching rule's variant on the plan's stage
(``stage.launch.variant``, :class:`ckfmha.plan.Launch`); the Triton launcher applies each where the problem can take it
(Q.K ahead for plain problems, the longest-first grid in batch mode without packed GQA rows). No matching rule:
neither.

A **shape class** (:func:`shape_class`) is the problem family, dtype, mode, head dims, the mask kind (``none``,
``causal`` -- top-left or bottom-right --, ``window``) and the power-of-two buckets of the longest query and key
lengths (``seqlen_q: 1024`` holds 1024..2047).  Among the main stage's candidates that pass every rule, the
dispatcher ranks the class's tuned kernel (when the table has one for the registry's arch) first; then head-dim
waste, pads, seqtune, the rules' priorities and the kernel id (ckfmha/dispatcher.py).

:func:`tune` derives the ``tuned`` entries from a timed run report (``--ckfmha-bench``): per class, the kernel with
the best mean speed relative to the fastest kernel of each shape, among the kernels timed on every shape of the
class (or, when none is, on the most shapes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckfmha.plan import LaunchVariant  # the type lives with the plan it travels on; re-exported here

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.kernel import KernelConfig
    from ckfmha.problem import Problem

DEFAULT_PRIORITY = 100
CLASS_KEYS = ("family", "dtype", "mode", "hdim_q", "hdim_v", "mask", "seqlen_q", "seqlen_k")
Rule = tuple[Callable[[Any], bool], int, str]  # (when, value, why)


class HeuristicsError(ValueError):
    """A heuristics file that cannot be used; the message names the file, the key path and the rule."""


def bucket(n: int) -> int:
    """The power-of-two bucket of a length: the largest power of two <= n (0 for 0)."""
    return 0 if n <= 0 else 1 << (int(n).bit_length() - 1)


def _mask_kind(mask) -> str:
    from ckfmha.masking import MaskKind, MaskSpec

    m = MaskSpec.parse(mask)
    if m.kind is MaskKind.NONE:
        return "none"
    return "causal" if m.is_causal else "window"


def shape_class(problem: "Problem") -> tuple:
    """The problem's shape class (see the module doc), a tuple in :data:`CLASS_KEYS` order."""
    from ckfmha.families import problem_family_of

    p = problem
    return (
        problem_family_of(p),
        p.dtype.value,
        p.mode.value,
        p.hdim_q,
        p.hdim_v,
        _mask_kind(p.mask),
        bucket(p.seqlen_q),
        bucket(p.seqlen_k),
    )


def row_class(row: dict[str, Any]) -> tuple:
    """The shape class of a report row (its problem fields)."""
    return (
        str(row["family"]),
        str(row["dtype"]),
        str(row["mode"]),
        int(row["hdim_q"]),
        int(row["hdim_v"]),
        _mask_kind(str(row.get("mask") or "0")),
        bucket(int(row["seqlen_q"])),
        bucket(int(row["seqlen_k"])),
    )


@dataclass(frozen=True)
class Heuristics:
    source: str
    rules: tuple[Rule, ...] = ()
    short_query_tiles: tuple[Rule, ...] = ()
    tuned: dict[tuple[str, tuple], str] = field(default_factory=dict)  # (arch, class) -> kernel id
    launch_variants: tuple[tuple[Callable[[Any], bool], LaunchVariant, str], ...] = ()

    def launch_variant(self, c: "KernelConfig") -> LaunchVariant:
        for pred, variant, _ in self.launch_variants:
            if pred(c):
                return variant
        return LaunchVariant()

    def priority(self, c: "KernelConfig") -> int:
        for pred, prio, _ in self.rules:
            if pred(c):
                return prio
        return DEFAULT_PRIORITY

    def short_query_limit(self, c: "KernelConfig") -> int:
        for pred, limit, _ in self.short_query_tiles:
            if pred(c):
                return limit
        return 0

    def tuned_kernel(self, arch: str, problem: "Problem") -> str | None:
        if not self.tuned:
            return None
        return self.tuned.get((arch, shape_class(problem)))


def _compile(source: str, entries: Iterable[dict], key: str, value: Callable[[dict], Any]) -> tuple:
    """(when, value(entry), why) per entry of section ``key``; a bad filter names the entry."""
    from ckfmha.filters import FilterError, compile_filter

    out = []
    for i, rule in enumerate(entries):
        try:
            pred = compile_filter(rule["when"])
        except FilterError as e:
            raise HeuristicsError(f"{source}: {key}[{i}].when: {e}") from None
        out.append((pred, value(rule), str(rule.get("why", ""))))
    return tuple(out)


def heuristics_from_doc(doc: Any, source: str) -> Heuristics:
    from ckfmha.datafile import DataFileError, check_schema

    try:
        check_schema(doc, "heuristics", source)
    except DataFileError as e:
        raise HeuristicsError(str(e)) from None
    tuned: dict[tuple[str, tuple], str] = {}
    for i, entry in enumerate(doc.get("tuned") or ()):
        key = (entry["arch"], tuple(entry["class"][k] for k in CLASS_KEYS))
        if key in tuned:
            raise HeuristicsError(
                f"{source}: tuned[{i}]: a second entry for arch {key[0]} and class {dict(zip(CLASS_KEYS, key[1]))}"
            )
        tuned[key] = entry["kernel_id"]
    return Heuristics(
        source,
        _compile(source, doc.get("rules") or (), "rules", lambda r: int(r["priority"])),
        _compile(source, doc.get("short_query_tiles") or (), "short_query_tiles", lambda r: int(r["max_seqlen_q"])),
        tuned,
        _compile(source, doc.get("launch_variants") or (), "launch_variants", LaunchVariant.from_stage_args),
    )


@lru_cache(maxsize=8)
def _load(path: str, _mtime: int) -> Heuristics:
    from ckfmha.datafile import DataFileError, load_yaml

    try:
        doc = load_yaml(path)
    except DataFileError as e:
        raise HeuristicsError(str(e)) from None
    return heuristics_from_doc(doc, path)


def load_heuristics(path: str | Path | None = None) -> Heuristics:
    """The table of ``path``, or the packaged ``data/heuristics.yaml`` (cached while the file is unchanged)."""
    if path is None:
        from ckfmha.archs import data_dir

        path = data_dir() / "heuristics.yaml"
    p = Path(path)
    if not p.is_file():
        raise HeuristicsError(f"{p}: no such heuristics file")
    return _load(str(p), p.stat().st_mtime_ns)


# ------------------------------------------------------------------------------------------------ tuning
def _speed(row: dict[str, Any]) -> float | None:
    """1 / median ms of a timed, passed kernel row (None otherwise)."""
    if row.get("verdict") != "passed" or row.get("kind") != "kernel" or row.get("timed") is not True:
        return None
    try:
        ms = float(row["time_ms"])
    except (KeyError, TypeError, ValueError):
        return None
    return 1.0 / ms if ms > 0 else None


def tune(rows: Iterable[dict[str, Any]], arch: str) -> list[dict[str, Any]]:
    """The ``tuned`` entries of a timed run (see the module doc), sorted by class."""
    per_shape: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        sp = _speed(r)
        if sp is None or not r.get("kernel_id"):
            continue
        shape = str(r["id"]).split("::", 1)[0]
        per_shape[row_class(r)][shape][str(r["kernel_id"])] = sp
    entries = []
    for cls, shapes in sorted(per_shape.items(), key=lambda kv: tuple(map(str, kv[0]))):
        share: dict[str, list[float]] = defaultdict(list)
        for timings in shapes.values():
            best = max(timings.values())
            for kid, sp in timings.items():
                share[kid].append(sp / best)
        most = max(len(v) for v in share.values())
        if len(shapes) > 1 and most < 2:
            continue  # no kernel was timed on two shapes of the class: nothing to learn beyond one shape
        kid, shares = max(
            ((k, v) for k, v in share.items() if len(v) == most), key=lambda kv: (sum(kv[1]) / len(kv[1]), kv[0])
        )
        mean = sum(shares) / len(shares)
        entries.append(
            {
                "arch": arch,
                "class": dict(zip(CLASS_KEYS, cls)),
                "kernel_id": kid,
                "why": f"fastest on average over {len(shares)} of the class's {len(shapes)} timed shape(s): "
                f"{mean:.1%} of the best kernel of each shape",
            }
        )
    return entries


def tuned_document(base_path: str | Path | None, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The heuristics document ``ckfmha tune`` writes: the base table's rules with ``tuned`` replaced."""
    from ckfmha.datafile import load_yaml

    if base_path is None:
        from ckfmha.archs import data_dir

        base_path = data_dir() / "heuristics.yaml"
    doc = dict(load_yaml(base_path))
    doc["tuned"] = entries
    return doc
