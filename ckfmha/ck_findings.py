"""CK kernel findings: where CK's FMHA kernels compute something other than the exact semantics, as data.

The findings live in ``ckfmha/data/ck_findings.yaml`` (schema ``ck_findings``): each names the CK source lines,
the kernel families it affects, what in a problem triggers it and how it was reproduced.  ckfmha's reference stays
exact; instead the harness knows the limitation:

==============================  =====================================================================================
:func:`load_findings`           the findings (checked against the schema and ckfmha's kernel vocabulary; loaded once)
:meth:`Finding.affects`         the affected entry a kernel falls under (CK kernels only: a Triton kernel is
                                ckfmha's own and computes exact positions), else None
:meth:`Finding.max_operand`     the largest position operand a kernel of that order forms for the problem
:func:`finding_misfit`          the dispatcher's words when an affected kernel would run a problem that triggers a
                                finding (:mod:`ckfmha.rules` refuses the kernel with them), else None
:func:`triggered_findings`      the findings a problem triggers for some affected kernel family (the dispatcher
                                then also plans the kernels that serve such problems: split-KV for the forward)
==============================  =====================================================================================

The nightly category exposes each finding on the hip backend: a shape that triggers it gets a kernel item pinning
an affected kernel, run with rule 9b waived (``Dispatcher(..., waive_findings=True)``) and ``xfail`` naming the
finding (:func:`pytest_ckfmha.collect.exposing_kernels`, docs/plugin.md "CK findings").

``alibi_sad_u16``: the ALiBi position of the fwd, paged-KV, batch-prefill and bwd kernels is a 16-bit sum of
absolute differences (``block_position_encoding.hpp``): the row-major (forward) kernels form the operands
``row + shift`` and ``col + shift``, at most ``max(seqlen_q, seqlen_k) - 1`` per sequence; the column-major (bwd)
kernel forms ``row + col`` under a causal mask (ALiBi's vertical mode), at most ``seqlen_q + seqlen_k - 2``.  An
operand at or beyond ``operand_limit`` (2^16) wraps.  docs/ck_findings.md has the write-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckfmha.datafile import DataFileError, check_schema, load_yaml
from ckfmha.kernel import Bias, Family, KernelConfig, Pipeline
from ckfmha.masking import MaskKind

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem


@dataclass(frozen=True)
class Affected:
    """One affected kernel family: ``order`` of its position operands (``row_major``: fwd kernels,
    ``column_major``: the bwd kernel) and the pipelines of that family that are not affected."""

    family: Family
    order: str
    except_pipelines: frozenset[Pipeline] = frozenset()


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    summary: str
    sources: tuple[str, ...]
    bias: Bias
    operand_limit: int
    affected: tuple[Affected, ...]
    served_by: str = ""
    reproduction: tuple[tuple[str, str], ...] = ()

    def affects(self, c: KernelConfig) -> Affected | None:
        """The entry ``c`` falls under (a CK kernel of an affected family and pipeline), else None."""
        if c.pipeline is Pipeline.TRITON:
            return None
        for a in self.affected:
            if c.family is a.family and c.pipeline not in a.except_pipelines:
                return a
        return None

    def max_operand(self, problem: "Problem", order: str) -> int:
        """The largest position operand a kernel of ``order`` forms for ``problem`` (over its sequences)."""
        qs, ks = problem.seqlens_q_list, problem.seqlens_k_list  # per sequence (batch mode: per batch entry)
        m = problem.mask
        left, right = (m.y, m.x) if m.kind is MaskKind.GENERIC else (m.left, m.right)
        vertical = m.kind is not MaskKind.NONE and left < 0 and right == 0  # make_alibi_from_lr_mask: causal
        if order == "column_major" and vertical:
            return max(sq + sk - 2 for sq, sk in zip(qs, ks))
        return max(max(sq, sk) - 1 for sq, sk in zip(qs, ks))

    def triggers(self, problem: "Problem", order: str) -> bool:
        return problem.bias is self.bias and self.max_operand(problem, order) >= self.operand_limit


def default_findings_path() -> Path:
    return Path(str(resources.files("ckfmha") / "data" / "ck_findings.yaml"))


def _token(enum: Any, value: str, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise DataFileError(f"{where}: {value!r} is not a ckfmha {enum.__name__.lower()}; allowed: {allowed}") from None


def _finding(doc: dict, i: int, source: str) -> Finding:
    where = f"{source}: findings[{i}]"
    affected = tuple(
        Affected(
            _token(Family, a["family"], f"{where}.affected[{j}].family"),
            a["order"],
            frozenset(
                _token(Pipeline, pl, f"{where}.affected[{j}].except_pipelines") for pl in a.get("except_pipelines", ())
            ),
        )
        for j, a in enumerate(doc["affected"])
    )
    trig = doc["trigger"]
    return Finding(
        doc["id"],
        doc["title"],
        doc["summary"],
        tuple(doc["sources"]),
        _token(Bias, trig["bias"], f"{where}.trigger.bias"),
        int(trig["operand_limit"]),
        affected,
        doc.get("served_by", ""),
        tuple((doc.get("reproduction") or {}).items()),
    )


@lru_cache(maxsize=4)
def load_findings(path: str | None = None) -> tuple[Finding, ...]:
    """The findings of ``path`` (default: the packaged data file); a :class:`~ckfmha.datafile.DataFileError`
    naming the file, the key and the rule when it does not follow the schema or names an unknown family."""
    source = str(path or default_findings_path())
    doc = load_yaml(source)
    check_schema(doc, "ck_findings", source)
    findings = tuple(_finding(f, i, source) for i, f in enumerate(doc["findings"]))
    ids = [f.id for f in findings]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise DataFileError(f"{source}: findings: id {dup[0]!r} appears more than once")
    return findings


def finding_misfit(problem: "Problem", c: KernelConfig, findings: tuple[Finding, ...] | None = None) -> str | None:
    """The dispatcher's words when ``c`` is affected by a finding that ``problem`` triggers, else None."""
    for f in load_findings() if findings is None else findings:
        a = f.affects(c)
        if a is not None and f.triggers(problem, a.order):
            return (
                f"ck_finding {f.id}: {f.title} -- this problem's largest position operand is "
                f"{f.max_operand(problem, a.order)} >= {f.operand_limit} (docs/ck_findings.md)"
            )
    return None


def triggered_findings(problem: "Problem", family: Family) -> list[Finding]:
    """The findings ``problem`` triggers for CK kernels of ``family``."""
    return [f for f in load_findings() for a in f.affected if a.family is family and f.triggers(problem, a.order)]


__all__ = [
    "Affected",
    "Finding",
    "default_findings_path",
    "finding_misfit",
    "load_findings",
    "triggered_findings",
]
