"""Per-sequence operands of the cpu backend, read the way CK's kernels offset their pointers (not shared with
:mod:`ckfmha.reference`).

* query rows (:func:`query_rows`): batch mode rows ``[0, q_eff_lens[b])`` of batch ``b`` (``seqlen_q`` without
  effective lengths: :attr:`~ckfmha.problem.Problem.seqlens_q_list`; CK's batch-mode kernels read
  ``cu_seqlen_q_ptr`` as the batch's logical length, fmha_fwd_kernel.hpp, and leave the rows past it unwritten:
  the poison stays, the reference's NaN); group mode rows ``[seqstart_q[b], seqstart_q[b] + seqlens_q[b])`` of
  batch 0 (``query_start * stride_q``);
* key rows (:func:`key_rows`; the forward's K / V and the backward's dK / dV): ``[0, kv_eff_lens[b])`` of batch
  ``b`` (``seqlen_k`` without effective lengths: :attr:`~ckfmha.problem.Problem.seqlens_k_list`,
  ``cu_seqlen_k_ptr``); group mode ``[seqstart_k[b], seqstart_k[b] + seqlens_k[b])`` (``seqstart_k`` counts
  ``s_kpad``);
* K / V through :mod:`ckfmha.backends.common.kv` (contiguous rows, ``cache_batch_idx``, page tables);
* extras (:func:`sequence_extras`): the elementwise bias window ``seqlen_q x seqlen_k`` at batch ``b`` when the
  bias has rank 2, else batch 0 (the host's ``batch_stride_bias = 0``), every q-head when its rank is >= 1, else
  head 0 broadcast (``nhead_stride_bias = 0``), group mode from row ``seqstart_q[b]`` of batch 0; ALiBi slopes
  row ``b`` of a (batch, hq) tensor (rank 1), row 0 of a (1, hq) one (rank 0: ``alibi_slope_stride = 0``); the
  per-head sink logits; the caller's stored ``randval`` window when dropout is on.

Tensor shapes are checked against the problem (:class:`~ckfmha.backends.cpu.errors.KernelInputError` naming the
tensor, its shape and the expected one) before they are indexed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ckfmha.backends.common.kv import KVSource
from ckfmha.backends.cpu.errors import KernelInputError
from ckfmha.backends.cpu.layout import as_bhsd
from ckfmha.faults import perturb
from ckfmha.inputs import bias_shape
from ckfmha.kernel import Bias, Mode
from ckfmha.problem import Problem

F32 = np.float32


@dataclass(frozen=True)
class SequenceExtras:
    """The logit extras of one sequence (every q-head): elementwise ``bias`` rows (1|hq, sq, sk), ALiBi ``alibi``
    slopes (hq,), ``sink`` logits (hq,), the caller's stored ``randval`` (hq, sq, sk) uint8, and ``batch``, the
    sequence index the dropout generator uses."""

    bias: np.ndarray | None = None
    alibi: np.ndarray | None = None
    sink: np.ndarray | None = None
    randval: np.ndarray | None = None
    batch: int = 0


def query_rows(p: Problem, b: int) -> slice:
    """Sequence ``b``'s rows in a (B, h, S, ...) query-side tensor (module doc)."""
    if p.mode is Mode.GROUP:
        start = perturb("rows.start", p.seqstart_q[b], problem=p, b=b, side="q")
        return slice(start, start + p.seqlens_q_list[b])
    return slice(0, p.seqlens_q_list[b])


def key_rows(p: Problem, b: int) -> slice:
    """Sequence ``b``'s rows in a (B, h, S_k, ...) key-side tensor (module doc)."""
    if p.mode is Mode.GROUP:
        start = perturb("rows.start", p.seqstart_k[b], problem=p, b=b, side="k")
        return slice(start, start + p.seqlens_k_list[b])
    return slice(0, p.seqlens_k_list[b])


def batch_index(p: Problem, b: int) -> int:
    """The batch axis index of sequence ``b`` (0 in group mode, where sequences are packed)."""
    return 0 if p.mode is Mode.GROUP else b


def _shaped(tensors: dict, name: str, shape: tuple[int, ...], rule: str) -> np.ndarray:
    if name not in tensors:
        raise KernelInputError(f"{name}: missing from the tensors ({rule}; have: {', '.join(sorted(tensors))})")
    a = np.asarray(tensors[name])
    if a.shape != tuple(shape):
        raise KernelInputError(f"{name}: shape {a.shape} must be {tuple(shape)} ({rule})")
    return a


def sequence_extras(p: Problem, tensors: dict, b: int, sq: int, sk: int) -> SequenceExtras:
    """Bias window, ALiBi slopes, sink and stored random values of sequence ``b`` (module doc)."""
    bias = alibi = sink = randval = None
    rows = query_rows(p, b)
    if p.bias is Bias.ELEMENTWISE:
        t = _shaped(tensors, "bias", bias_shape(p), f"elementwise bias of rank {p.bias_rank}")
        if p.mode is Mode.GROUP:
            bias = t[0, :, rows, :sk]
        else:
            bias = t[b if p.bias_rank == 2 else 0, :, :sq, :sk]
    elif p.bias is Bias.ALIBI:
        want = (p.batch if p.bias_rank == 1 else 1, p.nhead_q)
        t = _shaped(tensors, "alibi_slopes", want, f"ALiBi slopes of rank {p.bias_rank}")
        alibi = t[b if p.bias_rank == 1 else 0].astype(F32)
    if p.sink:
        sink = _shaped(tensors, "sink", (p.nhead_q,), "one sink logit per q-head").astype(F32)
    stored = tensors.get("randval")
    if stored is not None and p.p_drop > 0:
        stored = np.asarray(stored)
        randval = stored[0, :, rows, :sk] if p.mode is Mode.GROUP else stored[b, :, :sq, :sk]
    return SequenceExtras(bias=bias, alibi=alibi, sink=sink, randval=randval, batch=b)


def forward_sequences(
    p: Problem, tensors: dict, kv: list[tuple[KVSource, KVSource]]
) -> Iterator[tuple[int, int, slice, np.ndarray, np.ndarray, np.ndarray]]:
    """Per sequence ``b``: ``(b, batch index, query rows, q (hq, sq, dq), k (hk, sk, dq), v (hk, sk, dv))``,
    float32; K/V from the sequence's sources ``kv[b]`` (:func:`ckfmha.backends.common.kv.sequence_kv`)."""
    q = as_bhsd(np.asarray(tensors["q"]), p.input_layout)
    for b, (k_src, v_src) in enumerate(kv):
        sk = p.seqlens_k_list[b]
        bi, rows = batch_index(p, b), query_rows(p, b)
        yield (b, bi, rows, q[bi, :, rows].astype(F32), k_src.read(0, sk).astype(F32), v_src.read(0, sk).astype(F32))


@dataclass(frozen=True)
class BackwardSequence:
    """One sequence of a backward problem: float32 operands and where its results go."""

    b: int
    bi: int  # batch index into the (B, h, S, ...) buffers
    rows: slice  # query rows
    keys: slice  # key rows of dK / dV
    q: np.ndarray  # (hq, sq, dq)
    k: np.ndarray  # (hk, sk, dq)
    v: np.ndarray  # (hk, sk, dv)
    do: np.ndarray  # (hq, sq, dv)
    extras: SequenceExtras


def backward_sequences(
    p: Problem, tensors: dict, kv: list[tuple[KVSource, KVSource]], q_bhsd: np.ndarray, do_bhsd: np.ndarray
) -> Iterator[BackwardSequence]:
    """A :class:`BackwardSequence` per sequence of ``p``; ``q_bhsd`` / ``do_bhsd`` are (B, h, S, d) views."""
    for b, (k_src, v_src) in enumerate(kv):
        sk = p.seqlens_k_list[b]
        bi, rows = batch_index(p, b), query_rows(p, b)
        q = q_bhsd[bi, :, rows].astype(F32)
        yield BackwardSequence(
            b=b,
            bi=bi,
            rows=rows,
            keys=key_rows(p, b),
            q=q,
            k=k_src.read(0, sk).astype(F32),
            v=v_src.read(0, sk).astype(F32),
            do=do_bhsd[bi, :, rows].astype(F32),
            extras=sequence_extras(p, tensors, b, q.shape[1], sk),
        )
