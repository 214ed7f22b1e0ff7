"""Marked-NaN poison: unwritten elements are told apart from NaNs a kernel computed."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ckfmha.poison import POISON_BITS, census, distinguishes, is_poison, poisoned


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16])
def test_poison_is_a_marked_nan_kept_by_copies(dtype) -> None:
    a = poisoned((3, 5), dtype)
    view, bits = POISON_BITS[np.dtype(dtype).name]
    assert np.all(a.view(view) == bits)
    assert np.all(np.isnan(a.astype(np.float32)))
    assert is_poison(a.copy()).all() and is_poison(np.ascontiguousarray(a.T).T).all()
    # what arithmetic produces is the canonical NaN, which is not the poison
    with np.errstate(invalid="ignore"):
        computed = np.array([np.inf], dtype=np.float32) * 0
    assert not is_poison(computed.astype(dtype)).any()


def test_census_counts_unwritten_and_computed_separately() -> None:
    ref = np.ones((2, 4, 8), np.float32)
    out = np.ones((2, 4, 8), np.float32)
    out[0, 1, :3] = poisoned((3,), np.float32)
    out[1, 2, 5] = np.nan
    c = census("o", out, ref)
    assert (c.unwritten, c.computed_nan, c.first_unwritten, c.first_nan) == (3, 1, (0, 1, 0), (1, 2, 5))
    assert not c.ok and len(c.messages()) == 2
    assert "left unwritten" in c.messages()[0] and "a NaN the kernel computed" in c.messages()[1]


def test_census_ignores_elements_the_reference_leaves_nan_and_unrequired_rows() -> None:
    ref = np.ones((1, 4), np.float32)
    ref[0, 3] = np.nan  # e.g. a skipped sequence
    out = poisoned((1, 4), np.float32)
    assert census("o", out, ref).unwritten == 3
    assert census("o", out, ref, where=np.array([[True, False, False, False]])).unwritten == 1
    out[:] = 2.0
    assert census("o", out, ref).ok


def test_float8_cannot_tell_the_two_apart() -> None:
    a = poisoned((4,), ml_dtypes.float8_e4m3fn)
    assert not distinguishes(a.dtype) and is_poison(a).all()
    c = census("o", a)
    assert c.unwritten == 4 and c.computed_nan == 0 and "unwritten or computed" in c.messages()[0]


def test_integer_outputs_are_zero_filled_and_never_flagged() -> None:
    a = poisoned((3,), np.int32)
    assert a.tolist() == [0, 0, 0] and census("n", a).ok
