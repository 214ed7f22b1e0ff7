"""What one side of a parity comparison reports for one problem: a :class:`Verdict` plus its words.

Verdicts:

* ``unsupported`` -- the side has no kernel for the problem (CK: ``not supported yet``; ckfmha: the dispatcher
  found no kernel or the backend cannot realize it).
* ``ran_valid`` / ``ran_invalid`` -- it ran and its result matched / did not match its reference.
* ``error`` -- it could not be judged (crash, timeout, bad arguments, garbage output, inconsistent output,
  output over the runner's cap).
* ``unparseable`` -- it printed a result, but not in any of the formats the side really prints (tile_example:
  a result line without the problem echo, without a kernel name although ``-kname=1`` was passed, or with
  fields no generation of the binary prints); the reason names what is missing and quotes the line.  Counts as
  an error everywhere (:func:`ckfmha.parity.compare_results` makes the row ``error``).
* ``skipped`` -- the side was not run (missing binary, no GPU, a problem the side cannot express); the
  reason says why.  A skip is never a pass.

Two properties group the verdicts (one rule each, here):

* :attr:`Verdict.ran` -- a kernel executed and its result was judged against a reference: ``ran_valid`` and
  ``ran_invalid``.
* :attr:`Verdict.answered` -- *the side ran*: it executed and gave a judgeable answer, i.e. ``ran`` or
  ``unsupported`` (CK's binary did run and said ``not supported yet``; ckfmha's dispatcher did run and found no
  kernel).  ``skipped``, ``error`` and ``unparseable`` are not answers.  A parity session in which a side
  answered for no item compared nothing on that side (:func:`ckfmha.parity.sides_that_never_ran`).

A side that judges its outputs against ckfmha's references (``ckfmha``, ``torch``) judges each by both rules of
:mod:`ckfmha.validator` -- CK's elementwise tolerance and the noise floor against the float64 truth -- and records
in :attr:`SideResult.rule` which one decided its verdict (:mod:`ckfmha.upstream.judging`); ``None`` for a side
whose verdict is its own (tile_example: the binary's ``valid:y``, CK's elementwise ``check_err``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from ckfmha.kernel import TokenEnum
from ckfmha.validator import Rule


class Verdict(TokenEnum):
    UNSUPPORTED = "unsupported"
    RAN_VALID = "ran_valid"
    RAN_INVALID = "ran_invalid"
    ERROR = "error"
    UNPARSEABLE = "unparseable"
    SKIPPED = "skipped"

    @property
    def ran(self) -> bool:
        """A kernel executed and was judged against a reference (``ran_valid`` / ``ran_invalid``)."""
        return self in (Verdict.RAN_VALID, Verdict.RAN_INVALID)

    @property
    def answered(self) -> bool:
        """The side ran and gave a judgeable answer: ``ran_valid``, ``ran_invalid`` or ``unsupported``."""
        return self.ran or self is Verdict.UNSUPPORTED

    @property
    def is_error(self) -> bool:
        """The side could not be judged: ``error`` or ``unparseable`` (both fail a parity row)."""
        return self in (Verdict.ERROR, Verdict.UNPARSEABLE)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return {"shape": list(v.shape), "dtype": str(v.dtype)}
    if isinstance(v, float) and v != v:  # NaN is not JSON
        return None
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


@dataclass
class SideResult:
    """One side's report.  ``reason`` holds the side's own words (a CK line, an exception, a skip reason);
    ``outputs`` (name -> array in CK's shapes) are kept for the cross-side comparison; ``checks`` summarise the
    side's own comparison with ckfmha's references (both rules, :mod:`ckfmha.upstream.judging`); ``rule`` is the
    rule that decided ``verdict`` (None: the side's own verdict, e.g. tile_example's); ``fields`` hold parsed
    details (kernel names, timings, the echoed problem, the command line); ``raw`` the raw text (stdout + stderr)
    where there is one."""

    side: str
    verdict: Verdict
    reason: str = ""
    outputs: dict[str, np.ndarray] | None = None
    checks: dict[str, dict] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    notes: list[str] = field(default_factory=list)
    rule: Rule | None = None

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        if self.rule is not None:
            self.rule = Rule.parse(self.rule, "rule")

    def words(self) -> str:
        """One line for reports: verdict plus reason."""
        r = " ".join(self.reason.split())
        return f"{self.verdict.value}" + (f": {r}" if r else "")

    def to_dict(self, raw: bool = True) -> dict[str, Any]:
        d = {
            "side": self.side,
            "verdict": self.verdict.value,
            "rule": self.rule.value if self.rule else None,
            "reason": self.reason,
            "checks": _jsonable(self.checks),
            "fields": _jsonable(self.fields),
            "notes": list(self.notes),
            "outputs": sorted(self.outputs) if self.outputs else [],
        }
        if raw:
            d["raw"] = self.raw
        return d


def check_summary(res) -> dict[str, Any]:
    """A JSON-able summary of a :class:`ckfmha.validator.CheckResult`."""
    return {
        "passed": bool(res.passed),
        "max_abs_err": res.max_abs_err,
        "max_rel_err": res.max_rel_err,
        "mismatches": res.mismatch_count,
        "total": res.total,
        "rtol": res.rtol,
        "atol": res.atol,
        "message": res.message,
    }
