"""The skip reason of a shape no kernel serves (pytest_ckfmha.execute.short_explanation): the commonest reasons
per stage, and -- where the kernel space has not a single kernel of the stage's family in the problem's dtype (the
items' registry views are per dtype) -- words that say so instead of an empty list."""

from __future__ import annotations

import pytest

from ckfmha.dispatcher import Dispatcher, NoKernelError
from ckfmha.problem import Problem
from ckfmha.registry import Registry
from pytest_ckfmha.collect import Views
from pytest_ckfmha.execute import short_explanation


def _no_kernel(problem: Problem) -> NoKernelError:
    view = Views(Registry.from_enumeration("gfx942"), None).for_dtype(problem.dtype)
    with pytest.raises(NoKernelError) as e:
        Dispatcher(view).select(problem)  # type: ignore[arg-type]
    return e.value


def test_a_dtype_without_kernels_is_named() -> None:
    # CK's gfx942 space has no plain-fp8 forward kernel (its fp8 forward kernels are fp8bf16 / fp8fp32)
    p = Problem(dtype="fp8", qscale="pertensor", batch=1, nhead_q=2, seqlen_q=128, hdim_q=128)
    assert short_explanation(_no_kernel(p), p) == "stage fwd: the kernel space has no fwd kernel of dtype fp8"


def test_the_commonest_reasons_otherwise() -> None:
    p = Problem(batch=2, nhead_q=2, seqlen_q=80, hdim_q=64, vlayout="col")  # no column-major V kernel on gfx942
    why = short_explanation(_no_kernel(p), p)
    assert why.startswith("stage fwd: ") and "problem needs V layout col, kernel has vlayout=row" in why
    assert "the kernel space has no" not in why
