"""Counter-based random numbers for dropout: Philox4x32 in vectorized NumPy, and CK's dropout mapping.

Philox4x32-R (Salmon et al., SC'11; Random123) maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key
``(k0, k1)`` to four uint32 words.  One round is::

    hi0, lo0 = mulhilo(0xD2511F53, c0);  hi1, lo1 = mulhilo(0xCD9E8D57, c2)
    c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
    k = (k0 + 0x9E3779B9, k1 + 0xBB67AE85)          # between rounds, not after the last one

:func:`philox4x32` runs ``rounds`` rounds (10 = the standard Philox4x32-10; CK's and FlashAttention's dropout
generator uses 7 rounds).

Dropout mapping (the contract a GPU kernel must implement to match :func:`dropout_randval` bit for bit)
--------------------------------------------------------------------------------------------------------
Parameters: ``seed`` (uint64), ``offset`` (uint64), batch index ``b``, query-head index ``h``, ``nhead``
(= nhead_q), query row ``i`` and key column ``j`` (both relative to the start of the sequence).

1. Tile coordinates (CK's 32x32 dropout tile): ``ti = i // 32``, ``tj = j // 32``; inside the tile
   ``r = i % 32``, ``c = j % 32``.
2. Lane and byte (:func:`tile_lane_byte`; CK's order, the accumulator layout of the swizzled 32x32 warp GEMM
   ``WarpGemmMfmaF16F16F32M32N32K16SwizzleA``, SFactor 2): ``lane = c + 32 * ((r // 8) % 2)``,
   ``byte = 8 * (r // 16) + r % 8`` (lane in 0..63, byte in 0..15).  Inversely byte ``k`` of lane ``l`` is
   row ``16 * (k // 8) + 8 * (l // 32) + k % 8``, column ``l % 32`` -- the formula of CK's host reference
   ``include/ck_tile/host/reference/reference_batched_dropout_randval.hpp``.
3. Philox input, as in CK's ``ck_tile::philox``:
   key = ``(seed & 0xffffffff, seed >> 32)``;
   counter low 64 bits = ``offset + (b * nhead + h) * 64 + lane`` (words c0 = low, c1 = high);
   counter high 64 bits = ``(tj << 32) | ti`` (words c2 = ti, c3 = tj).
4. ``randval = byte ``byte`` of the little-endian concatenation of the four output words`` (uint8),
   using :data:`DROPOUT_ROUNDS` = 7 rounds.
5. Keep: ``randval <= p_undrop_u8(p_drop)`` (:func:`p_undrop_u8`: CK's float32 arithmetic,
   ``uint8_t(floor(float(1.0 - p_drop) * 255))``); kept values are scaled by ``1 / (1 - p_drop)``; dropped
   values are 0.

Every step follows CK: ``include/ck_tile/ops/fmha/block/block_dropout.hpp`` (tiles, lane offsets, the
register order of ``MakeRandValTileDistribution``), ``include/ck_tile/core/utility/philox_rand.hpp`` and the
host reference above.  The element order inside a tile is one fixed order for every kernel: CK's
``block_dropout.hpp`` generates the values with the swizzled 32x32 warp-GEMM distribution whatever warp GEMM the
kernel uses (16x16 MFMA and WMMA kernels generate the same bytes; they only reshuffle them through LDS), so that
the forward and the backward drop the same elements.  ckfmha's releases before this one used
``lane = c + 32 * ((r // 4) % 2)``, ``byte = 4 * (r // 8) + r % 4`` (the unswizzled MFMA 32x32x8 C layout); no
CK version generated that order with this counter -- the pre-ck_tile ``ck::tile_program`` BlockDropout
("distribution like bwd": rows split ``2 x 2 x 8``, register = ``8 * (r // 16) + r % 8``) and every ck_tile
``block_dropout.hpp`` since produce the order of step 2 -- so it is not offered as an option.  A kernel that
stores its random values (``store_randval``) can also be checked by passing its ``randval`` to the reference
(see :mod:`ckfmha.reference.forward`).
"""

from __future__ import annotations

import numpy as np

PHILOX_M0 = np.uint32(0xD2511F53)
PHILOX_M1 = np.uint32(0xCD9E8D57)
PHILOX_W0 = np.uint32(0x9E3779B9)
PHILOX_W1 = np.uint32(0xBB67AE85)
DROPOUT_ROUNDS = 7
DROPOUT_TILE = 32

_MASK32 = np.uint64(0xFFFFFFFF)


def _mulhilo(m: np.uint32, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    prod = x.astype(np.uint64) * np.uint64(m)
    return (prod >> np.uint64(32)).astype(np.uint32), (prod & _MASK32).astype(np.uint32)


def philox4x32(counter, key, rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` on arrays: ``counter`` shape (..., 4) uint32, ``key`` shape (..., 2) uint32
    (broadcast against each other).  Returns (..., 4) uint32."""
    ctr = np.asarray(counter, dtype=np.uint32)
    k = np.asarray(key, dtype=np.uint32)
    if ctr.shape[-1] != 4 or k.shape[-1] != 2:
        raise ValueError(f"philox4x32: counter must end in 4 words and key in 2, got {ctr.shape} and {k.shape}")
    if rounds < 1:
        raise ValueError(f"philox4x32: rounds must be >= 1, got {rounds}")
    c0, c1, c2, c3 = (ctr[..., i] for i in range(4))
    k0, k1 = k[..., 0], k[..., 1]
    with np.errstate(over="ignore"):
        for r in range(rounds):
            if r:
                k0 = k0 + PHILOX_W0
                k1 = k1 + PHILOX_W1
            hi0, lo0 = _mulhilo(PHILOX_M0, c0)
            hi1, lo1 = _mulhilo(PHILOX_M1, c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1).astype(np.uint32)


def p_undrop_u8(p_drop: float) -> int:
    """The uint8 keep threshold (keep iff ``randval <= p_undrop_u8(p_drop)``), computed as CK computes it.

    CK (``init_dropout`` of fmha_fwd_kernel.hpp / fmha_bwd_kernel.hpp, and the hosts of
    example/ck_tile/01_fmha)::

        float p_undrop = 1.0 - p_drop;                // p_drop is a float; the difference is rounded to float
        uint8_t p_undrop_in_uint8_t = uint8_t(std::floor(p_undrop * std::numeric_limits<uint8_t>::max()));

    ``p_undrop * 255`` is a float32 product, so the threshold can be one lower than the exact
    ``floor((1 - p) * 255)`` (p = 0.6: float32 gives 101.99999 -> 101, float64 102).  This is the one place the
    threshold is computed (the reference, the cpu backend and the Triton launch all call it)."""
    p32 = np.float32(p_drop)
    p_undrop = np.float32(1.0 - np.float64(p32))
    return int(np.floor(p_undrop * np.float32(255)))


def tile_lane_byte(r, c):
    """CK's position of element (row ``r``, column ``c``) of a 32x32 dropout tile (0 <= r, c < 32): the lane
    (0..63) whose Philox call produces it and the byte (0..15) of that call's 16 output bytes.

    ``lane = c + 32 * ((r // 8) % 2)``, ``byte = 8 * (r // 16) + r % 8`` -- the inverse of CK's
    ``i = 16 * (byte / 8) + 8 * (lane / 32) + byte % 8``, ``j = lane % 32``
    (reference_batched_dropout_randval.hpp; the SwizzleA 32x32 C distribution of block_dropout.hpp).
    Works on ints and NumPy arrays."""
    return c + 32 * ((r // 8) % 2), 8 * (r // 16) + r % 8


def _tile_order() -> np.ndarray:
    """flat (lane * 16 + byte) index of each element (r, c) of a 32x32 dropout tile."""
    r = np.arange(DROPOUT_TILE)[:, None]
    c = np.arange(DROPOUT_TILE)[None, :]
    lane, byte = tile_lane_byte(r, c)
    return (lane * 16 + byte).astype(np.intp)


_TILE_ORDER = _tile_order()


def dropout_randval(seed: int, offset: int, batch: int, head, nhead: int, rows, cols) -> np.ndarray:
    """uint8 random values for query rows ``rows`` x key columns ``cols`` (1-D int arrays) of one batch and
    one or more heads (``head`` int or 1-D array).  Returns shape (len(head), len(rows), len(cols)) when
    ``head`` is an array, else (len(rows), len(cols)).  One Philox call yields the 16 bytes of one lane of a
    32x32 tile, so the work is one call per 16 elements."""
    heads = np.atleast_1d(np.asarray(head, dtype=np.int64))
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    nh = heads.shape[0]
    if rows.size == 0 or cols.size == 0:
        out = np.zeros((nh, rows.size, cols.size), dtype=np.uint8)
        return out if np.ndim(head) else out[0]
    seed = int(seed) & ((1 << 64) - 1)
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)
    t0, t1 = int(rows.min()) // DROPOUT_TILE, int(rows.max()) // DROPOUT_TILE + 1
    u0, u1 = int(cols.min()) // DROPOUT_TILE, int(cols.max()) // DROPOUT_TILE + 1
    ti = np.arange(t0, t1, dtype=np.uint64)
    tj = np.arange(u0, u1, dtype=np.uint64)
    lanes = np.arange(64, dtype=np.uint64)
    base = np.array([(int(offset) + (batch * nhead + int(h)) * 64) & ((1 << 64) - 1) for h in heads], dtype=np.uint64)
    with np.errstate(over="ignore"):
        sub = base[:, None] + lanes[None, :]  # (H, 64), wraps like the uint64 on the GPU
    shape = (nh, ti.size, tj.size, 64)
    ctr = np.empty(shape + (4,), dtype=np.uint32)
    ctr[..., 0] = (sub & _MASK32).astype(np.uint32)[:, None, None, :]
    ctr[..., 1] = (sub >> np.uint64(32)).astype(np.uint32)[:, None, None, :]
    ctr[..., 2] = ti.astype(np.uint32)[None, :, None, None]
    ctr[..., 3] = tj.astype(np.uint32)[None, None, :, None]
    words = philox4x32(ctr, key, rounds=DROPOUT_ROUNDS)  # (H, TI, TJ, 64, 4)
    tile_bytes = np.ascontiguousarray(words).view(np.uint8).reshape(nh, ti.size, tj.size, 64 * 16)
    if tile_bytes.dtype.byteorder == ">":  # pragma: no cover - big-endian hosts
        raise RuntimeError("dropout_randval assumes a little-endian host")
    tiles = tile_bytes[..., _TILE_ORDER]  # (H, TI, TJ, 32, 32)
    grid = tiles.transpose(0, 1, 3, 2, 4).reshape(nh, ti.size * DROPOUT_TILE, tj.size * DROPOUT_TILE)
    out = grid[:, (rows - t0 * DROPOUT_TILE)[:, None], (cols - u0 * DROPOUT_TILE)[None, :]]
    return out if np.ndim(head) else out[0]


def dropout_keep(randval: np.ndarray, p_drop: float) -> np.ndarray:
    """Boolean keep mask from random values."""
    return randval <= np.uint8(p_undrop_u8(p_drop))
