"""The KV-cache launchers of the Triton backend: the append-KV launch and the batch-prefill pools (kernels in
:mod:`.kernels_kvcache`; below :mod:`.launch`, which reads the pools, and the stage module :mod:`.execute`).

=================  =================================================================================================
stage / helper     what it does
=================  =================================================================================================
appendkv           :func:`check_append_inputs` checks every cache row / page first on the host (the backends'
                   shared :func:`ckfmha.backends.common.kv.sequence_kv` and
                   :func:`ckfmha.backends.common.rope.rotary_tables`: a bad ``block_table`` / ``cache_batch_idx``
                   is a KernelInputError before anything is written); :func:`appendkv_launcher` then launches
                   :func:`kernels_kvcache.append_rows_kernel`: q rotated into a new tensor (``rotary_dim > 0``),
                   knew (rotated) and vnew stored at keys ``cache_seqlens[b] ..`` of the contiguous cache (row
                   ``cache_batch_idx[b]`` or ``b``) or of the paged cache (vLLM block table), in place on the
                   device tensors it is given (the stage module gives it copies: the stage returns ``q`` and the
                   caches ``k``/``v`` or ``k_cache``/``v_cache`` as new arrays); the attention stage after it reads
                   the post-append key counts ``cache_seqlens + seqlen_knew`` (computed on the device: no host sync)
batch_prefill      the forward kernel (:func:`ckfmha.backends.triton.launch.attention_launcher`, group mode, paged)
                   with :func:`prefill_pools`: the pools' strides and the table of the config's traits -- vLLM
                   ``block_table`` (row ``b``) or SGLang ``kv_page_indices`` from ``kv_indptr[b]`` with the key count
                   CK derives, ``(pages - 1) * page_block_size + kv_last_page_lens[b]`` (fmha_batch_prefill_kernel.hpp);
                   linear pools ``(pages, page, hk, d)``; vectorized K ``(pages, hk, d / vec, page, vec)`` and V
                   ``(pages, hk, page / vec, d, vec)`` (the kernel's KV_VEC address mode); fp8 kv_blockscale:
                   K/V descales ``(pages, hk)`` applied per key (the kernel's QSCALE 3, launch.attention_launcher)
=================  =================================================================================================

The ``perturb("triton.<point>", value)`` calls are the fault catalogue's hook points (:mod:`ckfmha.faults`,
docs/faults.md): each returns its value unless a fault is active.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton

from ckfmha.backends.common.kv import KVAddressing, sequence_kv
from ckfmha.backends.common.rope import rotary_tables
from ckfmha.backends.triton import kernels_kvcache
from ckfmha.backends.triton.capability import next_pow2
from ckfmha.backends.triton.device import PreconditionError, seq_strides
from ckfmha.faults import perturb  # the fault hooks (docs/faults.md): each returns its value unless a fault is active
from ckfmha.kernel import KernelConfig, KVLookupTable, KVMemoryLayout, Rope
from ckfmha.masking import MaskKind
from ckfmha.problem import Layout, Problem

_APPEND_INPUTS = ("knew", "vnew", "rotary_cos", "rotary_sin", "cache_seqlens")


# ------------------------------------------------------------------------------------------ batch prefill
@dataclass(frozen=True)
class PrefillPools:
    """What the forward kernel needs to read a batch-prefill problem's pools: per-page / per-head / per-key strides of
    K and V, the page table, and the extra kernel arguments (KV_INDPTR, KV_LAST, stride_kvec, stride_vd)."""

    k_strides: tuple[int, int, int]
    v_strides: tuple[int, int, int]
    table: torch.Tensor
    args: tuple[Any, ...]
    kv_table: int  # 0 vLLM block table, 1 SGLang page table
    kv_vec: int  # 0 linear pools, else the vector length of the vectorized pools


def _pool(t: Mapping[str, torch.Tensor], name: str, ndim: int, layout: str) -> torch.Tensor:
    x = t.get(name)
    if x is None:
        raise PreconditionError(f"tensors: {name!r} is missing; a batch-prefill kernel reads its {layout} pool")
    if x.dim() != ndim or x.stride(-1) != 1:
        raise PreconditionError(
            f"{name}: shape {tuple(x.shape)} strides {x.stride()}: a {layout} pool has {ndim} axes, the last contiguous"
        )
    return x


def prefill_pools(c: KernelConfig, p: Problem, t: Mapping[str, torch.Tensor]) -> PrefillPools:
    """The pool strides and page table of batch-prefill kernel ``c`` (its kv_memory_layout and kv_lookup_table
    traits, as CK's kernel reads them) for ``p`` (module table)."""
    dummy = torch.empty(1, dtype=torch.int32, device=t["q"].device)
    if c.kv_memory_layout is KVMemoryLayout.VECTORIZED:
        k = _pool(t, "k_cache", 5, "vectorized (pages, hk, d/vec, page, vec)")
        v = _pool(t, "v_cache", 5, "vectorized (pages, hk, page/vec, d, vec)")
        vec = k.shape[4]
        if v.shape[4] != vec:
            raise PreconditionError(f"v_cache: shape {tuple(v.shape)}: vector length {v.shape[4]} != k_cache's {vec}")
        if k.stride(3) != vec or v.stride(3) != vec or k.stride(2) != k.shape[3] * vec:
            # the kernel addresses keys and head-dim runs by the vector length (kernels.py, KV_VEC)
            raise PreconditionError(
                f"k_cache/v_cache: strides {k.stride()} / {v.stride()}: a vectorized pool's (page, vec) and "
                f"(d, vec) axes are packed (strides {vec} and {k.shape[3] * vec})"
            )
        k_strides = (k.stride(0), k.stride(1), k.stride(3))
        v_strides = (v.stride(0), v.stride(1), v.stride(2))
        stride_kvec, stride_vd = k.stride(2), v.stride(3)
    else:
        k = _pool(t, "k_cache", 4, "linear (pages, page, hk, d)")
        v = _pool(t, "v_cache", 4, "linear (pages, page, hk, d)")
        k_strides = seq_strides(k, Layout.BSHD)
        v_strides = seq_strides(v, Layout.BSHD)
        vec, stride_kvec, stride_vd = 0, 0, 1
    if c.kv_lookup_table is KVLookupTable.SGLANG:
        names = ("kv_page_indices", "kv_indptr", "kv_last_page_lens")
        missing = [n for n in names if n not in t]
        if missing:
            raise PreconditionError(
                f"tensors: {missing} missing; a batch-prefill kernel with an SGLang table reads them"
            )
        table, indptr, last = (t[n] for n in names)
        return PrefillPools(k_strides, v_strides, table, (indptr, last, stride_kvec, stride_vd), 1, vec)
    if "block_table" not in t:
        raise PreconditionError("tensors: 'block_table' is missing; a batch-prefill kernel with a vLLM table reads it")
    return PrefillPools(k_strides, v_strides, t["block_table"], (dummy, dummy, stride_kvec, stride_vd), 0, vec)


# ------------------------------------------------------------------------------------------ append-KV
@dataclass(frozen=True)
class _Rows:
    """One launch of append_rows_kernel: ``src`` rows -> ``dst`` (DST_MODE), rotated or not."""

    src: torch.Tensor
    dst: torch.Tensor
    src_strides: tuple[int, int, int]
    dst_strides: tuple[int, int, int]
    nrows: int
    nhead: int
    hdim: int
    rotate: bool
    per_row: bool
    dst_mode: int


def _append_launches(c: KernelConfig, p: Problem, t: Mapping[str, torch.Tensor]) -> tuple[list[_Rows], dict[str, Any]]:
    """The row launches of the append (q rotation, knew, vnew) and the names they produce (name -> device tensor)."""
    lay = p.input_layout
    rows: list[_Rows] = []
    produced: dict[str, Any] = {}
    if p.rotary_dim:
        q = t["q"]
        q_rot = torch.empty_like(q)
        per_row = p.mask.kind is not MaskKind.NONE  # CK: q's table row stride is has_mask * rotary_dim / 2
        per_row = perturb("triton.rope.per_row", per_row)
        qs = seq_strides(q, lay)
        rows.append(_Rows(q, q_rot, qs, seq_strides(q_rot, lay), p.seqlen_q, p.nhead_q, p.hdim_q, True, per_row, 0))
        produced["q"] = q_rot
    if p.seqlen_knew:
        paged = bool(p.page_block_size)
        kname, vname = ("k_cache", "v_cache") if paged else ("k", "v")
        # paged caches: (pages, hk, page, d) for bhsd inputs, (pages, page, hk, d) for bshd (as the paged attention)
        dst_lay = (Layout.BHSD if lay is Layout.BHSD else Layout.BSHD) if paged else lay
        for new, cache, hdim, rot in (("knew", kname, p.hdim_q, bool(p.rotary_dim)), ("vnew", vname, p.hdim_v, False)):
            src, dst = t[new], t[cache]
            rows.append(
                _Rows(
                    src,
                    dst,
                    seq_strides(src, lay),
                    seq_strides(dst, dst_lay),
                    p.seqlen_knew,
                    p.nhead_k,
                    hdim,
                    rot,
                    True,
                    2 if paged else 1,
                )
            )
            produced[cache] = dst
    return rows, produced


def _launch_rows(c: KernelConfig, p: Problem, t: Mapping[str, torch.Tensor], r: _Rows, cache: torch.Tensor) -> None:
    dummy = torch.empty(1, dtype=torch.int32, device=r.src.device)
    cos = t.get("rotary_cos") if r.rotate else None
    sin = t.get("rotary_sin") if r.rotate else None
    bt = t.get("block_table") if r.dst_mode == 2 else None
    cbi = t.get("cache_batch_idx") if r.dst_mode == 1 else None
    block_s = c.algorithm.tile[0] if r.dst_mode == 0 else c.algorithm.tile[1]
    block_s = min(next_pow2(max(block_s, 1)), 64)  # rows per program: the config's bs / bsk, at most 64 rows
    grid = (triton.cdiv(r.nrows, block_s), p.batch * r.nhead)
    if r.dst_mode != 0:  # the key at which knew / vnew rows are written
        cache = perturb("triton.append.cache_seqlens", cache)
    fault = perturb("triton.kernel.fault", "", kernel="append_rows")
    switch = {"FAULT": fault} if fault else {}  # an in-kernel fault's switch (kernels_kvcache.py module doc)
    kernels_kvcache.append_rows_kernel[grid](
        r.src,
        r.dst,
        cache,
        cbi if cbi is not None else dummy,
        bt if bt is not None else dummy,
        cos if cos is not None else dummy,
        sin if sin is not None else dummy,
        *r.src_strides,
        *r.dst_strides,
        bt.stride(0) if bt is not None else 0,
        cos.stride(0) if cos is not None else 0,
        r.nrows,
        r.nhead,
        p.page_block_size or 1,
        HDIM=r.hdim,
        BLOCK_S=block_s,
        BLOCK_D=next_pow2(max(r.hdim, 16)),
        ROTARY_DIM=p.rotary_dim if r.rotate else 0,
        INTERLEAVED=c.signature.rope is Rope.INTERLEAVED,
        PER_ROW=r.per_row,
        DST_MODE=r.dst_mode,
        HAS_CBI=cbi is not None,
        **switch,
        num_warps=4,
        enable_fp_fusion=False,  # CK's BlockRotaryEmbedding: one float32 operation at a time, no fused multiply-add
    )


def check_append_inputs(c: KernelConfig, p: Problem, inputs: Mapping[str, Any]) -> None:
    """The append's host checks on the NumPy inputs, before anything is written: every cache row / page
    (:func:`~ckfmha.backends.common.kv.sequence_kv`) and, with RoPE, the rotary tables up to the last row read
    (as the cpu stage: :func:`~ckfmha.backends.common.rope.table_rows`); a KernelInputError names the tensor."""
    sequence_kv(p, inputs, KVAddressing.of(p, lookup=c.kv_lookup_table, kv_layout=c.kv_memory_layout))
    if p.rotary_dim:
        q_extra = p.seqlen_q - 1 if p.mask.kind is not MaskKind.NONE else 0
        last = max((cb + max(q_extra, p.seqlen_knew - 1) for cb in p.cache_seqlens), default=0)
        rotary_tables(inputs, p.rotary_dim, last)


def appendkv_launcher(
    c: KernelConfig, p: Problem, t: Mapping[str, torch.Tensor]
) -> tuple[Callable[[], None], dict[str, torch.Tensor]]:
    """Device only: a zero-argument launch of the append on the device tensors ``t`` (``t['cache_seqlens']``: the
    keys cached before it), and the device tensors the attention stage reads afterwards: the rotated ``q``, the
    caches (updated in place) and ``cache_seqlens`` = the post-append key counts. Relaunching is idempotent."""
    needed = ["cache_seqlens"] + (["rotary_cos", "rotary_sin"] if p.rotary_dim else [])
    needed += ["knew", "vnew"] if p.seqlen_knew else []
    missing = [n for n in needed if n not in t]
    if missing:
        raise PreconditionError(f"tensors: {missing} missing; the append-KV stage of this problem reads them")
    cache_before = t["cache_seqlens"]
    rows, produced = _append_launches(c, p, t)

    def launch() -> None:
        for r in rows:
            _launch_rows(c, p, t, r, cache_before)

    return launch, {**produced, "cache_seqlens": cache_before + p.seqlen_knew}
