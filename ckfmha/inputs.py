"""Deterministic inputs for a problem: ``make_inputs(problem, seed) -> dict[str, np.ndarray]``.

Every floating tensor is a scaled random normal (never all zeros) stored in the problem's NumPy dtype: fp16 ->
``np.float16``, bf16 -> ``ml_dtypes.bfloat16``, fp32 -> ``np.float32``, fp8 family -> ``ml_dtypes.float8_e4m3fn``
(OCP e4m3, as CK builds with ``CK_TILE_USE_OCP_FP8`` on gfx950) or, with ``fp8_format="fnuz"``,
``ml_dtypes.float8_e4m3fnuz`` (gfx942).  Index tensors are int32.  See docs/reference.md for every key and shape.

Layouts: ``bhsd`` = (batch, head, seq, dim), ``bshd`` = (batch, seq, head, dim).  Group mode packs the sequences
along the seq axis of a batch of 1 (``seqstart_q`` / ``seqstart_k`` give the offsets; ``seqstart_k`` uses
``s_kpad``).  V is always given row-major (``vlayout`` is a storage detail of the kernel launch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from ckfmha.kernel import Bias, DType, Family, KVLookupTable, KVMemoryLayout, Mode, QScale
from ckfmha.problem import BLOCK_SCALE_SIZE, Layout, Problem

ROPE_BASE = 10000.0


def storage_dtype(dtype: DType, fp8_format: str = "ocp") -> np.dtype:
    """NumPy dtype of Q/K/V for a problem dtype."""
    if dtype is DType.FP32:
        return np.dtype(np.float32)
    if dtype is DType.FP16:
        return np.dtype(np.float16)
    if dtype is DType.BF16:
        return np.dtype(ml_dtypes.bfloat16)
    if fp8_format == "ocp":
        return np.dtype(ml_dtypes.float8_e4m3fn)
    if fp8_format == "fnuz":
        return np.dtype(ml_dtypes.float8_e4m3fnuz)
    raise ValueError(f"fp8_format: {fp8_format!r} must be 'ocp' or 'fnuz'")


def output_dtype(dtype: DType, fp8_format: str = "ocp") -> np.dtype:
    """NumPy dtype of O (fp8bf16 -> bf16, fp8fp32 -> fp32)."""
    if dtype is DType.FP8BF16:
        return np.dtype(ml_dtypes.bfloat16)
    if dtype is DType.FP8FP32:
        return np.dtype(np.float32)
    return storage_dtype(dtype, fp8_format)


def fp8_format_of(tensors: Any) -> str:
    """The fp8 encoding of a run's NumPy inputs: ``fnuz`` when ``q`` (else ``k_cache``, else ``k``) is
    ``ml_dtypes.float8_e4m3fnuz`` (:func:`make_inputs`' ``fp8_format="fnuz"``), else ``ocp`` -- the one rule
    (plain fp8 O is stored in the inputs' encoding)."""
    for name in ("q", "k_cache", "k"):
        a = tensors.get(name)
        if isinstance(a, np.ndarray):
            return "fnuz" if a.dtype.name == "float8_e4m3fnuz" else "ocp"
    return "ocp"


def seq_shape(layout: Layout, batch: int, heads: int, seq: int, dim: int) -> tuple[int, int, int, int]:
    return (batch, heads, seq, dim) if layout is Layout.BHSD else (batch, seq, heads, dim)


def q_shape(p: Problem) -> tuple[int, ...]:
    if p.mode is Mode.GROUP:
        return seq_shape(p.input_layout, 1, p.nhead_q, p.total_q, p.hdim_q)
    return seq_shape(p.input_layout, p.batch, p.nhead_q, p.seqlen_q, p.hdim_q)


def o_shape(p: Problem) -> tuple[int, ...]:
    if p.mode is Mode.GROUP:
        return seq_shape(p.output_layout, 1, p.nhead_q, p.total_q, p.hdim_v)
    return seq_shape(p.output_layout, p.batch, p.nhead_q, p.seqlen_q, p.hdim_v)


def kv_shapes(p: Problem) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes of contiguous K and V."""
    if p.mode is Mode.GROUP:
        tot = p.seqstart_k[-1]
        return (
            seq_shape(p.input_layout, 1, p.nhead_k, tot, p.hdim_q),
            seq_shape(p.input_layout, 1, p.nhead_k, tot, p.hdim_v),
        )
    return (
        seq_shape(p.input_layout, p.batch, p.nhead_k, p.seqlen_k, p.hdim_q),
        seq_shape(p.input_layout, p.batch, p.nhead_k, p.seqlen_k, p.hdim_v),
    )


def lse_shape(p: Problem) -> tuple[int, ...]:
    return (1, p.nhead_q, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.nhead_q, p.seqlen_q)


def _bwd_rows(p: Problem) -> tuple[int, int, int]:
    """(batch axis, query rows, key rows) of the backward's per-head buffers: (batch, seqlen_q, seqlen_k), group
    mode (1, total_q, sum(s_kpad))."""
    if p.mode is Mode.GROUP:
        return 1, p.total_q, p.seqstart_k[-1]
    return p.batch, p.seqlen_q, p.seqlen_k


def dk_raw_shape(p: Problem) -> tuple[int, ...]:
    """CK's raw dK: one slice per *q*-head, in the input layout -- (b, hq, sk, hdim_q) / bshd; group mode
    (1, hq, sum(s_kpad), hdim_q).  fmha_bwd_runner.hpp allocates ``dk_host`` with ``nhead`` (not ``nhead_k``)
    and the dq_dk_dv kernel (fmha_bwd_kernel.hpp) writes head ``i_nhead`` at ``i_nhead * nhead_stride_dk``."""
    nb, _, nk = _bwd_rows(p)
    return seq_shape(p.input_layout, nb, p.nhead_q, nk, p.hdim_q)


def dv_raw_shape(p: Problem) -> tuple[int, ...]:
    """CK's raw dV: as :func:`dk_raw_shape` with ``hdim_v``."""
    nb, _, nk = _bwd_rows(p)
    return seq_shape(p.input_layout, nb, p.nhead_q, nk, p.hdim_v)


def dbias_raw_shape(p: Problem) -> tuple[int, ...]:
    """CK's raw dBias: every q-head of every batch whatever the bias's rank, ``max_seqlen_k`` columns, in the
    input layout -- (b, hq, sq, max_sk) (``-iperm=1``) or (b, sq, hq, max_sk) (``-iperm=0``); group mode
    (1, hq, total_q, max_sk) / (1, total_q, hq, max_sk).  fmha_bwd_runner.hpp: ``dbias_host`` =
    ``get_lengths(i_perm, shape_batch, nhead, shape_seqlen_q, max_seqlen_k)``, ``stride_dbias = i_perm ?
    max_seqlen_k : nhead * max_seqlen_k``, ``batch_stride_dbias = nhead * shape_seqlen_q * max_seqlen_k``."""
    nb, nq, _ = _bwd_rows(p)
    return seq_shape(p.input_layout, nb, p.nhead_q, nq, p.seqlen_k)


def bias_shape(p: Problem) -> tuple[int, ...]:
    """Elementwise bias: rank 0 (1,1,sq,sk), 1 (1,h,sq,sk), 2 (b,h,sq,sk); group mode rows are packed tokens
    (1, 1|h, total_q, max_seqlen_k)."""
    hb = 1 if p.bias_rank == 0 else p.nhead_q
    bb = p.batch if p.bias_rank == 2 else 1
    if p.mode is Mode.GROUP:
        return (1, hb, p.total_q, p.seqlen_k)
    return (bb, hb, p.seqlen_q, p.seqlen_k)


def alibi_slopes(nhead: int) -> np.ndarray:
    """CK's ``get_alibi_slopes`` (ALiBi paper's geometric slopes, interleaved for non-powers of two)."""

    def pow2(n: int) -> list[float]:
        start = np.float32(2.0) ** (-(np.float32(2.0) ** -np.float32(math.floor(math.log2(n)) - 3)))
        return [float(np.float32(start * start ** np.float32(i))) for i in range(n)]

    if nhead & (nhead - 1) == 0:
        return np.array(pow2(nhead), dtype=np.float32)
    closest = 1 << int(math.floor(math.log2(nhead)))
    v0 = pow2(closest)
    v1 = pow2(2 * closest)[0::2][: nhead - closest]
    return np.array(v0 + v1, dtype=np.float32)


def rotary_tables(max_pos: int, rotary_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 cos/sin tables (max_pos, rotary_dim/2): angle(pos, i) = pos * base**(-2i/rotary_dim)."""
    inv = ROPE_BASE ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    ang = np.arange(max_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _normal(rng: np.random.Generator, shape, dtype: np.dtype, scale: float = 1.0) -> np.ndarray:
    x = rng.standard_normal(size=shape, dtype=np.float32)
    if scale != 1.0:  # x * 1.0 is x: no pass over a large tensor for it
        x *= np.float32(scale)
    if x.size and not np.any(x):  # pragma: no cover - probability zero
        x.flat[0] = 1.0
    return x.astype(dtype)


def make_inputs(problem: Problem, seed: int = 0, fp8_format: str = "ocp") -> dict[str, np.ndarray]:
    """All tensors the problem's family needs, deterministic from ``seed``.

    The generator is drawn from in a fixed order (q, K/V or the page caches, append-KV's new rows, bias or ALiBi
    slopes, sink, descales, dO): each helper below draws its part in turn, so the same seed gives the same
    tensors."""
    p = problem
    rng = np.random.default_rng(seed)
    sdt = storage_dtype(p.dtype, fp8_format)
    scale_in = 2.0 if p.dtype.is_fp8_family else 1.0
    out: dict[str, np.ndarray] = {}
    out["q"] = _normal(rng, q_shape(p), sdt, scale_in)
    k_shape, v_shape = kv_shapes(p)
    if p.mode is Mode.GROUP:
        out["seqstart_q"] = np.array(p.seqstart_q, dtype=np.int32)
        out["seqstart_k"] = np.array(p.seqstart_k, dtype=np.int32)
        out["seqlen_k"] = np.array(p.seqlens_k, dtype=np.int32)
    if p.family is Family.BATCH_PREFILL:
        _batch_prefill_cache(out, rng, p, sdt, scale_in)
    elif p.page_block_size:
        _paged_cache(out, rng, p, sdt, scale_in)
    else:
        out["k"] = _normal(rng, k_shape, sdt, scale_in)
        out["v"] = _normal(rng, v_shape, sdt, scale_in)
        if p.cache_batch_idx:
            out["cache_batch_idx"] = rng.permutation(p.batch).astype(np.int32)
        if p.family is Family.FWD_APPENDKV:
            out["cache_seqlens"] = np.array(p.cache_seqlens, dtype=np.int32)
    if p.family is Family.FWD_APPENDKV:
        _appendkv_inputs(out, rng, p, sdt)
    _bias_inputs(out, rng, p, sdt)
    if p.sink:
        out["sink"] = rng.standard_normal(p.nhead_q, dtype=np.float32)
    _descale_inputs(out, rng, p)
    if p.is_backward:
        out["do"] = _normal(rng, o_shape(p), sdt)
    return out


def _batch_prefill_cache(out: dict, rng: np.random.Generator, p: Problem, sdt: np.dtype, scale_in: float) -> None:
    """batch_prefill's K/V page caches (linear or vectorized layout) and page lookup tables."""
    page, vec = p.page_block_size, p.vector_size
    k_shp: Callable[[int, int], tuple[int, ...]]  # (pages, head dim) -> cache shape
    v_shp: Callable[[int, int], tuple[int, ...]]
    if p.kv_layout is KVMemoryLayout.LINEAR:
        shp = lambda n, d: (n, page, p.nhead_k, d)  # noqa: E731
        k_shp, v_shp = shp, shp
    else:
        k_shp = lambda n, d: (n, p.nhead_k, d // vec, page, vec)  # noqa: E731
        v_shp = lambda n, d: (n, p.nhead_k, page // vec, d, vec)  # noqa: E731
    nblk = [(-(-sk // page)) for sk in p.seqlens_k_list]  # batch_prefill is group mode
    num_pages = sum(nblk) + 1
    perm = rng.permutation(num_pages).astype(np.int32)
    out["k_cache"] = _normal(rng, k_shp(num_pages, p.hdim_q), sdt, scale_in)
    out["v_cache"] = _normal(rng, v_shp(num_pages, p.hdim_v), sdt, scale_in)
    _lookup(out, p, nblk, perm)


def paged_cache_shape(p: Problem, pages: int, hdim: int) -> tuple[int, ...]:
    """A paged-KV family's page pool of ``pages`` pages in the input layout (CK's vLLM-style pool)."""
    if p.input_layout is Layout.BHSD:
        return (pages, p.nhead_k, p.page_block_size, hdim)
    return (pages, p.page_block_size, p.nhead_k, hdim)


def _paged_cache(out: dict, rng: np.random.Generator, p: Problem, sdt: np.dtype, scale_in: float) -> None:
    """Paged-KV families' K/V page caches (in the input layout), vllm block table and cache sequence lengths."""
    page = p.page_block_size

    def shp(n: int, d: int) -> tuple[int, ...]:
        return paged_cache_shape(p, n, d)

    nblk = [(-(-sk // page)) for sk in p.seqlens_k_list]
    num_pages = sum(nblk) + 1
    perm = rng.permutation(num_pages).astype(np.int32)
    out["k_cache"] = _normal(rng, shp(num_pages, p.hdim_q), sdt, scale_in)
    out["v_cache"] = _normal(rng, shp(num_pages, p.hdim_v), sdt, scale_in)
    _lookup(out, p, nblk, perm, force_vllm=True)
    out["cache_seqlens"] = np.array(
        p.seqlens_k_list if p.family is not Family.FWD_APPENDKV else p.cache_seqlens, dtype=np.int32
    )


def _appendkv_inputs(out: dict, rng: np.random.Generator, p: Problem, sdt: np.dtype) -> None:
    """append-KV's new K/V rows and RoPE cos/sin tables (each only when the problem has them)."""
    if p.seqlen_knew:
        out["knew"] = _normal(rng, seq_shape(p.input_layout, p.batch, p.nhead_k, p.seqlen_knew, p.hdim_q), sdt)
        out["vnew"] = _normal(rng, seq_shape(p.input_layout, p.batch, p.nhead_k, p.seqlen_knew, p.hdim_v), sdt)
    if p.rotary_dim:
        cos, sin = rotary_tables(p.seqlen_k + p.seqlen_q, p.rotary_dim)
        out["rotary_cos"] = cos.astype(sdt)
        out["rotary_sin"] = sin.astype(sdt)


def _bias_inputs(out: dict, rng: np.random.Generator, p: Problem, sdt: np.dtype) -> None:
    """The elementwise bias, or the ALiBi slopes (CK's, per batch scaled by ``1 + b/4`` with bias rank 1)."""
    if p.bias is Bias.ELEMENTWISE:
        out["bias"] = _normal(rng, bias_shape(p), sdt, 0.5)
    elif p.bias is Bias.ALIBI:
        base = alibi_slopes(p.nhead_q)
        if p.bias_rank == 0:
            out["alibi_slopes"] = base[None, :].copy()
        else:  # per-batch slopes: CK's slopes scaled by (1 + b/4) so batches differ
            out["alibi_slopes"] = base[None, :] * (1.0 + 0.25 * np.arange(p.batch, dtype=np.float32))[:, None]


def _descale_inputs(out: dict, rng: np.random.Generator, p: Problem) -> None:
    """fp8 descales of q/k/v: per tensor, per 128-row block (blockscale) or per page and head (kv_blockscale,
    after the page caches)."""
    if p.qscale is QScale.PERTENSOR:
        for n in ("q", "k", "v"):
            out[f"{n}_descale"] = rng.uniform(0.05, 0.25, size=(1,)).astype(np.float32)
    elif p.qscale is QScale.BLOCKSCALE:
        nq = max(1, -(-p.seqlen_q // BLOCK_SCALE_SIZE))
        nk = max(1, -(-max(p.kpad_list) // BLOCK_SCALE_SIZE)) if p.kpad_list else 1
        out["q_descale"] = rng.uniform(0.05, 0.25, size=(p.batch, p.nhead_q, nq)).astype(np.float32)
        out["k_descale"] = rng.uniform(0.05, 0.25, size=(p.batch, p.nhead_k, nk)).astype(np.float32)
        out["v_descale"] = rng.uniform(0.05, 0.25, size=(p.batch, p.nhead_k, nk)).astype(np.float32)
    elif p.qscale is QScale.KV_BLOCKSCALE:
        npages = out["k_cache"].shape[0]
        out["q_descale"] = rng.uniform(0.05, 0.25, size=(1,)).astype(np.float32)
        out["k_descale"] = rng.uniform(0.05, 0.25, size=(npages, p.nhead_k)).astype(np.float32)
        out["v_descale"] = rng.uniform(0.05, 0.25, size=(npages, p.nhead_k)).astype(np.float32)


def _lookup(out: dict, p: Problem, nblk: list[int], perm: np.ndarray, force_vllm: bool = False) -> None:
    """Page lookup tables: vllm ``block_table`` (batch, max_blocks; unused entries 0) or sglang ``kv_indptr`` /
    ``kv_page_indices`` / ``kv_last_page_lens`` (1..page for a sequence with pages; 0 for an empty sequence,
    whose last-page length CK never reads).  The references check user-supplied tables against these rules
    (:func:`ckfmha.reference.pagedkv.check_kv_lookup`)."""
    page = p.page_block_size
    starts = np.concatenate([[0], np.cumsum(nblk)]).astype(np.int64)
    if force_vllm or p.kv_lookup is KVLookupTable.VLLM:
        width = max(1, max(nblk) if nblk else 1)
        bt = np.zeros((p.batch, width), dtype=np.int32)
        for b, n in enumerate(nblk):
            bt[b, :n] = perm[starts[b] : starts[b] + n]
        out["block_table"] = bt
    else:
        out["kv_indptr"] = starts.astype(np.int32)
        out["kv_page_indices"] = perm[: starts[-1]].astype(np.int32)
        sks = p.seqlens_k_list
        out["kv_last_page_lens"] = np.array(
            [0 if sk == 0 else sk - (n - 1) * page for sk, n in zip(sks, nblk)], dtype=np.int32
        )
