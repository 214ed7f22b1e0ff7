"""Backward workspace sizes (dq accumulator and the dot_do_o term), exact and as an allocate-once bound.

CK's backward writes dQ through an fp32 accumulator ``dq_acc[nsplits, nhead_q, rows, hdim_q]`` (``rows`` =
batch*seqlen_q in batch mode, the total query tokens in group mode; ``nsplits`` = ceil(max_seqlen_k / bn0)
for the deterministic variant, which gives every key block its own slice, else 1) and keeps the dot_do_o term
``D[nhead_q, rows]`` in fp32. Every buffer is rounded up to 256 bytes.

:func:`dq_acc_shape` is the accumulator's array shape, :func:`bwd_workspace_bytes` the exact size for a problem.
:func:`bwd_workspace_upper_bound` needs only five numbers the host always knows — max_batch, hdim_q, nhead_q,
max_seqlen_q, max_seqlen_k — and never reads per-sequence lengths (seqstart arrays), so a training loop can
allocate once and keep the stream asynchronous
(upstream CK PR #7331 made the same change after its group-mode launcher synchronously copied seqstart_q/k back
to the host). The bound equals the exact size whenever every sequence has the maximal lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckfmha.kernel import Mode

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem

ALIGN = 256
ACC_BYTES = 4  # fp32 accumulators
MIN_BN0 = 16  # the smallest dq_dk_dv key tile CK generates: the bound's worst case for nsplits


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _sizes(rows: int, nhead_q: int, hdim_q: int, nsplits: int) -> int:
    dq_acc = _align(nsplits * nhead_q * rows * hdim_q * ACC_BYTES)
    d_term = _align(nhead_q * rows * ACC_BYTES)
    return dq_acc + d_term


def dq_acc_splits(max_seqlen_k: int, bn0: int, deterministic: bool) -> int:
    return max(1, -(-max_seqlen_k // bn0)) if deterministic else 1


def dq_acc_shape(problem: "Problem", bn0: int) -> tuple[int, int, int, int, int]:
    """The dq accumulator array of a dq_dk_dv kernel with key tile ``bn0``: ``(nsplits, batch, nhead_q, seqlen_q,
    hdim_q)`` in batch mode, ``(nsplits, 1, nhead_q, total_q, hdim_q)`` in group mode (the rows of the module
    doc's ``dq_acc[nsplits, nhead_q, rows, hdim_q]`` split by batch)."""
    p = problem
    nb, rows = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    return (dq_acc_splits(max(p.seqlens_k_list), bn0, p.deterministic), nb, p.nhead_q, rows, p.hdim_q)


def bwd_workspace_bytes(problem: "Problem", bn0: int = MIN_BN0) -> int:
    """Exact workspace bytes for ``problem`` with a dq_dk_dv kernel whose key tile is ``bn0``."""
    rows = problem.batch * problem.seqlen_q if problem.mode is Mode.BATCH else sum(problem.seqlens_q_list)
    max_sk = problem.seqlen_k if problem.mode is Mode.BATCH else max(problem.seqlens_k_list)
    return _sizes(rows, problem.nhead_q, problem.hdim_q, dq_acc_splits(max_sk, bn0, problem.deterministic))


def bwd_workspace_upper_bound(
    max_batch: int,
    hdim_q: int,
    nhead_q: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    deterministic: bool = True,
    bn0: int = MIN_BN0,
) -> int:
    """Workspace bytes that suffice for every problem within these maxima (reads no per-sequence length)."""
    for name, v in (
        ("max_batch", max_batch),
        ("hdim_q", hdim_q),
        ("nhead_q", nhead_q),
        ("max_seqlen_q", max_seqlen_q),
        ("max_seqlen_k", max_seqlen_k),
        ("bn0", bn0),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name != "max_seqlen_k" else 0):
            raise ValueError(f"{name}: expected a positive int, found {v!r}")
    return _sizes(max_batch * max_seqlen_q, nhead_q, hdim_q, dq_acc_splits(max_seqlen_k, bn0, deterministic))
