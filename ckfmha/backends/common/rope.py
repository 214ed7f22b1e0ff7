"""RoPE of the append-KV stage, as CK's kernel computes it (not shared with :mod:`ckfmha.reference`): the cpu
backend rotates with it; both backends check the rotary tables with :func:`rotary_tables`.

CK's ``BlockRotaryEmbedding<RotaryEnum, ComputeDataType = float>::apply``
(include/ck_tile/ops/fmha/block/block_rotary_embedding.hpp), applied by the append-KV pipeline to a q tile and a
knew tile: each value, cos and sin is converted to float32, the rotated value computed in float32 and converted
back to the tensor's type (fp16 / bf16 round to nearest even):

* interleaved: pair ``(2t, 2t + 1)`` with column ``t`` of the tables: ``left * cos - right * sin`` and
  ``right * cos + left * sin``;
* half-rotated: element ``t < rotary_dim / 2`` with its partner ``t + rotary_dim / 2`` and column ``t``:
  ``curr * cos + other * (-sin)``; element ``t >= rotary_dim / 2`` with partner ``t - rotary_dim / 2`` and
  column ``t - rotary_dim / 2``: ``curr * cos + other * sin``.

Features past ``rotary_dim`` are stored back unchanged.  The products and sums are evaluated one float32
operation at a time (no fused multiply-add; a compiler that contracts them can differ in the last float32 bit
before the conversion).  The references rotate in float64 instead, so fp16 values can differ from theirs by one
unit in the last place in rare cases (a float32 result landing on an fp16 rounding tie).

Table rows (fmha_fwd_appendkv_kernel.hpp: the rotary_cos / rotary_sin views start at row ``seqlen_k``, the
sequence's cache length): knew row ``j`` uses row ``cache + j``; q row ``i`` uses row ``cache + i`` when the
problem has a mask and row ``cache`` for every query otherwise (the q view's row stride is
``has_mask * rotary_dim / 2``) -- :func:`table_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ckfmha.backends.common.errors import KernelInputError
from ckfmha.kernel import Rope

F32 = np.float32


def table_rows(cache_len: int, count: int, per_row: bool) -> np.ndarray:
    """The rotary-table rows of ``count`` rows appended after ``cache_len`` cached keys: ``cache_len + i``, or
    ``cache_len`` for every row when not ``per_row`` (q of an unmasked problem)."""
    if per_row:
        return cache_len + np.arange(count, dtype=np.int64)
    return np.full(count, cache_len, dtype=np.int64)


def rotary_tables(tensors: Mapping[str, Any], rotary_dim: int, last_row: int) -> tuple[np.ndarray, np.ndarray]:
    """``rotary_cos`` and ``rotary_sin``, checked: (rows, rotary_dim / 2) with row ``last_row`` present."""
    out = []
    for name in ("rotary_cos", "rotary_sin"):
        if name not in tensors:
            raise KernelInputError(f"{name}: missing from the tensors (RoPE with rotary_dim={rotary_dim})")
        a = np.asarray(tensors[name])
        if a.ndim != 2 or a.shape[1] != rotary_dim // 2:
            raise KernelInputError(f"{name}: shape {a.shape} must be (rows, rotary_dim / 2 = {rotary_dim // 2})")
        if last_row >= a.shape[0]:
            raise KernelInputError(
                f"{name}: {a.shape[0]} rows, the append reads row {last_row} (cache length + "
                f"appended position); the table needs at least {last_row + 1} rows"
            )
        out.append(a)
    return out[0], out[1]


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rope: Rope, rotary_dim: int) -> np.ndarray:
    """``x`` (..., s, d) rotated with the table rows ``cos`` / ``sin`` (s, rotary_dim / 2) of its s rows, as CK's
    BlockRotaryEmbedding (module doc); a new array of ``x``'s dtype."""
    rope = Rope(rope)
    if rope is Rope.NONE:
        raise KernelInputError(f"rope: none cannot rotate rotary_dim={rotary_dim} features (the kernel has no RoPE)")
    y = x.astype(F32)
    c, s = np.asarray(cos).astype(F32), np.asarray(sin).astype(F32)
    out = np.array(x, copy=True)
    if rope is Rope.INTERLEAVED:
        left, right = y[..., 0:rotary_dim:2], y[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = (left * c - right * s).astype(x.dtype)
        out[..., 1:rotary_dim:2] = (right * c + left * s).astype(x.dtype)
    else:  # half-rotated
        h = rotary_dim // 2
        first, second = y[..., :h], y[..., h:rotary_dim]
        out[..., :h] = (first * c + second * -s).astype(x.dtype)
        out[..., h:rotary_dim] = (second * c + first * s).astype(x.dtype)
    return out
