"""Inputs and the NumPy reference of a (problem, seed), shared by every side that validates against them.

Both the ``ckfmha`` side and the ``torch`` sides of one parity row validate against the same reference; the
small LRU cache keeps it from being computed twice per row.  :func:`noise_references` adds what the noise-floor
rule needs (:mod:`ckfmha.validator`): the float64 ground truth and the same-precision reference of the same inputs,
cached the same way.
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


@lru_cache(maxsize=2)
def noise_references(problem: Problem, seed: int = 0) -> tuple[dict, dict]:
    """``(truth, same_precision)`` of ``make_inputs(problem, seed)``: :func:`ckfmha.validator.ground_truth` (float64)
    and :func:`ckfmha.validator.same_precision_reference` of the float32 reference of :func:`inputs_and_reference`."""
    from ckfmha.validator import ground_truth, same_precision_reference

    inputs, ref = inputs_and_reference(problem, seed)
    return ground_truth(problem, inputs), same_precision_reference(problem, ref)


def compared_names(problem: Problem) -> tuple[str, ...]:
    """The outputs a parity side is judged on: ``o`` (+ ``lse`` when asked for) or ``dq dk dv`` (+ ``dbias``).
    The backward is judged in its reduced, user-facing form (dK/dV per K/V head, dBias in the bias's shape) --
    the only form torch produces; CK's raw per-q-head layouts (``dk_raw``, ...) are for kernel items
    (:func:`pytest_ckfmha.execute.output_names`)."""
    from ckfmha.outputs import compared_outputs

    # the append-KV caches are not an output torch or tile_example hands back: the parity sides judge attention
    return tuple(n for n in compared_outputs(problem) if n not in ("k", "v", "k_cache", "v_cache"))
