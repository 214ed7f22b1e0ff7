"""Append-KV reference (``fwd_appendkv``): append knew/vnew to the cache, RoPE, then attention.

For batch ``b`` with ``c = cache_seqlens[b]`` keys already cached (``c = seqlen_k - seqlen_knew``):

1. RoPE (when ``rotary_dim > 0``) rotates the first ``rotary_dim`` features of ``knew`` at positions
   ``c + j`` and of ``q`` at positions ``c + i`` when the problem has a mask, else at position ``c`` for every
   row (FlashAttention's KV-cache convention that CK follows).  Interleaved RoPE rotates pairs ``(2t, 2t+1)``,
   half-rotated RoPE pairs ``(t, t + rotary_dim/2)``, both by ``rotary_cos/sin[pos, t]``:
   ``(x, y) -> (x cos - y sin, y cos + x sin)``.  Rotated values are rounded to the storage dtype (the kernel
   writes them back to memory).
2. ``knew``/``vnew`` are written at key positions ``c .. c + seqlen_knew - 1`` of the cache (contiguous cache,
   a ``cache_batch_idx`` row, or through the block table).  ``block_table`` / ``cache_batch_idx`` are checked
   before anything is written (:func:`ckfmha.reference.pagedkv.check_kv_lookup`: pages and rows in range).
3. Attention of the rotated ``q`` over the first ``seqlen_k`` keys of the updated cache, as ``fwd``.

Returns ``o``, ``lse``, the updated caches (``k``/``v`` or ``k_cache``/``v_cache``, storage dtype) and ``q`` (the
rotated queries, storage dtype).
"""

from __future__ import annotations

import numpy as np

from ckfmha.kernel import Rope
from ckfmha.problem import Layout, Problem
from ckfmha.reference.core import attend, from_hsd, to_hsd
from ckfmha.reference.forward import run_sequences, sequences
from ckfmha.reference.pagedkv import cache_row, check_kv_lookup, kv_sources, page_list


def apply_rope(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray, rope: Rope, rotary_dim: int
) -> np.ndarray:
    """Rotate ``x`` (..., s, d) at positions ``pos`` (s,); returns float32.

    In float32, as CK's kernel does (``BlockRotaryEmbedding`` in ck_tile's fmha append-KV pipeline converts each
    value, cos and sin to float32, rotates, and stores the result back in the storage type): the rotated q / k
    are stored values, so a wider rotation would round differently from the kernel's in the last bit."""
    rope = Rope(rope)
    y = x.astype(np.float32).copy()
    c = cos.astype(np.float32)[pos]  # (s, rd/2)
    s_ = sin.astype(np.float32)[pos]
    if rope is Rope.INTERLEAVED:
        a, b = y[..., 0:rotary_dim:2].copy(), y[..., 1:rotary_dim:2].copy()
        y[..., 0:rotary_dim:2] = a * c - b * s_
        y[..., 1:rotary_dim:2] = b * c + a * s_
    else:
        h = rotary_dim // 2
        a, b = y[..., :h].copy(), y[..., h:rotary_dim].copy()
        y[..., :h] = a * c - b * s_
        y[..., h:rotary_dim] = b * c + a * s_
    return y


def reference_appendkv(p: Problem, inputs: dict, accum=np.float32, *, attend_fn=attend) -> dict:
    check_kv_lookup(p, inputs)  # block_table / cache_batch_idx, before anything is written
    inp = dict(inputs)
    sdt = inputs["q"].dtype
    paged = "k_cache" in inputs
    kname, vname = ("k_cache", "v_cache") if paged else ("k", "v")
    kc, vc = inputs[kname].copy(), inputs[vname].copy()
    q_hsd = to_hsd(inputs["q"], p.input_layout).copy()
    cache = p.cache_seqlens
    has_mask = p.mask.kind.value != "none"
    if p.rotary_dim:
        cos, sin = inputs["rotary_cos"], inputs["rotary_sin"]
        for b in range(p.batch):
            pos = cache[b] + np.arange(p.seqlen_q) if has_mask else np.full(p.seqlen_q, cache[b])
            q_hsd[b] = apply_rope(q_hsd[b], cos, sin, pos, p.rope, p.rotary_dim).astype(sdt)
    if p.seqlen_knew:
        kn = to_hsd(inputs["knew"], p.input_layout)
        vn = to_hsd(inputs["vnew"], p.input_layout)
        for b in range(p.batch):
            knb = kn[b]
            pos = cache[b] + np.arange(p.seqlen_knew)
            if p.rotary_dim:
                knb = apply_rope(knb, inputs["rotary_cos"], inputs["rotary_sin"], pos, p.rope, p.rotary_dim).astype(sdt)
            write_cache(p, inputs, kc, knb, b, pos, paged)
            write_cache(p, inputs, vc, vn[b], b, pos, paged)
    inp[kname], inp[vname] = kc, vc
    inp["q"] = from_hsd(q_hsd, p.input_layout)
    k_src, v_src = kv_sources(p, inp)
    out = run_sequences(p, inp, accum, seqs=sequences(p, inp, accum, k_src, v_src), attend_fn=attend_fn)
    out[kname], out[vname], out["q"] = kc, vc, inp["q"]
    return out


def write_cache(
    p: Problem, inputs: dict, cache: np.ndarray, new_hsd: np.ndarray, b: int, pos: np.ndarray, paged: bool
) -> None:
    """Write (hk, n, d) values at key positions ``pos`` of batch ``b``'s cache, in place."""
    if paged:
        page = p.page_block_size
        pages = page_list(p, inputs, b, p.seqlen_k)
        blk, off = pages[pos // page], pos % page
        if p.input_layout is Layout.BHSD:  # (n, hk, page, d)
            cache[blk, :, off] = new_hsd.transpose(1, 0, 2)
        else:  # (n, page, hk, d)
            cache[blk, off] = new_hsd.transpose(1, 0, 2)
        return
    row = cache_row(p, inputs, b) if "cache_batch_idx" in inputs else b
    if p.input_layout is Layout.BHSD:
        cache[row, :, pos] = new_hsd.transpose(1, 0, 2)
    else:
        cache[row, pos] = new_hsd.transpose(1, 0, 2)
