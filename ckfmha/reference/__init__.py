"""NumPy references for every FMHA family (see docs/reference.md for the conventions).

``reference(problem, inputs, accum=np.float32)`` dispatches on ``problem.family``; ``accum=np.float64`` gives a
float64 reference.  Inputs are the dict of :func:`ckfmha.inputs.make_inputs` (or the same keys from a kernel run).
"""

from __future__ import annotations

import numpy as np

from ckfmha.kernel import Family
from ckfmha.problem import BWD, Problem
from ckfmha.reference.appendkv import apply_rope, reference_appendkv
from ckfmha.reference.backward import reference_backward
from ckfmha.reference.batch_prefill import reference_batch_prefill
from ckfmha.reference.forward import reference_forward
from ckfmha.reference.pagedkv import PageTableError, reference_pagedkv
from ckfmha.reference.splitkv import reference_splitkv, split_ranges, splitkv_combine

__all__ = ["reference", "reference_forward", "reference_splitkv", "reference_pagedkv", "reference_appendkv",
           "reference_batch_prefill", "reference_backward", "splitkv_combine", "split_ranges", "apply_rope",
           "PageTableError"]

_DISPATCH = {
    Family.FWD: reference_forward,
    Family.FWD_SPLITKV: reference_splitkv,
    Family.FWD_PAGEDKV: reference_pagedkv,
    Family.FWD_APPENDKV: reference_appendkv,
    Family.BATCH_PREFILL: reference_batch_prefill,
    BWD: reference_backward,
}


def reference(problem: Problem, inputs: dict, accum=np.float32) -> dict:
    accum = np.dtype(accum).type
    if accum not in (np.float32, np.float64):
        raise ValueError(f"accum: {np.dtype(accum).name} must be float32 or float64")
    return _DISPATCH[problem.family](problem, inputs, accum)
