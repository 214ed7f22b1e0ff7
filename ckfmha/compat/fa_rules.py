"""FlashAttention's CK-build host rules, as pure functions (no torch): what ``csrc/flash_attn_ck/*.cpp`` decides
before it calls CK, so :mod:`ckfmha.compat.flash_attn` builds the same ckfmha :class:`~ckfmha.problem.Problem`.

Sources: Dao-AILab/flash-attention at 0251105a2fb1 (2026-08-15); ``FA:<file>:<line>`` below is that tree.

| rule | function | FA source |
|---|---|---|
| windows to CK's mask: a window size ``>= seqlen_k`` becomes -1 (unbounded); ``seqlen_q == 1`` without ALiBi is not causal (forward only); causal is ``b:<left>,0``; ``(-1, -1)`` is no mask (``0``); any other window ``b:<left>,<right>`` (bottom-right origin) | :func:`fa_mask` | FA:mha_fwd.cpp:212-232, mha_varlen_fwd.cpp:390, 403-421 (``max_seqlen_k``), mha_bwd.cpp:227, 269-284, mha_varlen_bwd.cpp:239, 282-296, mha_fwd_kvcache.cpp:337-354 |
| the KV-cache call clamps the windows *after* it decoded the mask, so its mask keeps windows ``>= seqlen_k`` | :func:`fa_mask` (``clamp_first=False``) | FA:mha_fwd_kvcache.cpp:340-354 then 366-367 |
| decode GQA: ``seqlen_q == 1``, ``nheads > nheads_k``, no window, head size % 8 == 0, no ALiBi (and no dropout in ``fwd``) runs as ``seqlen_q = nheads / nheads_k`` query rows of ``nheads_k`` heads | :func:`ngroups_swapped` | FA:mha_fwd.cpp:236-242, mha_fwd_kvcache.cpp:358-364 |
| ``num_splits < 1`` without dropout: FA's heuristic over ``2 * multiProcessorCount`` units with ``kM0 = 128``, ``kN1 = hdim_v`` (so ``num_n_blocks`` is always 1 and the heuristic always answers 1: flash-attention#2901) | :func:`override_num_splits` | FA:flash_common.cpp:8-31, flash_common.hpp:39-75 |
| the varlen forward ignores its ``num_splits`` argument and asks the heuristic (``num_splits = 0``) | :func:`override_num_splits` | FA:mha_varlen_fwd.cpp:477-478 |
| dropout: ``counter_offset = batch * nheads * warp_size``; the generator hands out ``(seed, offset)`` and advances its offset by ``counter_offset`` rounded up to a multiple of 4 (PyTorch's ``philox_cuda_state``) | :func:`counter_offset`, :func:`philox_increment` | FA:mha_fwd.cpp:283-295, mha_bwd.cpp:380-393 |
| warp size: ``ck_tile::get_warp_size()``, 64 on CDNA (gfx9), 32 on RDNA (gfx10/11/12) | :func:`warp_size` | CK include/ck_tile/core/arch/arch.hpp ``get_warp_size`` |
| paged KV: page size a multiple of 128, no dropout with paged KV, no ``cache_batch_idx`` with paged KV | :func:`check_paged` | FA:mha_varlen_fwd.cpp:388, 454-455, mha_fwd_kvcache.cpp:311, 328 |
| head size: a multiple of 8 (fwd/varlen/bwd), at most 256; the KV-cache call zero-pads a head size that is not | :func:`check_head_size` | FA:mha_fwd.cpp:208-209, mha_bwd.cpp:265-266, mha_fwd_kvcache.cpp:333, 379-388 |

Errors are :class:`FlashAttnArgError` (a ``RuntimeError``, as ``TORCH_CHECK`` raises) naming the argument, the
value and the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ckfmha.masking import MaskSpec

MAX_HEAD_SIZE = 256
PAGE_MULTIPLE = 128
MAX_SPLITS = 128
KM0 = 128  # FA:flash_common.cpp:21 "tile size should match the TileFmhaShape, hardcode for now"


class FlashAttnArgError(RuntimeError):
    """An argument FA's CK build refuses (its ``TORCH_CHECK``); the message names the argument, value and rule."""


def _bad(name: str, value: object, rule: str) -> FlashAttnArgError:
    return FlashAttnArgError(f"{name}: {value!r} {rule}")


@dataclass(frozen=True)
class FaMask:
    """The mask FA's host code gives CK: ``text`` (CK's ``-mask`` string FA decodes, e.g. ``b:-1,0``), ``spec``
    (ckfmha's :class:`~ckfmha.masking.MaskSpec` of it), and the windows after FA's clamping (what it passes on,
    e.g. to the swap rule)."""

    text: str
    spec: MaskSpec
    left: int
    right: int
    causal: bool


def fa_mask(
    is_causal: bool,
    left: int,
    right: int,
    seqlen_q: int,
    seqlen_k: int,
    *,
    has_alibi: bool,
    forward: bool = True,
    clamp_first: bool = True,
) -> FaMask:
    """The mask FA builds (module table).  ``forward``: the ``seqlen_q == 1`` rule applies (the backward has
    none, FA:mha_bwd.cpp:227); ``clamp_first``: windows ``>= seqlen_k`` are clamped to -1 before the mask is
    decoded (False for the KV-cache call)."""
    left, right = int(left), int(right)

    def clamp(lr: tuple[int, int]) -> tuple[int, int]:
        return tuple(-1 if w >= seqlen_k else w for w in lr)  # type: ignore[return-value]

    if clamp_first:
        left, right = clamp((left, right))
    if forward and seqlen_q == 1 and not has_alibi:
        is_causal = False  # FA:mha_fwd.cpp:216 "causal=true is the same as causal=false in this case"
    if is_causal:
        right = 0
        text = f"b:{left},0"
    elif left == -1 and right == -1:
        text = "0"
    else:
        text = f"b:{left},{right}"
    if not clamp_first:
        left, right = clamp((left, right))
    return FaMask(text, MaskSpec.parse(text), left, right, bool(is_causal))


def ngroups_swapped(
    seqlen_q: int,
    nheads: int,
    nheads_k: int,
    left: int,
    right: int,
    head_size: int,
    *,
    has_alibi: bool,
    p_dropout: float = 0.0,
) -> bool:
    """FA's decode swap (module table): ``q`` (b, 1, nheads, d) runs as (b, nheads/nheads_k, nheads_k, d)."""
    return (
        seqlen_q == 1
        and nheads > nheads_k
        and left < 0
        and right < 0
        and p_dropout == 0.0
        and head_size % 8 == 0
        and not has_alibi
    )


def num_splits_heuristic_ck(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int) -> int:
    """FA's ``num_splits_heuristic_ck`` (FA:flash_common.hpp:39-75), step for step."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(n: int) -> bool:
        return n == 1 or -(-num_n_blocks // n) != -(-num_n_blocks // (n - 1))

    eff: list[float] = []
    best = 0.0
    for n in range(1, max_splits + 1):
        if not eligible(n):
            eff.append(0.0)
            continue
        waves = batch_nheads_mblocks * n / num_sms
        e = waves / math.ceil(waves)
        best = max(best, e)
        eff.append(e)
    for n in range(1, max_splits + 1):
        if eligible(n) and eff[n - 1] >= 0.85 * best:
            return n
    return 1


def override_num_splits(
    batch: int, nhead: int, max_seqlen_q: int, hdim_v: int, p_drop: float, num_splits: int, num_cus: int
) -> int:
    """FA's ``override_num_splits_if_necessary`` (FA:flash_common.cpp:8-31): ``num_splits < 1`` without dropout
    asks :func:`num_splits_heuristic_ck` with ``2 * num_cus`` units; anything else is kept."""
    num_m_blocks = -(-max_seqlen_q // KM0)
    num_n_blocks = -(-hdim_v // hdim_v) if hdim_v else 1  # kN1 = hdim_v: always 1 block
    if num_splits < 1 and p_drop == 0.0:
        return num_splits_heuristic_ck(batch * nhead * num_m_blocks, num_cus * 2, num_n_blocks, MAX_SPLITS)
    return num_splits


def check_num_splits(num_splits: int) -> int:
    """FA:mha_fwd_kvcache.cpp:478-479, mha_varlen_fwd.cpp:479-480."""
    if num_splits < 1:
        raise _bad("num_splits", num_splits, "should be greater than 0")
    if num_splits > MAX_SPLITS:
        raise _bad("num_splits", num_splits, f"greater than {MAX_SPLITS} is not supported")
    return num_splits


def warp_size(arch: str) -> int:
    """``ck_tile::get_warp_size()`` of ``arch``: 64 on gfx9 (CDNA), 32 on gfx10/11/12 (RDNA); 64 for a
    non-AMD kernel space (ckfmha runs CK's gfx9 kernel model there)."""
    a = arch.lower()
    if a.startswith("gfx") and not a.startswith("gfx9"):
        return 32
    return 64


def counter_offset(batch: int, nheads: int, warp: int) -> int:
    """FA:mha_fwd.cpp:283 ``counter_offset = batch_size * num_heads * ck_tile::get_warp_size()``."""
    return batch * nheads * warp


def philox_increment(offset: int) -> int:
    """How far PyTorch's ``CUDAGeneratorImpl::philox_cuda_state(increment)`` advances the generator's offset:
    ``increment`` rounded up to a multiple of 4."""
    return (offset + 3) // 4 * 4


def check_head_size(head_size: int, *, multiple_of_8: bool = True) -> None:
    """FA:mha_fwd.cpp:208-209 (head size <= 256, a multiple of 8); the KV-cache call pads instead."""
    if head_size > MAX_HEAD_SIZE:
        raise _bad("head_size", head_size, f"exceeds {MAX_HEAD_SIZE} (CK only supports head dimension at most 256)")
    if multiple_of_8 and head_size % 8:
        raise _bad("head_size", head_size, "is not a multiple of 8 (query, key, value and out_ must be)")


def check_heads(nheads: int, nheads_k: int) -> None:
    """FA:mha_fwd.cpp:210."""
    if nheads_k < 1 or nheads % nheads_k:
        raise _bad("num_heads_k", nheads_k, f"does not divide num_heads={nheads}")


def check_sizes(batch: int, head_size: int, nheads: int, nheads_k: int) -> None:
    """The size checks every attention entry point (fwd, varlen_fwd, bwd, varlen_bwd) makes in this order: a
    positive batch, then the head size (:func:`check_head_size`) and the head counts (:func:`check_heads`)."""
    if batch < 1:
        raise FlashAttnArgError(f"batch_size: {batch} must be positive")
    check_head_size(head_size)
    check_heads(nheads, nheads_k)


def check_paged(page_block_size: int, *, p_dropout: float = 0.0, cache_batch_idx: bool = False) -> None:
    """FA:mha_varlen_fwd.cpp:388, 454-455; mha_fwd_kvcache.cpp:311, 328."""
    if page_block_size % PAGE_MULTIPLE:
        raise _bad("page_block_size", page_block_size, f"must be divisible by {PAGE_MULTIPLE} (paged KV cache)")
    if p_dropout > 0:
        raise _bad("p_dropout", p_dropout, "must be 0 with a block_table (paged KV does not support dropout)")
    if cache_batch_idx:
        raise _bad("cache_batch_idx", "given", "cannot be combined with a block_table (paged KV cache)")


def round_multiple(x: int, m: int) -> int:
    """FA:mha_fwd_kvcache.cpp:402."""
    return (x + m - 1) // m * m
