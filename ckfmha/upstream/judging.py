"""How a parity side that checks its own outputs against ckfmha's references turns them into a verdict.

Every named output is judged by both rules of :mod:`ckfmha.validator`:

* ``elementwise`` -- CK's tolerance (``check_err``) against the float32-accumulation reference
  (:func:`ckfmha.validator.validate`);
* ``noise_floor`` -- against the float64 ground truth, decided per row (last axis) since a GEMM's rounding noise
  follows the row's own magnitude: ``max_row|out - truth| <= k * max(max_row|same_precision - truth|, u *
  max(max_row|truth|, g * max|truth|)) + atol`` (:func:`ckfmha.validator.validate_noise_floor`; ``k``, ``g``,
  ``atol`` in tolerances.yaml ``row_noise_floor``; u the dtype's unit roundoff), with the error ratio of the worst
  row; FlashAttention's tensor-wide form ``max|out - truth| <= k * max|same_precision - truth| + atol`` is kept
  next to it (``tensor_*`` keys) for comparison.

One of them (``decide_by``) decides the verdict: ``ran_valid`` iff every output passes under it.  Which side uses
which rule, and why, is in docs/parity.md: the ``torch`` sides are decided by the noise floor (torch's kernels are
not CK kernels and are not bound by CK's elementwise tolerance), the ``ckfmha`` side -- a CK kernel checked against
CK's reference -- elementwise.  Both verdicts are kept in each output's summary (:func:`output_summary`):

``passed`` (under the deciding rule), ``rule``, ``elementwise_passed``, ``noise_passed``, ``error_ratio`` (None
where the same-precision reference is exact), ``err_vs_truth``, ``ref_err_vs_truth``, ``noise_k``, ``noise_atol``,
``noise_limit``, ``noise_message``, ``noise_granularity`` (``row``), the tensor-wide rule's ``tensor_noise_passed``,
``tensor_error_ratio``, ``tensor_err_vs_truth``, ``tensor_ref_err_vs_truth``, ``tensor_noise_k``,
``tensor_noise_limit``, and the elementwise check's ``max_abs_err``, ``max_rel_err``, ``mismatches``,
``total``, ``rtol``, ``atol``, ``message`` (:func:`ckfmha.upstream.result.check_summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckfmha.problem import Problem
from ckfmha.upstream.result import Verdict, check_summary
from ckfmha.validator import CheckResult, NoiseFloorResult, Rule


@dataclass
class Judgement:
    """A side's verdict on its outputs: ``words`` name the deciding rule and every check; ``checks`` hold each
    output's summary (module doc)."""

    verdict: Verdict
    rule: Rule
    words: str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.verdict is Verdict.RAN_VALID


def output_summary(elementwise: CheckResult, noise: NoiseFloorResult, decide_by: Rule) -> dict[str, Any]:
    """One output's summary with both verdicts; ``passed`` is the deciding rule's."""
    decide_by = Rule.parse(decide_by, "decide_by")
    d = check_summary(elementwise)
    d.update(noise.summary())
    d["elementwise_passed"] = bool(elementwise.passed)
    d["rule"] = decide_by.value
    d["passed"] = bool(noise.passed if decide_by is Rule.NOISE_FLOOR else elementwise.passed)
    return d


def _words(elementwise: CheckResult, noise: NoiseFloorResult, decide_by: Rule) -> str:
    first, second = (str(noise), str(elementwise)) if decide_by is Rule.NOISE_FLOOR else (str(elementwise), str(noise))
    return f"{first} [also: {second}]"


def judge(problem: Problem, seed: int, outputs: dict, names, decide_by: Rule | str) -> Judgement:
    """Judge ``outputs`` (of ``make_inputs(problem, seed)``) on ``names`` by both rules; ``decide_by`` decides."""
    from ckfmha.upstream.reference_cache import inputs_and_reference, noise_references
    from ckfmha.validator import validate, validate_noise_floor

    rule = Rule.parse(decide_by, "decide_by")
    names = list(names)
    _, ref = inputs_and_reference(problem, seed)
    truth, same = noise_references(problem, seed)
    elem = validate(problem, outputs, ref, names=names)
    noise = validate_noise_floor(problem, outputs, truth, same, names=names)
    checks = {n: output_summary(elem[n], noise[n], rule) for n in names}
    ok = all(c["passed"] for c in checks.values())
    words = f"{rule.value} rule decides: " + "; ".join(_words(elem[n], noise[n], rule) for n in names)
    return Judgement(Verdict.RAN_VALID if ok else Verdict.RAN_INVALID, rule, words, checks)


__all__ = ["Judgement", "judge", "output_summary"]
