"""NumPy references for every FMHA family (see docs/reference.md for the conventions).

The module is callable: ``ckfmha.reference(problem, inputs, accum=np.float32)`` is
:func:`reference`, which computes the reference outputs of ``problem`` (dispatching on ``problem.family``: the
forward, split-KV, paged-KV, append-KV, batch-prefill or backward reference) and returns them as a dict of NumPy
arrays keyed like a kernel run's outputs (``o``, ``lse``, ``dq``, ``dk``, ``dv``, ...).  ``accum=np.float64``
gives a float64 reference; ``array_backend="torch", device=...`` computes the same dict with the torch twin
(:mod:`ckfmha.reference.torch_twin`, torch imported only then).  Inputs are the dict of
:func:`ckfmha.inputs.make_inputs` (or the same keys from a kernel run).  The per-family functions
(``reference_forward``, ``reference_splitkv``, ...) stay available as attributes: ``from ckfmha import reference;
reference(p, inputs)`` and ``reference.reference_forward(...)`` both work.
"""

from __future__ import annotations

import sys
import types

import numpy as np

from ckfmha import array_ops
from ckfmha.family_records import family_record
from ckfmha.problem import Problem
from ckfmha.reference.appendkv import apply_rope, reference_appendkv
from ckfmha.reference.backward import reference_backward
from ckfmha.reference.batch_prefill import reference_batch_prefill
from ckfmha.reference.forward import reference_forward
from ckfmha.reference.pagedkv import PageTableError, reference_pagedkv
from ckfmha.reference.splitkv import reference_splitkv, split_ranges, splitkv_combine

__all__ = [
    "reference",
    "reference_function",
    "reference_forward",
    "reference_splitkv",
    "reference_pagedkv",
    "reference_appendkv",
    "reference_batch_prefill",
    "reference_backward",
    "splitkv_combine",
    "split_ranges",
    "apply_rope",
    "PageTableError",
]

#: the values of :func:`reference`'s ``array_backend``
ARRAY_BACKENDS = array_ops.ARRAY_BACKENDS


def reference_function(problem: Problem):
    """The reference function of ``problem``'s family: the one its family record names
    (:attr:`ckfmha.family_records.FamilyRecord.reference`)."""
    return globals()[family_record(problem).reference]


def reference(problem: Problem, inputs: dict, accum=np.float32, *, array_backend: str = "numpy", device=None) -> dict:
    """The reference outputs of ``problem`` on ``inputs`` (a dict name -> NumPy array, e.g. ``o`` and ``lse`` for
    the forward, ``dq``/``dk``/``dv`` for the backward), computed with ``accum`` (float32 or float64)
    accumulation; a ValueError for any other ``accum``.

    ``array_backend="torch"`` computes them with the torch twin (:mod:`ckfmha.reference.torch_twin`: the same
    references, the attention core on ``device`` -- default 'cuda' when available, else 'cpu'); the results are
    the same NumPy dict.  ``device`` is only for the torch backend."""
    accum = np.dtype(accum).type
    if accum not in (np.float32, np.float64):
        raise ValueError(f"accum: {np.dtype(accum).name} must be float32 or float64")
    array_ops.check_array_backend(array_backend, device)
    if array_backend == "torch":
        from ckfmha.reference.torch_twin import reference_torch  # imports torch, only now

        return reference_torch(problem, inputs, accum, device)
    return reference_function(problem)(problem, inputs, accum)


class _CallableModule(types.ModuleType):
    """This package, callable: ``ckfmha.reference(problem, inputs, accum)`` is :func:`reference`."""

    def __call__(
        self, problem: Problem, inputs: dict, accum=np.float32, *, array_backend: str = "numpy", device=None
    ) -> dict:
        return reference(problem, inputs, accum, array_backend=array_backend, device=device)


sys.modules[__name__].__class__ = _CallableModule
