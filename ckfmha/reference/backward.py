"""Backward reference (``bwd_dq_dk_dv`` = the whole backward: dot_do_o, dq_dk_dv, convert_dq).

With ``P`` the softmax probabilities, ``Z`` the dropout keep mask and ``pk = 1 - p_drop``:
``O = (P * Z / pk) V``; ``D = rowsum(dO * O)`` (the dot_do_o term; O rounded to the output dtype first, as
the backward reads the stored forward output; P and dS are rounded to the input dtype before the gradient GEMMs,
as in CK's reference); ``dP = (dO V^T) * Z / pk``;
``dS = P * (dP - D)``; ``dQ = scale * dS K``; ``dK = scale * dS^T Q`` and ``dV = (P * Z / pk)^T dO`` per q-head;
``dBias = dS`` per q-head.  ``deterministic`` changes only the kernel's reduction order, not the reference.

Two forms of dK, dV and dBias (all in the accumulation dtype):

* **raw** -- what CK's dq_dk_dv kernel writes (fmha_bwd_kernel.hpp, with the buffers of fmha_bwd_runner.hpp):
  ``dk_raw`` / ``dv_raw`` one slice per *q*-head in the input layout (:func:`ckfmha.inputs.dk_raw_shape`; q-head
  ``h`` holds the gradient through K/V head ``h // (nhead_q // nhead_k)``), ``dbias_raw`` = dS of every q-head
  of every batch, ``max_seqlen_k`` columns, in the input layout (:func:`ckfmha.inputs.dbias_raw_shape`) whatever
  the bias's rank; in group mode the columns past a sequence's ``seqlen_k`` are 0 (the kernel does not write
  them; CK's host clears the buffer first: ``dbias_buf.SetZero()``).
* **reduced** -- the user-facing gradients, what CK's callers compute from the raw buffers on the host
  (:func:`reduce_raw_gradients`): ``dk`` / ``dv`` in K/V's shapes, summed over the q-heads that share a K/V head
  (FlashAttention's csrc/flash_attn_ck/mha_bwd.cpp: ``dk_expanded`` with ``num_heads``, then
  ``at::sum_out(dk, reshape(dk_expanded, {b, sk, hk, h / hk, d}), {3})``), and ``dbias`` in the bias's shape,
  summed over the batch/head axes the bias broadcasts (TransformerEngine's ROCm ``dbias_reduce_11ss``).  The
  host sums what the kernel stored, so for fp16/bf16 each raw slice is rounded to the input (bias) precision
  (fmha_bwd.hpp's ``KGradDataType`` / ``VGradDataType`` / ``BiasGradDataType``) before the float32 sum; float64
  references and fp32 problems sum the unrounded slices.

Kernel-level checks compare raw against raw, plan-level checks and torch parity reduced against reduced.
Padded key rows (group mode ``s_kpad``) are 0 in both forms; padded query rows (group mode ``s_qpad`` past a
sequence's logical length) are NaN in ``dq``, ``o``, ``lse`` and ``d``: no kernel writes them.

Returns ``dq`` (q's shape), ``dk``/``dv`` (k/v's shapes), ``dk_raw``/``dv_raw``, ``dbias`` and ``dbias_raw``
(when ``dbias``), and ``o``, ``lse``, ``d`` (``d``: (b, hq, sq) or (1, hq, total_q)).  An empty query sequence
(group mode ``seqlen_q = 0``) has no rows in dQ/O/LSE/D and leaves its keys' dK/dV at 0, as CK writes them.
"""

from __future__ import annotations

import numpy as np

from ckfmha.inputs import dbias_raw_shape, dk_raw_shape, dv_raw_shape, lse_shape, output_dtype, storage_dtype
from ckfmha.problem import Layout, Problem
from ckfmha.reference.core import attend, backward_sequences, from_hsd, put_dbias_raw, to_hsd

#: reduced output -> the raw output it is reduced from
RAW_NAMES = {"dk": "dk_raw", "dv": "dv_raw", "dbias": "dbias_raw"}


class RawLayoutError(ValueError):
    """A raw gradient buffer or a bias whose shape does not fit the problem's layouts."""


def reduce_raw_gradients(p: Problem, raw: dict, bias_shape=None, dtypes: dict | None = None) -> dict:
    """The user-facing ``dk``, ``dv`` (and ``dbias``) from CK's raw ``dk_raw``, ``dv_raw`` (and ``dbias_raw``):
    dK/dV summed over each K/V head's group of ``nhead_q // nhead_k`` q-heads, dBias summed over the axes where
    ``bias_shape`` (needed with ``dbias_raw``) is 1 and the raw buffer is not.  Sums run in float32 (float64 for
    float64 buffers); ``dtypes`` (name -> dtype) rounds a result, else it keeps the sum's dtype.  This is the one
    rule, used by the reference and by the runner's host step alike."""
    dtypes = dtypes or {}
    hq, hk = p.nhead_q, p.nhead_k
    want = {"dk_raw": dk_raw_shape(p), "dv_raw": dv_raw_shape(p)}
    if "dbias_raw" in raw:
        want["dbias_raw"] = dbias_raw_shape(p)
    out = {}
    for name, shape in want.items():
        x = np.asarray(raw[name])
        if x.shape != shape:
            raise RawLayoutError(f"{name}: shape {x.shape} is not CK's raw layout {shape} for this problem")
        acc = np.float64 if x.dtype == np.float64 else np.float32
        hsd = to_hsd(x, p.input_layout).astype(acc)  # (B, hq, S, d)
        reduced = name[: -len("_raw")]
        if name == "dbias_raw":
            y = _reduce_to_bias(hsd, bias_shape)
        else:
            b, _, s, d = hsd.shape
            y = from_hsd(hsd.reshape(b, hk, hq // hk, s, d).sum(axis=2), p.input_layout)
        out[reduced] = y.astype(dtypes[reduced]) if reduced in dtypes else y
    return out


def _reduce_to_bias(dbias_hsd: np.ndarray, bias_shape) -> np.ndarray:
    """Sum CK's dBias (B, hq, S, max_sk) to ``bias_shape`` (B|1, hq|1, S, max_sk)."""
    if bias_shape is None:
        raise RawLayoutError("bias: its shape is needed to reduce dbias_raw")
    shape = tuple(int(n) for n in bias_shape)
    if (
        len(shape) != 4
        or shape[2:] != dbias_hsd.shape[2:]
        or any(n not in (1, m) for n, m in zip(shape[:2], dbias_hsd.shape[:2]))
    ):
        raise RawLayoutError(
            f"bias: shape {shape} cannot receive dBias {dbias_hsd.shape} (b, hq, rows, max_sk): "
            "its batch and head extents must each be 1 or equal, its rows and columns equal"
        )
    axes = tuple(i for i in (0, 1) if shape[i] == 1 and dbias_hsd.shape[i] != 1)
    return dbias_hsd.sum(axis=axes, keepdims=True) if axes else dbias_hsd


def _hsd_shape(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """The (b, h, s, d) shape of a tensor of ``shape`` stored in ``layout``."""
    return shape if layout is Layout.BHSD else (shape[0], shape[2], shape[1], shape[3])


def reference_backward(p: Problem, inputs: dict, accum=np.float32, *, attend_fn=attend) -> dict:
    # The dot_do_o term reads O as the forward stored it (output dtype), as CK's backward does; with float64
    # accumulation (the finite-difference checks) O stays exact.
    o_dtype = None if np.dtype(accum) == np.float64 else output_dtype(p.dtype)
    # Likewise P and dS enter the gradient GEMMs in the input precision (CK's reference keeps a low-precision
    # copy of each), except in float64 checks and for fp32.
    lp_dtype = None if np.dtype(accum) == np.float64 or p.dtype.value == "fp32" else storage_dtype(p.dtype)
    q_hsd = to_hsd(inputs["q"], p.input_layout)
    k_hsd = to_hsd(inputs["k"], p.input_layout)
    v_hsd = to_hsd(inputs["v"], p.input_layout)
    do_hsd = to_hsd(inputs["do"], p.output_layout)
    # query rows outside every sequence's logical length (group-mode s_qpad padding) are never written: NaN, as
    # in the forward reference (the kernels iterate over the logical seqlen_q)
    unwritten = tuple(p.qpad_list) != tuple(p.seqlens_q_list)
    dq = np.full(q_hsd.shape, np.nan if unwritten else 0.0, dtype=accum)
    dk_raw = np.zeros(_hsd_shape(dk_raw_shape(p), p.input_layout), dtype=accum)
    dv_raw = np.zeros(_hsd_shape(dv_raw_shape(p), p.input_layout), dtype=accum)
    o = np.full(do_hsd.shape, np.nan if unwritten else 0.0, dtype=accum)
    lse = np.full(lse_shape(p), np.nan if unwritten else -np.inf, dtype=accum)
    d = np.full(lse_shape(p), np.nan if unwritten else 0.0, dtype=accum)
    dbias_raw = None
    if p.dbias:
        dbias_raw = np.zeros(_hsd_shape(dbias_raw_shape(p), p.input_layout), dtype=accum)
    for seq in backward_sequences(p, inputs, q_hsd, k_hsd, v_hsd, do_hsd, accum):
        bw = {"do": seq.do, "want_ds": p.dbias, "o_dtype": o_dtype, "lp_dtype": lp_dtype}
        ob, lb, _ = attend_fn(p, seq.q, seq.k, seq.v, seq.extras, accum, backward=bw)
        bi, rows = seq.bi, seq.rows
        o[bi, :, rows] = ob
        lse[bi, :, rows] = lb
        d[bi, :, rows] = bw["d"]
        dq[bi, :, rows] = bw["dq"]
        dk_raw[bi, :, seq.keys] = bw["dk_heads"]
        dv_raw[bi, :, seq.keys] = bw["dv_heads"]
        if dbias_raw is not None:
            put_dbias_raw(dbias_raw, bw["ds"], seq)
    out = {
        "dq": from_hsd(dq, p.input_layout),
        "dk_raw": from_hsd(dk_raw, p.input_layout),
        "dv_raw": from_hsd(dv_raw, p.input_layout),
        "o": from_hsd(o, p.output_layout),
        "lse": lse,
        "d": d,
    }
    if dbias_raw is not None:
        out["dbias_raw"] = from_hsd(dbias_raw, p.input_layout)
    # The reduced gradients are the host's sums of the buffers the kernel stored: per q-head slices in the input
    # (bias) precision -- fmha_bwd.hpp's KGradDataType / VGradDataType / BiasGradDataType -- so with a 16-bit
    # input each raw slice is rounded to it before the sum (as P and dS are above; not in float64 checks)
    stored = dict(out)
    if lp_dtype is not None:
        for n in ("dk_raw", "dv_raw"):
            stored[n] = out[n].astype(lp_dtype)
        if dbias_raw is not None:
            stored["dbias_raw"] = out["dbias_raw"].astype(np.asarray(inputs["bias"]).dtype)
    accum_dtypes = {n: np.dtype(accum) for n in RAW_NAMES}
    out.update(reduce_raw_gradients(p, stored, inputs["bias"].shape if p.dbias else None, accum_dtypes))
    return out
