"""One function per plan stage: read the stage's inputs from ``tensors``, run the tile loops, write its outputs.

Tensor keys (inputs as :func:`ckfmha.inputs.make_inputs`; outputs as the references return them):

============  ===============================================================================================
stage         writes
============  ===============================================================================================
fwd           ``o`` (output layout, output dtype); ``lse`` (fp32, (b, hq, sq) / (1, hq, total_q)) when the
              kernel has LSE
pagedkv       same as fwd; K/V gathered through ``block_table`` from ``k_cache``/``v_cache``
batch_prefill same as fwd; K/V gathered from the vectorized/linear pools through a vLLM or SGLang table
splitkv       ``o_acc`` (fp32, (num_splits, B, hq, S, dv)) and ``lse_acc`` (fp32, (num_splits, B, hq, S)) with
              (B, S) = (batch, seqlen_q) or (1, total_q) in group mode; split i covers keys
              ``[i * n, min(sk, (i + 1) * n))``, ``n = max(1, ceil(sk / num_splits))``, as CK
              (:func:`ckfmha.backends.cpu.engine.split_key_ranges`); the sink counts in split 0 only
combine       ``o`` and (kernel LSE) ``lse`` from ``o_acc``/``lse_acc``
appendkv      ``q`` (rotated, storage dtype, a new array) and, in place, the caches ``k``/``v`` or
              ``k_cache``/``v_cache`` (knew/vnew written at ``cache_seqlens``, knew rotated)
dot_do_o      ``d`` (fp32, LSE shape) = rowsum(dO * O)
dq_dk_dv      ``dq_acc`` (fp32, (nsplits, B, hq, S, hdim_q); nsplits = ceil(max seqlen_k / bn0) when
              deterministic, else 1); CK's raw layouts, as the kernel writes them: ``dk_raw``/``dv_raw`` (input
              layout, storage dtype, one slice per *q*-head: :func:`ckfmha.inputs.dk_raw_shape`), ``dbias_raw``
              (when the kernel has dbias; bias dtype, every q-head and batch, max_seqlen_k columns:
              :func:`ckfmha.inputs.dbias_raw_shape`; cleared to 0 first as CK's host does, then each sequence's
              seqlen_k columns written); and ``dq`` directly when no convert_dq stage follows (fp32,
              non-deterministic).  The GQA / bias-broadcast reduction to ``dk``/``dv``/``dbias`` is not a kernel's:
              it is the runner's host step (:func:`ckfmha.runner.reduce_gradients`)
convert_dq    ``dq`` (input layout, storage dtype) = the dq_acc slices summed in order
============  ===============================================================================================

The backward stages read ``o`` (output layout, storage dtype) and ``lse`` (fp32) of the forward from ``tensors``.
"""

from __future__ import annotations

import numpy as np

from ckfmha.backends.base import BackendError
from ckfmha.backends.cpu.engine import F32, attend_tiled, backward_tiled, split_key_ranges
from ckfmha.inputs import (dbias_raw_shape, dk_raw_shape, dv_raw_shape, lse_shape, o_shape, output_dtype,
                           storage_dtype)
from ckfmha.kernel import DType, KernelConfig, Mode
from ckfmha.poison import poisoned
from ckfmha.problem import Problem
from ckfmha.reference._core import (backward_sequences, from_hsd, put_dbias_raw, q_rows, sequence_extras,
                                    to_hsd)
from ckfmha.reference.appendkv import apply_rope, write_cache
from ckfmha.reference.forward import sequences
from ckfmha.reference.pagedkv import kv_sources


def _out(tensors: dict, name: str, shape, dtype) -> np.ndarray:
    """The output array ``name``: the caller's (when its shape and dtype fit) or a new NaN-poisoned one."""
    shape, dtype = tuple(shape), np.dtype(dtype)
    a = tensors.get(name)
    if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype:
        a = poisoned(shape, dtype)
        tensors[name] = a
    return a


def _need(tensors: dict, name: str, stage: str) -> np.ndarray:
    if name not in tensors:
        raise BackendError(f"stage {stage}: input tensor {name!r} is missing (have: {', '.join(sorted(tensors))})")
    return tensors[name]


def p_dtype(cfg: KernelConfig):
    """The type P (and dS) is rounded to before the second GEMM: the kernel's input type; None for fp32."""
    return None if cfg.dtype is DType.FP32 else storage_dtype(cfg.dtype)


def _rows_shape(p: Problem) -> tuple[int, int]:
    return (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)


# ----------------------------------------------------------------------------------------- forward family
def run_attention(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    """fwd / pagedkv / batch_prefill / splitkv (when ``stage.args['num_splits']`` is given)."""
    role = stage.role.value
    bm0, bn0 = plan["tile"]["bm0"], plan["tile"]["bn0"]
    pdt = p_dtype(cfg)
    num_splits = stage.args.get("num_splits") if role == "splitkv" else None
    if role == "splitkv" and not num_splits:
        raise BackendError("stage splitkv: the stage arguments carry no num_splits")
    _need(tensors, "q", role)
    k_src, v_src = kv_sources(p, tensors)
    nb, ns = _rows_shape(p)
    hq, dv = p.nhead_q, p.hdim_v
    skip = not num_splits and cfg.skip_min_seqlen_q and p.min_seqlen_q > 0  # CK's kSkipMinSeqlenQ
    if num_splits:
        o_acc = _out(tensors, "o_acc", (num_splits, nb, hq, ns, dv), F32)
        lse_acc = _out(tensors, "lse_acc", (num_splits, nb, hq, ns), F32)
    else:
        o_hsd = np.zeros((nb, hq, ns, dv), dtype=F32)
        lse = np.full((nb, hq, ns), -np.inf, dtype=F32)
        if skip:  # skipped sequences keep whatever the output buffers hold: start from them
            if "o" in tensors:
                o_hsd = to_hsd(np.asarray(tensors["o"]), p.output_layout).astype(F32)
            if cfg.lse and "lse" in tensors:
                lse = np.asarray(tensors["lse"]).astype(F32)
    for b, qb, kb, vb in sequences(p, tensors, F32, k_src, v_src):
        sq, sk = qb.shape[1], kb.shape[1]
        if skip and sq <= p.min_seqlen_q:
            continue  # the kernel returns before this sequence
        ex = sequence_extras(p, tensors, b, sq, sk, F32)
        bi = 0 if p.mode is Mode.GROUP else b
        rows = q_rows(p, b)
        if num_splits:
            for i, (lo, hi) in enumerate(split_key_ranges(sk, num_splits)):
                oi, li = attend_tiled(p, qb, kb, vb, ex, bm0=bm0, bn0=bn0, p_dtype=pdt, key_lo=lo, key_hi=hi,
                                      use_sink=(i == 0))
                o_acc[i, bi, :, rows] = oi
                lse_acc[i, bi, :, rows] = li
        else:
            ob, lb = attend_tiled(p, qb, kb, vb, ex, bm0=bm0, bn0=bn0, p_dtype=pdt)
            o_hsd[bi, :, rows] = ob
            lse[bi, :, rows] = lb
    if num_splits:
        return ["o_acc", "lse_acc"]
    return _write_o_lse(cfg, p, tensors, o_hsd, lse)


def _write_o_lse(cfg: KernelConfig, p: Problem, tensors: dict, o_hsd: np.ndarray, lse: np.ndarray) -> list[str]:
    """Store O (output layout and dtype) and, for kernels with LSE, the LSE; return the names written."""
    o = _out(tensors, "o", o_shape(p), output_dtype(cfg.dtype))
    o[...] = from_hsd(o_hsd, p.output_layout).astype(o.dtype)
    if not cfg.lse:
        return ["o"]
    _out(tensors, "lse", lse_shape(p), F32)[...] = lse
    return ["o", "lse"]


def run_combine(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    """CK's split-KV combine: ``lse = max + log(sum exp(lse_i - max))``, ``o = sum exp(lse_i - lse) o_i``."""
    o_acc = _need(tensors, "o_acc", "combine")
    lse_acc = _need(tensors, "lse_acc", "combine")
    ns = stage.args.get("num_splits")
    if ns is not None and o_acc.shape[0] != ns:
        raise BackendError(f"stage combine: o_acc holds {o_acc.shape[0]} splits, the stage says num_splits={ns}")
    lmax = lse_acc.max(axis=0)
    lmax_safe = np.where(np.isfinite(lmax), lmax, F32(0))
    tot = np.exp(lse_acc - lmax_safe[None]).sum(axis=0)
    empty = tot == 0
    lse = np.where(empty, F32(-np.inf), lmax_safe + np.log(np.where(empty, F32(1), tot))).astype(F32)
    lse_safe = np.where(empty, F32(np.inf), lse)  # empty rows: every weight exp(-inf - inf) = 0
    w = np.exp(lse_acc - lse_safe[None])
    o_hsd = np.einsum("n...,n...d->...d", w, o_acc, dtype=F32)
    return _write_o_lse(cfg, p, tensors, o_hsd, lse)


def run_appendkv(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    q = _need(tensors, "q", "appendkv")
    sdt = q.dtype
    paged = "k_cache" in tensors
    kname, vname = ("k_cache", "v_cache") if paged else ("k", "v")
    kc, vc = _need(tensors, kname, "appendkv"), _need(tensors, vname, "appendkv")
    cache = p.cache_seqlens
    has_mask = p.mask.kind.value != "none"
    written = []
    if p.rotary_dim:
        cos, sin = _need(tensors, "rotary_cos", "appendkv"), _need(tensors, "rotary_sin", "appendkv")
        q_hsd = to_hsd(q, p.input_layout).copy()
        for b in range(p.batch):
            pos = cache[b] + np.arange(p.seqlen_q) if has_mask else np.full(p.seqlen_q, cache[b])
            q_hsd[b] = apply_rope(q_hsd[b], cos, sin, pos, cfg.rope, p.rotary_dim).astype(sdt)
        tensors["q"] = from_hsd(q_hsd, p.input_layout)
        written.append("q")
    if p.seqlen_knew:
        kn = to_hsd(_need(tensors, "knew", "appendkv"), p.input_layout)
        vn = to_hsd(_need(tensors, "vnew", "appendkv"), p.input_layout)
        for b in range(p.batch):
            pos = cache[b] + np.arange(p.seqlen_knew)
            knb = kn[b]
            if p.rotary_dim:
                knb = apply_rope(knb, tensors["rotary_cos"], tensors["rotary_sin"], pos, cfg.rope,
                                 p.rotary_dim).astype(sdt)
            write_cache(p, tensors, kc, knb, b, pos, paged)
            write_cache(p, tensors, vc, vn[b], b, pos, paged)
        written += [kname, vname]
    return written


# ----------------------------------------------------------------------------------------- backward family
def needs_convert(p: Problem) -> bool:
    """Whether a convert_dq stage follows dq_dk_dv (the dispatcher's rule)."""
    return p.dtype is not DType.FP32 or p.deterministic


def run_dot_do_o(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    o = to_hsd(_need(tensors, "o", "dot_do_o"), p.output_layout).astype(F32)
    do = to_hsd(_need(tensors, "do", "dot_do_o"), p.output_layout).astype(F32)
    d = _out(tensors, "d", lse_shape(p), F32)
    d[...] = np.einsum("bhsd,bhsd->bhs", do, o, dtype=F32)
    return ["d"]


def dq_acc_shape(p: Problem, bn0: int) -> tuple[int, ...]:
    nb, ns = _rows_shape(p)
    nsplits = max(1, -(-max(p.seqlens_k_list) // bn0)) if p.deterministic else 1
    return (nsplits, nb, p.nhead_q, ns, p.hdim_q)


def run_dq_dk_dv(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    t = plan["tile"]
    bm0, bn0 = t["bm0"], t["bn0"]
    pdt = p_dtype(cfg)
    q_hsd = to_hsd(_need(tensors, "q", "dq_dk_dv"), p.input_layout)
    k_hsd = to_hsd(_need(tensors, "k", "dq_dk_dv"), p.input_layout)
    v_hsd = to_hsd(_need(tensors, "v", "dq_dk_dv"), p.input_layout)
    do_hsd = to_hsd(_need(tensors, "do", "dq_dk_dv"), p.output_layout)
    lse = np.asarray(_need(tensors, "lse", "dq_dk_dv"), dtype=F32)
    d = np.asarray(_need(tensors, "d", "dq_dk_dv"), dtype=F32)
    dq_acc = _out(tensors, "dq_acc", dq_acc_shape(p, bn0), F32)
    dq_acc[...] = 0  # the launcher clears the accumulator before the kernel adds into it
    # CK's raw dK/dV: one slice per q-head (the kernel writes head i_nhead at i_nhead * nhead_stride_dk), in the
    # storage dtype; padded key rows (group-mode s_kpad) are 0
    sdt = storage_dtype(cfg.dtype)
    dk = to_hsd(_out(tensors, "dk_raw", dk_raw_shape(p), sdt), p.input_layout)
    dv = to_hsd(_out(tensors, "dv_raw", dv_raw_shape(p), sdt), p.input_layout)
    dk[...] = 0
    dv[...] = 0
    want_dbias = bool(cfg.dbias)
    dbias = None
    if want_dbias:
        bdt = _need(tensors, "bias", "dq_dk_dv").dtype
        dbias = to_hsd(_out(tensors, "dbias_raw", dbias_raw_shape(p), bdt), p.input_layout)
        dbias[...] = 0  # CK's host clears dBias before the launch (fmha_bwd_runner.hpp: dbias_buf.SetZero())
    for seq in backward_sequences(p, tensors, q_hsd, k_hsd, v_hsd, do_hsd, F32):
        bi, rows = seq.bi, seq.rows
        dkh, dvh, dsb = backward_tiled(p, seq.q, seq.k, seq.v, seq.do, lse[bi, :, rows], d[bi, :, rows], seq.extras,
                                       bm0=bm0, bn0=bn0, p_dtype=pdt, deterministic=cfg.deterministic,
                                       dq_acc=dq_acc[:, bi, :, rows], want_dbias=want_dbias)
        dk[bi, :, seq.keys] = dkh.astype(sdt)
        dv[bi, :, seq.keys] = dvh.astype(sdt)
        if dbias is not None:
            put_dbias_raw(dbias, dsb.astype(dbias.dtype), seq)
    written = ["dq_acc", "dk_raw", "dv_raw"]
    if dbias is not None:
        written.append("dbias_raw")
    if not needs_convert(p):  # fp32, non-deterministic: the accumulator is dQ
        _out(tensors, "dq", tensors["q"].shape, sdt)[...] = from_hsd(dq_acc[0], p.input_layout).astype(sdt)
        written.append("dq")
    return written


def run_convert_dq(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    dq_acc = _need(tensors, "dq_acc", "convert_dq")
    acc = dq_acc[0].astype(F32, copy=True)
    for i in range(1, dq_acc.shape[0]):  # deterministic: the per-key-tile slices, summed in order
        acc += dq_acc[i]
    sdt = storage_dtype(cfg.dtype)
    _out(tensors, "dq", tensors["q"].shape, sdt)[...] = from_hsd(acc, p.input_layout).astype(sdt)
    return ["dq"]


STAGE_FUNCTIONS = {
    "fwd": run_attention,
    "splitkv": run_attention,
    "pagedkv": run_attention,
    "batch_prefill": run_attention,
    "combine": run_combine,
    "appendkv": run_appendkv,
    "dot_do_o": run_dot_do_o,
    "dq_dk_dv": run_dq_dk_dv,
    "convert_dq": run_convert_dq,
}
