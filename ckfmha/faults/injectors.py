"""The injectors of the fault catalogue: per fault, one function per hook point of the cpu backend
(:data:`INJECTORS`; the points and their values are :mod:`ckfmha.faults`' table).

Each function takes the value the backend passes at its hook point and the hook's context and returns the value
the faulty kernel would have used; none changes its input in place.  K/V sources are the backend's
``PageBlockNavigator`` / ``ContiguousRows`` (:mod:`ckfmha.backends.common.kv`), read here by their fields only
(``physical_blocks``, ``pool``, ``start``: no backend import).

===============================  ================================================================================
fault                            what the injector does
===============================  ================================================================================
splitkv_range_gap                every split but the last ends one key early (the boundary key is in no split)
mask_left_off_by_one             the window's first key one earlier (``start - 1``, at least 0)
mask_right_off_by_one            the window's last key one later (``end + 1``, at most ``seqlen_k``)
tail_key_tile_dropped            the key-tile loop stops before a partial last tile
page_index_off_by_one            every physical page index + 1 (modulo the pool's pages)
last_page_len_off_by_one         a paged sequence's key count one short (``(pages - 1) * page + last - 1``)
append_offset_wrong              knew/vnew written one key early (``cache - 1``; ``+ 1`` for an empty cache)
gqa_head_map                     q-head ``h`` reads K/V head ``h % hk`` instead of ``h // (hq / hk)``
dropout_threshold_off_by_one     keep ``randval < threshold`` instead of ``<=``
dropout_seed_wrong               the Philox seed + 1 (a stale seed read by the host)
dropout_offset_wrong             the Philox offset + 1
dropout_rescale_missing          no ``1 / (1 - p_drop)`` (forward output and backward)
lse_base2                        the LSE returned in base 2 (``lse * log2(e)``)
sink_state_wrong                 a sink starts the softmax at ``m = sink, l = 0`` (its own term lost)
sink_every_split                 every split counts the sink, not split 0 alone
masked_rows_nan                  rows with no key: ``o = acc / l`` unguarded (NaN); backward ``P = exp(s - lse)``
                                 with ``lse = -inf`` unguarded (NaN)
empty_seqlen_q_nan_dkdv          a sequence with ``seqlen_q = 0`` writes NaN dK / dV
ds_missing_d                     ``dS = P dP`` (the ``- D`` term dropped)
dk_scale_missing                 ``dK += dS^T Q`` without the softmax scale
dq_scale_missing                 ``dQ += dS K`` without the softmax scale
dq_stored_not_accumulated        a key tile stores its dQ contribution instead of adding it
dq_slices_not_summed             convert_dq sums all dq_acc slices but the last
rope_halves_swapped              the rotary partner halves (half-rotated) / pair elements (interleaved) swapped
rope_dim_ignored                 every feature rotated as if ``rotary_dim = hdim`` (table columns wrap)
rope_q_positions_wrong           q rows use the other table-row rule (per row vs the cache position)
group_seqstart_ignores_padding   group-mode sequence starts from the logical lengths (``s_qpad`` / ``s_kpad`` ignored)
alibi_slope_sign                 ALiBi slopes negated
tile_corruption_2pct             ~2% of the last query tile's outputs (every 50th element) read from the
                                 neighbouring column
===============================  ================================================================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

F32 = np.float32
Injector = Callable[[Any, Mapping[str, Any]], Any]


def split_range_gap(ranges: list[tuple[int, int]], ctx: Mapping[str, Any]) -> list[tuple[int, int]]:
    return [(lo, hi - 1 if i < len(ranges) - 1 and hi > lo else hi) for i, (lo, hi) in enumerate(ranges)]


def mask_left(bounds: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    start, end = bounds
    return np.maximum(start - 1, 0), end


def mask_right(bounds: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    start, end = bounds
    return start, np.minimum(end + 1, ctx["sk"])


def drop_tail_tile(hi: int, ctx: Mapping[str, Any]) -> int:
    lo, bn0 = ctx["lo"], ctx["bn0"]
    n = hi - lo
    return lo + (n // bn0) * bn0 if n > 0 and n % bn0 else hi


def _each_source(sources: list, fn: Callable[[Any, int], Any]) -> list:
    return [tuple(fn(s, b) for s in pair) for b, pair in enumerate(sources)]


def _paged(source: Any) -> bool:
    return getattr(source, "physical_blocks", None) is not None


def page_index_plus_one(sources: list, ctx: Mapping[str, Any]) -> list:
    def shift(s: Any, b: int) -> Any:
        if not _paged(s):
            return s
        return dataclasses.replace(s, physical_blocks=(s.physical_blocks + 1) % s.pool.shape[0])

    return _each_source(sources, shift)


@dataclass(frozen=True)
class ShortSource:
    """A K/V source whose sequence holds ``keys`` keys: reads stop there (writes pass through)."""

    source: Any
    keys: int

    def read(self, lo: int, hi: int) -> np.ndarray:
        return self.source.read(lo, max(lo, min(hi, self.keys)))

    def write(self, lo: int, values: np.ndarray) -> None:
        self.source.write(lo, values)


def last_page_short(sources: list, ctx: Mapping[str, Any]) -> list:
    lens = ctx["problem"].seqlens_k_list

    def short(s: Any, b: int) -> Any:
        return ShortSource(s, lens[b] - 1) if _paged(s) and lens[b] > 0 else s

    return _each_source(sources, short)


def _logical_starts(lengths: list[int]) -> list[int]:
    return [int(x) for x in np.concatenate([[0], np.cumsum(lengths)])[:-1]]


def logical_kv_starts(sources: list, ctx: Mapping[str, Any]) -> list:
    p = ctx["problem"]
    if p.mode.value != "group":
        return sources
    starts = _logical_starts(p.seqlens_k_list)

    def move(s: Any, b: int) -> Any:
        return dataclasses.replace(s, start=starts[b]) if hasattr(s, "start") else s

    return _each_source(sources, move)


def logical_row_start(start: int, ctx: Mapping[str, Any]) -> int:
    p = ctx["problem"]
    lengths = p.seqlens_q_list if ctx["side"] == "q" else p.seqlens_k_list
    return _logical_starts(lengths)[ctx["b"]]


def append_offset(cache: int, ctx: Mapping[str, Any]) -> int:
    return cache - 1 if cache > 0 else cache + 1


def gqa_modulo(heads: Any, ctx: Mapping[str, Any]) -> Any:
    hq, hk = ctx["hq"], ctx["hk"]
    return np.arange(hq) % hk if 1 < hk < hq else heads


def keep_below(keep: np.ndarray, ctx: Mapping[str, Any]) -> np.ndarray:
    from ckfmha.rng import p_undrop_u8

    return ctx["randval"] < np.uint8(p_undrop_u8(ctx["p_drop"]))


def seed_plus_one(seed_offset: tuple[int, int], ctx: Mapping[str, Any]) -> tuple[int, int]:
    return seed_offset[0] + 1, seed_offset[1]


def offset_plus_one(seed_offset: tuple[int, int], ctx: Mapping[str, Any]) -> tuple[int, int]:
    return seed_offset[0], seed_offset[1] + 1


def one(value: Any, ctx: Mapping[str, Any]) -> Any:
    return F32(1)


def lse_in_base2(o_lse: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    o, lse = o_lse
    return o, np.where(np.isfinite(lse), lse * F32(1 / math.log(2)), lse).astype(F32)


def sink_without_mass(m_l: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, l = m_l
    return (m, np.zeros_like(l)) if ctx.get("sink") is not None else m_l


def always(value: Any, ctx: Mapping[str, Any]) -> bool:
    return True


def unguarded_empty_rows(o_lse: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    o, lse = o_lse
    return np.where(ctx["empty"][..., None], F32(np.nan), o), lse


def unguarded_lse(lse_safe: np.ndarray, ctx: Mapping[str, Any]) -> np.ndarray:
    return ctx["lse"]


def nan_when_no_query(dk_dv: tuple[np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    if ctx["sq"] != 0:
        return dk_dv
    return tuple(np.full_like(x, np.nan) for x in dk_dv)  # type: ignore[return-value]


def zero(value: np.ndarray, ctx: Mapping[str, Any]) -> np.ndarray:
    return np.zeros_like(value)


def store(mode: str, ctx: Mapping[str, Any]) -> str:
    return "store"


def one_slice_fewer(n: int, ctx: Mapping[str, Any]) -> int:
    return n - 1 if n > 1 else n


def swap_rotary_partners(x: np.ndarray, ctx: Mapping[str, Any]) -> np.ndarray:
    rd = ctx["rotary_dim"]
    out = np.array(x, copy=True)
    if ctx["rope"] == "interleaved":
        out[..., 0:rd:2], out[..., 1:rd:2] = x[..., 1:rd:2], x[..., 0:rd:2]
    else:
        h = rd // 2
        out[..., :h], out[..., h:rd] = x[..., h:rd], x[..., :h]
    return out


def whole_head_rotated(dim_tables: tuple[int, np.ndarray, np.ndarray], ctx: Mapping[str, Any]) -> tuple:
    rd, cos, sin = dim_tables
    d = ctx["hdim"]
    if rd >= d:
        return dim_tables
    cols = np.arange(d // 2) % (rd // 2)
    return d, cos[:, cols], sin[:, cols]


def negate(value: Any, ctx: Mapping[str, Any]) -> Any:
    return None if value is None else -value


def flip(value: bool, ctx: Mapping[str, Any]) -> bool:
    return not value


CORRUPT_EVERY = 50
"""tile_corruption_2pct: every this-many-th element of the last query tile is corrupted (2%)."""


def corrupt_last_tile(o: np.ndarray, ctx: Mapping[str, Any]) -> np.ndarray:
    hq, sq, dv = o.shape
    if sq == 0:
        return o
    r0 = (sq - 1) // ctx["bm0"] * ctx["bm0"]
    out = np.array(o, copy=True)
    tile = out[:, r0:]
    flat = np.arange(tile.size).reshape(tile.shape)
    hit = flat % CORRUPT_EVERY == 0
    neighbour = np.roll(tile, -1, axis=-1)
    out[:, r0:] = np.where(hit, neighbour, tile)
    return out


INJECTORS: dict[str, dict[str, Injector]] = {
    "splitkv_range_gap": {"splitkv.ranges": split_range_gap},
    "mask_left_off_by_one": {"mask.key_range": mask_left},
    "mask_right_off_by_one": {"mask.key_range": mask_right},
    "tail_key_tile_dropped": {"tiles.key_end": drop_tail_tile},
    "page_index_off_by_one": {"kv.sources": page_index_plus_one},
    "last_page_len_off_by_one": {"kv.sources": last_page_short},
    "append_offset_wrong": {"appendkv.offset": append_offset},
    "gqa_head_map": {"gqa.heads": gqa_modulo},
    "dropout_threshold_off_by_one": {"dropout.keep": keep_below},
    "dropout_seed_wrong": {"dropout.seed": seed_plus_one},
    "dropout_offset_wrong": {"dropout.seed": offset_plus_one},
    "dropout_rescale_missing": {"dropout.rescale": one},
    "lse_base2": {"softmax.finish": lse_in_base2},
    "sink_state_wrong": {"softmax.start": sink_without_mass},
    "sink_every_split": {"splitkv.sink": always},
    "masked_rows_nan": {"softmax.finish": unguarded_empty_rows, "bwd.lse": unguarded_lse},
    "empty_seqlen_q_nan_dkdv": {"bwd.sequence_out": nan_when_no_query},
    "ds_missing_d": {"bwd.d_term": zero},
    "dk_scale_missing": {"bwd.dk_scale": one},
    "dq_scale_missing": {"bwd.dq_scale": one},
    "dq_stored_not_accumulated": {"bwd.dq_update": store},
    "dq_slices_not_summed": {"convert.slices": one_slice_fewer},
    "rope_halves_swapped": {"rope.input": swap_rotary_partners},
    "rope_dim_ignored": {"rope.dim": whole_head_rotated},
    "rope_q_positions_wrong": {"rope.q_rows": flip},
    "group_seqstart_ignores_padding": {"kv.sources": logical_kv_starts, "rows.start": logical_row_start},
    "alibi_slope_sign": {"alibi.slopes": negate},
    "tile_corruption_2pct": {"attention.out": corrupt_last_tile},
}
"""Injector name -> {hook point -> function} (the catalogue's ``injector``, by default the fault's name)."""
