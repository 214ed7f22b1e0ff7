"""Parity: run the same problems through two sides and report every agreement and disagreement.

A *side* is anything with ``name`` and ``run(problem, seed) -> SideResult`` (:class:`ParitySide`):
``tile_example`` (CK's binaries, :mod:`ckfmha.upstream.tile_runner`), ``ckfmha[:backend]`` (our dispatcher +
backend, :mod:`ckfmha.upstream.ckfmha_side`) and ``torch[:backend]`` (PyTorch SDPA / FlexAttention,
:mod:`ckfmha.upstream.torch_sdpa`); build them with :func:`make_side`.

Semantics (:func:`compare_results`), per problem:

* either side ``skipped`` -> the row is ``skipped`` (with the reason); never a pass;
* either side ``error`` or ``unparseable`` (:attr:`Verdict.is_error`) -> ``error``;
* verdicts differ -> ``disagree``, with both sides' words;
* both ``unsupported`` -> ``agree`` (compared: verdicts);
* both ran -> where both produced outputs, the common outputs are judged by both rules of
  :mod:`ckfmha.validator` and one of them decides (:func:`comparison_rule`):

  - ``elementwise``: the two sides' outputs compared with each other with CK's tolerance for the problem;
  - ``noise_floor``: each side's output against the float64 ground truth of the problem's inputs (``seed``),
    for both sides (two outputs within the noise of the truth agree up to that noise), decided per row
    (:func:`ckfmha.validator.validate_noise_floor`: ``max_row|out - truth| <= k * max(max_row|same_precision -
    truth|, u * max(max_row|truth|, g * max|truth|)) + atol``, tolerances.yaml ``row_noise_floor``);
    the tensor-wide FlashAttention form ``max|out - truth| <= k * max|same_precision - truth| + atol`` is reported
    next to it (``tensor_noise_passed``, ``tensor_error_ratio``); the error ratio per output is the larger of the
    two sides'.

  The noise floor decides when either side's own verdict was decided by it (a ``torch`` side: torch's kernels
  are not bound by CK's elementwise tolerance); otherwise (``ckfmha`` vs ``ckfmha``, fakes) the elementwise rule
  does.  Any output failing the deciding rule -> ``disagree``; otherwise ``agree`` (compared:
  ``verdicts+outputs`` or, when a side yields no tensors -- tile_example -- ``verdicts``: each side's own verdict
  came from comparing with a reference).  Both ``ran_invalid`` still agree, flagged ``both_invalid``.  Every
  output's summary carries both verdicts (``elementwise_passed``, ``noise_passed``; and ``tensor_noise_passed``,
  the tensor-wide figure), the error ratios and the deciding ``rule``; ``passed`` is the deciding rule's.

:func:`run_parity` returns a :class:`ParityReport` (JSON / CSV / a readable table).  The default parity set is
upstream's 14 configurations (research/upstream_testing.md §2.1) in ``data/parity_default.yaml``
(:func:`default_parity_set`).  docs/parity.md describes the API the pytest plugin uses.

*The side ran* means its verdict :attr:`~ckfmha.upstream.result.Verdict.answered` (``ran_valid``, ``ran_invalid``
or ``unsupported``); :func:`sides_that_never_ran` names the sides that answered for no row of a session (a
missing binary, no GPU, every run an error: nothing was compared on that side).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ckfmha.kernel import TokenEnum
from ckfmha.problem import Problem, ProblemError
from ckfmha.upstream.result import SideResult, Verdict, check_summary
from ckfmha.validator import NoiseFloorResult, Rule

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

PARITY_DEFAULT_PATH = Path(__file__).with_name("data") / "parity_default.yaml"


@runtime_checkable
class ParitySide(Protocol):
    @property
    def name(self) -> str: ...  # pragma: no cover - protocol (read-only: an attribute or a property)

    def run(self, problem: Problem, seed: int = 0) -> SideResult:  # pragma: no cover - protocol
        ...


class Status(TokenEnum):
    AGREE = "agree"
    DISAGREE = "disagree"
    SKIPPED = "skipped"
    ERROR = "error"


# ------------------------------------------------------------------------------------------ sides
def make_side(
    spec: str,
    *,
    bin_dir: str | Path | None = None,
    timeout_s: float | None = None,
    arch: str | None = None,
    receipt: int | str = 0,
    mask_mode: str = "simplified",
    device: str | None = None,
) -> ParitySide:
    """``tile_example`` | ``ckfmha[:auto|cpu|triton|hip]`` (default cpu; ``auto`` resolves lazily as a normal run
    does, :mod:`ckfmha.upstream.ckfmha_side`) | ``torch[:math|efficient|flash|cudnn|flex]``."""
    s = spec.strip()
    if s == "tile_example":
        from ckfmha.upstream.tile_runner import DEFAULT_TIMEOUT_S, TileExampleSide

        return TileExampleSide(bin_dir, timeout_s or DEFAULT_TIMEOUT_S)
    if s == "ckfmha" or s.startswith("ckfmha:"):
        from ckfmha.backends import backend_names
        from ckfmha.upstream.ckfmha_side import AUTO_BACKEND, CkfmhaSide

        backend = s.partition(":")[2] or "cpu"
        allowed = (AUTO_BACKEND,) + backend_names()
        if backend not in allowed:
            raise ValueError(f"parity side: {spec!r}: backend {backend!r} unknown; allowed: {', '.join(allowed)}")
        return CkfmhaSide(backend, arch=arch, receipt=receipt, mask_mode=mask_mode)
    if s == "torch" or s.startswith("torch:"):
        from ckfmha.upstream.torch_sdpa import TorchSide

        return TorchSide(s, device=device)
    raise ValueError(
        f"parity side: {spec!r} unknown; allowed: tile_example, ckfmha[:backend], "
        "torch[:math|efficient|flash|cudnn|flex]"
    )


def make_pair(upstream: str, ckfmha: str = "ckfmha:cpu", **kw) -> tuple[ParitySide, ParitySide]:
    """``(upstream side, ckfmha side)`` for ``--ckfmha-parity <upstream>``."""
    return make_side(upstream, **kw), make_side(ckfmha, **kw)


# ------------------------------------------------------------------------------------------ comparing
_ARCH_SUFFIX = re.compile(r"(_gfx[0-9a-z]+)?(\.cpp)?$")


def _norm_kernel(name: str) -> str:
    return _ARCH_SUFFIX.sub("", name)


@dataclass
class ParityRow:
    name: str
    problem: Problem
    seed: int
    left: SideResult
    right: SideResult
    status: Status
    compared: str  # "verdicts" | "verdicts+outputs" | "" (nothing compared: skipped/error)
    detail: str
    output_checks: dict[str, dict] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status is Status.AGREE and bool(self.compared)

    def _over_outputs(self, key: str) -> list:
        return [c.get(key) for c in self.output_checks.values() if isinstance(c, dict) and key in c]

    @property
    def rule(self) -> Rule | None:
        """The rule that decided the output comparison; None when no outputs were compared."""
        rules = self._over_outputs("rule")
        return Rule(rules[0]) if rules else None

    @property
    def elementwise_passed(self) -> bool | None:
        """Every compared output agrees between the sides under CK's elementwise tolerance (None: no outputs)."""
        v = self._over_outputs("elementwise_passed")
        return all(v) if v else None

    @property
    def noise_passed(self) -> bool | None:
        """Every compared output of both sides lies within the noise floor of the float64 truth (None: no
        outputs, or the rule could not judge them)."""
        v = self._over_outputs("noise_passed")
        return None if not v or any(x is None for x in v) else all(v)

    @property
    def tensor_noise_passed(self) -> bool | None:
        """The tensor-wide (FlashAttention) noise floor's verdict over the compared outputs, reported next to the
        deciding per-row one (None: no outputs, or not judged)."""
        v = self._over_outputs("tensor_noise_passed")
        return None if not v or any(x is None for x in v) else all(v)

    @property
    def error_ratio(self) -> float | None:
        """The worst error ratio ``max|out - truth| / max|same_precision - truth|`` over the compared outputs and
        both sides (None: no outputs, or no ratio defined)."""
        v = [x for x in self._over_outputs("error_ratio") if x is not None]
        return max(v) if v else None

    def pytest_outcome(self) -> tuple[str, str]:
        """("passed" | "failed" | "skipped", message) for a test item."""
        if self.status is Status.SKIPPED:
            return "skipped", self.detail
        if self.passed:
            return "passed", self.detail
        return "failed", self.detail

    def to_dict(self, raw: bool = False) -> dict[str, Any]:
        try:
            args = " ".join(self.problem.to_ck_args())
        except ProblemError:
            args = ""
        return {
            "name": self.name,
            "problem": str(self.problem),
            "family": self.problem.family.value,
            "ck_args": args,
            "seed": self.seed,
            "status": self.status.value,
            "compared": self.compared,
            "rule": self.rule.value if self.rule else None,
            "elementwise_passed": self.elementwise_passed,
            "noise_passed": self.noise_passed,
            "tensor_noise_passed": self.tensor_noise_passed,
            "error_ratio": self.error_ratio,
            "detail": self.detail,
            "output_checks": self.output_checks,
            "info": self.info,
            "left": self.left.to_dict(raw),
            "right": self.right.to_dict(raw),
        }

    def csv_row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "problem": str(self.problem),
            "status": self.status.value,
            "compared": self.compared,
            "left_side": self.left.side,
            "left_verdict": self.left.verdict.value,
            "left_words": " ".join(self.left.reason.split()),
            "right_side": self.right.side,
            "right_verdict": self.right.verdict.value,
            "right_words": " ".join(self.right.reason.split()),
            "rule": self.rule.value if self.rule else "",
            "elementwise_passed": _cell(self.elementwise_passed),
            "noise_passed": _cell(self.noise_passed),
            "tensor_noise_passed": _cell(self.tensor_noise_passed),
            "error_ratio": _cell(self.error_ratio),
            "detail": " ".join(self.detail.split()),
        }


def _cell(v) -> Any:
    return "" if v is None else v


def comparison_rule(left: SideResult, right: SideResult) -> Rule:
    """The rule that decides a comparison of two sides' outputs: the noise floor when either side's verdict was
    decided by it (:attr:`SideResult.rule`), else CK's elementwise tolerance."""
    return Rule.NOISE_FLOOR if Rule.NOISE_FLOOR in (left.rule, right.rule) else Rule.ELEMENTWISE


def _noise_against_truth(
    problem: Problem, seed: int, outputs: tuple[dict[str, np.ndarray], dict[str, np.ndarray]], names: list[str]
) -> tuple[dict[str, tuple[NoiseFloorResult, NoiseFloorResult]], str]:
    """Per output, the (left, right) sides' noise-floor results against the truth of ``make_inputs(problem,
    seed)``; or ({}, why) when the truth cannot be had for some output."""
    from ckfmha.upstream.reference_cache import noise_references
    from ckfmha.validator import validate_noise_floor

    try:
        truth, same = noise_references(problem, seed)
    except Exception as e:  # noqa: BLE001 - a reference that cannot be computed: the rule cannot judge
        return {}, f"no float64 ground truth ({type(e).__name__}: {e})"
    try:
        left, right = (validate_noise_floor(problem, o, truth, same, names=names) for o in outputs)
    except ValueError as e:
        return {}, str(e)
    return {n: (left[n], right[n]) for n in names}, ""


def _cross_summary(
    elementwise,
    noise: tuple[NoiseFloorResult, NoiseFloorResult] | None,
    rule: Rule,
    sides: tuple[str, str],
    why_no_noise: str,
) -> dict[str, Any]:
    d = check_summary(elementwise)
    d["elementwise_passed"] = bool(elementwise.passed)
    if noise is None:
        d.update({"noise_passed": None, "error_ratio": None, "noise_message": f"not judged: {why_no_noise}"})
    else:
        ratios = [r.ratio for r in noise]
        defined = [x for x in ratios if x is not None]
        d.update(
            {
                "noise_passed": all(r.passed for r in noise),
                "noise_granularity": noise[0].granularity.value,
                "error_ratio": max(defined) if defined else None,
                "left_error_ratio": ratios[0],
                "right_error_ratio": ratios[1],
                "noise_k": noise[0].k,
                "noise_atol": noise[0].atol,
                "noise_message": " || ".join(f"{s}: {r}" for s, r in zip(sides, noise)),
            }
        )
        d.update(_tensor_wide(noise))
    d["rule"] = rule.value
    d["passed"] = bool(d["noise_passed"]) if rule is Rule.NOISE_FLOOR else d["elementwise_passed"]
    return d


def _tensor_wide(noise: tuple[NoiseFloorResult, NoiseFloorResult]) -> dict[str, Any]:
    """The tensor-wide (FlashAttention) figures kept next to a per-row verdict, both sides: ``tensor_noise_passed``
    (both sides pass), ``tensor_error_ratio`` (the larger side's), ``tensor_noise_k``; empty when the verdict
    itself is tensor-wide."""
    wide = [r.tensor for r in noise]
    if any(w is None for w in wide):
        return {}
    ratios = [w.ratio for w in wide if w is not None and w.ratio is not None]
    return {
        "tensor_noise_passed": all(w is not None and w.passed for w in wide),
        "tensor_error_ratio": max(ratios) if ratios else None,
        "tensor_noise_k": wide[0].k if wide[0] is not None else None,
    }


def compare_results(
    problem: Problem, left: SideResult, right: SideResult, *, seed: int = 0
) -> tuple[Status, str, str, dict]:
    """``(status, compared, detail, output_checks)``; see the module doc.  ``seed``: the inputs the sides ran on
    (``make_inputs(problem, seed)``), whose float64 truth the noise-floor rule compares with."""
    both = f"{left.side}: {left.words()} || {right.side}: {right.words()}"
    skipped = [r for r in (left, right) if r.verdict is Verdict.SKIPPED]
    if skipped:
        return Status.SKIPPED, "", "; ".join(f"{r.side} skipped: {r.reason}" for r in skipped), {}
    errors = [r for r in (left, right) if r.verdict.is_error]
    if errors:
        return (
            Status.ERROR,
            "",
            "; ".join(f"{r.side} {r.verdict.value}: {r.reason}" for r in errors) + f" || {both}",
            {},
        )
    if left.verdict is not right.verdict:
        return Status.DISAGREE, "verdicts", f"verdicts differ: {both}", {}
    if left.verdict is Verdict.UNSUPPORTED:
        return Status.AGREE, "verdicts", f"both unsupported: {both}", {}
    left_outputs, right_outputs = left.outputs or {}, right.outputs or {}
    common = [n for n in left_outputs if n in right_outputs]
    note = " (both invalid)" if left.verdict is Verdict.RAN_INVALID else ""
    if not common:
        lacking = [r.side for r in (left, right) if not r.outputs]
        return (
            Status.AGREE,
            "verdicts",
            (
                f"both {left.verdict.value}{note}; outputs not compared ("
                f"{', '.join(lacking) or 'no common outputs'} gives no tensors): {both}"
            ),
            {},
        )
    return _compare_outputs(problem, left, right, common, seed, f"both {left.verdict.value}{note}", both)


def _compare_outputs(
    problem: Problem, left: SideResult, right: SideResult, common: list[str], seed: int, agreed: str, both: str
) -> tuple[Status, str, str, dict]:
    """:func:`compare_results` for two sides with the same ran verdict (``agreed`` words it) and ``common``
    outputs: each output under CK's elementwise rule and against the float64 truth, judged by the comparison
    rule."""
    from ckfmha.validator import validate

    left_outputs, right_outputs = left.outputs or {}, right.outputs or {}
    rule = comparison_rule(left, right)
    checks = validate(problem, left_outputs, right_outputs, names=common)
    noise, why = _noise_against_truth(problem, seed, (left_outputs, right_outputs), common)
    summ = {n: _cross_summary(checks[n], noise.get(n), rule, (left.side, right.side), why) for n in common}
    if rule is Rule.NOISE_FLOOR and why:
        return Status.ERROR, "verdicts+outputs", f"noise-floor rule cannot judge the outputs: {why} || {both}", summ
    bad = [n for n in common if not summ[n]["passed"]]
    if bad:
        if rule is Rule.ELEMENTWISE:
            what = "outputs differ between the sides: " + "; ".join(str(checks[n]) for n in bad)
        else:
            what = "outputs differ from the float64 truth beyond the noise floor: " + "; ".join(
                summ[n]["noise_message"] for n in bad
            )
        return Status.DISAGREE, "verdicts+outputs", f"{what} || {both}", summ
    return (
        Status.AGREE,
        "verdicts+outputs",
        f"{agreed}; outputs agree under the {rule.value} rule (" + ", ".join(common) + f"): {both}",
        summ,
    )


def compare_one(problem: Problem, left: ParitySide, right: ParitySide, seed: int = 0, name: str = "") -> ParityRow:
    """Run both sides on one problem and compare (what a plugin test item calls)."""
    lres = left.run(problem, seed)
    rres = right.run(problem, seed)
    status, compared, detail, checks = compare_results(problem, lres, rres, seed=seed)
    info: dict[str, Any] = {}
    lk, rk = lres.fields.get("kernels"), rres.fields.get("kernels")
    if lk and rk:
        info["kernels_match"] = sorted(map(_norm_kernel, lk)) == sorted(map(_norm_kernel, rk))
        info["left_kernels"], info["right_kernels"] = list(lk), list(rk)
    return ParityRow(name or str(problem), problem, seed, lres, rres, status, compared, detail, checks, info)


# ------------------------------------------------------------------------------------------ report
@dataclass
class ParityReport:
    left: str
    right: str
    rows: list[ParityRow] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = {s.value: 0 for s in Status}
        for r in self.rows:
            c[r.status.value] += 1
        c["total"] = len(self.rows)
        return c

    @property
    def ok(self) -> bool:
        """No disagreement and no error (skips do not fail, and do not count as agreements)."""
        return all(r.status in (Status.AGREE, Status.SKIPPED) for r in self.rows)

    @property
    def disagreements(self) -> list[ParityRow]:
        return [r for r in self.rows if r.status in (Status.DISAGREE, Status.ERROR)]

    def sides_that_never_ran(self) -> list[str]:
        """:func:`sides_that_never_ran` over this report's rows."""
        return sides_that_never_ran(self.rows)

    def to_dict(self, raw: bool = False) -> dict[str, Any]:
        return {
            "left": self.left,
            "right": self.right,
            "counts": self.counts(),
            "ok": self.ok,
            "rows": [r.to_dict(raw) for r in self.rows],
        }

    def to_json(self, path: str | Path | None = None, raw: bool = False) -> str:
        text = json.dumps(self.to_dict(raw), indent=1, allow_nan=False, default=str)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def to_csv(self, path: str | Path | None = None) -> str:
        buf = io.StringIO()
        cols = [
            "name",
            "problem",
            "status",
            "compared",
            "left_side",
            "left_verdict",
            "left_words",
            "right_side",
            "right_verdict",
            "right_words",
            "rule",
            "elementwise_passed",
            "noise_passed",
            "tensor_noise_passed",
            "error_ratio",
            "detail",
        ]
        w = csv.DictWriter(buf, fieldnames=cols)
        w.writeheader()
        for r in self.rows:
            w.writerow(r.csv_row())
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def table(self) -> str:
        lines = [f"parity {self.left} vs {self.right}"]
        w = max([4] + [len(r.name) for r in self.rows])
        for r in self.rows:
            judged = (
                ""
                if r.rule is None
                else f"  {r.rule.value}" + ("" if r.error_ratio is None else f" ratio {r.error_ratio:.3g}")
            )
            lines.append(
                f"  {r.name.ljust(w)}  {r.status.value:<8}  {r.left.verdict.value:<11}  "
                f"{r.right.verdict.value:<11}  {r.compared}{judged}"
            )
        c = self.counts()
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in c.items()))
        for r in self.disagreements:
            lines.append(f"  {r.status.value.upper()} {r.name}: {r.detail}")
        return "\n".join(lines)


def sides_that_never_ran(rows: Iterable[ParityRow]) -> list[str]:
    """Names of the sides (in order of first appearance, left before right) whose verdict *answered*
    (:attr:`Verdict.answered`: ``ran_valid`` / ``ran_invalid`` / ``unsupported``) for none of ``rows`` -- e.g. a
    parity session whose binary was missing everywhere (all ``skipped``) or crashed everywhere (all ``error``).
    Empty when every side answered at least once, and for no rows."""
    seen: dict[str, bool] = {}
    for row in rows:
        for r in (row.left, row.right):
            seen[r.side] = seen.get(r.side, False) or r.verdict.answered
    return [side for side, answered in seen.items() if not answered]


def _named(problems: Iterable) -> list[tuple[str, Problem]]:
    out = []
    for item in problems:
        if isinstance(item, Problem):
            out.append((str(item), item))
        else:
            name, p = item
            out.append((str(name), p))
    return out


def run_parity(
    problems: Iterable,
    left: ParitySide | str,
    right: ParitySide | str,
    seed: int = 0,
    progress: Callable[[ParityRow], None] | None = None,
    **side_kw,
) -> ParityReport:
    """Every problem (``Problem`` or ``(name, Problem)``) through both sides; sides may be given as specs."""
    ls = make_side(left, **side_kw) if isinstance(left, str) else left
    rs = make_side(right, **side_kw) if isinstance(right, str) else right
    rep = ParityReport(ls.name, rs.name)
    for name, p in _named(problems):
        row = compare_one(p, ls, rs, seed, name)
        rep.rows.append(row)
        if progress is not None:
            progress(row)
    return rep


# ------------------------------------------------------------------------------------------ default set
class ParitySetError(ValueError):
    pass


def load_parity_set(path: str | Path = PARITY_DEFAULT_PATH) -> list[tuple[str, Problem]]:
    """``[(name, Problem)]`` from a parity-set YAML (``defaults`` + ``cases`` of tile_example arguments), read by
    the strict :func:`ckfmha.datafile.load_yaml` (duplicate keys, non-UTF-8 bytes, deep nesting are errors) and
    checked against ``data/schemas/parity_set.schema.yaml``; a case name used twice is an error, and every case
    becomes a Problem through :meth:`Problem.from_ck_args` (whose errors name the case)."""
    from ckfmha.datafile import DataFileError, check_schema, load_yaml

    try:
        doc = load_yaml(path)
        check_schema(doc, "parity_set", str(path))
    except DataFileError as e:
        raise ParitySetError(str(e)) from None
    defaults = doc.get("defaults") or {}
    binary = doc.get("binary", "fwd")
    out, seen = [], set()
    for i, case in enumerate(doc["cases"]):
        name = case["name"]
        if name in seen:
            raise ParitySetError(f"{path}: cases[{i}]: duplicate name {name!r}")
        seen.add(name)
        args = {**defaults, **{k: v for k, v in case.items() if k != "name"}}
        toks = [f"-{k}={v}" for k, v in args.items()]
        try:
            out.append((name, Problem.from_ck_args(toks, binary=binary)))
        except ProblemError as e:
            raise ParitySetError(f"{path}: cases[{i}] ({name}): {e}") from None
    return out


def default_parity_set() -> list[tuple[str, Problem]]:
    """Upstream's 14 parity configurations (research/upstream_testing.md §2.1)."""
    return load_parity_set(PARITY_DEFAULT_PATH)


__all__ = [
    "ParitySide",
    "Status",
    "ParityRow",
    "ParityReport",
    "SideResult",
    "Verdict",
    "make_side",
    "make_pair",
    "compare_results",
    "comparison_rule",
    "compare_one",
    "run_parity",
    "sides_that_never_ran",
    "load_parity_set",
    "default_parity_set",
]
