"""Compare a kernel's output with a reference.

Tolerances come from ``ckfmha/data/tolerances.yaml`` (CK's tables per dtype and direction, and the noise-floor
constants).  Rules (:class:`Rule` names the two a verdict can be decided by):

* ``elementwise`` -- ``allclose`` here, CK's ``check_err`` (ck_tile/host/check_err.hpp, used by
  tile_example_fmha_fwd / _bwd): an element passes iff ``|out - ref| <= atol + rtol * |ref|``
  (:func:`check`, :func:`validate`).
* ``noise_floor`` -- FlashAttention's test rule (flash-attention ``tests/test_flash_attn.py``,
  ``hopper/test_flash_attn.py``; research/anchors.md 2.5): the error of the output against a float64 ground truth
  may be at most ``k`` times the error of a same-precision reference against that truth, plus ``atol``::

      max|out - truth| <= k * max|same_precision - truth| + atol

  ``truth`` is :func:`ground_truth` (ckfmha's reference computed in float64 on the stored inputs -- the stored
  fp16/bf16/fp8 values are exact in float64, so this equals the reference of float64-upcast inputs);
  ``same_precision`` is :func:`same_precision_reference` (the reference's normal float32-accumulation path,
  each output rounded to the dtype the problem stores it in, :func:`stored_dtype`).  ``k`` and ``atol`` are per
  direction (``noise_floor.forward`` / ``.backward`` in tolerances.yaml, :func:`noise_floor_for`).  The result
  (:class:`NoiseFloorResult`) reports the *error ratio* ``max|out - truth| / max|same_precision - truth|``
  (None where the same-precision reference is exact).  :func:`noise_floor_check` is the rule, once, at one of two
  granularities (:class:`Granularity`):

  ==========  ===============================================================================================
  ``tensor``  the form above, FlashAttention's (tolerances.yaml ``noise_floor``: k 2 forward, 3 backward)
  ``row``     per row -- each vector along the last axis (one (batch, head, query) row of o / dq, one (batch,
              head, key) row of dk / dv): ``max_row|out - truth| <= k * ref_row + atol`` with ``ref_row =
              max(max_row|same_precision - truth|, u * max(max_row|truth|, g * max|truth|))``; ``u`` the unit
              roundoff of ``same_precision``'s dtype (:func:`unit_roundoff`), ``g`` the ``magnitude_floor``
              (tolerances.yaml ``row_noise_floor``: g 1, k per direction with ``k_by_dtype``: bf16 backward 2)
  ==========  ===============================================================================================

  :func:`validate_noise_floor` applies it to a problem's outputs at :data:`DECIDING_GRANULARITY` (``row``), each
  result carrying the ``tensor`` result of the same output so that both are reported.  Why the per-row form with
  the rounding bound decides, with the measurements: docs/parity.md "Which noise floor decides".  The older
  ``check(..., rule="relative")`` (``max|out - ref| <= factor * max|base - ref| + rel_atol``) is the tensor-wide
  rule with ``ref`` as the truth and ``base`` as the same-precision reference; ``validate(..., rule="relative")``
  takes ``k`` and ``atol`` from the same (tensor-wide) table.

Non-finite values never pass unless the reference (truth) holds the very same value at the same place (+inf
with +inf, -inf with -inf, NaN with NaN) -- e.g. LSE of fully masked rows is -inf on both sides.  Under the
noise-floor rule, an element where the same-precision reference is non-finite but the truth is finite never
widens the limit (it is left out of ``max|same_precision - truth|``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ckfmha.array_ops import NUMPY, ArrayOps, ops_for
from ckfmha.kernel import DType, TokenEnum

TOLERANCES_PATH = Path(__file__).with_name("data") / "tolerances.yaml"


class ToleranceError(ValueError):
    """A malformed tolerance table."""


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


DIRECTIONS = ("forward", "backward")


def load_tolerances(path: str | Path = TOLERANCES_PATH) -> dict:
    """Load and validate the tolerance tables: the strict YAML loader, the JSON Schema
    ``data/schemas/tolerances.schema.yaml`` (errors name the file, the key path, the value and the rule), and every
    table key (and every ``row_noise_floor.*.k_by_dtype`` key) a ckfmha dtype."""
    from ckfmha.datafile import DataFileError, check_schema, load_yaml

    try:
        data = load_yaml(path)
        check_schema(data, "tolerances", str(path))
    except DataFileError as e:
        raise ToleranceError(str(e)) from None
    keyed = [(direction, data[direction]) for direction in DIRECTIONS]
    keyed += [
        (f"row_noise_floor.{direction}.k_by_dtype", data["row_noise_floor"][direction].get("k_by_dtype", {}))
        for direction in DIRECTIONS
    ]
    for key_path, table in keyed:
        for dt in table:
            try:
                DType(dt)
            except ValueError:
                known = ", ".join(d.value for d in DType)
                raise ToleranceError(f"{path}: {key_path}.{dt}: unknown dtype; expected one of {known}") from None
    return data


@lru_cache(maxsize=1)
def _default_tables() -> dict:
    return load_tolerances()


def tolerance_for(
    dtype: DType | str,
    backward: bool = False,
    hdim_q: int = 0,
    hdim_v: int = 0,
    fp8_format: str = "ocp",
    tables: dict | None = None,
) -> Tolerance:
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
    #: the pass rule's own figure at the worst element: allclose ``max |out - ref| / (atol + rtol * |ref|)`` (inf
    #: for a non-finite mismatch or a shape mismatch, 0 for no error), the relative rule ``err / limit``; the
    #: check passed exactly when it is <= 1 (reports keep it per row: the HTML page's tolerance plot)
    limit_ratio: float = float("nan")

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        head = f"{self.name}: {'PASS' if self.passed else 'FAIL'}"
        body = (
            f"max_abs_err={self.max_abs_err:.3g} max_rel_err={self.max_rel_err:.3g} "
            f"mismatches={self.mismatch_count}/{self.total} (rtol={self.rtol:g}, atol={self.atol:g})"
        )
        tail = f" first at {self.first_mismatch}" if self.first_mismatch is not None else ""
        return f"{head} {body}{tail}" + (f"; {self.message}" if self.message else "")


def _compared(out, ref, ops: ArrayOps = NUMPY):
    """``(o, r, both_finite, nonfinite_mismatch, |o - r| where both finite else 0)`` in float64 where ``ops``
    computes, or None when the shapes differ.  When every value of both is finite (the common case)
    ``both_finite`` and ``nonfinite_mismatch`` are None (no mask arrays are built)."""
    o = ops.float64(out)
    r = ops.float64(ref)
    if tuple(o.shape) != tuple(r.shape):
        return None
    fin_o, fin_r = ops.isfinite(o), ops.isfinite(r)
    if bool(fin_o.all()) and bool(fin_r.all()):
        return o, r, None, None, abs(o - r)
    same_nonfinite = (~fin_o & ~fin_r) & ((o == r) | (o != o) & (r != r))  # x != x: NaN
    both = fin_o & fin_r
    with ops.errstate():
        err = ops.where(both, abs(ops.where(both, o, 0.0) - ops.where(both, r, 0.0)), 0.0)
    return o, r, both, ~both & ~same_nonfinite, err


@dataclass
class _Allclose:
    """CK's elementwise rule accumulated over the chunks of one output (:func:`_allclose_stats`)."""

    size: int = 0
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    ratio: float = 0.0
    first: int | None = None  # flat index
    message: str = ""
    nonfinite_mismatch: bool = False

    def add(self, cmp, offset: int, rtol: float, atol: float, ops: ArrayOps) -> None:
        """Take in one chunk's :func:`_compared` (its first element at flat index ``offset``)."""
        o, r, both, nonfinite_bad, err = cmp
        n = int(err.reshape(-1).shape[0])
        self.size += n
        if not n:
            return
        abs_r = abs(r)
        allowance = atol + rtol * abs_r
        bad = err > allowance
        if both is not None:
            bad = nonfinite_bad | (both & bad)
            self.nonfinite_mismatch |= bool(nonfinite_bad.any())
        n_bad = int(bad.sum())
        self.mismatches += n_bad
        self.max_abs = max(self.max_abs, float(err.max()))
        with ops.errstate():  # err is 0 wherever the reference is not finite
            self.ratio = max(self.ratio, float(ops.where(err > 0, err / allowance, 0.0).max()))
            rel = err / ops.where(abs_r > 0, abs_r, float("inf"))  # 0 where the reference is 0 (or not finite)
        self.max_rel = max(self.max_rel, float(rel.max()))
        if n_bad and self.first is None:
            i = ops.first_true(bad)
            self.first = offset + i
            self.message = f"first mismatch out={float(o.reshape(-1)[i])!r} ref={float(r.reshape(-1)[i])!r}"


def _allclose_stats(
    out, ref, rtol: float, atol: float, ops: ArrayOps = NUMPY
) -> tuple[int, int, float, float, tuple[int, ...] | None, str, float] | None:
    """CK's elementwise rule over ``out`` and ``ref`` (None when their shapes differ), chunk by chunk of the
    flattened arrays where ``ops`` computes (:mod:`ckfmha.array_ops`): ``(size, mismatches, max_abs_err,
    max_rel_err, first mismatch index or None, message naming the first mismatch's values, limit ratio)``; a
    non-finite mismatch makes max_abs_err and the limit ratio inf.  The limit ratio is the rule as one figure: the
    largest ``|out - ref| / (atol + rtol * |ref|)`` (an element is a mismatch exactly when its figure is > 1; an
    error where the allowance is 0 counts inf, no error 0)."""
    shape = np.shape(out)
    if shape != np.shape(ref):
        return None
    o_flat, r_flat = np.reshape(out, -1), np.reshape(ref, -1)
    acc = _Allclose()
    for start in range(0, max(int(o_flat.shape[0]), 1), ops.chunk):
        cmp = _compared(o_flat[start : start + ops.chunk], r_flat[start : start + ops.chunk], ops)
        acc.add(cmp, start, rtol, atol, ops)
    if acc.nonfinite_mismatch:
        acc.max_abs = acc.ratio = float("inf")
    first = None if acc.first is None else tuple(int(i) for i in np.unravel_index(acc.first, shape))
    return acc.size, acc.mismatches, acc.max_abs, acc.max_rel, first, acc.message, acc.ratio


def check(
    out,
    ref,
    rtol: float,
    atol: float,
    name: str = "out",
    rule: str = "allclose",
    base=None,
    factor: float = 2.0,
    rel_atol: float = 1e-5,
    ops: ArrayOps = NUMPY,
) -> CheckResult:
    """Compare ``out`` with ``ref`` (any float dtypes, upcast to float64).  ``rule='allclose'``: CK's elementwise
    rule; ``rule='relative'``: the noise-floor rule (:func:`noise_floor_check`) with ``ref`` as the truth,
    ``base`` as the same-precision reference, ``k = factor`` and ``atol = rel_atol``; the allclose mismatches are
    reported in both cases.  ``ops``: where the elementwise rule computes (:mod:`ckfmha.array_ops`: NumPy on
    the host, or torch on a device; the same figures either way); the noise-floor rule computes with NumPy."""
    if rule not in ("allclose", "relative"):
        raise ValueError(f"rule: {rule!r} must be 'allclose' or 'relative'")
    if rule == "relative" and base is None:
        raise ValueError("check: rule='relative' needs base (a same-precision reference)")
    stats = _allclose_stats(out, ref, rtol, atol, ops)
    if stats is None:
        o_shape, r_shape = np.shape(out), np.shape(ref)
        n = max(int(np.prod(o_shape)), int(np.prod(r_shape)))
        return CheckResult(
            name,
            False,
            float("inf"),
            float("inf"),
            n,
            n,
            None,
            rtol,
            atol,
            f"shape {o_shape} != reference shape {r_shape}",
            float("inf"),
        )
    size, n_bad, max_abs, max_rel, first, msg, ratio = stats
    if rule == "allclose":
        passed = n_bad == 0
    else:
        nf = noise_floor_check(out, ref, base, factor, rel_atol, name=name)
        passed = nf.passed
        ratio = nf.err / nf.limit if nf.limit > 0 else (0.0 if nf.err == 0 else float("inf"))
        if not passed and ratio <= 1.0:  # a non-finite error: the rule failed it
            ratio = float("inf")
        msg = (
            f"relative rule: max_abs_err {nf.err:.3g} {'<=' if passed else '>'} {factor:g} x "
            f"{nf.ref_err:.3g} + {rel_atol:g} = {nf.limit:.3g}" + (f"; {msg}" if msg else "")
        )
    return CheckResult(name, bool(passed), max_abs, max_rel, n_bad, size, first, rtol, atol, msg, ratio)


def validate(
    problem,
    outputs: dict,
    ref: dict,
    names=None,
    rule: str = "allclose",
    base: dict | None = None,
    fp8_format: str = "ocp",
    *,
    array_backend: str = "numpy",
    device=None,
) -> dict[str, CheckResult]:
    """Check each named output of a kernel against the reference with CK's tolerance for the problem
    (``rule='relative'``: the noise-floor rule against ``ref`` with ``base`` as the same-precision reference and
    the problem's direction's ``k`` / ``atol``).  ``array_backend='torch'`` with ``device`` (None: 'cuda' when
    available, else 'cpu') computes the elementwise rule with torch there (:mod:`ckfmha.array_ops`): the arrays
    stay NumPy arrays, each chunk is copied to the device in its stored dtype; the results are the same."""
    tol = tolerance_for(problem.dtype, problem.is_backward, problem.hdim_q, problem.hdim_v, fp8_format)
    floor = noise_floor_for(problem.is_backward)
    ops = ops_for(array_backend, device)
    if names is None:
        from ckfmha.outputs import compared_outputs

        names = [n for n in compared_outputs(problem) if n in outputs and n in ref]
    res = {}
    for n in names:
        res[n] = check(
            outputs[n],
            ref[n],
            tol.rtol,
            tol.atol,
            name=n,
            rule=rule,
            base=None if base is None else base[n],
            factor=floor.k,
            rel_atol=floor.atol,
            ops=ops,
        )
    return res


# ------------------------------------------------------------------------------------------ the noise floor
class Rule(TokenEnum):
    """The rule a verdict is decided by (see the module doc)."""

    ELEMENTWISE = "elementwise"
    NOISE_FLOOR = "noise_floor"


class Granularity(TokenEnum):
    """Over what the noise-floor rule takes its maxima (see the module doc): the whole tensor (FlashAttention's
    form) or each row -- each vector along the last axis."""

    TENSOR = "tensor"
    ROW = "row"


@dataclass(frozen=True)
class NoiseFloor:
    """The noise-floor constants of one direction and granularity: ``err <= k * ref_err + atol`` (module doc)."""

    k: float
    atol: float
    granularity: Granularity = Granularity.TENSOR
    magnitude_floor: float = 0.0


#: tolerances.yaml section of each granularity's constants
_FLOOR_SECTION = {Granularity.TENSOR: "noise_floor", Granularity.ROW: "row_noise_floor"}

#: the granularity that decides a noise-floor verdict (:func:`validate_noise_floor`); the other is reported next to it
DECIDING_GRANULARITY = Granularity.ROW


def noise_floor_for(
    backward: bool = False,
    tables: dict | None = None,
    granularity: Granularity | str = Granularity.TENSOR,
    dtype: DType | str | None = None,
) -> NoiseFloor:
    """``k`` and ``atol`` of the noise-floor rule for the forward or the backward at ``granularity``
    (tolerances.yaml ``noise_floor`` for the tensor-wide form, ``row_noise_floor`` for the per-row one); ``k`` is
    the entry's ``k_by_dtype[dtype]`` where it names the problem's dtype."""
    g = Granularity.parse(granularity, "granularity")
    e = (tables or _default_tables())[_FLOOR_SECTION[g]]["backward" if backward else "forward"]
    k = e["k"]
    if dtype is not None:
        k = e.get("k_by_dtype", {}).get(DType.parse(dtype, "dtype").value, k)
    return NoiseFloor(float(k), float(e["atol"]), g, float(e.get("magnitude_floor", 0.0)))


#: outputs kept in float32 whatever the problem's dtype (CK: LSE, the dot_do_o term D, split-KV partials and the
#: dQ accumulator are float32 buffers: LSEDataType / DDataType / OaccDataType / AccDataType in fmha_fwd.hpp and
#: fmha_bwd.hpp); ``o`` is stored in the output dtype; every other output (dq, dk, dv, dbias, appended caches,
#: rotated q) in the input storage dtype.
FLOAT32_OUTPUTS = frozenset({"lse", "d", "o_acc", "lse_acc", "dq_acc"})
STORAGE_OUTPUTS = frozenset({"dq", "dk", "dv", "dbias", "q", "k", "v", "k_cache", "v_cache"})


def stored_dtype(problem, name: str, fp8_format: str = "ocp") -> np.dtype:
    """The dtype the problem's output ``name`` is stored in (see :data:`FLOAT32_OUTPUTS`); a ValueError naming
    the output for an unknown one."""
    from ckfmha.inputs import output_dtype, storage_dtype

    if name == "o":
        return output_dtype(problem.dtype, fp8_format)
    if name in FLOAT32_OUTPUTS:
        return np.dtype(np.float32)
    if name in STORAGE_OUTPUTS:
        return storage_dtype(problem.dtype, fp8_format)
    known = ", ".join(sorted({"o"} | FLOAT32_OUTPUTS | STORAGE_OUTPUTS))
    raise ValueError(f"output: {name!r} has no stored dtype; known outputs: {known}")


def ground_truth(problem, inputs: dict) -> dict:
    """The float64 ground truth of ``problem`` on ``inputs``: ckfmha's reference with float64 accumulation.
    The reference casts every operand to the accumulation dtype itself and the stored inputs are exact in
    float64, so this is the reference of float64-upcast inputs (without turning the appended caches' storage
    rounding of the append-KV family, which is part of that operation, into float64)."""
    from ckfmha.reference import reference

    return reference(problem, inputs, np.float64)


def same_precision_reference(problem, ref: dict, fp8_format: str = "ocp") -> dict:
    """The reference's normal path in the problem's own precision: each floating-point output of ``ref`` (the
    float32-accumulation reference) rounded to the dtype the problem stores it in (:func:`stored_dtype`).
    Outputs without a stored dtype (e.g. ``randval``) are left out."""
    out = {}
    for n, a in ref.items():
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.floating):
            continue
        try:
            dt = stored_dtype(problem, n, fp8_format)
        except ValueError:
            continue
        out[n] = a.astype(dt)
    return out


def _finite_or_none(v: float) -> float | None:
    return v if np.isfinite(v) else None


@dataclass(frozen=True)
class NoiseFloorResult:
    """One output under the noise-floor rule at ``granularity``.  Tensor: ``err`` = max|out - truth| (inf when a
    non-finite value differs from the truth's), ``ref_err`` = max|same_precision - truth|.  Row: the same figures of
    the *worst row* (the row with the largest ``err / limit``), ``ref_err`` being that row's floored reference
    error (module doc).  ``limit`` = k * ref_err + atol, ``ratio`` = err / ref_err (None when ref_err is 0 or err
    is not finite), ``where`` = the index of the largest error (of the worst row; the first non-finite mismatch
    when there is one).  ``tensor``: the tensor-wide result of the same output, kept next to a per-row verdict
    (:func:`validate_noise_floor`) so that both are reported."""

    name: str
    passed: bool
    err: float
    ref_err: float
    k: float
    atol: float
    limit: float
    ratio: float | None
    where: tuple[int, ...] | None
    message: str
    granularity: Granularity = Granularity.TENSOR
    tensor: NoiseFloorResult | None = None

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        ratio = "-" if self.ratio is None else f"{self.ratio:.3g}"
        what = "noise floor" if self.granularity is Granularity.TENSOR else "row noise floor"
        return (
            f"{self.name}: {what} {'PASS' if self.passed else 'FAIL'} err={self.err:.3g} "
            f"{'<=' if self.passed else '>'} {self.k:g} x ref_err {self.ref_err:.3g} + {self.atol:g} = "
            f"{self.limit:.3g} (ratio {ratio})" + (f"; {self.message}" if self.message else "")
        )

    def summary(self) -> dict[str, Any]:
        """JSON-able fields (non-finite numbers become None); with a ``tensor`` companion, its figures too
        (``tensor_noise_passed``, ``tensor_error_ratio``, ...)."""
        d: dict[str, Any] = {
            "noise_passed": bool(self.passed),
            "noise_granularity": self.granularity.value,
            "error_ratio": self.ratio,
            "err_vs_truth": _finite_or_none(self.err),
            "ref_err_vs_truth": _finite_or_none(self.ref_err),
            "noise_k": self.k,
            "noise_atol": self.atol,
            "noise_limit": _finite_or_none(self.limit),
            "noise_message": str(self),
        }
        if self.tensor is not None:
            t = self.tensor
            d.update(
                {
                    "tensor_noise_passed": bool(t.passed),
                    "tensor_error_ratio": t.ratio,
                    "tensor_err_vs_truth": _finite_or_none(t.err),
                    "tensor_ref_err_vs_truth": _finite_or_none(t.ref_err),
                    "tensor_noise_k": t.k,
                    "tensor_noise_limit": _finite_or_none(t.limit),
                }
            )
        return d


def unit_roundoff(dtype) -> float:
    """Half the machine epsilon of a floating dtype (bf16 2^-8, fp16 2^-11, fp32 2^-24, fp8 e4m3 2^-4): every
    correctly rounded value x of that dtype is within ``unit_roundoff * |x|`` of the exact one; 0 for a
    non-floating dtype."""
    import ml_dtypes

    dt = np.dtype(dtype)
    try:
        return float(ml_dtypes.finfo(dt).eps) / 2.0
    except ValueError:
        return 0.0


def noise_floor_check(
    out,
    truth,
    same_precision,
    k: float,
    atol: float,
    name: str = "out",
    granularity: Granularity | str = Granularity.TENSOR,
    magnitude_floor: float = 0.0,
) -> NoiseFloorResult:
    """The noise-floor rule (module doc) for one output at ``granularity``: tensor-wide ``max|out - truth| <= k *
    max|same_precision - truth| + atol``, or per row with the reference error floored at the rounding bound of
    ``same_precision``'s dtype at the row's magnitude, itself floored at ``magnitude_floor`` x the tensor's (module
    doc).  Arrays of any float dtype (compared in float64); ``k`` >= 1, ``atol`` >= 0, 0 <= ``magnitude_floor`` <=
    1 (a ValueError naming the argument otherwise)."""
    k = _noise_arg("k", k, 1.0)
    atol = _noise_arg("atol", atol, 0.0)
    fraction = _noise_arg("magnitude_floor", magnitude_floor, 0.0)
    if fraction > 1:
        raise ValueError(f"noise floor magnitude_floor: {magnitude_floor!r} must be a finite number <= 1")
    g = Granularity.parse(granularity, "granularity")
    cmp = _compared(out, truth)
    ref_cmp = _compared(same_precision, truth)
    if cmp is None or ref_cmp is None:
        which = "out" if cmp is None else "same_precision"
        shape = np.shape(out) if cmp is None else np.shape(same_precision)
        msg = f"{which} shape {shape} != truth shape {np.shape(truth)}"
        return NoiseFloorResult(name, False, float("inf"), float("nan"), k, atol, float("nan"), None, None, msg, g)
    nonfinite_bad = cmp[3]
    if nonfinite_bad is not None and nonfinite_bad.any():
        bad_at = tuple(int(i) for i in np.argwhere(nonfinite_bad)[0])
        o = np.asarray(out)[bad_at]
        t = np.asarray(truth)[bad_at]
        msg = f"non-finite mismatch at {bad_at}: out={float(o)!r} truth={float(t)!r}"
        ref_err = float(ref_cmp[4].max()) if ref_cmp[4].size else 0.0
        return NoiseFloorResult(name, False, float("inf"), ref_err, k, atol, k * ref_err + atol, None, bad_at, msg, g)
    if g is Granularity.TENSOR:
        return _tensor_noise_floor(out, truth, cmp[4], ref_cmp[4], k, atol, name)
    u = unit_roundoff(np.asarray(same_precision).dtype)
    return _row_noise_floor(out, truth, cmp[1], cmp[4], ref_cmp[4], (u, fraction), k, atol, name)


def _verdict(out, truth, name, err, ref_err, k, atol, limit, where, g) -> NoiseFloorResult:
    ratio = err / ref_err if ref_err > 0 else None
    passed = err <= limit
    msg = ""
    if not passed and where is not None:
        msg = f"worst at {where}: out={float(np.asarray(out)[where])!r} truth={float(np.asarray(truth)[where])!r}"
    return NoiseFloorResult(name, bool(passed), err, ref_err, k, atol, limit, ratio, where, msg, g)


def _tensor_noise_floor(out, truth, err: np.ndarray, ref_err_a: np.ndarray, k, atol, name) -> NoiseFloorResult:
    # same-precision elements that are non-finite where the truth is finite are 0 in ref_err_a: they never widen
    ref_err = float(ref_err_a.max()) if ref_err_a.size else 0.0
    e = float(err.max()) if err.size else 0.0
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape)) if err.size else None
    return _verdict(out, truth, name, e, ref_err, k, atol, k * ref_err + atol, where, Granularity.TENSOR)


def _row_noise_floor(out, truth, t, err, ref_err_a, floors: tuple[float, float], k, atol, name) -> NoiseFloorResult:
    """Per row (vector along the last axis; a 0-d array is one row): ``max_row|out - truth| <= k *
    max(max_row|same_precision - truth|, u * max(max_row|truth|, g * max|truth|)) + atol`` with ``floors = (u,
    g)``; the result holds the row with the largest err / limit."""
    u, fraction = floors
    shape = np.shape(err)
    if err.size == 0:
        return _verdict(out, truth, name, 0.0, 0.0, k, atol, atol, None, Granularity.ROW)
    width = shape[-1] if len(shape) else 1
    e_rows = err.reshape(-1, width)
    with np.errstate(invalid="ignore"):
        magnitude = np.where(np.isfinite(t), np.abs(t), 0.0).reshape(-1, width).max(axis=1)
    magnitude = np.maximum(magnitude, fraction * float(magnitude.max()))
    ref_rows = np.maximum(ref_err_a.reshape(-1, width).max(axis=1), u * magnitude)
    e_max = e_rows.max(axis=1)
    limits = k * ref_rows + atol
    with np.errstate(divide="ignore", invalid="ignore"):
        over = np.where(limits > 0, e_max / np.where(limits > 0, limits, 1.0), np.where(e_max > 0, np.inf, 0.0))
    row = int(np.argmax(over))
    flat = row * width + int(np.argmax(e_rows[row]))
    where = tuple(int(i) for i in np.unravel_index(flat, shape)) if len(shape) else ()
    return _verdict(
        out, truth, name, float(e_max[row]), float(ref_rows[row]), k, atol, float(limits[row]), where, Granularity.ROW
    )


def _noise_arg(what: str, v: Any, minimum: float) -> float:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float, np.floating, np.integer))
        or not np.isfinite(v)
        or v < minimum
    ):
        raise ValueError(f"noise floor {what}: {v!r} must be a finite number >= {minimum:g}")
    return float(v)


def validate_noise_floor(
    problem, outputs: dict, truth: dict, same_precision: dict, names=None, tables: dict | None = None
) -> dict[str, NoiseFloorResult]:
    """:func:`noise_floor_check` of each named output at the deciding granularity (:data:`DECIDING_GRANULARITY`,
    per row) with the problem's direction's constants, each result carrying the tensor-wide (FlashAttention) result
    as ``tensor``.  An output missing from ``truth`` or ``same_precision`` is a ValueError naming it."""
    floor = noise_floor_for(problem.is_backward, tables, DECIDING_GRANULARITY, problem.dtype)
    wide = noise_floor_for(problem.is_backward, tables, Granularity.TENSOR)
    if names is None:
        from ckfmha.outputs import compared_outputs

        names = [n for n in compared_outputs(problem) if n in outputs and n in truth]
    res = {}
    for n in names:
        for what, d in (("outputs", outputs), ("truth", truth), ("same_precision", same_precision)):
            if n not in d:
                raise ValueError(f"noise floor: output {n!r} is missing from {what} (has {sorted(d)})")
        args = (outputs[n], truth[n], same_precision[n])
        tensor = noise_floor_check(*args, wide.k, wide.atol, name=n)
        decided = noise_floor_check(*args, floor.k, floor.atol, n, floor.granularity, floor.magnitude_floor)
        res[n] = replace(decided, tensor=tensor) if floor.granularity is not Granularity.TENSOR else tensor
    return res
