"""Inputs and the NumPy reference of a (problem, seed), shared by every side that validates against them.

Both the ``ckfmha`` side and the ``torch`` sides of one parity row validate against the same reference; the
small LRU cache keeps it from being computed twice per row.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ckfmha.problem import Problem


@lru_cache(maxsize=2)
def inputs_and_reference(problem: Problem, seed: int = 0) -> tuple[dict, dict]:
    """``(inputs, reference outputs)`` of ``make_inputs(problem, seed)`` (float32 accumulation)."""
    from ckfmha.inputs import make_inputs
    from ckfmha.reference import reference

    inputs = make_inputs(problem, seed)
    return inputs, reference(problem, inputs, np.float32)


def compared_names(problem: Problem) -> tuple[str, ...]:
    """The outputs a parity side is judged on: ``o`` (+ ``lse`` when asked for) or ``dq dk dv`` (+ ``dbias``)."""
    if problem.is_backward:
        return ("dq", "dk", "dv") + (("dbias",) if problem.dbias else ())
    return ("o",) + (("lse",) if problem.lse else ())
