"""Layout views of the cpu backend: (batch, head, seq, dim) views of tensors stored ``bhsd`` or ``bshd``.

Pure index bookkeeping (a transpose), no FMHA semantics; the cpu backend keeps its own copy so that it imports
nothing from the references (:mod:`ckfmha.reference`).
"""

from __future__ import annotations

import numpy as np

from ckfmha.problem import Layout


def as_bhsd(x: np.ndarray, layout: Layout) -> np.ndarray:
    """(b, h, s, d) view of a 4-D tensor stored in ``layout`` (no copy)."""
    return x if layout is Layout.BHSD else x.transpose(0, 2, 1, 3)


def from_bhsd(x: np.ndarray, layout: Layout) -> np.ndarray:
    """A (b, h, s, d) tensor as stored in ``layout`` (contiguous)."""
    return x if layout is Layout.BHSD else np.ascontiguousarray(x.transpose(0, 2, 1, 3))
