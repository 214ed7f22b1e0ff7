"""The elementwise rule computed with torch (``validate(..., array_backend="torch", device=...)``,
:mod:`ckfmha.array_ops`) gives the very figures NumPy gives, chunk by chunk or whole; and it catches an injected
fault at any position, a chunk boundary included.  Runs on torch's CPU build in CI (the AMD ahead-of-time step of
``.ci/run``) and on a GPU by hand (``CKFMHA_TEST_DEVICE=cuda``)."""

from __future__ import annotations

import dataclasses
import os

import ml_dtypes
import numpy as np
import pytest

from ckfmha import array_ops
from ckfmha.problem import Problem
from ckfmha.validator import check, validate

torch = pytest.importorskip("torch")
DEVICE = os.environ.get("CKFMHA_TEST_DEVICE", "cpu")

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz]


def _pair(dtype, n: int, seed: int, nonfinite: bool) -> tuple[np.ndarray, np.ndarray]:
    """A float32 reference (zeros, and with ``nonfinite`` NaN/inf of both kinds, matching and not) and an output
    in ``dtype`` near it, with a few gross mismatches."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(n).astype(np.float32) * 4
    ref[rng.integers(0, n, 20)] = 0.0
    out = (ref + rng.standard_normal(n).astype(np.float32) * 1e-3).astype(dtype)
    bad = rng.integers(0, n, 5)
    out[bad] = (ref[bad] + 3.0).astype(dtype)
    if nonfinite:
        i = rng.integers(0, n, 8)
        ref[i[:2]] = np.inf  # the output matches at i[0] only where its dtype has an inf
        out[i[0]] = np.float32(np.inf).astype(dtype)
        ref[i[2:4]] = np.nan
        out[i[2]] = np.float32(np.nan).astype(dtype)
        out[i[4]] = np.float32(np.nan).astype(dtype)  # a NaN where the reference is finite
        ref[i[5]] = -np.inf
    return out, ref


def _fields(r) -> dict:
    d = dataclasses.asdict(r)
    for k in ("max_abs_err", "max_rel_err", "limit_ratio"):
        d[k] = repr(d[k])  # nan == nan, and bit-exact floats
    return d


@pytest.mark.parametrize("nonfinite", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_torch_gives_numpys_figures(dtype, nonfinite) -> None:
    out, ref = _pair(dtype, 3000, 7, nonfinite)
    out, ref = out.reshape(3, 10, 100), ref.reshape(3, 10, 100)
    want = check(out, ref, 1e-2, 1e-2, name="o")
    got = check(out, ref, 1e-2, 1e-2, name="o", ops=array_ops.torch_ops(DEVICE))
    assert _fields(got) == _fields(want)
    assert not want.passed and want.first_mismatch is not None  # the injected mismatches are seen


class _Small:
    """An ops object with a tiny chunk: the chunked accumulation over many chunks."""

    def __init__(self, inner, chunk: int) -> None:
        self._inner, self.chunk, self.name = inner, chunk, inner.name

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("chunk", [1, 7, 64, 4096])
def test_chunks_do_not_change_the_figures(backend, chunk) -> None:
    out, ref = _pair(np.float16, 1000, 3, True)
    whole = check(out, ref, 1e-2, 1e-2)  # NUMPY's chunk holds all 1000 elements
    ops = array_ops.NUMPY if backend == "numpy" else array_ops.torch_ops(DEVICE)
    got = check(out, ref, 1e-2, 1e-2, ops=_Small(ops, chunk))
    assert _fields(got) == _fields(whole)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("where", [0, 63, 64, 999])
def test_one_wrong_element_is_caught_where_it_is(backend, where) -> None:
    """The injected fault: one element off by 4 ulps of tolerance, at a chunk's edge or inside one."""
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((10, 100)).astype(np.float32)
    out = ref.astype(np.float16)
    out.reshape(-1)[where] = np.float16(ref.reshape(-1)[where] + 0.05)
    ops = array_ops.NUMPY if backend == "numpy" else array_ops.torch_ops(DEVICE)
    r = check(out, ref, 1e-2, 1e-2, ops=_Small(ops, 64))
    assert not r.passed and r.mismatch_count == 1
    assert r.first_mismatch == tuple(int(i) for i in np.unravel_index(where, ref.shape))
    assert r.limit_ratio > 1.0
    clean = check(ref.astype(np.float16), ref, 1e-2, 1e-2, ops=_Small(ops, 64))
    assert clean.passed and clean.limit_ratio <= 1.0


def test_validate_on_torch_equals_numpy() -> None:
    p = Problem(nhead_q=2, seqlen_q=40, hdim_q=32)
    rng = np.random.default_rng(5)
    ref = {"o": rng.standard_normal((1, 2, 40, 32)).astype(np.float32), "lse": np.zeros((1, 2, 40), np.float32)}
    outs = {"o": ref["o"].astype(np.float16), "lse": ref["lse"] + np.float32(0.5)}
    want = validate(p, outs, ref, names=["o", "lse"])
    got = validate(p, outs, ref, names=["o", "lse"], array_backend="torch", device=DEVICE)
    assert {n: _fields(r) for n, r in got.items()} == {n: _fields(r) for n, r in want.items()}
    assert want["o"].passed and not want["lse"].passed


def test_shape_mismatch_and_empty() -> None:
    ops = array_ops.torch_ops(DEVICE)
    r = check(np.zeros((2, 3), np.float16), np.zeros((3, 2), np.float32), 1e-3, 1e-3, ops=ops)
    assert not r.passed and "shape (2, 3) != reference shape (3, 2)" in r.message
    e = check(np.zeros((0, 4), np.float16), np.zeros((0, 4), np.float32), 1e-3, 1e-3, ops=ops)
    assert e.passed and e.total == 0 and e.max_abs_err == 0.0


def test_bad_array_backend_and_device_name_the_value() -> None:
    p = Problem()
    with pytest.raises(ValueError, match=r"array_backend: 'cupy' must be one of 'numpy', 'torch'"):
        validate(p, {}, {}, names=[], array_backend="cupy")
    with pytest.raises(ValueError, match=r"device: 'cuda' is only for array_backend='torch'"):
        validate(p, {}, {}, names=[], device="cuda")
    with pytest.raises(ValueError, match=r"device: 'gpu0' is not a torch device"):
        validate(p, {}, {}, names=[], array_backend="torch", device="gpu0")
