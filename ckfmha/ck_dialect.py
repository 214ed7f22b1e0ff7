"""The machinery of CK's tile_example argument dialect (:mod:`ckfmha.ck_args` is the public module and its doc the
specification): :func:`parse_ck_args` reads a command line into the effective problem's constructor fields
(:class:`CKArgs`), :func:`problem_to_ck_args` / :func:`problem_to_ck_command` render a problem.

It sits below :mod:`ckfmha.problem` and never imports it (``Problem.from_ck_args`` / ``to_ck_args`` use this
module; :func:`ckfmha.problem.ck_run_from_args` builds the :class:`~ckfmha.problem.Problem` from the fields), so the
dependency runs one way: ``ck_args -> problem -> ck_dialect -> problem_base``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from ckfmha.ck_seqlens import CKHostRandom, CKSeqlenError, generate_missing_seqlens
from ckfmha.kernel import Bias, DType, Family, Mode, QScale, Rope, VLayout
from ckfmha.limits import INT32_MAX
from ckfmha.masking import MaskError, MaskKind, MaskSpec
from ckfmha.problem_base import BWD, BWD_DTYPES, FWD_DTYPES, CKRefusal, Layout, ProblemError

_Problem = Any
"""A :class:`ckfmha.problem.Problem` in annotations: that module imports this one, so this one names it only."""

RUNNER_ONLY_ARGS = frozenset({"v", "kname", "init", "warmup", "repeat", "timer", "json", "jsonfile", "drop_prefs"})
"""Arguments of the tile_example runners that say nothing about the problem: accepted and not used."""
FWD_KEYS = frozenset(
    {
        "mode",
        "b",
        "h",
        "h_k",
        "s",
        "s_k",
        "s_qpad",
        "s_kpad",
        "q_eff_lens",
        "kv_eff_lens",
        "d",
        "d_v",
        "scale_s",
        "iperm",
        "operm",
        "bias",
        "prec",
        "mask",
        "vlayout",
        "lse",
        "p_drop",
        "drop_seed",
        "drop_offset",
        "logits_soft_cap",
        "squant",
        "qscale",
        "s_knew",
        "rotary_dim",
        "rotary_interleaved",
        "num_splits",
        "page_block_size",
        "cache_batch_idx",
        "init_sink",
        "seed",
    }
)
BWD_KEYS = frozenset(
    {
        "mode",
        "b",
        "h",
        "h_k",
        "s",
        "s_k",
        "s_qpad",
        "s_kpad",
        "d",
        "d_v",
        "scale",
        "iperm",
        "operm",
        "bias",
        "dbias",
        "prec",
        "mask",
        "p_drop",
        "drop_seed",
        "drop_offset",
        "deterministic",
        "seed",
    }
)
# Every argument CK's tile_example binaries of the amd-aiter tree take is modelled (kept for older imports).
UNMODELLED_FWD: dict[str, str] = {}
UNMODELLED_BWD: dict[str, str] = {}
FWD_APIS = ("all", "fwd")
"""Builds of tile_example_fmha_fwd (CMake's ``FMHA_FWD_ENABLE_APIS``): ``all`` four fwd APIs or ``fwd`` alone."""
CK_DEFAULT_SEED = 11939
"""The runners' ``-seed`` default (example_fmha_fwd.cpp / example_fmha_bwd.cpp)."""
BWD_INIT_METHODS = frozenset({"ui", "0", "uf", "1", "tf", "2"})
"""The ``-init`` values fmha_bwd_runner.hpp fills tensors for (any other is refused)."""
_QSCALE_TOKENS = {
    "n": QScale.NONE,
    "0": QScale.NONE,
    "pt": QScale.PERTENSOR,
    "1": QScale.PERTENSOR,
    "bs": QScale.BLOCKSCALE,
    "2": QScale.BLOCKSCALE,
    "mx": QScale.MX,
}
_QSCALE_RENDERED = {QScale.PERTENSOR: "pt", QScale.BLOCKSCALE: "bs"}


@dataclass(frozen=True)
class CKArgs:
    """What one tile_example command line runs, before a Problem is built: ``fields`` (the effective problem's
    constructor keywords: ``Problem(**fields)``), ``normalizations`` (what the runner announces on stderr, verbatim
    and in its order) and ``unannounced`` (what it changes or ignores without a word, in ckfmha's words naming the
    argument).  :func:`ckfmha.problem.ck_run_from_args` turns it into a :class:`~ckfmha.problem.CKRun`."""

    binary: str
    fields: dict[str, Any]
    normalizations: tuple[str, ...] = ()
    unannounced: tuple[str, ...] = ()


@dataclass
class _Notes:
    said: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- values, as CK's ArgParser reads them
def _scalar(k: str, v: str) -> str:
    """The number text of a scalar argument. CK's ArgParser (ck_tile/host/arg_parser.hpp) reads scalars with
    ``atoi`` / ``strtoul`` / ``atof``: the leading number, so ``-d=16,`` (a trailing comma, as in CK's own smoke
    logs) is 16. A trailing comma is accepted; more after it (``16,32``) is an error, not CK's silent 16."""
    if v.endswith(",") and "," not in v[:-1] and len(v) > 1:
        return v[:-1]
    if "," in v and v.split(",", 1)[0]:
        raise ProblemError(
            f"-{k}: {v!r} is a list, but -{k} takes one number (CK's parser would read the leading "
            f"{v.split(',', 1)[0]!r} and ignore the rest)"
        )
    return v


def _to_int(k: str, v: str) -> int:
    t = _scalar(k, v)
    try:
        return int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t)
    except ValueError:
        raise ProblemError(f"-{k}: {v!r} is not an integer") from None


def _to_float(k: str, v: str) -> float:
    t = _scalar(k, v)
    try:
        return float(t)
    except ValueError:
        raise ProblemError(f"-{k}: {v!r} is not a number") from None


def _to_bool(k: str, v: str) -> bool:
    lv = v.lower()
    if lv in ("t", "true"):
        return True
    if lv in ("f", "false"):
        return False
    return _to_int(k, v) != 0


def _int_list(k: str, v: str) -> list[int]:
    """A comma-separated int list as CK's ``ArgParser::get_int_vec`` reads it: split at every comma, each item with
    ``atoi`` -- so an empty item (``-s=16,``) is 0, a length CK then uses."""
    out = []
    for x in v.split(","):
        if x == "":
            out.append(0)
            continue
        try:
            out.append(int(x, 0) if x.lower().startswith(("0x", "-0x")) else int(x))
        except ValueError:
            raise ProblemError(f"-{k}: {v!r} has {x!r}, which is not an integer") from None
    return out


def _to_layout(k: str, v: str) -> Layout:
    """``-iperm`` / ``-operm``: 1 = bhsd, 0 = bshd."""
    return Layout.BHSD if _to_bool(k, v) else Layout.BSHD


def _to_bias(k: str, v: str) -> tuple[Bias, int]:
    """``-bias``: ``n`` / ``e[:rank]`` / ``a[:rank]`` (or CK's ``0`` / ``1`` / ``2``) -> (bias, bias_rank)."""
    btype, _, brank = v.partition(":")
    if btype in ("n", "0"):
        bias = Bias.NONE
    elif btype in ("e", "1", "elementwise"):
        bias = Bias.ELEMENTWISE
    elif btype in ("a", "2", "alibi"):
        bias = Bias.ALIBI
    else:
        raise ProblemError(f"-{k}: invalid bias value {v!r}; allowed: n, e, e:1, e:2, a, a:1")
    return bias, _to_int(k, brank) if brank else 0


def _to_mask(k: str, v: str) -> MaskSpec:
    """``-mask``: :meth:`MaskSpec.parse`; its error names the argument once (``-mask: invalid mask value ...``, not
    ``-mask: mask: ...``)."""
    try:
        return MaskSpec.parse(v)
    except MaskError as e:
        words = str(e).removeprefix("mask: ")
        raise ProblemError(f"-{k}: {words}") from None


def _to_vlayout(k: str, v: str) -> VLayout:
    if v not in ("r", "c"):
        raise ProblemError(f"-{k}: {v!r} must be r or c")
    return VLayout.ROW if v == "r" else VLayout.COL


class _Arg(NamedTuple):
    """One tile_example argument read into Problem field(s): ``read(key, text)`` gives the value (a tuple of values
    where ``field`` names several); ``default`` is CK's default text for an absent argument."""

    key: str
    field: str | tuple[str, ...]
    read: Callable[[str, str], Any]
    default: str


def _to_uint32(k: str, v: str) -> int:
    n = _to_int(k, v)
    if not 0 <= n <= 0xFFFFFFFF:
        raise ProblemError(f"-{k}: {n} must fit in uint32")
    return n


def _lengths(k: str, kv: dict[str, str], default: str) -> list[int]:
    """A length-list argument (``get_int_vec``; an absent one with the default ``""`` is empty)."""
    v = kv.get(k, default)
    return _int_list(k, v) if v else []


def _refuse(key: str, kv: dict[str, str], default: str, binary: str, words: str) -> CKRefusal:
    value = kv.get(key, default)
    return CKRefusal(f"-{key}: {value!r}: tile_example_fmha_{binary} refuses the line: {words}")


# Scalar arguments, each table read in its order (the first bad argument is the error).
_LAYOUT_BIAS_MASK_DROPOUT_ARGS = (
    _Arg("iperm", "input_layout", _to_layout, "1"),
    _Arg("operm", "output_layout", _to_layout, "1"),
    _Arg("bias", ("bias", "bias_rank"), _to_bias, "n"),
    _Arg("mask", "mask", _to_mask, "0"),
    _Arg("p_drop", "p_drop", _to_float, "0"),
    _Arg("drop_seed", "drop_seed", _to_int, "1"),
    _Arg("drop_offset", "drop_offset", _to_int, "0"),
)
_BWD_ARGS = (
    _Arg("dbias", "dbias", _to_bool, "0"),
    _Arg("deterministic", "deterministic", _to_bool, "0"),
)
_FWD_OUTPUT_ARGS = (
    _Arg("lse", "lse", _to_bool, "0"),
    _Arg("vlayout", "vlayout", _to_vlayout, "r"),
    _Arg("logits_soft_cap", "logits_soft_cap", _to_float, "0"),
    _Arg("init_sink", "sink", _to_bool, "0"),
)
_FWD_KV_ARGS = (
    _Arg("s_knew", "seqlen_knew", _to_int, "0"),
    _Arg("rotary_dim", "rotary_dim", _to_int, "0"),
    _Arg("rotary_interleaved", "rotary_interleaved", _to_bool, "1"),
    _Arg("num_splits", "num_splits", _to_int, "1"),
    _Arg("page_block_size", "page_block_size", _to_int, "0"),
    _Arg("cache_batch_idx", "cache_batch_idx", _to_bool, "0"),
)


def _read_args(kv: dict[str, str], table: Iterable[_Arg]) -> dict[str, Any]:
    """The values of ``table``'s arguments, read in order."""
    out: dict[str, Any] = {}
    for arg in table:
        value = arg.read(arg.key, kv.get(arg.key, arg.default))
        if isinstance(arg.field, tuple):
            out.update(zip(arg.field, value))
        else:
            out[arg.field] = value
    return out


# ---------------------------------------------------------------------- parsing
def parse_ck_args(args: "str | Iterable[str]", binary: str | None = None, *, fwd_apis: str = "all") -> CKArgs:
    """What tile_example arguments (a string or a list of ``-key=value`` tokens) run, as a :class:`CKArgs`
    (the semantics: :mod:`ckfmha.ck_args`'s module doc).  A leading program name (``tile_example_fmha_fwd`` /
    ``..._bwd``) selects the binary; otherwise ``binary`` (default ``fwd``).  ``fwd_apis``: the forward binary's
    build, :data:`FWD_APIS`."""
    toks = shlex.split(args) if isinstance(args, str) else list(args)
    if toks and not toks[0].startswith("-"):
        prog = toks.pop(0).rsplit("/", 1)[-1]
        if prog.endswith("bwd"):
            binary = binary or "bwd"
        elif prog.endswith("fwd"):
            binary = binary or "fwd"
        else:
            raise ProblemError(f"args: illegal input {prog!r} (arguments must look like -key=value)")
    binary = binary or "fwd"
    if binary not in ("fwd", "bwd"):
        raise ProblemError(f"binary: {binary!r} is not a tile_example binary; allowed: fwd, bwd")
    if fwd_apis not in FWD_APIS:
        raise ProblemError(f"fwd_apis: {fwd_apis!r} is not a build of tile_example_fmha_fwd; allowed: all, fwd")
    kv = _key_values(toks)
    _check_keys(kv, binary)
    return _bwd_run(kv) if binary == "bwd" else _fwd_run(kv, fwd_apis == "all")


def _key_values(tokens: Iterable[str]) -> dict[str, str]:
    """``-key=value`` tokens -> {key: value} (a later token wins, as in CK's ArgParser)."""
    kv: dict[str, str] = {}
    for t in tokens:
        if not t.startswith("-"):
            raise ProblemError(f"args: illegal input {t!r} (arguments must look like -key=value)")
        if "=" not in t:
            raise ProblemError(f"args: {t!r} should be a -key=value pair")
        k, v = t[1:].split("=", 1)
        if v == "":
            raise ProblemError(f"args: no value after '=' in {t!r}")
        kv[k] = v
    return kv


def _check_keys(kv: dict[str, str], binary: str) -> None:
    keys = BWD_KEYS if binary == "bwd" else FWD_KEYS
    for k in kv:
        if k not in keys and k not in RUNNER_ONLY_ARGS:
            raise ProblemError(f"-{k}: no such argument for tile_example_fmha_{binary}")


class _Raw(NamedTuple):
    """The shape arguments as the runner holds them before it normalizes anything."""

    group: bool
    batch: int
    nhead: int
    nhead_k: int
    seqlen_qs: list[int]
    seqlen_ks: list[int]
    qpads: list[int]
    kpads: list[int]
    hdim_q: int
    hdim_v: int


def _raw_shape(kv: dict[str, str]) -> _Raw:
    """``-mode -b -h -h_k -s -s_k -d -d_v`` and the pads, read in CK's order (``-1``: "the same as")."""
    g = kv.get
    mode = _to_int("mode", g("mode", "0"))
    if mode not in (0, 1):
        raise ProblemError(f"-mode: {mode} is not a mode; allowed: 0 (batch), 1 (group)")
    b = _to_int("b", g("b", "2"))
    if b > INT32_MAX:
        raise ProblemError(f"batch: {b} exceeds INT32_MAX = {INT32_MAX} (-b)")
    if b < 1:
        raise ProblemError(f"batch: {b} must be >= 1 (-b)")
    h = _to_int("h", g("h", "8"))
    h_k = _to_int("h_k", g("h_k", "-1"))
    sq = _int_list("s", g("s", "3328"))
    sk = _int_list("s_k", g("s_k", "-1"))
    d = _to_int("d", g("d", "128"))
    dv = _to_int("d_v", g("d_v", "-1"))
    qpads = _lengths("s_qpad", kv, "-1")
    kpads = _lengths("s_kpad", kv, "-1")
    return _Raw(mode == 1, b, h, h if h_k < 0 else h_k, sq, sk, qpads, kpads, d, d if dv < 0 else dv)


def _check_heads(raw: _Raw, kv: dict[str, str], binary: str) -> None:
    if raw.nhead_k > 0 and raw.nhead % raw.nhead_k:
        raise _refuse("h_k", kv, "-1", binary, f"nhead:{raw.nhead} must be multiple of nhead_k:{raw.nhead_k}")


class _Random:
    """The runner's ``random_engine``, created on the first draw (``-seed=0`` seeds from std::random_device,
    which cannot be reproduced: an error then)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rnd: CKHostRandom | None = None

    def get(self, what: str) -> CKHostRandom:
        if self._rnd is None:
            if self.seed == 0:
                raise ProblemError(
                    f"-seed: 0 seeds the runner's generator from std::random_device, which ckfmha cannot "
                    f"reproduce, and {what} draws from it; give a seed"
                )
            self._rnd = CKHostRandom(self.seed)
        return self._rnd


def _seqlens(
    raw: _Raw, group: bool, knew_min: int, append: bool, rnd: _Random, kv: dict[str, str], binary: str
) -> tuple[list[int], list[int], list[int], list[int]]:
    """utils.hpp ``generate_missing_seqlens`` (draws only when it needs to; group-mode totals and the random walk's
    length are checked first: :func:`_check_generated`)."""
    given = min(len(raw.seqlen_qs), raw.batch)
    if group and given < raw.batch:
        _check_generated(raw, given)
    draws = (group and given < raw.batch - 1) or (not group and append and raw.batch > 1)
    try:
        engine = rnd.get("the lengths of sequences not given") if draws else CKHostRandom(1)
        return generate_missing_seqlens(
            group, raw.batch, raw.seqlen_qs, raw.seqlen_ks, raw.qpads, raw.kpads, knew_min, append, engine
        )
    except CKSeqlenError as e:
        raise _refuse("s_k", kv, "-1", binary, str(e)) from None


MAX_WALK_STEPS = 2_000_000
"""The most steps of utils.hpp ``generate_seqlens``'s random walk ckfmha replays (each step draws from the
runner's generator; a longer walk would take minutes in Python)."""


def _check_generated(raw: _Raw, given: int) -> None:
    """Before group mode generates the lengths of sequences ``given..batch-1``: the query total (the walk cannot
    move query lengths: every one is the last given length) and the key total (the walk keeps the sum) must fit
    int32, and the two walks (``avg * (count // 2)`` steps each) must be short enough to replay."""
    rest = raw.batch - given
    q_last = raw.seqlen_qs[given - 1]
    q_total = sum(raw.seqlen_qs[:given]) + rest * q_last
    if q_total > INT32_MAX:
        same = all(x == q_last for x in raw.seqlen_qs[:given])
        shown = f"({q_last},) * {raw.batch}" if same else f"{tuple(raw.seqlen_qs[:given])} + ({q_last},) * {rest}"
        raise ProblemError(
            f"seqlens_q: {shown} sums to {q_total} query tokens, which exceeds INT32_MAX = {INT32_MAX} (group "
            "mode's seqstart_q is an int32 array; -s, -b)"
        )
    k_given = raw.seqlen_ks[min(given, len(raw.seqlen_ks)) - 1] if raw.seqlen_ks else -1
    k_last = q_last if k_given < 0 else k_given
    steps = max(q_last, 0) * (rest // 2) + max(k_last, 0) * (rest // 2)
    if steps > MAX_WALK_STEPS:
        raise ProblemError(
            f"-b: {raw.batch} with {given} given lengths: the runner generates the other {rest} with a random walk "
            f"of {steps} steps (utils.hpp generate_seqlens), more than the {MAX_WALK_STEPS} ckfmha replays; give "
            "every sequence's length in -s / -s_k"
        )


def _note_lengths(raw: _Raw, group: bool, s_q: list[int], s_k: list[int], notes: _Notes, append: bool) -> None:
    """The unannounced length changes of generate_missing_seqlens."""
    if not group:
        for key, given in (("s", raw.seqlen_qs), ("s_k", raw.seqlen_ks)):
            if len(given) > 1:
                notes.silent.append(f"-{key}: batch mode uses the first length {given[0]} and ignores {given[1:]}")
        for key, given in (("s_qpad", raw.qpads), ("s_kpad", raw.kpads)):
            if given != [-1]:
                notes.silent.append(f"-{key}: ignored in batch mode (utils.hpp: batch mode does not pad)")
        if append and raw.batch > 1 and len(set(s_k)) > 1:
            notes.silent.append(f"-s_k: the KV-cache lengths of batches 1.. are drawn: seqlens_k {tuple(s_k)}")
        return
    n_given = min(len(raw.seqlen_qs), raw.batch)
    if n_given < raw.batch:
        notes.silent.append(
            f"-s: lengths of sequences {n_given}..{raw.batch - 1} generated: seqlens_q {tuple(s_q)}, "
            f"seqlens_k {tuple(s_k)}"
        )
    elif len(raw.seqlen_qs) > raw.batch:
        notes.silent.append(f"-s: {len(raw.seqlen_qs)} lengths for -b={raw.batch}; the extra ones are ignored")


def _group_padding(pads: list[int], on: bool, key: str, notes: _Notes) -> tuple[int, ...] | None:
    if on:
        return tuple(pads)
    if any(x > 0 for x in pads):
        notes.silent.append(f"-{key}: ignored (its first entry {pads[0]} turns the padding off)")
    return None


def _eff_lengths(key: str, values: list[int], batch: int, notes: _Notes) -> tuple[int, ...] | None:
    """fmha_fwd_runner.hpp ``calculate_cumulative``: none when empty or led by -1, else one per batch (a short
    list repeats its last value; a long one is cut)."""
    if not values or values[0] == -1:
        return None
    if len(values) < batch:
        notes.silent.append(f"-{key}: {len(values)} lengths for -b={batch}; the last one repeats")
        values = values + [values[-1]] * (batch - len(values))
    elif len(values) > batch:
        notes.silent.append(f"-{key}: {len(values)} lengths for -b={batch}; the extra ones are ignored")
    return tuple(values[:batch])


def _c_rem(n: int, m: int) -> int:
    """C++ ``n % m`` (the sign of ``n``)."""
    return int(math.fmod(n, m))


# ---------------------------------------------------------------------- the forward runner
class _FwdState:
    """The forward runner's variables as fmha_fwd_run normalizes them."""

    def __init__(self, kv: dict[str, str], raw: _Raw, dtype: DType) -> None:
        f = _read_args(kv, _FWD_KV_ARGS)
        self.kv, self.raw, self.dtype = kv, raw, dtype
        self.group = raw.group
        self.knew: int = f["seqlen_knew"]
        self.rotary: int = f["rotary_dim"]
        self.interleaved: bool = f["rotary_interleaved"]
        self.splits: int = f["num_splits"]
        self.page: int = f["page_block_size"]
        self.cbi: bool = f["cache_batch_idx"]
        self.notes = _Notes()

    def refuse(self, key: str, default: str, words: str) -> CKRefusal:
        return _refuse(key, self.kv, default, "fwd", words)

    def append_kv(self, kv_api: bool, append_api: bool, rnd: _Random) -> None:
        """``-s_knew`` / ``-rotary_dim`` and the mode they force."""
        say = self.notes.said.append
        if not append_api and self.knew != 0:
            say("fmha_fwd_appendkv() is not enabled. ignoring the 's_knew' option")
            self.knew = 0
        if self.knew < 0:
            if not self.raw.seqlen_qs or self.raw.seqlen_qs[0] < 1:
                raise self.refuse("s_knew", "0", "a random s_knew needs -s >= 1 (randint(1, s))")
            self.knew = rnd.get("-s_knew < 0").uniform_int(1, self.raw.seqlen_qs[0])
            self.notes.silent.append(f"-s_knew: negative: the runner draws s_knew = {self.knew} in [1, s]")
        if self.dtype not in (DType.FP16, DType.BF16) and self.rotary > 0:
            raise self.refuse("rotary_dim", "0", "rotary embedding is only available for data type=fp16|bf16")
        if not append_api and self.rotary > 0:
            say("rotary embedding is not supported. ignoring the 'rotary_dim' option")
            self.rotary = 0
        if self.need_append and self.group:
            say("fmha_fwd_appendkv() will be invoked. ignoring the 'mode' option")
            self.group = False
        if self.rotary > self.raw.hdim_q:
            raise self.refuse("rotary_dim", "0", "rotary_dim should be less than or equal to head dim for q")
        if _c_rem(self.rotary, 16):
            raise self.refuse("rotary_dim", "0", "only rotary dimensions divisible by 16 are currently supported")
        if self.rotary < 0:
            self.notes.silent.append(f"-rotary_dim: {self.rotary} <= 0 applies no RoPE")
            self.rotary = 0

    @property
    def need_append(self) -> bool:
        return self.knew > 0 or self.rotary > 0

    def kv_cache(self, kv_api: bool) -> None:
        """``-page_block_size`` and ``-cache_batch_idx``."""
        say = self.notes.said.append
        if not kv_api and self.page > 0:
            say("paged-kvcache is not supported. ignoring the 'page_block_size' option")
            self.page = 0
        if _c_rem(self.page, 128):
            raise self.refuse(
                "page_block_size", "0", "only paged-kvcache block size divisible by 128 are currently supported"
            )
        if self.cbi:
            if not kv_api:
                say("split-kv is not supported. ignoring the 'cache_batch_idx' option")
                self.cbi = False
            elif self.page > 0:
                say("paged-kvcache does not support cache_batch_idx. ignoring the 'cache_batch_idx' option")
                self.cbi = False
            elif self.group:
                say("group mode will not use cache_batch_idx. ignoring the 'cache_batch_idx' option")
                self.cbi = False
        if self.page < 0:
            self.notes.silent.append(f"-page_block_size: {self.page} <= 0 means a contiguous KV cache")
            self.page = 0

    def check_padding(self, q_eff: list[int], kv_eff: list[int]) -> tuple[bool, bool]:
        """The runner's padding flags, and its refusal of padding with the KV-cache pipelines."""
        raw = self.raw
        q_pad = self.group and bool(raw.qpads) and raw.qpads[0] > 0
        k_pad = self.group and bool(raw.kpads) and raw.kpads[0] > 0
        given = [k for k, on in (("s_qpad", q_pad), ("s_kpad", k_pad)) if on]
        if not self.group:
            given += [k for k, v in (("q_eff_lens", q_eff), ("kv_eff_lens", kv_eff)) if v]
        if given and (self.need_append or self.page > 0 or self.splits > 1 or self.cbi):
            raise self.refuse(
                given[0],
                "",
                "Padding (physical or effective lengths) is not supported with appendkv/splitkv/pagedkv pipelines",
            )
        return q_pad, k_pad

    def splits_and_dropout(self, p_drop: float, split_api: bool, kv_api: bool) -> float:
        """``-num_splits`` (legalized) and the dropout the split-KV / KV-cache kernels drop."""
        say = self.notes.said.append
        if p_drop < 0.0 or p_drop > 1.0:
            raise self.refuse("p_drop", "0", "The value of p_drop should be 0~1")
        if not split_api and self.splits != 1:
            say("split-kv is not supported. ignoring the 'num_splits' option")
            self.splits = 1
        if self.splits < 1:
            raise ProblemError(
                f"-num_splits: {self.splits}: the runner picks the split count from the GPU's compute units "
                "(override_num_splits_if_necessary), which ckfmha does not model; give num_splits >= 1"
            )
        if self.splits > 128:
            raise self.refuse("num_splits", "1", "num_splits greater than 128 is not supported")
        use_kvcache = self.need_append or self.cbi or self.page > 0
        if kv_api and p_drop > 0 and (self.splits > 1 or use_kvcache):
            say("dropout is not supported by split-kv kernels. ignoring the 'p_drop' option")
            return 0.0
        return p_drop

    @property
    def family(self) -> Family:
        if self.need_append:
            return Family.FWD_APPENDKV
        if self.splits > 1 or self.cbi:
            return Family.FWD_SPLITKV
        return Family.FWD_PAGEDKV if self.page > 0 else Family.FWD


def _fwd_run(kv: dict[str, str], all_apis: bool) -> CKArgs:
    """fmha_fwd_runner.hpp ``fmha_fwd_run`` (:mod:`ckfmha.ck_args`' module doc); ``all_apis``: built with every
    fwd API."""
    raw = _raw_shape(kv)
    dtype = _to_dtype(kv.get("prec", "fp16"), "fwd")
    kw: dict[str, Any] = {"dtype": dtype, "scale": _to_float("scale_s", kv.get("scale_s", "0"))}
    kw.update(_read_args(kv, _LAYOUT_BIAS_MASK_DROPOUT_ARGS))
    kw.update(_read_args(kv, _FWD_OUTPUT_ARGS))
    qscale = _qscale(kv, dtype)
    if qscale is not None:
        kw["qscale"] = qscale
    st = _FwdState(kv, raw, dtype)
    q_eff, kv_eff = _lengths("q_eff_lens", kv, ""), _lengths("kv_eff_lens", kv, "")
    rnd = _Random(_to_uint32("seed", kv.get("seed", str(CK_DEFAULT_SEED))))
    _check_heads(raw, kv, "fwd")
    st.append_kv(all_apis, all_apis, rnd)
    st.kv_cache(all_apis)
    q_pad, k_pad = st.check_padding(q_eff, kv_eff)
    s_q, s_k, qpads, kpads = _seqlens(raw, st.group, max(st.knew, 0), st.need_append, rnd, kv, "fwd")
    for i in range(raw.batch):
        for key, pads, lens, what in (("s_kpad", kpads, s_k, "k"), ("s_qpad", qpads, s_q, "q")):
            if 0 < pads[i] < lens[i]:
                raise st.refuse(key, "-1", f"{what}pad must be greater than or equal to seqlen for {what}")
    _note_lengths(raw, st.group, s_q, s_k, st.notes, st.need_append)
    kw["p_drop"] = st.splits_and_dropout(kw["p_drop"], all_apis, all_apis)
    kw.update(_shape_fields(raw, st.group, s_q, s_k, st.notes))
    if st.group:
        kw["s_qpad"] = _group_padding(qpads, q_pad, "s_qpad", st.notes)
        kw["s_kpad"] = _group_padding(kpads, k_pad, "s_kpad", st.notes)
        for key, values in (("q_eff_lens", q_eff), ("kv_eff_lens", kv_eff)):
            if values:
                st.notes.silent.append(f"-{key}: ignored in group mode (batch-mode effective lengths)")
    else:
        kw["q_eff_lens"] = _eff_lengths("q_eff_lens", q_eff, raw.batch, st.notes)
        kw["kv_eff_lens"] = _eff_lengths("kv_eff_lens", kv_eff, raw.batch, st.notes)
        if st.need_append and len(set(s_k)) > 1:
            kw["kv_eff_lens"] = tuple(s_k)
    kw.update(
        family=st.family,
        seqlen_knew=st.knew,
        rotary_dim=st.rotary,
        num_splits=st.splits,
        page_block_size=st.page,
        cache_batch_idx=st.cbi,
    )
    if st.rotary:
        kw["rope"] = Rope.INTERLEAVED if st.interleaved else Rope.HALF_ROTATED
    return CKArgs("fwd", kw, tuple(st.notes.said), tuple(st.notes.silent))


def _shape_fields(raw: _Raw, group: bool, s_q: list[int], s_k: list[int], notes: _Notes) -> dict[str, Any]:
    """The Problem's mode, counts, head dims and lengths (group mode: per sequence; batch mode: the batch's)."""
    kw: dict[str, Any] = dict(
        batch=raw.batch, nhead_q=raw.nhead, nhead_k=raw.nhead_k, hdim_q=raw.hdim_q, hdim_v=raw.hdim_v
    )
    if group:
        kw.update(mode=Mode.GROUP, seqlens_q=tuple(s_q), seqlens_k=tuple(s_k))
    else:
        kw.update(mode=Mode.BATCH, seqlen_q=s_q[0], seqlen_k=s_k[0])
    return kw


def _to_dtype(prec: str, binary: str) -> DType:
    try:
        return DType(prec)
    except ValueError:
        raise ProblemError(
            f"-prec: {prec!r} unsupported precision; allowed: "
            + ", ".join(x.value for x in (BWD_DTYPES if binary == "bwd" else FWD_DTYPES))
        ) from None


def _qscale(kv: dict[str, str], dtype: DType) -> QScale | None:
    """``-qscale`` (newer CK), else the older ``-squant`` (``auto``: on for ``fp8`` alone, the runner's
    ``std::is_same_v<DataTypeConfig, FmhaFwdFp8>``); ``None``: neither."""
    qs = kv.get("qscale")
    if qs is not None:
        if qs not in _QSCALE_TOKENS:
            raise ProblemError(f"-qscale: {qs!r} unknown; allowed: n, pt, bs, mx")
        return _QSCALE_TOKENS[qs]
    if "squant" in kv:
        sq_v = kv["squant"]
        on = dtype is DType.FP8 if sq_v == "auto" else _to_bool("squant", sq_v)
        return QScale.PERTENSOR if on else QScale.NONE
    return None


# ---------------------------------------------------------------------- the backward runner
def _bwd_run(kv: dict[str, str]) -> CKArgs:
    """fmha_bwd_runner.hpp ``fmha_bwd_run`` (:mod:`ckfmha.ck_args`' module doc)."""
    raw = _raw_shape(kv)
    kw: dict[str, Any] = {"family": BWD, "dtype": _to_dtype(kv.get("prec", "fp16"), "bwd")}
    kw["scale"] = _to_float("scale", kv.get("scale", "0"))
    kw.update(_read_args(kv, _LAYOUT_BIAS_MASK_DROPOUT_ARGS))
    kw.update(_read_args(kv, _BWD_ARGS))
    rnd = _Random(_to_uint32("seed", kv.get("seed", str(CK_DEFAULT_SEED))))
    notes = _Notes()
    _check_heads(raw, kv, "bwd")
    if kw["dbias"] and kw["bias"] is not Bias.ELEMENTWISE:
        raise _refuse("dbias", kv, "0", "bwd", "dbias only exists when bias type is elementwise")
    s_q, s_k, qpads, kpads = _seqlens(raw, raw.group, 0, False, rnd, kv, "bwd")
    _note_lengths(raw, raw.group, s_q, s_k, notes, False)
    if not 0.0 <= kw["p_drop"] <= 1.0:
        raise _refuse("p_drop", kv, "0", "bwd", "The value of p_drop should be 0~1")
    init = kv.get("init", "uf")
    if init not in BWD_INIT_METHODS:
        raise _refuse("init", kv, "uf", "bwd", f"Unknown value for init argument: {init}")
    kw.update(_shape_fields(raw, raw.group, s_q, s_k, notes))
    if raw.group:
        kw["s_qpad"] = _group_padding(qpads, bool(raw.qpads) and raw.qpads[0] != -1, "s_qpad", notes)
        kw["s_kpad"] = _group_padding(kpads, bool(raw.kpads) and raw.kpads[0] != -1, "s_kpad", notes)
    return CKArgs("bwd", kw, tuple(notes.said), tuple(notes.silent))


# ---------------------------------------------------------------------- rendering
def problem_to_ck_args(problem: _Problem) -> list[str]:
    """``-key=value`` tokens for ``tile_example_fmha_fwd`` / ``_bwd`` (non-default values only)."""
    p = problem
    if p.family is Family.BATCH_PREFILL:
        raise ProblemError("family: 'batch_prefill' has no tile_example command line")
    if p.min_seqlen_q:
        raise ProblemError(
            f"min_seqlen_q: {p.min_seqlen_q} cannot be given to tile_example_fmha_fwd, which has no argument for it"
        )
    pairs = _shape_args(p) + _common_args(p) + (_bwd_args(p) if p.is_backward else _fwd_args(p))
    tokens = [f"-{k}={v}" for k, v in pairs if v is not None]
    _check_round_trip(p, tokens)
    return tokens


def _check_round_trip(p: _Problem, tokens: list[str]) -> None:
    """The rendered line must run ``p``: where the runner draws what the problem fixes (the KV-cache lengths of an
    append-KV batch), a problem other than the draws has no command line."""
    back = type(p)(**parse_ck_args(tokens, binary=p.ck_binary).fields)
    if back == p:
        return
    for f in fields(p):
        want, got = getattr(p, f.name), getattr(back, f.name)
        if want != got:
            raise ProblemError(
                f"{f.name}: {want!r} has no tile_example_fmha_{p.ck_binary} command line: the runner would run "
                f"{f.name}={got!r} for {' '.join(tokens)} (it draws the lengths it is not given: ckfmha.ck_seqlens)"
            )


def problem_to_ck_command(problem: _Problem) -> str:
    """The whole command line: ``tile_example_fmha_fwd`` / ``_bwd`` and :func:`problem_to_ck_args`."""
    return " ".join([f"tile_example_fmha_{problem.ck_binary}"] + problem_to_ck_args(problem))


# Each of the following lists (argument, value) in the order they are written; None: CK's default, not written.
def _shape_args(p: _Problem) -> list[tuple[str, Any]]:
    group = p.mode is Mode.GROUP
    out: list[tuple[str, Any]] = [
        ("prec", p.dtype.value),
        ("mode", 1 if group else None),
        ("b", p.batch),
        ("h", p.nhead_q),
        ("h_k", p.nhead_k if p.nhead_k != p.nhead_q else None),
    ]
    if group:
        out += [
            ("s", ",".join(map(str, p.seqlens_q_list))),
            ("s_k", ",".join(map(str, p.seqlens_k_list))),
            ("s_qpad", None if p.s_qpad is None else ",".join(map(str, p.s_qpad))),
            ("s_kpad", None if p.s_kpad is None else ",".join(map(str, p.s_kpad))),
        ]
    else:
        out += [("s", p.seqlen_q), ("s_k", p.seqlen_k)]
        if p.family is Family.FWD:  # cu_seqlen_q / cu_seqlen_k; a KV cache's per-batch lengths are drawn
            out += [
                ("q_eff_lens", None if p.q_eff_lens is None else ",".join(map(str, p.q_eff_lens))),
                ("kv_eff_lens", None if p.kv_eff_lens is None else ",".join(map(str, p.kv_eff_lens))),
            ]
    return out + [("d", p.hdim_q), ("d_v", p.hdim_v if p.hdim_v != p.hdim_q else None)]


def _common_args(p: _Problem) -> list[tuple[str, Any]]:
    bias = None
    if p.bias is not Bias.NONE:
        tok = "e" if p.bias is Bias.ELEMENTWISE else "a"
        bias = tok if p.bias_rank == 0 else f"{tok}:{p.bias_rank}"
    return [
        ("scale" if p.is_backward else "scale_s", repr(p.scale) if p.scale else None),
        ("iperm", 0 if p.input_layout is not Layout.BHSD else None),
        ("operm", 0 if p.output_layout is not Layout.BHSD else None),
        ("bias", bias),
        ("mask", p.mask.to_ck() if p.mask.kind is not MaskKind.NONE else None),
        ("p_drop", repr(p.p_drop) if p.p_drop else None),
        ("drop_seed", p.drop_seed if p.drop_seed != 1 else None),
        ("drop_offset", p.drop_offset or None),
    ]


def _bwd_args(p: _Problem) -> list[tuple[str, Any]]:
    return [("dbias", 1 if p.dbias else None), ("deterministic", 1 if p.deterministic else None)]


def _fwd_args(p: _Problem) -> list[tuple[str, Any]]:
    return [
        ("lse", 1 if p.lse else None),
        ("vlayout", "c" if p.vlayout is VLayout.COL else None),
        ("logits_soft_cap", repr(p.logits_soft_cap) if p.logits_soft_cap else None),
        ("init_sink", 1 if p.sink else None),
        ("qscale", _QSCALE_RENDERED[p.qscale] if p.qscale is not QScale.NONE else None),
        ("s_knew", p.seqlen_knew or None),
        ("rotary_dim", p.rotary_dim or None),
        ("rotary_interleaved", (1 if p.rope is Rope.INTERLEAVED else 0) if p.rotary_dim else None),
        ("num_splits", p.num_splits if p.num_splits != 1 else None),
        ("page_block_size", p.page_block_size or None),
        ("cache_batch_idx", 1 if p.cache_batch_idx else None),
    ]
