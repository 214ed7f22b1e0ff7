"""The torch twin (``array_backend="torch"``) equals the NumPy reference on every shape of the smoke and full
matrices, forward families and backward, at both accumulation dtypes.

Equivalence rule (:func:`mismatches`), per output of the reference dict:

* the keys, and each output's shape and dtype, are the NumPy reference's;
* exact outputs -- integer ones (``randval``) and those stored in a 16-bit or fp8 storage dtype (append-KV's
  updated caches and rotated ``q``) -- are bitwise equal;
* float outputs have NaN and +-inf at exactly the same places (unwritten rows, fully masked LSE);
* finite elements: ``|twin - ref| <= TOL * sqrt(L) * scale``, ``TOL = 8 eps`` (``eps`` the accumulation dtype's
  machine epsilon), ``L`` the longest reduction of the problem (``max(seqlen_q, seqlen_k, hdim_q, hdim_v) *
  nhead_q / nhead_k``: both sides sum the same terms in different orders, an error that grows like ``eps *
  sqrt(L)`` times the terms' size) and ``scale`` the output's term size: ``max(max|ref|, floor)``, the floor an
  a-priori bound of one term from the inputs (:func:`floors`: e.g. ``max|V| / (1 - p_drop)`` for O,
  ``scale_s * |dS| * |K|`` for dQ), so that an output that is pure cancellation (dQ of a one-key sequence) is
  measured against its terms, not against its own noise;
* rounding flips: with float32 accumulation the backward rounds O to the output dtype and P and dS to the input
  dtype (fp16/bf16) mid-computation, so a value whose float32 result differs in the last bit between the two sides
  may round to the neighbouring fp16/bf16 value.  For those outputs (``d``, ``dq``, ``dk*``, ``dv*``, ``dbias*``
  of a 16-bit float32 backward) the elements over the bound above are *flips*: each within ``FLIP_ULPS`` (1)
  low-precision epsilon times ``scale``, at most ``max(FLIP_MIN, FLIP_FRACTION * size)`` (4, 0.5 %) of them per
  output.  Nowhere else is a flip allowed.

Measured (``python tests/test_reference_torch.py smoke``; torch 2.13 CPU and torch 2.11 CUDA on an H200): the
largest ``|twin - ref| / (eps sqrt(L) scale)`` is 0.19 at float64 and 0.38 at float32 (the flips of dV aside:
8 leaves a margin of 20x); flips hit at most 0.02 % of an output's elements, each under 0.01 low-precision ulp
(margins 25x and 100x).  The injected-fault tests show the rule catches a softmax scale off by 2**-20, one dropped
key, a dropout stream off by one counter and a backward that skips the bf16 rounding of P and dS.

The device is ``$CKFMHA_TWIN_DEVICE`` (default ``cpu``; ``cuda`` runs the same checks on a GPU).  The default run
checks the smoke matrix and the full-only shapes of at most ``SUBSET_WORK`` multiply-adds (:func:`work`: about
the smoke matrix's cost again); the other full shapes (``test_full_matrix_rest``, ``@pytest.mark.slow``) are about
10,000 times the smoke matrix's work -- hours of NumPy on 2 cores, about 40 minutes on a 16-core GPU host.
"""

from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch twin needs torch (array_backend='torch'); not installed")

from ckfmha import reference  # noqa: E402
from ckfmha.inputs import make_inputs, storage_dtype  # noqa: E402
from ckfmha.matrix import Shape, load_matrices, select  # noqa: E402
from ckfmha.problem import BWD, Problem  # noqa: E402
from ckfmha.reference import torch_twin  # noqa: E402

DEVICE = os.environ.get("CKFMHA_TWIN_DEVICE", "cpu")
TOL = {np.float64: 8 * float(np.finfo(np.float64).eps), np.float32: 8 * float(np.finfo(np.float32).eps)}
FLIP_ULPS = 1
FLIP_FRACTION = 0.005
FLIP_MIN = 4
FLIP_OUTPUTS = ("d", "dq", "dk", "dk_raw", "dv", "dv_raw", "dbias", "dbias_raw")
SUBSET_WORK = 10**8  # the default run: the full-only shapes of at most this much work (:func:`work`)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Two shared cores: one torch thread (restored after the module)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ------------------------------------------------------------------------------------------------- the rule
def _amax(inputs: dict, names: tuple[str, ...], descale: str | None = None) -> float:
    """max |x| over the inputs ``names`` (float64), times the largest descale when there is one."""
    vals = [np.abs(np.asarray(inputs[n]).astype(np.float64)).max(initial=0.0) for n in names if n in inputs]
    m = max(vals, default=0.0)
    if descale is not None and descale in inputs:
        m *= max(1.0, float(np.abs(np.asarray(inputs[descale], dtype=np.float64)).max(initial=0.0)))
    return float(m)


def floors(p: Problem, inputs: dict) -> dict[str, float]:
    """A-priori size of one term of each output (see the module doc), from the inputs."""
    inv = 1.0 / (1.0 - p.p_drop)
    vmax = _amax(inputs, ("v", "v_cache", "vnew"), "v_descale")
    qn = math.sqrt(p.hdim_q) * _amax(inputs, ("q",), "q_descale")
    kn = math.sqrt(p.hdim_q) * _amax(inputs, ("k", "k_cache", "knew"), "k_descale")
    vn, don = math.sqrt(p.hdim_v) * vmax, math.sqrt(p.hdim_v) * _amax(inputs, ("do",))
    d = don * vn * inv
    ds = d + don * vn * inv  # |dP - D|
    out = {"o": vmax * inv, "lse": 1.0, "d": d, "dq": p.softmax_scale * ds * kn, "dk": p.softmax_scale * ds * qn}
    out.update(dv=don * inv, dbias=ds)
    for name in ("o", "lse"):
        out[f"{name}_acc"] = out[f"{name}_full"] = out[name]
    for name in ("dk", "dv", "dbias"):
        out[f"{name}_raw"] = out[name]
    return out


def reduction_length(p: Problem) -> int:
    return max(p.seqlen_q, p.seqlen_k, p.hdim_q, p.hdim_v) * (p.nhead_q // p.nhead_k)


def _exact(name: str, want: np.ndarray, got: np.ndarray) -> list[str]:
    if want.tobytes() != got.tobytes():
        n = int(np.count_nonzero(want.view(np.uint8) != got.view(np.uint8)))
        return [f"{name}: {n} byte(s) differ; an exact output (integer / storage dtype) must be bitwise equal"]
    return []


def _nonfinite(name: str, want: np.ndarray, got: np.ndarray) -> list[str]:
    fw, fg = np.isfinite(want), np.isfinite(got)
    if not np.array_equal(fw, fg):
        return [f"{name}: {int(np.count_nonzero(fw != fg))} element(s) finite on one side only"]
    if not np.array_equal(np.isnan(want), np.isnan(got)) or not np.array_equal(
        want[~fw & ~np.isnan(want)], got[~fg & ~np.isnan(got)]
    ):
        return [f"{name}: NaN/inf markings differ"]
    return []


def output_errors(p: Problem, name: str, want: np.ndarray, got: np.ndarray, floor: float, accum) -> dict:
    """``{"scale", "bound", "err", "over"}`` of one float output: the largest error and the elements over bound."""
    fin = np.isfinite(want)
    w, g = want[fin].astype(np.float64), got[fin].astype(np.float64)
    scale = max(float(np.abs(w).max(initial=0.0)), floor)
    bound = TOL[accum] * math.sqrt(reduction_length(p)) * scale
    err = np.abs(w - g)
    return {"scale": scale, "bound": bound, "err": float(err.max(initial=0.0)), "over": err[err > bound]}


def _float_mismatch(p: Problem, name: str, want, got, floor: float, accum) -> list[str]:
    e = output_errors(p, name, want, got, floor, accum)
    over = e["over"]
    if not over.size:
        return []
    flips = accum is np.float32 and p.family is BWD and p.dtype.value in ("fp16", "bf16") and name in FLIP_OUTPUTS
    if flips:
        ulp = float(ml_dtypes.finfo(storage_dtype(p.dtype)).eps) * e["scale"]
        allowed = max(FLIP_MIN, int(FLIP_FRACTION * want.size))
        if over.size <= allowed and over.max() <= FLIP_ULPS * ulp:
            return []
        return [
            f"{name}: {over.size} element(s) over {e['bound']:.3g} (allowed {allowed} rounding flips of at most "
            f"{FLIP_ULPS * ulp:.3g}); largest error {e['err']:.3g}"
        ]
    return [f"{name}: {over.size} element(s) over the bound {e['bound']:.3g}; largest error {e['err']:.3g}"]


def mismatches(p: Problem, inputs: dict, want: dict, got: dict, accum) -> list[str]:
    """Every way ``got`` (the twin) breaks the equivalence rule against ``want`` (the NumPy reference)."""
    if set(want) != set(got):
        return [f"keys: twin {sorted(got)} != reference {sorted(want)}"]
    fl = floors(p, inputs)
    out = []
    for name, w in want.items():
        g = got[name]
        if not isinstance(g, np.ndarray) or g.shape != w.shape or g.dtype != w.dtype:
            out.append(
                f"{name}: twin {type(g).__name__} {getattr(g, 'shape', '')} {getattr(g, 'dtype', '')} != "
                f"reference {w.shape} {w.dtype}"
            )
        elif w.dtype not in (np.float32, np.float64):
            out += _exact(name, w, g)
        else:
            out += _nonfinite(name, w, g) or _float_mismatch(p, name, w, g, fl.get(name, 0.0), accum)
    return out


# -------------------------------------------------------------------------------------------------- shapes
def _shapes(category: str) -> list[Shape]:
    return select(load_matrices(), category)


def _id(s: Shape) -> str:
    return f"{s.file}:{s.entry}:{s.index}"


def work(p: Problem) -> int:
    """Multiply-adds of the reference's score and output GEMMs (x3 for the backward): its cost on the CPU."""
    w = sum(p.nhead_q * sq * sk * (p.hdim_q + p.hdim_v) for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list))
    return w * (3 if p.family is BWD else 1)


SMOKE = _shapes("smoke")
FULL_ONLY = [s for s in _shapes("full") if s.category == "full"]
FULL_SUBSET = [s for s in FULL_ONLY if work(s.problem) <= SUBSET_WORK]
FULL_REST = [s for s in FULL_ONLY if work(s.problem) > SUBSET_WORK]


def check_shape(s: Shape, accum) -> None:
    p = s.problem
    inputs = make_inputs(p, 0)
    want = reference(p, inputs, accum)
    got = reference(p, inputs, accum, array_backend="torch", device=DEVICE)
    bad = mismatches(p, inputs, want, got, accum)
    assert not bad, f"{_id(s)} ({s.family}, accum {np.dtype(accum).name}):\n  " + "\n  ".join(bad)


ACCUMS = [pytest.param(np.float64, id="f64"), pytest.param(np.float32, id="f32")]


@pytest.mark.parametrize("accum", ACCUMS)
@pytest.mark.parametrize("shape", SMOKE, ids=_id)
def test_smoke_matrix(shape: Shape, accum) -> None:
    check_shape(shape, accum)


@pytest.mark.parametrize("accum", ACCUMS)
@pytest.mark.parametrize("shape", FULL_SUBSET, ids=_id)
def test_full_matrix_subset(shape: Shape, accum) -> None:
    check_shape(shape, accum)


@pytest.mark.slow
@pytest.mark.parametrize("accum", ACCUMS)
@pytest.mark.parametrize("shape", FULL_REST, ids=_id)
def test_full_matrix_rest(shape: Shape, accum) -> None:
    check_shape(shape, accum)


# ------------------------------------------------------------------------------------- the check can fail
def _first(pred) -> Shape:
    return next(s for s in SMOKE if pred(s.problem))


def _fwd_plain(p: Problem) -> bool:
    return p.family.value == "fwd" and p.p_drop == 0 and p.seqlen_k >= 2 and p.seqlen_q >= 2


def _fwd_dropout(p: Problem) -> bool:
    return p.family.value == "fwd" and p.p_drop > 0


def _bwd_bf16(p: Problem) -> bool:
    return p.family is BWD and p.dtype.value == "bf16"


def _twin_mismatches(s: Shape, accum) -> list[str]:
    p = s.problem
    inputs = make_inputs(p, 0)
    want = reference(p, inputs, accum)
    return mismatches(p, inputs, want, reference(p, inputs, accum, array_backend="torch", device=DEVICE), accum)


def test_fault_softmax_scale_is_caught(monkeypatch) -> None:
    s = _first(_fwd_plain)
    assert not _twin_mismatches(s, np.float64)
    orig = torch_twin.TorchSequence.logits
    monkeypatch.setattr(
        torch_twin.TorchSequence, "logits", lambda self, x, r0, r1: orig(self, x * (1 + 2**-20), r0, r1)
    )
    bad = _twin_mismatches(s, np.float64)
    assert any(b.startswith(("o:", "lse:")) for b in bad), bad


def test_fault_dropped_key_is_caught(monkeypatch) -> None:
    s = _first(_fwd_plain)
    orig = torch_twin.TorchAttend.__call__

    def drop_last_key(self, p, q, k, v, ex, accum=np.float32, key_lo=0, key_hi=None, **kw):
        hi = k.shape[1] if key_hi is None else key_hi
        return orig(self, p, q, k, v, ex, accum, key_lo, max(key_lo, hi - 1), **kw)

    monkeypatch.setattr(torch_twin.TorchAttend, "__call__", drop_last_key)
    for accum in (np.float64, np.float32):
        assert any(b.startswith("o:") for b in _twin_mismatches(s, accum))


def test_fault_dropout_stream_is_caught(monkeypatch) -> None:
    s = _first(_fwd_dropout)
    assert not _twin_mismatches(s, np.float64)
    orig = torch_twin.dropout_randval
    monkeypatch.setattr(torch_twin, "dropout_randval", lambda t, dev, seed, off, *a: orig(t, dev, seed, off + 1, *a))
    assert any(b.startswith("o:") for b in _twin_mismatches(s, np.float64))


def test_fault_missing_low_precision_rounding_is_caught(monkeypatch) -> None:
    """At float32 the backward rounds P and dS to bf16; a twin that skips it is more than a few flips off."""
    s = _first(_bwd_bf16)
    assert not _twin_mismatches(s, np.float32)
    orig = torch_twin.TorchGradients.__init__

    def no_lp(self, seq, q):
        orig(self, seq, q)
        self.lp = None

    monkeypatch.setattr(torch_twin.TorchGradients, "__init__", no_lp)
    bad = _twin_mismatches(s, np.float32)
    assert any(b.startswith(("dv:", "dq:", "dk:")) for b in bad), bad


# ------------------------------------------------------------------------------------ pieces and the API
@pytest.mark.parametrize(
    ("seed", "offset", "batch", "nhead", "rows", "cols"),
    [
        (0, 0, 0, 4, range(0, 64), range(0, 64)),
        ((1 << 64) - 5, (1 << 64) - 70, 3, 8, range(5, 77), range(31, 130)),  # counters wrap at 2**64
        (123456789012345, 987654321, 1, 2, range(33, 34), range(0, 1)),
        (7, 1 << 40, 0, 1, range(100, 100), range(0, 5)),  # empty
    ],
)
def test_device_philox_is_the_host_stream(seed, offset, batch, nhead, rows, cols) -> None:
    from ckfmha import rng

    want = rng.dropout_randval(seed, offset, batch, np.arange(nhead), nhead, np.array(rows), np.array(cols))
    got = torch_twin.dropout_randval(torch, torch.device(DEVICE), seed, offset, batch, nhead, nhead, rows, cols)
    assert got.dtype == torch.uint8 and np.array_equal(got.cpu().numpy(), want)


@pytest.mark.parametrize("pred", [_fwd_dropout, _bwd_bf16], ids=["fwd_dropout", "bwd_bf16"])
def test_small_chunks_change_nothing(monkeypatch, pred) -> None:
    """Row chunks of a few rows (crossing the 32-row dropout tiles) give the same results."""
    s = _first(pred)
    p = s.problem
    inputs = make_inputs(p, 0)
    want = reference(p, inputs, np.float64)
    monkeypatch.setattr(torch_twin.TorchAttend, "chunk_rows", lambda self, hq, nk, accum: 5)
    got = reference(p, inputs, np.float64, array_backend="torch", device=DEVICE)
    assert not mismatches(p, inputs, want, got, np.float64)


def test_stored_randval_replaces_the_stream() -> None:
    from ckfmha.inputs import lse_shape

    p = _first(_fwd_dropout).problem
    inputs = make_inputs(p, 0)
    inputs["randval"] = np.random.default_rng(1).integers(0, 256, lse_shape(p) + (p.seqlen_k,), dtype=np.uint8)
    want = reference(p, inputs, np.float64)
    got = reference(p, inputs, np.float64, array_backend="torch", device=DEVICE)
    assert not mismatches(p, inputs, want, got, np.float64)


def test_api_errors_name_the_option() -> None:
    p = _first(_fwd_plain).problem
    inputs = make_inputs(p, 0)
    with pytest.raises(ValueError, match=r"array_backend: 'jax' must be one of 'numpy', 'torch'"):
        reference(p, inputs, array_backend="jax")
    with pytest.raises(ValueError, match=r"device: 'cpu' is only for array_backend='torch'"):
        reference(p, inputs, device="cpu")
    with pytest.raises(ValueError, match=r"device: 'gpu0' is not a torch device"):
        reference(p, inputs, array_backend="torch", device="gpu0")
    with pytest.raises(ValueError, match=r"accum: float16 must be float32 or float64"):
        reference(p, inputs, np.float16, array_backend="torch")


def test_default_device_and_callable_module() -> None:
    import ckfmha.reference as package

    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert torch_twin.resolve_device(None).type == want
    p = _first(_fwd_plain).problem
    inputs = make_inputs(p, 0)
    got = package.reference(p, inputs, np.float64, array_backend="torch", device=DEVICE)
    assert not mismatches(p, inputs, reference(p, inputs, np.float64), got, np.float64)


def test_missing_torch_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ImportError, match=r"array_backend: 'torch' needs PyTorch"):
        torch_twin.import_torch()


def test_float32_matmul_precision_is_restored() -> None:
    p = _first(_fwd_plain).problem
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        reference(p, make_inputs(p, 0), array_backend="torch", device=DEVICE)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(old)


def test_core_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, ckfmha, ckfmha.reference; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --------------------------------------------------------------------------------------- measuring the rule
def measure(shapes: list[Shape]) -> dict:
    """Per (family, output, accum): the largest ``|twin - ref| / (eps sqrt(L) scale)`` and, where flips are
    allowed, the largest flip count (as a fraction of the output) and flip size (in low-precision ulps * scale)."""
    stats: dict = {}
    for s in shapes:
        p = s.problem
        inputs = make_inputs(p, 0)
        fl = floors(p, inputs)
        for accum in (np.float64, np.float32):
            want = reference(p, inputs, accum)
            got = reference(p, inputs, accum, array_backend="torch", device=DEVICE)
            for name, w in want.items():
                if w.dtype not in (np.float32, np.float64) or not np.isfinite(w).any():
                    continue
                e = output_errors(p, name, w, got[name], fl.get(name, 0.0), accum)
                ratio = e["err"] / (e["bound"] / TOL[accum] * float(np.finfo(accum).eps))
                key = (p.family.value, name, np.dtype(accum).name)
                ulp = float(ml_dtypes.finfo(storage_dtype(p.dtype)).eps) * e["scale"]
                flips = (e["over"].size / w.size, float(e["over"].max(initial=0.0)) / ulp)
                old = stats.get(key, (0.0, "", 0.0, 0.0))
                stats[key] = (
                    max(old[0], ratio),
                    _id(s) if ratio > old[0] else old[1],
                    max(old[2], flips[0]),
                    max(old[3], flips[1]),
                )
    return stats


if __name__ == "__main__":  # python tests/test_reference_torch.py smoke|full  (CKFMHA_TWIN_DEVICE picks the device)
    import sys

    which = sys.argv[1] if len(sys.argv) > 1 else "smoke"
    for key, val in sorted(measure(SMOKE if which == "smoke" else FULL_ONLY).items()):
        ratio, where, frac, ulps = val
        print(*key, f"ratio {ratio:.3g} ({where}) flips {frac:.3g} of the elements, {ulps:.3g} ulp")
