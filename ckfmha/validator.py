"""Compare a kernel's output with a reference.

Tolerances come from ``ckfmha/data/tolerances.yaml`` (CK's tables per dtype and direction).  Two rules:

* ``allclose`` (CK's ``check_err``): element passes iff ``|out - ref| <= atol + rtol * |ref|``.
* ``relative`` (FlashAttention's): ``max|out - ref| <= factor * max|base - ref| + atol`` where ``base`` is a
  same-precision reference (e.g. the reference computed from storage-dtype inputs and rounded to the output
  dtype).  The per-element result still reports the allclose mismatches for diagnosis.

Non-finite values never pass unless the reference holds the very same value at the same place (+inf with
+inf, -inf with -inf, NaN with NaN) -- e.g. LSE of fully masked rows is -inf on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ckfmha.kernel import DType

TOLERANCES_PATH = Path(__file__).with_name("data") / "tolerances.yaml"


class ToleranceError(ValueError):
    """A malformed tolerance table."""


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


def _check_pair(where: str, d: Any) -> Tolerance:
    if not isinstance(d, dict) or not {"rtol", "atol"} <= set(d):
        raise ToleranceError(f"{where}: needs rtol and atol, found {d!r}")
    vals = {}
    for k in ("rtol", "atol"):
        v = d[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
            raise ToleranceError(f"{where}.{k}: {v!r} must be a finite number >= 0")
        vals[k] = float(v)
    return Tolerance(**vals)


def load_tolerances(path: str | Path = TOLERANCES_PATH) -> dict:
    """Load and validate the tolerance tables."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ToleranceError(f"{path}: expected a mapping with version: 1")
    allowed_keys = {"rtol", "atol", "ocp_atol_factor", "large_hdim"}
    for direction in ("forward", "backward"):
        table = data.get(direction)
        if not isinstance(table, dict) or not table:
            raise ToleranceError(f"{path}: missing table {direction!r}")
        for dt, entry in table.items():
            try:
                DType(dt)
            except ValueError:
                raise ToleranceError(f"{direction}.{dt}: unknown dtype") from None
            _check_pair(f"{direction}.{dt}", entry)
            extra = set(entry) - allowed_keys
            if extra:
                raise ToleranceError(f"{direction}.{dt}: unknown key(s) {sorted(extra)}")
            if "large_hdim" in entry:
                _check_pair(f"{direction}.{dt}.large_hdim", entry["large_hdim"])
    rel = data.get("relative")
    if not isinstance(rel, dict):
        raise ToleranceError(f"{path}: missing table 'relative'")
    for direction in ("forward", "backward"):
        e = rel.get(direction)
        if not isinstance(e, dict) or not {"factor", "atol"} <= set(e):
            raise ToleranceError(f"relative.{direction}: needs factor and atol")
    return data


@lru_cache(maxsize=1)
def _default_tables() -> dict:
    return load_tolerances()


def tolerance_for(dtype: DType | str, backward: bool = False, hdim_q: int = 0, hdim_v: int = 0,
                  fp8_format: str = "ocp", tables: dict | None = None) -> Tolerance:
    """CK's (rtol, atol) for a dtype and direction."""
    t = tables or _default_tables()
    dt = DType(dtype)
    table = t["backward" if backward else "forward"]
    if dt.value not in table:
        raise ToleranceError(f"dtype: no {'backward' if backward else 'forward'} tolerance for {dt.value}")
    e = table[dt.value]
    tol = Tolerance(float(e["rtol"]), float(e["atol"]))
    if "large_hdim" in e and hdim_q > 128 and hdim_v > 128:
        tol = Tolerance(float(e["large_hdim"]["rtol"]), float(e["large_hdim"]["atol"]))
    if "ocp_atol_factor" in e and fp8_format == "ocp":
        tol = Tolerance(tol.rtol, tol.atol * float(e["ocp_atol_factor"]))
    return tol


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    max_abs_err: float
    max_rel_err: float
    mismatch_count: int
    total: int
    first_mismatch: tuple[int, ...] | None
    rtol: float
    atol: float
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        head = f"{self.name}: {'PASS' if self.passed else 'FAIL'}"
        body = (f"max_abs_err={self.max_abs_err:.3g} max_rel_err={self.max_rel_err:.3g} "
                f"mismatches={self.mismatch_count}/{self.total} (rtol={self.rtol:g}, atol={self.atol:g})")
        tail = f" first at {self.first_mismatch}" if self.first_mismatch is not None else ""
        return f"{head} {body}{tail}" + (f"; {self.message}" if self.message else "")


def check(out, ref, rtol: float, atol: float, name: str = "out", rule: str = "allclose", base=None,
          factor: float = 2.0, rel_atol: float = 1e-5) -> CheckResult:
    """Compare ``out`` with ``ref`` (any float dtypes, upcast to float64)."""
    o = np.asarray(out).astype(np.float64)
    r = np.asarray(ref).astype(np.float64)
    if o.shape != r.shape:
        return CheckResult(name, False, float("inf"), float("inf"), max(o.size, r.size), max(o.size, r.size), None,
                           rtol, atol, f"shape {o.shape} != reference shape {r.shape}")
    fin_o, fin_r = np.isfinite(o), np.isfinite(r)
    same_nonfinite = (~fin_o & ~fin_r) & ((o == r) | (np.isnan(o) & np.isnan(r)))
    both = fin_o & fin_r
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(np.where(both, o, 0.0) - np.where(both, r, 0.0)), 0.0)
    bad = (~both & ~same_nonfinite) | (both & (err > atol + rtol * np.abs(r)))
    n_bad = int(bad.sum())
    max_abs = float(err.max()) if err.size else 0.0
    if np.any(~both & ~same_nonfinite):
        max_abs = float("inf")
    rel = np.where(both & (np.abs(r) > 0), err / np.where(np.abs(r) > 0, np.abs(r), 1), 0.0)
    max_rel = float(rel.max()) if rel.size else 0.0
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if n_bad else None
    msg = ""
    if n_bad:
        idx = first
        msg = f"first mismatch out={float(o[idx])!r} ref={float(r[idx])!r}"
    if rule == "allclose":
        passed = n_bad == 0
    elif rule == "relative":
        if base is None:
            raise ValueError("check: rule='relative' needs base (a same-precision reference)")
        b = np.asarray(base).astype(np.float64)
        bfin = np.isfinite(b) & fin_r
        with np.errstate(invalid="ignore", over="ignore"):
            base_err = float(np.max(np.where(bfin, np.abs(np.where(bfin, b, 0.0) - np.where(bfin, r, 0.0)), 0.0))) \
                if b.size else 0.0
        limit = factor * base_err + rel_atol
        nonfinite_bad = bool(np.any(~both & ~same_nonfinite))
        passed = (not nonfinite_bad) and max_abs <= limit
        msg = (f"relative rule: max_abs_err {max_abs:.3g} {'<=' if passed else '>'} {factor:g} x "
               f"{base_err:.3g} + {rel_atol:g} = {limit:.3g}" + (f"; {msg}" if msg else ""))
    else:
        raise ValueError(f"rule: {rule!r} must be 'allclose' or 'relative'")
    return CheckResult(name, bool(passed), max_abs, max_rel, n_bad, int(o.size), first, rtol, atol, msg)


def validate(problem, outputs: dict, ref: dict, names=None, rule: str = "allclose", base: dict | None = None,
             fp8_format: str = "ocp") -> dict[str, CheckResult]:
    """Check each named output of a kernel against the reference with CK's tolerance for the problem."""
    tol = tolerance_for(problem.dtype, problem.is_backward, problem.hdim_q, problem.hdim_v, fp8_format)
    rel = _default_tables()["relative"]["backward" if problem.is_backward else "forward"]
    if names is None:
        names = [n for n in ("o", "lse", "dq", "dk", "dv", "dbias") if n in outputs and n in ref]
    res = {}
    for n in names:
        res[n] = check(outputs[n], ref[n], tol.rtol, tol.atol, name=n, rule=rule,
                       base=None if base is None else base[n], factor=float(rel["factor"]),
                       rel_atol=float(rel["atol"]))
    return res
