"""Enumerator of the ``bwd`` api: CK's backward kernels (``bwd_dot_do_o``, ``bwd_dq_dk_dv``, ``bwd_convert_dq``).

CK's backward pass runs three kernels: ``dot_do_o`` (D = rowsum(dO * O)), ``dq_dk_dv`` (the main kernel) and
``convert_dq`` (casts the fp32 dQ accumulator). The generator builds one *trait* per point of a feature
product, emits its dq_dk_dv kernel, and pairs it with the two 1-D kernels it needs; the 1-D kernels are shared
by many traits and emitted once each.

Data section schema (``data/archs/_parts/<arch>/bwd.yaml``, or ``apis.bwd`` of the arch file)::

    arch_tag: gfx9                 # CK factory name = file-name suffix (gfx9, gfx950, gfx11, gfx12, ...)
    dtypes: [fp32, fp16, bf16]     # dtypes to try, in generator order (a dtype without tiles emits nothing)
    modes: [batch, group]
    biases: [none, elementwise, alibi]
    dbias: [true, false]
    dropouts: [none, wg16, wg16_store_randval]
    deterministic: [true, false]
    pads:                          # (pad_d, pad_dv) pairs of dq_dk_dv kernels; values 0, 1 or 8
      ntrload: [[0, 0], [0, 8], [0, 1], [8, 8], [1, 0], [1, 8], [1, 1]]
      trload: [[0, 0], [8, 8]]
    one_d:                         # the 1-D kernels paired with each dq_dk_dv kernel
      bm0: 64                      # their block size along seqlen_q (tile = (bm0,))
      occupancy: 2
      seqlen_pad: {batch: [false, true], group: [true]}   # seqlen_q pad variants per mode
    constraints:                   # every key is required
      dbias_biases: [elementwise]                     # dbias=true only with these biases
      max_seq_len_q_masks: [none]                     # masks allowed for tiles with max_seq_len_q != 0
      max_seq_len_q_below_bm0_needs_seqlen_pad: true  # 0 < max_seq_len_q < one_d.bm0: padded 1-D kernels only
      max_seq_len_q_without_convert_dq: true          # no convert_dq for tiles with max_seq_len_q != 0
    tiles:                         # groups of dq_dk_dv tiles
      - dtypes: [fp16, bf16]
        trload: false
        tiles:
          - block: [32, 128, 64, 32, 64, 32, 32, 64, 64]   # bm0 bn0 bk0 bk1 bk2 bk3 bk4 bhdq bhdv
            warps: [[1, 4, 1], [4, 1, 1], [1, 4, 1]]       # gemm0/2, gemm1/3, gemm4
            warp_tiles: [[16, 16, 32], [16, 16, 16]]       # gemm0/2/4, gemm1/3
            occupancy: 1
            max_seq_len_q: 0                               # optional, default 0 (no limit)

``mask`` is not in the section: the masks come from the generator's mask mode (``ctx.masks``). The kernel's
head dim is the tile's ``bhdq`` (``hdim_v`` = ``bhdv``).

Product, for each dtype, trload (true first, as CK) and tile of a matching group: mode x mask x bias x dbias x
dropout x (pad_d, pad_dv) x deterministic, less the combinations the ``constraints`` exclude. Each resulting
dq_dk_dv config is tested with the receipt's predicate (``ctx.keep``); for every kept one the generator adds

* ``bwd_dot_do_o``  (hdim, dtype, mode, pad_s = seqlen pad, pad_dv = pad_dv > 0) for each seqlen pad variant;
* ``bwd_convert_dq`` (hdim, dtype, mode, pad_s, pad_d = pad_d > 0, deterministic), unless the tile has a
  max_seq_len_q and ``max_seq_len_q_without_convert_dq`` holds.

The dq_dk_dv kernels themselves carry no seqlen pads (``pad_s = pad_sk = 0``): CK's backward traits take only
the head-dim pads and always handle ragged seqlens inside the kernel.

Output order: dot_do_o kernels, then dq_dk_dv (in CK's generation order), then convert_dq (1-D kernels in
order of first use).  ``enumerate_names(ctx)`` gives the CK names of the same kernels in the same order without
making the dq_dk_dv kernels (see its doc).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any

from ckfmha.archs import ArchSpecError
from ckfmha.enumeration._pairs import Pair, SignatureProbe, configs, reads_signature_only
from ckfmha.kernel import (
    PAD_VALUES,
    ArchTag,
    Bias,
    Dropout,
    DType,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    MaskImpl,
    Mode,
    Pipeline,
    new_config,
    new_signature,
)
from ckfmha.naming import ck_name_middle, ck_name_parts, render_ck_names

_TOP_KEYS = {
    "arch_tag": "a CK factory name (str)",
    "dtypes": "a list of dtypes",
    "modes": "a list of modes",
    "biases": "a list of bias kinds",
    "dbias": "a list of bools",
    "dropouts": "a list of dropout variants",
    "deterministic": "a list of bools",
    "pads": "a mapping {ntrload: [[pad_d, pad_dv], ...], trload: [...]}",
    "one_d": "a mapping {bm0, occupancy, seqlen_pad}",
    "constraints": "a mapping of named constraints",
    "tiles": "a list of tile groups",
}
_CONSTRAINT_KEYS = (
    "dbias_biases",
    "max_seq_len_q_masks",
    "max_seq_len_q_below_bm0_needs_seqlen_pad",
    "max_seq_len_q_without_convert_dq",
)
_TILE_KEYS = {"block", "warps", "warp_tiles", "occupancy", "max_seq_len_q"}
_GROUP_KEYS = {"dtypes", "trload", "tiles"}


class _Checker:
    """Load-time checks that name the file, the key path, the expectation and what was found."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def loc(self, path: str) -> str:
        where = self.ctx.where(path)
        return where[:-2] + ")" if not path and where.endswith(".)") else where

    def fail(self, path: str, expected: str, found: Any) -> ArchSpecError:
        return ArchSpecError(f"{self.loc(path)}: expected {expected}, found {found!r}")

    def mapping(
        self,
        value: Any,
        path: str,
        required: AbstractSet[str] | dict[str, str],
        optional: AbstractSet[str] = frozenset(),
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, "a mapping", value)
        allowed = set(required) | set(optional)
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ArchSpecError(f"{self.loc(path)}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        missing = sorted(k for k in required if k not in value)
        if missing:
            raise ArchSpecError(f"{self.loc(path)}: missing key(s) {missing}")
        return value

    def seq(self, value: Any, path: str, what: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"a list of {what}", value)
        return value

    def enum_list(self, value: Any, path: str, enum: Any) -> tuple[Any, ...]:
        out = []
        for i, v in enumerate(self.seq(value, path, enum.__name__ + " tokens")):
            try:
                out.append(enum(v))
            except ValueError:
                raise self.fail(f"{path}[{i}]", "one of " + ", ".join(m.value for m in enum), v) from None
        return tuple(out)

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, "a bool", value)
        return value

    def bool_list(self, value: Any, path: str) -> tuple[bool, ...]:
        return tuple(self.boolean(v, f"{path}[{i}]") for i, v in enumerate(self.seq(value, path, "bools")))

    def integer(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            raise self.fail(path, "an int" + (f" >= {minimum}" if minimum is not None else ""), value)
        return value

    def int_list(self, value: Any, path: str, length: int, minimum: int | None = None) -> tuple[int, ...]:
        items = self.seq(value, path, "ints")
        if len(items) != length:
            raise self.fail(path, f"a list of {length} ints", value)
        return tuple(self.integer(v, f"{path}[{i}]", minimum) for i, v in enumerate(items))

    def triples(self, value: Any, path: str, count: int) -> tuple[tuple[int, int, int], ...]:
        items = self.seq(value, path, "[m, n, k] triples")
        if len(items) != count:
            raise self.fail(path, f"a list of {count} [m, n, k] triples", value)
        out: list[tuple[int, int, int]] = []
        for i, v in enumerate(items):
            m, n, k = self.int_list(v, f"{path}[{i}]", 3, 1)
            out.append((m, n, k))
        return tuple(out)


class _Plan:
    """A checked bwd section with its algorithm objects precomputed (shared by every receipt / mask mode)."""

    __slots__ = (
        "arch_tag",
        "dtypes",
        "modes",
        "biases",
        "dbias",
        "dropouts",
        "deterministic",
        "pads",
        "bm0",
        "occupancy",
        "seqlen_pad",
        "dbias_biases",
        "maxq_masks",
        "maxq_short_needs_spad",
        "maxq_no_convert",
        "tiles",
        "sigs",
        "one_d_cache",
    )

    def __init__(self, ctx: Any, section: Any) -> None:
        ck = _Checker(ctx)
        sec = ck.mapping(section, "", _TOP_KEYS)
        tag = sec["arch_tag"]
        try:
            self.arch_tag = ArchTag(tag)
        except ValueError:
            raise ck.fail(
                "arch_tag", "one of " + ", ".join(m.value for m in ArchTag if m is not ArchTag.NONE), tag
            ) from None
        self.dtypes = ck.enum_list(sec["dtypes"], "dtypes", DType)
        self.modes = ck.enum_list(sec["modes"], "modes", Mode)
        self.biases = ck.enum_list(sec["biases"], "biases", Bias)
        self.dbias = ck.bool_list(sec["dbias"], "dbias")
        self.dropouts = ck.enum_list(sec["dropouts"], "dropouts", Dropout)
        self.deterministic = ck.bool_list(sec["deterministic"], "deterministic")
        self.pads = self._pads(ck, sec["pads"])
        self._one_d(ck, sec["one_d"])
        self._constraints(ck, sec["constraints"])
        self.tiles = self._tiles(ck, sec["tiles"])
        self.sigs: dict[tuple[Any, ...], KernelSignature] = {}
        self.one_d_cache: dict[tuple[Any, ...], KernelConfig] = {}

    @staticmethod
    def _pads(ck: _Checker, value: Any) -> dict[bool, tuple[tuple[int, int], ...]]:
        """``pads``: the (pad_d, pad_dv) pairs of trload tiles (key True) and of the others (key False)."""
        pads = ck.mapping(value, "pads", {"ntrload", "trload"})
        out: dict[bool, tuple[tuple[int, int], ...]] = {}
        for key, trl in (("trload", True), ("ntrload", False)):
            pairs: list[tuple[int, int]] = []
            for i, p in enumerate(ck.seq(pads[key], f"pads.{key}", "[pad_d, pad_dv] pairs")):
                pad_d, pad_dv = ck.int_list(p, f"pads.{key}[{i}]", 2)
                for j, v in enumerate((pad_d, pad_dv)):
                    if v not in PAD_VALUES:
                        raise ck.fail(f"pads.{key}[{i}][{j}]", f"a pad in {PAD_VALUES}", v)
                pairs.append((pad_d, pad_dv))
            out[trl] = tuple(pairs)
        return out

    def _one_d(self, ck: _Checker, value: Any) -> None:
        """``one_d``: the dot_do_o / convert_dq kernels' block size, occupancy and seqlen pads per mode."""
        one_d = ck.mapping(value, "one_d", {"bm0", "occupancy", "seqlen_pad"})
        self.bm0 = ck.integer(one_d["bm0"], "one_d.bm0", 1)
        self.occupancy = ck.integer(one_d["occupancy"], "one_d.occupancy", -1)
        sp = ck.mapping(one_d["seqlen_pad"], "one_d.seqlen_pad", set(), {m.value for m in Mode})
        self.seqlen_pad = {m: ck.bool_list(sp.get(m.value, []), f"one_d.seqlen_pad.{m.value}") for m in Mode}

    def _constraints(self, ck: _Checker, value: Any) -> None:
        """``constraints``: which biases allow dbias, and the rules of the max_seq_len_q tiles."""
        cons = ck.mapping(value, "constraints", set(_CONSTRAINT_KEYS))
        self.dbias_biases = frozenset(ck.enum_list(cons["dbias_biases"], "constraints.dbias_biases", Bias))
        self.maxq_masks = frozenset(
            ck.enum_list(cons["max_seq_len_q_masks"], "constraints.max_seq_len_q_masks", MaskImpl)
        )
        self.maxq_short_needs_spad = ck.boolean(
            cons["max_seq_len_q_below_bm0_needs_seqlen_pad"], "constraints.max_seq_len_q_below_bm0_needs_seqlen_pad"
        )
        self.maxq_no_convert = ck.boolean(
            cons["max_seq_len_q_without_convert_dq"], "constraints.max_seq_len_q_without_convert_dq"
        )

    def _tiles(self, ck: _Checker, value: Any) -> dict[tuple[DType, bool], list[tuple[Any, ...]]]:
        """``tiles``: per (dtype, trload), the rows ``(hdim_q, hdim_v, max_seq_len_q, ((pad_d, pad_dv, algorithm),
        ...), pad_dv > 0 flags, pad_d > 0 flags)`` in the section's order (needs :attr:`pads`)."""
        tiles: dict[tuple[DType, bool], list[tuple[Any, ...]]] = {}
        for gi, group in enumerate(ck.seq(value, "tiles", "tile groups")):
            gpath = f"tiles[{gi}]"
            ck.mapping(group, gpath, _GROUP_KEYS)
            gdtypes = ck.enum_list(group["dtypes"], f"{gpath}.dtypes", DType)
            trload = ck.boolean(group["trload"], f"{gpath}.trload")
            rows = []
            for ti, row in enumerate(ck.seq(group["tiles"], f"{gpath}.tiles", "tiles")):
                rows.append(self._tile_row(ck, row, f"{gpath}.tiles[{ti}]", trload))
            for dt in gdtypes:
                tiles.setdefault((dt, trload), []).extend(rows)
        return tiles

    def _tile_row(self, ck: _Checker, row: Any, tpath: str, trload: bool) -> tuple[Any, ...]:
        """One tile of a tile group, with its algorithm per pad pair (see :meth:`_tiles`)."""
        ck.mapping(row, tpath, _TILE_KEYS - {"max_seq_len_q"}, {"max_seq_len_q"})
        block = ck.int_list(row["block"], f"{tpath}.block", 9, 1)
        warps = ck.triples(row["warps"], f"{tpath}.warps", 3)
        wtiles = ck.triples(row["warp_tiles"], f"{tpath}.warp_tiles", 2)
        occ = ck.integer(row["occupancy"], f"{tpath}.occupancy", -1)
        maxq = ck.integer(row.get("max_seq_len_q", 0), f"{tpath}.max_seq_len_q", 0)
        # pads s/sk = 1: CK's bwd traits hard-code seqlen padding (kPadSeqLenQ = kPadSeqLenK = true)
        algs = tuple(
            (
                pd,
                pdv,
                KernelAlgorithm(
                    Pipeline.BWD_DQ_DK_DV, block, warps, wtiles, occ, 1, 1, pd, pdv, trload, max_seq_len_q=maxq
                ),
            )
            for pd, pdv in self.pads[trload]
        )
        dv_flags = tuple(dict.fromkeys(pdv > 0 for _, pdv, _ in algs))
        d_flags = tuple(dict.fromkeys(pd > 0 for pd, _, _ in algs))
        return (block[7], block[8], maxq, algs, dv_flags, d_flags)

    def sig(
        self,
        dtype: DType,
        mode: Mode,
        hq: int,
        hv: int,
        mask: MaskImpl,
        bias: Bias,
        dbias: bool,
        dropout: Dropout,
        det: bool,
        *,
        cache: bool = True,
    ) -> KernelSignature:
        """The dq_dk_dv signature, kept in the plan's cache unless ``cache`` is false (the names path: its
        signatures are dropped once named, before the cyclic collector is back on, so it never scans them; within
        one enumeration few signatures repeat)."""
        # keyed by the members' ids: an enum member is a singleton, and Enum.__hash__ is a Python-level call
        key = (id(dtype), id(mode), hq, hv, id(mask), id(bias), dbias, id(dropout), det)
        s = self.sigs.get(key)
        if s is None:
            s = new_signature(
                Family.BWD_DQ_DK_DV,
                dtype,
                mode,
                hq,
                hv,
                self.arch_tag,
                mask=mask,
                bias=bias,
                dbias=dbias,
                dropout=dropout,
                deterministic=det,
            )
            if cache:
                self.sigs[key] = s
        return s

    def dot_do_o(self, dtype: DType, hdim: int, mode: Mode, spad: int, dvpad: int) -> KernelConfig:
        key = (Family.BWD_DOT_DO_O, dtype, hdim, mode, spad, dvpad)
        c = self.one_d_cache.get(key)
        if c is None:
            c = self.one_d_cache[key] = KernelConfig(
                KernelSignature(Family.BWD_DOT_DO_O, dtype, mode, hdim, hdim, self.arch_tag),
                KernelAlgorithm(Pipeline.BWD_DOT_DO_O, (self.bm0,), occupancy=self.occupancy, pad_s=spad, pad_dv=dvpad),
            )
        return c

    def convert_dq(self, dtype: DType, hdim: int, mode: Mode, spad: int, dpad: int, det: bool) -> KernelConfig:
        key = (Family.BWD_CONVERT_DQ, dtype, hdim, mode, spad, dpad, det)
        c = self.one_d_cache.get(key)
        if c is None:
            c = self.one_d_cache[key] = KernelConfig(
                KernelSignature(Family.BWD_CONVERT_DQ, dtype, mode, hdim, hdim, self.arch_tag, deterministic=det),
                KernelAlgorithm(Pipeline.BWD_CONVERT_DQ, (self.bm0,), occupancy=self.occupancy, pad_s=spad, pad_d=dpad),
            )
        return c


_PLANS: dict[int, tuple[Any, _Plan]] = {}


def _plan(ctx: Any) -> _Plan:
    section = ctx.section
    hit = _PLANS.get(id(section))
    if hit is not None and hit[0] is section:
        return hit[1]
    plan = _Plan(ctx, section)
    _PLANS[id(section)] = (section, plan)  # keeps the section alive, so the id stays valid
    return plan


def enumerate_api(ctx: Any) -> list[KernelConfig]:
    """The configs of :func:`enumerate_pairs`."""
    return configs(enumerate_pairs(ctx))


def _levels(p: _Plan, masks: tuple[MaskImpl, ...], sig: Callable[..., Any] | None = None) -> Iterator[tuple[Any, ...]]:
    """The dq_dk_dv product in CK's generation order, one level per (dtype, trload, tile, mode, mask, bias, dbias,
    dropout) the constraints allow: ``(dtype, hq, mode, spads, convert, algs, dv_flags, d_flags, features, sigs)``
    -- the seqlen pad variants of its 1-D kernels, whether it has convert_dq kernels, the tile's (pad_d, pad_dv,
    algorithm) triples and pad flags (see :meth:`_Plan._tiles`), (mask, bias, dbias, dropout), and one signature
    per deterministic value, made by ``sig`` (the plan's cached :meth:`_Plan.sig` by default; the names path passes
    :func:`_signature_fields`, which keeps the arguments instead)."""
    dets = p.deterministic
    if sig is None:
        sig = p.sig
    for dtype in p.dtypes:
        for trload in (True, False):  # CK tries trload tiles first
            for hq, hv, maxq, algs, dv_flags, d_flags in p.tiles.get((dtype, trload), ()):
                if not algs:
                    continue  # an empty pads list: no pad variant, so the tile has no kernel (and no 1-D kernel)
                convert = not (maxq and p.maxq_no_convert)
                for mode in p.modes:
                    spads = p.seqlen_pad[mode]
                    if maxq and maxq < p.bm0 and p.maxq_short_needs_spad:
                        spads = tuple(s for s in spads if s)
                    if not spads:
                        continue
                    for mask in masks:
                        if maxq and mask not in p.maxq_masks:
                            continue
                        for bias in p.biases:
                            for dbias in p.dbias:
                                if dbias and bias not in p.dbias_biases:
                                    continue
                                for dropout in p.dropouts:
                                    sigs = [sig(dtype, mode, hq, hv, mask, bias, dbias, dropout, d) for d in dets]
                                    features = (mask, bias, dbias, dropout)
                                    yield dtype, hq, mode, spads, convert, algs, dv_flags, d_flags, features, sigs


def _note_one_d(
    dot_keys: dict[tuple[Any, ...], None], conv_keys: dict[tuple[Any, ...], None], level: tuple[Any, ...], dets: list
) -> None:
    """Record the 1-D kernels that a level's kept signatures (all its pad variants kept; ``dets``: their
    deterministic values) need."""
    dtype, hq, mode, spads, convert, _, dv_flags, d_flags, _, _ = level
    for f in dv_flags:
        dot_keys[(dtype, hq, mode, spads, f)] = None
    if convert:
        for f in d_flags:
            for det in dets:
                conv_keys[(dtype, hq, mode, spads, f, det)] = None


def enumerate_pairs(ctx: Any) -> list[Pair]:
    """All bwd kernels (dot_do_o, dq_dk_dv, convert_dq) the generator emits for ctx's arch/receipt/mask mode.

    A receipt filter that reads signature fields only (:func:`~ckfmha.enumeration._pairs.reads_signature_only`) is
    tested once per signature, on the signature; any other once per config."""
    p = _plan(ctx)
    keep = ctx.keep
    per_signature = reads_signature_only(keep)
    dq: list[Pair] = []
    append = dq.append
    # 1-D kernel keys in first-use order: (dtype, hdim, mode, seqlen pad variants, pad flag[, deterministic])
    dot_keys: dict[tuple[Any, ...], None] = {}
    conv_keys: dict[tuple[Any, ...], None] = {}
    for level in _levels(p, ctx.masks):
        dtype, hq, mode, spads, convert, algs, _, _, _, sigs = level
        if per_signature:
            sigs = [s for s in sigs if keep(s)]  # a signature has its fields
            if sigs:
                for _, _, alg in algs:
                    for sig in sigs:
                        append((sig, alg))
                _note_one_d(dot_keys, conv_keys, level, [s.deterministic for s in sigs])
            continue
        for pd, pdv, alg in algs:
            for sig in sigs:
                if keep(new_config(sig, alg)):
                    append((sig, alg))
                    dot_keys[(dtype, hq, mode, spads, pdv > 0)] = None
                    if convert:
                        conv_keys[(dtype, hq, mode, spads, pd > 0, sig.deterministic)] = None
    return _with_one_d(p, dq, dot_keys, conv_keys)


def enumerate_names(ctx: Any) -> list[str]:
    """The CK instance names of :func:`enumerate_pairs`' kernels, in the same order, without making the dq_dk_dv
    pairs: a dq_dk_dv name is head + middle + tail (:func:`ckfmha.naming.ck_name_parts`), the head made once per
    (tile, mode), the middle once per algorithm, the tail once per (mask, bias, dbias, dropout, deterministic,
    trload): of what a tail reads (``NAME_TAIL_SIGNATURE_FIELDS``, ``NAME_TAIL_ALGORITHM_FIELDS``), the rest is
    fixed by the plan's arch tag or is the signature default.  The receipt's filter is tested on a probe
    (:class:`~ckfmha.enumeration._pairs.SignatureProbe`) with each signature's fields: a signature is made only for
    a new head or tail.  With a receipt filter that reads more than signature fields the pairs are named
    instead."""
    p = _plan(ctx)
    keep = ctx.keep
    if not reads_signature_only(keep):
        return render_ck_names(enumerate_pairs(ctx))
    dq: list[str] = []
    dot_keys: dict[tuple[Any, ...], None] = {}
    conv_keys: dict[tuple[Any, ...], None] = {}
    tails: dict[tuple, str] = {}  # by (features, deterministic, trload): the plan's other tail fields are fixed
    pres: list[str] = []  # head + middle, per algorithm of the level's tile
    pres_of = None
    noted: tuple = ()
    probe = None
    for level in _levels(p, ctx.masks, _signature_fields):
        if probe is None:
            probe = SignatureProbe(p.sig(*level[-1][0], cache=False))
        kept = []  # the fields of the signatures the receipt keeps, tested on the probe
        for fields in level[-1]:
            (
                probe.dtype,
                probe.mode,
                probe.hdim_q,
                probe.hdim_v,
                probe.mask,
                probe.bias,
                probe.dbias,
                probe.dropout,
                probe.deterministic,
            ) = fields
            if keep(probe):
                kept.append(fields)
        if not kept:
            continue
        algs = level[5]
        first = algs[0][2]
        key = (id(algs), *level[:3])  # (tile, dtype, hdim, mode): the levels of one come together
        if key != pres_of:
            pres, pres_of = _prefixes(p.sig(*kept[0], cache=False), algs), key
        trload, feats = first.trload, level[8]  # a tile's algorithms differ in their pads only
        tl = [tails.get((feats, f[-1], trload)) or _tail(tails, feats, p.sig(*f, cache=False), first) for f in kept]
        dq.extend([pre + t for pre in pres for t in tl])
        dets = [f[-1] for f in kept]
        one_d = (*level[:5], level[6], level[7], *dets)  # what _note_one_d reads
        if one_d != noted:  # a level like the last one (of the tile and mode) notes nothing new
            _note_one_d(dot_keys, conv_keys, level, dets)
            noted = one_d
    dots, convs = _one_d(p, dot_keys, conv_keys)
    return [*render_ck_names(dots), *dq, *render_ck_names(convs)]


def _signature_fields(*fields: Any) -> tuple[Any, ...]:
    """What :func:`_levels` makes of a signature on the names path: its arguments to :meth:`_Plan.sig` (dtype,
    mode, hdim_q, hdim_v, mask, bias, dbias, dropout, deterministic); a signature is made only where a name part
    needs one."""
    return fields


def _prefixes(sig: KernelSignature, algs: tuple[tuple[int, int, KernelAlgorithm], ...]) -> list[str]:
    """Head + middle of the names of ``sig``'s head with each of a tile's algorithms (see :func:`enumerate_names`)."""
    head = ck_name_parts(sig, algs[0][2])[0]
    return [head + ck_name_middle(alg, Family.BWD_DQ_DK_DV) for _, _, alg in algs]


def _tail(tails: dict[tuple, str], features: tuple, sig: KernelSignature, alg: KernelAlgorithm) -> str:
    """The tail of ``sig``'s names with ``alg``'s trload (see :func:`enumerate_names`), remembered in ``tails``."""
    tail = tails[(features, sig.deterministic, alg.trload)] = ck_name_parts(sig, alg)[2]
    return tail


def _with_one_d(
    p: _Plan, dq: list[Pair], dot_keys: dict[tuple[Any, ...], None], conv_keys: dict[tuple[Any, ...], None]
) -> list[Pair]:
    """The dot_do_o kernels of ``dot_keys``, then the dq_dk_dv kernels ``dq``, then the convert_dq kernels of
    ``conv_keys`` (see :func:`_one_d`)."""
    dots, convs = _one_d(p, dot_keys, conv_keys)
    return [*dots, *dq, *convs]


def _one_d(
    p: _Plan, dot_keys: dict[tuple[Any, ...], None], conv_keys: dict[tuple[Any, ...], None]
) -> tuple[list[Pair], list[Pair]]:
    """The dot_do_o kernels of ``dot_keys`` and the convert_dq kernels of ``conv_keys``, deduplicated, in first-use
    order, one per seqlen pad variant.  (Deduplicated by the arguments that make them: a config is a function of
    them and spells each, so equal arguments are equal configs and distinct ones distinct -- and a tuple of enum
    members and ints hashes in C, a config in Python.)"""
    dots: dict[tuple[Any, ...], KernelConfig] = {}
    for dtype, hq, mode, spads, dv in dot_keys:
        for s in spads:
            dot = (dtype, hq, mode, int(s), int(dv))
            if dot not in dots:
                dots[dot] = p.dot_do_o(*dot)
    convs: dict[tuple[Any, ...], KernelConfig] = {}
    for dtype, hq, mode, spads, d, det in conv_keys:
        for s in spads:
            conv = (dtype, hq, mode, int(s), int(d), det)
            if conv not in convs:
                convs[conv] = p.convert_dq(*conv)
    return [(c.signature, c.algorithm) for c in dots.values()], [(c.signature, c.algorithm) for c in convs.values()]
