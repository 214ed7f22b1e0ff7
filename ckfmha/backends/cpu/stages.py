"""One function per plan stage: read the stage's inputs from ``tensors``, run the tile loops, write its outputs.

Tensor keys (inputs as :func:`ckfmha.inputs.make_inputs`; outputs as the references return them):

============  ===============================================================================================
stage         writes
============  ===============================================================================================
fwd           ``o`` (output layout, output dtype); ``lse`` (fp32, (b, hq, sq) / (1, hq, total_q)) when the
              kernel has LSE; only the rows inside each sequence's logical length (batch ``q_eff_lens``, group
              ``s_qpad`` padding excluded: :func:`sequence_rows`) -- the others keep the buffer's poison
pagedkv       same as fwd; K/V gathered through ``block_table`` from ``k_cache``/``v_cache``
              (:mod:`ckfmha.backends.common.kv`: CK's page block navigator)
batch_prefill same as fwd; K/V gathered from the vectorized/linear pools through a vLLM or SGLang table
splitkv       ``o_acc`` (fp32, (num_splits, B, hq, S, dv)) and ``lse_acc`` (fp32, (num_splits, B, hq, S)) with
              (B, S) = (batch, seqlen_q) or (1, total_q) in group mode; split i covers keys
              ``[i * n, min(sk, (i + 1) * n))``, ``n = max(1, ceil(sk / num_splits))``, as CK
              (:func:`ckfmha.backends.cpu.engine.split_key_ranges`); the sink counts in split 0 only
combine       ``o`` and (kernel LSE) ``lse`` from ``o_acc``/``lse_acc`` (the rows of :func:`sequence_rows`)
appendkv      ``q`` (rotated, storage dtype, a new array) and, in place, the caches ``k``/``v`` or
              ``k_cache``/``v_cache`` (knew/vnew written at ``cache_seqlens``, knew rotated;
              :mod:`ckfmha.backends.common.rope`); every cache row / page is checked before anything is written
dot_do_o      ``d`` (fp32, LSE shape) = rowsum(dO * O)
dq_dk_dv      ``dq_acc`` (fp32, (nsplits, B, hq, S, hdim_q); nsplits = ceil(max seqlen_k / bn0) when
              deterministic, else 1); CK's raw layouts, as the kernel writes them: ``dk_raw``/``dv_raw`` (input
              layout, storage dtype, one slice per *q*-head: :func:`ckfmha.inputs.dk_raw_shape`), ``dbias_raw``
              (when the kernel has dbias; bias dtype, every q-head and batch, max_seqlen_k columns:
              :func:`ckfmha.inputs.dbias_raw_shape`; cleared to 0 first as CK's host does, then each sequence's
              seqlen_k columns written); and ``dq`` directly when no convert_dq stage follows (fp32,
              non-deterministic).  The GQA / bias-broadcast reduction to ``dk``/``dv``/``dbias`` is not a kernel's:
              it is the runner's host step (:func:`ckfmha.runner.reduce_gradients`)
convert_dq    ``dq`` (input layout, storage dtype) = the dq_acc slices summed in order; with the older CK's tile
              ``(bm0, kN0)`` (deterministic) each sequence's first ``ceil(seqlen_k / kN0)`` slices
              (:func:`_sum_key_tile_slices`)
============  ===============================================================================================

The backward stages read ``o`` (output layout, storage dtype) and ``lse`` (fp32) of the forward from ``tensors``.

The stages compute everything themselves -- layouts (:mod:`~ckfmha.backends.cpu.layout`), K/V gathers and cache
writes (:mod:`~ckfmha.backends.common.kv`), RoPE (:mod:`~ckfmha.backends.common.rope`), ALiBi
(:mod:`~ckfmha.backends.cpu.bias`), per-sequence operands (:mod:`~ckfmha.backends.cpu.sequences`) -- and import
nothing from the references (:mod:`ckfmha.reference`), so that comparing the two catches a bug in either.
Bad index / table / bias tensors are a :class:`~ckfmha.backends.cpu.errors.KernelInputError` before any work.
"""

from __future__ import annotations

import numpy as np

from ckfmha.backends.base import BackendError
from ckfmha.backends.common.kv import KVAddressing, sequence_kv
from ckfmha.backends.common.rope import rotary_tables, rotate, table_rows
from ckfmha.backends.cpu.engine import F32, attend_tiled, backward_tiled, split_key_ranges
from ckfmha.backends.cpu.layout import as_bhsd, from_bhsd
from ckfmha.backends.cpu.sequences import (
    backward_sequences,
    batch_index,
    forward_sequences,
    query_rows,
    sequence_extras,
)
from ckfmha.faults import perturb
from ckfmha.inputs import dbias_raw_shape, dk_raw_shape, dv_raw_shape, lse_shape, o_shape, output_dtype, storage_dtype
from ckfmha.kernel import DType, KernelConfig, KVLookupTable, KVMemoryLayout, Mode
from ckfmha.masking import MaskKind
from ckfmha.plan import needs_convert
from ckfmha.poison import poisoned
from ckfmha.problem import Problem
from ckfmha.workspace import dq_acc_shape


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


def kv_addressing(cfg: KernelConfig, p: Problem) -> KVAddressing:
    """How the kernel ``cfg`` finds K/V for ``p``: its page-table and pool-layout traits (batch prefill), else the
    fwd paged kernels' vLLM block table / contiguous K/V (:class:`ckfmha.backends.common.kv.KVAddressing`)."""
    return KVAddressing.of(p, lookup=cfg.kv_lookup_table, kv_layout=cfg.kv_memory_layout)


def _rows_shape(p: Problem) -> tuple[int, int]:
    return (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)


def sequence_rows(p: Problem) -> np.ndarray:
    """(batch index, row) -> whether the row lies inside its sequence's logical length
    (:func:`~ckfmha.backends.cpu.sequences.query_rows`): the rows a forward or combine kernel stores."""
    rows = np.zeros(_rows_shape(p), dtype=bool)
    for b in range(p.batch):
        rows[batch_index(p, b), query_rows(p, b)] = True
    return rows


# ----------------------------------------------------------------------------------------- forward family
def run_attention(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    """fwd / pagedkv / batch_prefill / splitkv (when ``stage.launch.num_splits`` is given)."""
    role = stage.role.value
    bm0, bn0 = plan["tile"]["bm0"], plan["tile"]["bn0"]
    pdt = p_dtype(cfg)
    num_splits = stage.launch.num_splits if role == "splitkv" else None
    if role == "splitkv" and not num_splits:
        raise BackendError("stage splitkv: the stage arguments carry no num_splits")
    _need(tensors, "q", role)
    kv = perturb("kv.sources", sequence_kv(p, tensors, kv_addressing(cfg, p)), problem=p)  # indices checked first
    nb, ns = _rows_shape(p)
    hq, dv = p.nhead_q, p.hdim_v
    skip = not num_splits and cfg.skip_min_seqlen_q and p.min_seqlen_q > 0  # CK's kSkipMinSeqlenQ
    if num_splits:
        o_acc = _out(tensors, "o_acc", (num_splits, nb, hq, ns, dv), F32)
        lse_acc = _out(tensors, "lse_acc", (num_splits, nb, hq, ns), F32)
    else:
        o_hsd = np.zeros((nb, hq, ns, dv), dtype=F32)
        lse = np.full((nb, hq, ns), -np.inf, dtype=F32)
    written = np.zeros((nb, ns), dtype=bool)  # rows the kernel stores; the others keep what the buffers hold
    for b, bi, rows, qb, kb, vb in forward_sequences(p, tensors, kv):
        sq, sk = qb.shape[1], kb.shape[1]
        if skip and sq <= p.min_seqlen_q:
            continue  # the kernel returns before this sequence
        written[bi, rows] = True
        ex = sequence_extras(p, tensors, b, sq, sk)
        if num_splits:
            ranges = perturb("splitkv.ranges", split_key_ranges(sk, num_splits), sk=sk)
            for i, (lo, hi) in enumerate(ranges):
                sink = perturb("splitkv.sink", i == 0, split=i)
                oi, li = attend_tiled(
                    p, qb, kb, vb, ex, bm0=bm0, bn0=bn0, p_dtype=pdt, key_lo=lo, key_hi=hi, use_sink=sink
                )
                o_acc[i, bi, :, rows] = perturb("attention.out", oi, kernel=cfg, bm0=bm0)
                lse_acc[i, bi, :, rows] = li
        else:
            ob, lb = attend_tiled(p, qb, kb, vb, ex, bm0=bm0, bn0=bn0, p_dtype=pdt)
            o_hsd[bi, :, rows] = perturb("attention.out", ob, kernel=cfg, bm0=bm0)
            lse[bi, :, rows] = lb
    if num_splits:
        return ["o_acc", "lse_acc"]
    return _write_o_lse(cfg, p, tensors, o_hsd, lse, written)


def _write_o_lse(
    cfg: KernelConfig, p: Problem, tensors: dict, o_hsd: np.ndarray, lse: np.ndarray, written: np.ndarray
) -> list[str]:
    """Store the ``written`` (batch, row) rows of O (output layout and dtype) and, for kernels with LSE, of the LSE;
    return the names written.  The other rows -- past a batch's ``q_eff_lens``, group-mode ``s_qpad`` padding,
    sequences a ``kSkipMinSeqlenQ`` kernel skips -- keep what the buffers hold (the poison of a new buffer)."""
    o = _out(tensors, "o", o_shape(p), output_dtype(cfg.dtype))
    np.copyto(as_bhsd(o, p.output_layout), o_hsd.astype(o.dtype), where=written[:, None, :, None])
    if not cfg.lse:
        return ["o"]
    np.copyto(_out(tensors, "lse", lse_shape(p), F32), lse, where=written[:, None, :])
    return ["o", "lse"]


def run_combine(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    """CK's split-KV combine: ``lse = max + log(sum exp(lse_i - max))``, ``o = sum exp(lse_i - lse) o_i``."""
    o_acc = _need(tensors, "o_acc", "combine")
    lse_acc = _need(tensors, "lse_acc", "combine")
    ns = stage.launch.num_splits
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
    return _write_o_lse(cfg, p, tensors, o_hsd, lse, sequence_rows(p))


def run_appendkv(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    """CK's append-KV kernel (fmha_fwd_appendkv_kernel.hpp): RoPE on q and knew (:mod:`ckfmha.backends.common.rope`),
    knew / vnew stored at keys ``cache_seqlens[b] ..`` of the sequence's cache (:mod:`ckfmha.backends.common.kv`:
    contiguous row, ``cache_batch_idx`` row or block table). Every cache row / page and the rotary tables are
    checked before anything is written."""
    q = _need(tensors, "q", "appendkv")
    addressing = kv_addressing(cfg, p)
    kname, vname = ("k_cache", "v_cache") if addressing.page_block_size else ("k", "v")
    kv = perturb("kv.sources", sequence_kv(p, tensors, addressing), problem=p)
    cache = p.cache_seqlens
    per_row = p.mask.kind is not MaskKind.NONE  # CK: q's table row stride is has_mask * rotary_dim / 2
    per_row = perturb("rope.q_rows", per_row)
    q_rows = [table_rows(cache[b], p.seqlen_q, per_row) for b in range(p.batch)]
    knew_rows = [table_rows(cache[b], p.seqlen_knew, True) for b in range(p.batch)]
    tables: tuple[np.ndarray, np.ndarray] | None = None  # (cos, sin) when p.rotary_dim
    rotary_dim = p.rotary_dim
    if rotary_dim:
        last = max([int(r.max()) for r in q_rows + knew_rows if r.size], default=-1)
        cos_sin = rotary_tables(tensors, rotary_dim, last)
        rotary_dim, cos_t, sin_t = perturb("rope.dim", (rotary_dim, *cos_sin), hdim=p.hdim_q)
        tables = (cos_t, sin_t)
    new_kv: tuple[np.ndarray, np.ndarray] | None = None  # (knew, vnew) as bhsd when p.seqlen_knew
    if p.seqlen_knew:
        new_kv = (
            as_bhsd(_need(tensors, "knew", "appendkv"), p.input_layout),
            as_bhsd(_need(tensors, "vnew", "appendkv"), p.input_layout),
        )
    written = []
    if tables is not None:
        cos, sin = tables
        q_bhsd = as_bhsd(q, p.input_layout).copy()
        for b in range(p.batch):
            qb = perturb("rope.input", q_bhsd[b], rope=cfg.rope.value, rotary_dim=rotary_dim)
            q_bhsd[b] = rotate(qb, cos[q_rows[b]], sin[q_rows[b]], cfg.rope, rotary_dim)
        tensors["q"] = from_bhsd(q_bhsd, p.input_layout)
        written.append("q")
    if new_kv is not None:
        kn, vn = new_kv
        for b, (k_dst, v_dst) in enumerate(kv):
            knb = kn[b]
            if tables is not None:
                cos, sin = tables
                knb = perturb("rope.input", knb, rope=cfg.rope.value, rotary_dim=rotary_dim)
                knb = rotate(knb, cos[knew_rows[b]], sin[knew_rows[b]], cfg.rope, rotary_dim)
            at = perturb("appendkv.offset", int(cache[b]))
            k_dst.write(at, knb)
            v_dst.write(at, vn[b])
        written += [kname, vname]
    return written


# ----------------------------------------------------------------------------------------- backward family
def run_dot_do_o(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    o = as_bhsd(_need(tensors, "o", "dot_do_o"), p.output_layout).astype(F32)
    do = as_bhsd(_need(tensors, "do", "dot_do_o"), p.output_layout).astype(F32)
    d = _out(tensors, "d", lse_shape(p), F32)
    rows = sequence_rows(p)  # group-mode s_qpad padding rows keep the buffer's poison, as CK's kernel leaves them
    dd = np.einsum("bhsd,bhsd->bhs", do, o, dtype=F32)
    d[...] = np.where(rows[:, None, :], dd, d)
    return ["d"]


def run_dq_dk_dv(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    t = plan["tile"]
    bm0, bn0 = t["bm0"], t["bn0"]
    pdt = p_dtype(cfg)
    q_bhsd = as_bhsd(_need(tensors, "q", "dq_dk_dv"), p.input_layout)
    do_bhsd = as_bhsd(_need(tensors, "do", "dq_dk_dv"), p.output_layout)
    kv = sequence_kv(p, tensors, KVAddressing.of(p, lookup=KVLookupTable.NONE, kv_layout=KVMemoryLayout.NONE))
    kv = perturb("kv.sources", kv, problem=p)
    lse = np.asarray(_need(tensors, "lse", "dq_dk_dv"), dtype=F32)
    d = np.asarray(_need(tensors, "d", "dq_dk_dv"), dtype=F32)
    dq_acc = _out(tensors, "dq_acc", dq_acc_shape(p, bn0), F32)
    dq_acc[...] = 0  # the launcher clears the accumulator before the kernel adds into it
    # CK's raw dK/dV: one slice per q-head (the kernel writes head i_nhead at i_nhead * nhead_stride_dk), in the
    # storage dtype; padded key rows (group-mode s_kpad) are 0
    sdt = storage_dtype(cfg.dtype)
    dk = as_bhsd(_out(tensors, "dk_raw", dk_raw_shape(p), sdt), p.input_layout)
    dv = as_bhsd(_out(tensors, "dv_raw", dv_raw_shape(p), sdt), p.input_layout)
    dk[...] = 0
    dv[...] = 0
    want_dbias = bool(cfg.dbias)
    dbias = None
    if want_dbias:
        bdt = _need(tensors, "bias", "dq_dk_dv").dtype
        dbias = as_bhsd(_out(tensors, "dbias_raw", dbias_raw_shape(p), bdt), p.input_layout)
        dbias[...] = 0  # CK's host clears dBias before the launch (fmha_bwd_runner.hpp: dbias_buf.SetZero())
    for seq in backward_sequences(p, tensors, kv, q_bhsd, do_bhsd):
        bi, rows = seq.bi, seq.rows
        dkh, dvh, dsb = backward_tiled(
            p,
            seq.q,
            seq.k,
            seq.v,
            seq.do,
            lse[bi, :, rows],
            d[bi, :, rows],
            seq.extras,
            bm0=bm0,
            bn0=bn0,
            p_dtype=pdt,
            deterministic=cfg.deterministic,
            dq_acc=dq_acc[:, bi, :, rows],
            want_dbias=want_dbias,
        )
        dk[bi, :, seq.keys] = dkh.astype(sdt)
        dv[bi, :, seq.keys] = dvh.astype(sdt)
        if dbias is not None:  # fmha_bwd_kernel.hpp's dbias window: seqlen_q x seqlen_k at the sequence's rows;
            dbias[seq.bi, :, seq.rows, : dsb.shape[2]] = dsb.astype(dbias.dtype)  # columns past seqlen_k untouched
    written = ["dq_acc", "dk_raw", "dv_raw"]
    if dbias is not None:
        written.append("dbias_raw")
    if not needs_convert(p):  # fp32, non-deterministic: the accumulator is dQ
        store_dq_rows(p, tensors, dq_acc[0], sdt)
        written.append("dq")
    return written


def run_convert_dq(plan: dict, cfg: KernelConfig, stage, p: Problem, tensors: dict) -> list[str]:
    dq_acc = _need(tensors, "dq_acc", "convert_dq")
    kn0 = plan["loop"].get("split_key_tile")
    if kn0 is None:
        acc = dq_acc[0].astype(F32, copy=True)
        for i in range(1, perturb("convert.slices", dq_acc.shape[0])):  # deterministic: the slices, in order
            acc += dq_acc[i]
    else:
        acc = _sum_key_tile_slices(cfg, p, dq_acc, kn0)
    store_dq_rows(p, tensors, acc, storage_dtype(cfg.dtype))
    return ["dq"]


def store_dq_rows(p: Problem, tensors: dict, acc_bhsd: np.ndarray, sdt) -> None:
    """Store dQ's rows inside each sequence's logical length (:func:`sequence_rows`); group-mode ``s_qpad``
    padding rows keep the buffer's poison: CK's kernels iterate over the logical ``seqlen_q``
    (fmha_bwd_kernel.hpp, ``seqlen_q_ptr``)."""
    dq = as_bhsd(_out(tensors, "dq", tensors["q"].shape, sdt), p.input_layout)
    rows = sequence_rows(p)[:, None, :, None]
    dq[...] = np.where(rows, acc_bhsd.astype(sdt), dq)


def _sum_key_tile_slices(cfg: KernelConfig, p: Problem, dq_acc: np.ndarray, kn0: int) -> np.ndarray:
    """The older CK's deterministic convert_dq (two-entry tile ``(bm0, kN0)``, fmha_bwd_kernel.hpp
    ``FmhaBwdConvertQGradKernel``): each sequence sums, in order, its first ``ceil(seqlen_k / kN0)`` dq_acc
    slices -- the slices a dq_dk_dv kernel with ``bn0 = kN0`` wrote.  A kN0 other than the dq_dk_dv kernel's sums
    other slices (a wrong dQ the comparison shows) or, where it needs more slices than the accumulator holds,
    would read past CK's workspace: an error naming the kernel."""
    acc = np.zeros(dq_acc.shape[1:], dtype=F32)
    for b in range(p.batch):
        sk = p.seqlens_k_list[b]
        n = -(-sk // kn0)
        if n > dq_acc.shape[0]:
            raise BackendError(
                f"stage convert_dq: kernel {cfg.kernel_id} sums ceil(seqlen_k / kN0) = ceil({sk} / {kn0}) = {n} "
                f"dq_acc slices for sequence {b}, the accumulator holds {dq_acc.shape[0]} (its dq_dk_dv kernel's "
                "bn0 differs from this kN0): CK's kernel would read past the workspace"
            )
        bi, rows = batch_index(p, b), query_rows(p, b)
        for i in range(perturb("convert.slices", n)):
            acc[bi, :, rows] += dq_acc[i, bi, :, rows]
    return acc


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
