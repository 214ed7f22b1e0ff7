"""The sequence lengths CK's tile_example runners make of ``-s`` / ``-s_k`` / ``-s_qpad`` / ``-s_kpad`` / ``-b``.

Both runners (fmha_fwd_runner.hpp, fmha_bwd_runner.hpp of example/ck_tile/01_fmha) call
``generate_missing_seqlens`` (example/ck_tile/01_fmha/utils.hpp) with their ``std::mt19937`` seeded by ``-seed``
(default 11939; ``0`` seeds from ``std::random_device``, which cannot be reproduced):

* batch mode: every batch gets ``-s``'s first value and ``-s_k``'s first value (``-1``: the query length); the
  padding lists are ignored (``-1`` for every batch: "batch not support k_padding").  When the forward appends
  to a KV cache (``-s_knew`` / ``-rotary_dim``) and ``batch > 1``, the key lengths of batches 1.. are drawn
  uniformly in ``[seqlen_k_min, s_k]`` (``randints``; batch 0 keeps ``s_k``).
* group mode: the given per-sequence values are used for the first ``min(len(-s), batch)`` sequences (a shorter
  ``-s_k`` / pad list repeats its last value; ``-s_k`` entry ``-1`` means the query length); the remaining
  sequences take ``generate_seqlens``: every query length is the last given one (the random walk cannot move
  them: its maximum is that length), the key lengths start at the last given one (clamped to ``[max(min, 1),
  pad or INT32_MAX]``) and move by a seeded random walk that keeps their sum; the pads repeat the last one.
* a key length below ``seqlen_k_min`` (the forward's ``-s_knew``) is CK's ``std::runtime_error``
  ("seqlen_k (=X) is less than minimum seqlen_k (=Y)").

:class:`CKHostRandom` reproduces ``std::mt19937`` and libstdc++'s ``std::uniform_int_distribution`` (GCC >= 11:
Lemire's nearly-divisionless downscaling, the libstdc++ that hipcc links on Linux), so the drawn lengths are
those the binary uses; ``tests/test_ck_normalize.py`` checks the generator against the C++ standard's figure and
the draws against values a g++ 12 program printed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

INT32_MAX = (1 << 31) - 1
_MASK32 = 0xFFFFFFFF


class CKSeqlenError(ValueError):
    """Lengths CK's runner refuses (its own words) or that depend on a random source ckfmha cannot reproduce."""


class MT19937:
    """``std::mt19937`` (32-bit Mersenne Twister, ``seed`` through ``init_genrand``): :meth:`next` is ``eng()``.
    NumPy's MT19937 is the same generator: seeded through ``RandomState(seed)`` (its legacy seeding is
    ``init_genrand``), it hands out its raw 32-bit outputs a state's worth (624) at a time."""

    def __init__(self, seed: int) -> None:
        state = np.random.RandomState(seed & _MASK32).get_state(legacy=False)
        self._bits = np.random.MT19937()
        self._bits.state = state  # type: ignore[assignment]  # the same generator's full state
        self._buf: list[int] = []
        self._i = 0

    def next(self) -> int:
        if self._i >= len(self._buf):
            self._buf = self._bits.random_raw(624).tolist()
            self._i = 0
        y = self._buf[self._i]
        self._i += 1
        return y


class CKHostRandom:
    """CK's host ``random_engine`` and the draws the runners make from it (libstdc++'s algorithms)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._engine: MT19937 | None = None

    @property
    def engine(self) -> MT19937:
        """The generator, seeded on the first draw (most command lines draw nothing)."""
        if self._engine is None:
            self._engine = MT19937(self.seed)
        return self._engine

    def uniform_int(self, low: int, high: int) -> int:
        """``std::uniform_int_distribution<>(low, high)(engine)`` as libstdc++ computes it for a 32-bit engine:
        the range ``high - low + 1`` downscaled with Lemire's method (one draw, more on rejection)."""
        urange = high - low
        if urange < 0:
            raise ValueError(f"uniform_int: empty range [{low}, {high}]")
        if urange == _MASK32:
            return low + self.engine.next()
        erange = urange + 1
        product = self.engine.next() * erange
        lo = product & _MASK32
        if lo < erange:
            threshold = ((1 << 32) - erange) % erange
            while lo < threshold:
                product = self.engine.next() * erange
                lo = product & _MASK32
        return low + (product >> 32)


def generate_seqlens(
    group: bool, count: int, seqlen_avg: int, seqlen_min: int, seqlen_max: int, rnd: CKHostRandom
) -> list[int]:
    """utils.hpp ``generate_seqlens``: ``count`` lengths starting at ``clamp(avg, min, max)`` (min <= 0 -> 1,
    max <= 0 -> INT32_MAX); in group mode with ``count > 1`` a random walk of ``avg * (count // 2)`` steps moves
    one unit from a random length to another (never below min, never above max)."""
    lo = seqlen_min if seqlen_min > 0 else 1
    hi = seqlen_max if seqlen_max > 0 else INT32_MAX
    if lo > hi:
        raise CKSeqlenError(f"the minimum length {lo} exceeds the maximum {hi} (CK asserts min <= max)")
    lens = [min(max(seqlen_avg, lo), hi)] * count
    if group and count > 1:
        steps = (seqlen_avg * (count // 2)) & _MASK32  # unsigned arithmetic in CK
        for _ in range(steps):
            dec = rnd.uniform_int(0, count - 1)
            if lens[dec] == lo:
                continue
            inc = (dec + rnd.uniform_int(1, count - 1)) % count
            if lens[inc] >= hi:
                continue
            lens[dec] -= 1
            lens[inc] += 1
    return lens


def _min_check(k: int, seqlen_k_min: int) -> None:
    if k < seqlen_k_min:
        raise CKSeqlenError(f"seqlen_k (={k}) is less than minimum seqlen_k (={seqlen_k_min})")


def _at(values: Sequence[int], i: int, empty: int) -> int:
    """``values[min(i, len - 1)]``, ``empty`` for an empty list (utils.hpp's per-sequence lookup)."""
    return values[min(i, len(values) - 1)] if values else empty


def generate_missing_seqlens(
    group: bool,
    batch: int,
    q_val: Sequence[int],
    k_val: Sequence[int],
    q_pad_val: Sequence[int],
    k_pad_val: Sequence[int],
    seqlen_k_min: int,
    need_append_kvcache: bool,
    rnd: CKHostRandom,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """utils.hpp ``generate_missing_seqlens`` -> (seqlens_q, seqlens_k, qpads, kpads), ``batch`` entries each (a
    pad of ``-1``: no padding).  See the module doc."""
    if not group:
        q, k = q_val[0], k_val[0]
        k_max = q if k < 0 else k
        s_k = [k_max] * batch
        if batch > 1 and need_append_kvcache:
            for i in range(1, batch):
                s_k[i] = rnd.uniform_int(seqlen_k_min, k_max)
        _min_check(s_k[-1], seqlen_k_min)
        return [q] * batch, s_k, [-1] * batch, [-1] * batch
    s_q: list[int] = []
    s_k = []
    qpads: list[int] = []
    kpads: list[int] = []
    given = min(len(q_val), batch)
    for i in range(given):
        q = q_val[i]
        k = _at(k_val, i, -1)
        s_q.append(q)
        s_k.append(q if k < 0 else k)
        kpads.append(_at(k_pad_val, i, -1))
        qpads.append(_at(q_pad_val, i, -1))
        _min_check(s_k[-1], seqlen_k_min)
    if given < batch:
        rest = batch - given
        s_q += generate_seqlens(True, rest, s_q[-1], 1, s_q[-1], rnd)
        s_k += generate_seqlens(True, rest, s_k[-1], seqlen_k_min, kpads[-1], rnd)
        kpads += [kpads[-1]] * rest
        qpads += [qpads[-1]] * rest
    return s_q, s_k, qpads, kpads
