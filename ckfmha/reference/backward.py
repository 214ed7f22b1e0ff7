"""Backward reference (``bwd_dq_dk_dv`` = the whole backward: dot_do_o, dq_dk_dv, convert_dq).

With ``P`` the softmax probabilities, ``Z`` the dropout keep mask and ``pk = 1 - p_drop``:
``O = (P * Z / pk) V``; ``D = rowsum(dO * O)`` (the dot_do_o term; O rounded to the output dtype first, as
the backward reads the stored forward output; P and dS are rounded to the input dtype before the gradient GEMMs,
as in CK's reference); ``dP = (dO V^T) * Z / pk``;
``dS = P * (dP - D)``; ``dQ = scale * dS K``; ``dK = scale * dS^T Q`` and ``dV = (P * Z / pk)^T dO``, both summed
over the q-heads that share a K/V head (GQA/MQA); ``dBias = dS`` summed over the bias's broadcast axes.
``deterministic`` changes only the kernel's reduction order, not the reference.

Returns ``dq`` (q's shape), ``dk``/``dv`` (k/v's shapes; padded key rows of group mode stay 0), ``dbias`` (when
``dbias``), and ``o``, ``lse``, ``d`` (``d``: (b, hq, sq) or (1, hq, total_q)), all in the accumulation dtype.
"""

from __future__ import annotations

import numpy as np

from ckfmha.inputs import lse_shape, output_dtype, storage_dtype
from ckfmha.problem import Problem
from ckfmha.reference._core import add_dbias, attend, backward_sequences, from_hsd, to_hsd


def reference_backward(p: Problem, inputs: dict, accum=np.float32) -> dict:
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
    dq = np.zeros(q_hsd.shape, dtype=accum)
    dk = np.zeros(k_hsd.shape, dtype=accum)
    dv = np.zeros(v_hsd.shape, dtype=accum)
    o = np.zeros(do_hsd.shape, dtype=accum)
    lse = np.full(lse_shape(p), -np.inf, dtype=accum)
    d = np.zeros(lse_shape(p), dtype=accum)
    dbias = np.zeros(inputs["bias"].shape, dtype=accum) if p.dbias else None
    for seq in backward_sequences(p, inputs, q_hsd, k_hsd, v_hsd, do_hsd, accum):
        bw = {"do": seq.do, "want_ds": p.dbias, "o_dtype": o_dtype, "lp_dtype": lp_dtype}
        ob, lb, _ = attend(p, seq.q, seq.k, seq.v, seq.extras, accum, backward=bw)
        bi, rows = seq.bi, seq.rows
        o[bi, :, rows] = ob
        lse[bi, :, rows] = lb
        d[bi, :, rows] = bw["d"]
        dq[bi, :, rows] = bw["dq"]
        dk[bi, :, seq.keys] = bw["dk"]
        dv[bi, :, seq.keys] = bw["dv"]
        if dbias is not None:
            add_dbias(p, dbias, bw["ds"], seq)
    out = {"dq": from_hsd(dq, p.input_layout), "dk": from_hsd(dk, p.input_layout),
           "dv": from_hsd(dv, p.input_layout), "o": from_hsd(o, p.output_layout), "lse": lse, "d": d}
    if dbias is not None:
        out["dbias"] = dbias
    return out
