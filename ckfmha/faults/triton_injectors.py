"""The Triton backend's injectors of the fault catalogue: per fault, one function per hook point of the Triton
launchers (:data:`TRITON_INJECTORS`; the points, their values and contexts are :mod:`ckfmha.faults`' Triton table).

Every injection is a wrong **argument** handed to a kernel, the kind of host-side bug CK's history has (a wrong
count, window, threshold, seed, table or buffer), or -- for the bug classes inside a kernel that no argument can
express -- the kernel's compile-time switch ``FAULT`` (hook ``triton.kernel.fault``, passed only when a fault is
active): no output is touched after a kernel wrote it.  The functions take the launcher's value (Python numbers,
or device tensors read only through their own methods -- this module imports no torch) and return the value the
faulty launch hands the kernel; a tensor is never changed in place (a perturbed one is a new tensor).

===============================  ================================================================================
fault                            what the faulty launch hands the kernel
===============================  ================================================================================
splitkv_range_gap                the split-KV attention kernel ``num_splits + 1`` while the grid launches
                                 ``num_splits`` splits: the split ranges are cut for one split more, so the keys of
                                 the last range are in no split
mask_left_off_by_one             a window's ``left`` one larger (where bounded): each row's first key one earlier
mask_right_off_by_one            a window's ``right`` one larger (where bounded): each row's last key one later
tail_key_tile_dropped            batch mode: ``seqlen_k`` rounded down to the key tile (the partial last key tile
                                 is never visited; forward and dq_dk_dv)
page_index_off_by_one            the page table with every page index + 1 (modulo the pool's pages)
last_page_len_off_by_one         the paged key counts (or SGLang's last page lengths) one short (0 stays 0)
append_offset_wrong              the append's key counts ``cache - 1`` (``+ 1`` for an empty cache)
dropout_threshold_off_by_one     the integer keep threshold - 1 (the kernels keep ``randval <= threshold``, so
                                 this is ``<`` the true threshold)
dropout_seed_wrong               the Philox seed + 1
dropout_offset_wrong             the Philox offset + 1
dropout_rescale_missing          ``rp_keep = 1`` instead of ``1 / (1 - p_drop)`` (forward and backward)
sink_state_wrong                 the forward kernel sinks of ``-inf`` (an unset sink buffer): the sink's term is
                                 lost, as CK's ``l = 0`` start loses it
ds_missing_d                     dq_dk_dv a zeroed ``D`` buffer instead of dot_do_o's (``dS = P dP``)
dq_slices_not_summed             convert_dq one dq_acc slice fewer to sum
rope_q_positions_wrong           the append's q rows the other table-row rule (``PER_ROW`` flipped)
group_seqstart_ignores_padding   group mode: ``seqstart_q`` / ``seqstart_k`` from the logical lengths (the
                                 physical padding ``s_qpad`` / ``s_kpad`` ignored)
alibi_slope_sign                 the ALiBi slopes negated
gqa_head_map                     FAULT (attn_fwd, dq_dk_dv): K/V head ``h % nhead_k``
lse_base2                        FAULT (attn_fwd): the LSE stored in base 2
sink_every_split                 FAULT (attn_fwd): every split starts from the sink
masked_rows_nan                  FAULT (attn_fwd): empty rows unguarded (``o = 0 / 0``)
empty_seqlen_q_nan_dkdv          FAULT (dq_dk_dv): NaN dK / dV for a sequence with ``seqlen_q = 0``
dk_scale_missing                 FAULT (dq_dk_dv): dK stored without the softmax scale
dq_scale_missing                 FAULT (dq_dk_dv): dQ contributions without the softmax scale
dq_stored_not_accumulated        FAULT (dq_dk_dv): dQ contributions stored, not added (non-deterministic)
rope_halves_swapped              FAULT (append_rows): rotary partners swapped
rope_dim_ignored                 FAULT (append_rows): every feature rotated, table columns wrapping
===============================  ================================================================================

The one fault the Triton backend cannot host (``tile_corruption_2pct``) says why in the catalogue's
``triton: {not_injectable: ...}`` row (docs/faults.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Injector = Callable[[Any, Mapping[str, Any]], Any]

MaskArgs = tuple[int, int, int, int, int, int]
"""(mask_kind, left, right, y, x, alibi_mode): :func:`ckfmha.backends.triton.device.mask_args`."""

DropoutArgs = tuple[int, int, int, float]
"""(seed, offset, p_undrop, rp_keep): the dropout arguments of the forward and dq_dk_dv kernels."""


def one_split_more(num_splits: int, ctx: Mapping[str, Any]) -> int:
    return num_splits + 1


def _window_edge(args: MaskArgs, index: int) -> MaskArgs:
    kind = args[0]
    if kind not in (1, 2) or args[index] < 0:  # no mask / an unbounded edge: there is no edge to move
        return args
    out = list(args)
    out[index] += 1
    return tuple(out)  # type: ignore[return-value]


def window_left_plus_one(args: MaskArgs, ctx: Mapping[str, Any]) -> MaskArgs:
    return _window_edge(args, 1)


def window_right_plus_one(args: MaskArgs, ctx: Mapping[str, Any]) -> MaskArgs:
    return _window_edge(args, 2)


def seqlen_k_to_full_tiles(seqlen_k: int, ctx: Mapping[str, Any]) -> int:
    return seqlen_k - seqlen_k % int(ctx["block_n"])


def page_index_plus_one(table: Any, ctx: Mapping[str, Any]) -> Any:
    return (table + 1) % int(ctx["pages"])


def one_key_short(counts: Any, ctx: Mapping[str, Any]) -> Any:
    return (counts - 1).clamp(min=0)


def append_one_early(cache: Any, ctx: Mapping[str, Any]) -> Any:
    return (cache - 1).clamp(min=0) + (cache == 0).to(cache.dtype)


def threshold_minus_one(args: DropoutArgs, ctx: Mapping[str, Any]) -> DropoutArgs:
    seed, offset, p_undrop, rp_keep = args
    return seed, offset, p_undrop - 1, rp_keep


def seed_plus_one(args: DropoutArgs, ctx: Mapping[str, Any]) -> DropoutArgs:
    seed, offset, p_undrop, rp_keep = args
    return (seed + 1) & ((1 << 64) - 1), offset, p_undrop, rp_keep


def offset_plus_one(args: DropoutArgs, ctx: Mapping[str, Any]) -> DropoutArgs:
    seed, offset, p_undrop, rp_keep = args
    return seed, (offset + 1) & ((1 << 64) - 1), p_undrop, rp_keep


def no_rescale(args: DropoutArgs, ctx: Mapping[str, Any]) -> DropoutArgs:
    seed, offset, p_undrop, rp_keep = args
    return seed, offset, p_undrop, 1.0


def unset_sinks(sinks: Any, ctx: Mapping[str, Any]) -> Any:
    return sinks.new_full(sinks.shape, float("-inf"))


def zeroed(buffer: Any, ctx: Mapping[str, Any]) -> Any:
    return buffer.new_zeros(buffer.shape)


def one_slice_fewer(n: int, ctx: Mapping[str, Any]) -> int:
    return n - 1 if n > 1 else n


def flip(value: bool, ctx: Mapping[str, Any]) -> bool:
    return not value


def _logical_starts(lengths: list[int]) -> list[int]:
    return [int(x) for x in np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])]


def logical_seqstarts(starts: tuple[Any, Any], ctx: Mapping[str, Any]) -> tuple[Any, Any]:
    p = ctx["problem"]
    sq, sk = starts
    return sq.new_tensor(_logical_starts(p.seqlens_q_list)), sk.new_tensor(_logical_starts(p.seqlens_k_list))


def negated(slopes: Any, ctx: Mapping[str, Any]) -> Any:
    return -slopes


def kernel_switch(name: str, *kernels: str) -> Injector:
    """The injector of an in-kernel fault: the kernels named (the hook's ``kernel`` context: ``attn_fwd``,
    ``dq_dk_dv``, ``append_rows``) get ``FAULT = name``, the others their ``""``."""

    def switch(value: str, ctx: Mapping[str, Any]) -> str:
        return name if ctx["kernel"] in kernels else value

    switch.__name__ = f"switch_{name}"
    return switch


TRITON_INJECTORS: dict[str, dict[str, Injector]] = {
    "splitkv_range_gap": {"triton.splitkv.num_splits": one_split_more},
    "mask_left_off_by_one": {"triton.mask.window": window_left_plus_one},
    "mask_right_off_by_one": {"triton.mask.window": window_right_plus_one},
    "tail_key_tile_dropped": {"triton.seqlen_k": seqlen_k_to_full_tiles},
    "page_index_off_by_one": {"triton.kv.page_table": page_index_plus_one},
    "last_page_len_off_by_one": {"triton.kv.paged_seqlens": one_key_short},
    "append_offset_wrong": {"triton.append.cache_seqlens": append_one_early},
    "dropout_threshold_off_by_one": {"triton.dropout": threshold_minus_one},
    "dropout_seed_wrong": {"triton.dropout": seed_plus_one},
    "dropout_offset_wrong": {"triton.dropout": offset_plus_one},
    "dropout_rescale_missing": {"triton.dropout": no_rescale},
    "sink_state_wrong": {"triton.sink": unset_sinks},
    "ds_missing_d": {"triton.bwd.d": zeroed},
    "dq_slices_not_summed": {"triton.convert.slices": one_slice_fewer},
    "rope_q_positions_wrong": {"triton.rope.per_row": flip},
    "group_seqstart_ignores_padding": {"triton.group.seqstarts": logical_seqstarts},
    "alibi_slope_sign": {"triton.alibi.slopes": negated},
    "gqa_head_map": {"triton.kernel.fault": kernel_switch("gqa_head_map", "attn_fwd", "dq_dk_dv")},
    "lse_base2": {"triton.kernel.fault": kernel_switch("lse_base2", "attn_fwd")},
    "sink_every_split": {"triton.kernel.fault": kernel_switch("sink_every_split", "attn_fwd")},
    "masked_rows_nan": {"triton.kernel.fault": kernel_switch("masked_rows_nan", "attn_fwd")},
    "empty_seqlen_q_nan_dkdv": {"triton.kernel.fault": kernel_switch("empty_seqlen_q_nan_dkdv", "dq_dk_dv")},
    "dk_scale_missing": {"triton.kernel.fault": kernel_switch("dk_scale_missing", "dq_dk_dv")},
    "dq_scale_missing": {"triton.kernel.fault": kernel_switch("dq_scale_missing", "dq_dk_dv")},
    "dq_stored_not_accumulated": {"triton.kernel.fault": kernel_switch("dq_stored_not_accumulated", "dq_dk_dv")},
    "rope_halves_swapped": {"triton.kernel.fault": kernel_switch("rope_halves_swapped", "append_rows")},
    "rope_dim_ignored": {"triton.kernel.fault": kernel_switch("rope_dim_ignored", "append_rows")},
}
"""Injector name -> {Triton hook point -> function} (the catalogue's ``triton.injector``, by default the fault's
name)."""
