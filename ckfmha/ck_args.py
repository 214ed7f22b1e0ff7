"""CK's tile_example argument dialect: parsing ``tile_example_fmha_fwd`` / ``_bwd`` command lines into a
:class:`~ckfmha.problem.Problem` and rendering one back.

:meth:`Problem.from_ck_args <ckfmha.problem.Problem.from_ck_args>`, :meth:`~ckfmha.problem.Problem.to_ck_args`
and :meth:`~ckfmha.problem.Problem.to_ck_command` delegate to :func:`problem_from_ck_args`,
:func:`problem_to_ck_args` and :func:`problem_to_ck_command`.  Every error is a
:class:`~ckfmha.problem.ProblemError` naming the argument (``-d``, ``-mask``...) or field, the value and the rule.

Round trip: ``problem_from_ck_args(problem_to_ck_args(p), binary=p.ck_binary) == p`` (``batch_prefill`` has no
tile_example binary; ``min_seqlen_q`` and, for the backward, ``s_kpad`` have no argument: rendering them is an
error).  Rendering writes non-default values only, in a fixed order.

Parsing.  Runner-only arguments (:data:`RUNNER_ONLY_ARGS`: ``-v -kname -init -seed -warmup -repeat -timer -json
-jsonfile -drop_prefs``) are accepted and ignored; CK arguments Problem has no field for (``-q_eff_lens
-kv_eff_lens -s_qpad``, bwd ``-s_qpad -s_kpad``) are an error saying so; any other unknown argument is an error.
Values are read as CK's ArgParser (ck_tile/host/arg_parser.hpp) reads them: a scalar (``-d``, ``-b``,
``-p_drop``...; ``atoi``/``atof``) may end in one trailing comma (``-d=16,`` is 16, a form CK's own smoke logs use)
but a list where one number belongs (``-d=16,32``) is an error; a list (``-s``, ``-s_k``, ``-s_kpad``;
``get_int_vec``) splits at every comma and reads an empty item as 0, as CK does (``-s=16,`` is ``16, 0``).
``-mask`` takes newer CK's ``t:l,r,sink`` / ``b:l,r,sink`` with sink 0 only (:mod:`ckfmha.masking`: sink tokens
are not modelled; a non-zero sink is an error naming it).  An absent argument takes CK's default
(example_fmha_fwd.cpp / example_fmha_bwd.cpp: ``-b=2 -h=8 -s=3328 -d=128 -prec=fp16``...).  The fwd family is
inferred from the arguments: ``-s_knew`` or ``-rotary_dim`` -> fwd_appendkv, else ``-num_splits`` other than 1 or
``-cache_batch_idx`` -> fwd_splitkv, else ``-page_block_size`` -> fwd_pagedkv, else fwd.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ckfmha.kernel import Bias, DType, Family, Mode, QScale, Rope, VLayout
from ckfmha.limits import INT32_MAX
from ckfmha.masking import MaskError, MaskKind, MaskSpec
from ckfmha.problem import BWD, BWD_DTYPES, FWD_DTYPES, Layout, Problem, ProblemError

RUNNER_ONLY_ARGS = frozenset(
    {"v", "kname", "init", "seed", "warmup", "repeat", "timer", "json", "jsonfile", "drop_prefs"}
)
"""Arguments of the tile_example runners that say nothing about the problem: accepted and ignored."""
FWD_KEYS = frozenset(
    {
        "mode",
        "b",
        "h",
        "h_k",
        "s",
        "s_k",
        "s_kpad",
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
    }
)
# Arguments CK's tile_example binaries take (example_fmha_fwd.cpp / example_fmha_bwd.cpp, and CK's smoke scripts use
# them) that Problem has no field for: an error that says so, not "no such argument".
UNMODELLED_FWD = {
    "q_eff_lens": "per-batch effective query lengths (batch-mode padding)",
    "kv_eff_lens": "per-batch effective key lengths (batch-mode padding)",
    "s_qpad": "per-sequence physical query lengths (group-mode query padding)",
}
UNMODELLED_BWD = {
    "s_qpad": "per-sequence physical query lengths (group-mode query padding)",
    "s_kpad": "per-sequence physical key lengths (group-mode key padding)",
}
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


def _to_unset_if_negative(k: str, v: str) -> int | None:
    """CK's ``-1`` (any negative) for "the same as another argument" (``-h_k``, ``-d_v``): ``None``."""
    n = _to_int(k, v)
    return None if n < 0 else n


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
    try:
        return MaskSpec.parse(v)
    except MaskError as e:
        raise ProblemError(f"-{k}: {e}") from None


def _to_vlayout(k: str, v: str) -> VLayout:
    if v not in ("r", "c"):
        raise ProblemError(f"-{k}: {v!r} must be r or c")
    return VLayout.ROW if v == "r" else VLayout.COL


def _to_explicit_length(k: str, v: str) -> int:
    """``-s_knew``: CK draws a random length for a negative one, which is not modelled."""
    n = _to_int(k, v)
    if n < 0:
        raise ProblemError(f"-{k}: {n} (random length) is not modelled; give an explicit length")
    return n


class _Arg(NamedTuple):
    """One tile_example argument read into Problem field(s): ``read(key, text)`` gives the value (a tuple of values
    where ``field`` names several); ``default`` is CK's default text for an absent argument."""

    key: str
    field: str | tuple[str, ...]
    read: Callable[[str, str], Any]
    default: str


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
_FWD_APPEND_ARGS = (
    _Arg("s_knew", "seqlen_knew", _to_explicit_length, "0"),
    _Arg("rotary_dim", "rotary_dim", _to_int, "0"),
)
_FWD_KV_CACHE_ARGS = (
    _Arg("num_splits", "num_splits", _to_int, "1"),
    _Arg("page_block_size", "page_block_size", _to_int, "0"),
    _Arg("cache_batch_idx", "cache_batch_idx", _to_bool, "0"),
)


def _read_args(kv: dict[str, str], table: Iterable[_Arg]) -> dict[str, Any]:
    """The Problem fields of ``table``'s arguments, read in order."""
    out: dict[str, Any] = {}
    for arg in table:
        value = arg.read(arg.key, kv.get(arg.key, arg.default))
        if isinstance(arg.field, tuple):
            out.update(zip(arg.field, value))
        else:
            out[arg.field] = value
    return out


# ---------------------------------------------------------------------- parsing
def problem_from_ck_args(args: "str | Iterable[str]", binary: str | None = None) -> Problem:
    """Parse tile_example arguments (a string or a list of ``-key=value`` tokens).  A leading program name
    (``tile_example_fmha_fwd`` / ``..._bwd``) selects the binary; otherwise ``binary`` (default ``fwd``)."""
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
    return _problem_from_key_values(_key_values(toks), binary)


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


def _problem_from_key_values(kv: dict[str, str], binary: str) -> Problem:
    """The Problem of one binary's arguments; each concern read in CK's order (the first bad argument is the
    error)."""
    _check_keys(kv, binary)
    kw = _shape_fields(kv)
    kw["dtype"] = _to_dtype(kv.get("prec", "fp16"), binary)
    scale_key = "scale" if binary == "bwd" else "scale_s"
    kw["scale"] = _to_float(scale_key, kv.get(scale_key, "0"))
    kw.update(_read_args(kv, _LAYOUT_BIAS_MASK_DROPOUT_ARGS))
    if binary == "bwd":
        kw["family"] = BWD
        kw.update(_read_args(kv, _BWD_ARGS))
    else:
        kw.update(_fwd_fields(kv, kw["dtype"]))
    return Problem(**kw)


def _check_keys(kv: dict[str, str], binary: str) -> None:
    keys = BWD_KEYS if binary == "bwd" else FWD_KEYS
    unmodelled = UNMODELLED_BWD if binary == "bwd" else UNMODELLED_FWD
    for k in kv:
        if k in unmodelled:
            raise ProblemError(
                f"-{k}: {kv[k]!r}: tile_example_fmha_{binary} takes -{k} ({unmodelled[k]}), which "
                "ckfmha's Problem does not model"
            )
        if k not in keys and k not in RUNNER_ONLY_ARGS:
            raise ProblemError(f"-{k}: no such argument for tile_example_fmha_{binary}")


def _shape_fields(kv: dict[str, str]) -> dict[str, Any]:
    """``-mode -b -h -h_k -s -s_k -s_kpad -d -d_v`` -> the Problem's mode, counts, lengths and head dims."""
    g = kv.get
    mode = _to_int("mode", g("mode", "0"))
    if mode not in (0, 1):
        raise ProblemError(f"-mode: {mode} is not a mode; allowed: 0 (batch), 1 (group)")
    b = _to_int("b", g("b", "2"))
    h = _to_int("h", g("h", "8"))
    h_k = _to_unset_if_negative("h_k", g("h_k", "-1"))
    sq = _int_list("s", g("s", "3328"))
    sk = _int_list("s_k", g("s_k", "-1"))
    d = _to_int("d", g("d", "128"))
    dv = _to_unset_if_negative("d_v", g("d_v", "-1"))
    kw: dict[str, Any] = dict(batch=b, nhead_q=h, nhead_k=h_k, hdim_q=d, hdim_v=dv)
    kw.update(_group_lengths(kv, b, sq, sk) if mode == 1 else _batch_lengths(kv, sq, sk))
    return kw


def _group_lengths(kv: dict[str, str], b: int, sq: list[int], sk: list[int]) -> dict[str, Any]:
    kw: dict[str, Any] = {"mode": Mode.GROUP}
    # One length is used for every sequence (CK draws random lengths around -s); Problem broadcasts it
    # after its int32 checks, so a huge -b is an error, not a huge list.
    if len(sq) == 1:
        kw["seqlen_q"] = sq[0]
    else:
        kw["seqlens_q"] = tuple(sq)
    if len(sk) == 1:
        if sk != [-1]:
            kw["seqlen_k"] = sk[0]  # -1: the keys are the queries
    else:
        kw["seqlens_k"] = tuple(sk)
    if "s_kpad" in kv:
        kp = _int_list("s_kpad", kv["s_kpad"])
        if kp != [-1]:
            if len(kp) == 1 and b <= INT32_MAX:  # a larger -b is Problem's error (batch exceeds INT32_MAX)
                kp = kp * b
            kw["s_kpad"] = tuple(kp)
    return kw


def _batch_lengths(kv: dict[str, str], sq: list[int], sk: list[int]) -> dict[str, Any]:
    if len(sq) != 1:
        raise ProblemError(
            f"-s: {kv.get('s')!r} lists several lengths {tuple(sq)} (an empty item is 0, as CK reads "
            "it); per-sequence lengths need -mode=1"
        )
    if len(sk) != 1:
        raise ProblemError(
            f"-s_k: {kv.get('s_k')!r} lists several lengths {tuple(sk)} (an empty item is 0, as CK "
            "reads it); per-sequence lengths need -mode=1"
        )
    if "s_kpad" in kv and _int_list("s_kpad", kv["s_kpad"]) != [-1]:
        raise ProblemError(f"-s_kpad: {kv['s_kpad']!r} is only modelled in group mode (-mode=1)")
    return {"seqlen_q": sq[0], "seqlen_k": None if sk[0] < 0 else sk[0]}


def _to_dtype(prec: str, binary: str) -> DType:
    try:
        return DType(prec)
    except ValueError:
        raise ProblemError(
            f"-prec: {prec!r} unsupported precision; allowed: "
            + ", ".join(x.value for x in (BWD_DTYPES if binary == "bwd" else FWD_DTYPES))
        ) from None


def _fwd_fields(kv: dict[str, str], dtype: DType) -> dict[str, Any]:
    """The arguments only tile_example_fmha_fwd takes, and the fwd family they imply (module doc)."""
    kw = _read_args(kv, _FWD_OUTPUT_ARGS)
    qscale = _qscale(kv, dtype)
    if qscale is not None:
        kw["qscale"] = qscale
    kw.update(_read_args(kv, _FWD_APPEND_ARGS))
    if kw["rotary_dim"]:
        kw["rope"] = (
            Rope.INTERLEAVED if _to_bool("rotary_interleaved", kv.get("rotary_interleaved", "1")) else Rope.HALF_ROTATED
        )
    kw.update(_read_args(kv, _FWD_KV_CACHE_ARGS))
    if kw["seqlen_knew"] or kw["rotary_dim"]:
        kw["family"] = Family.FWD_APPENDKV
    elif kw["num_splits"] != 1 or kw["cache_batch_idx"]:
        kw["family"] = Family.FWD_SPLITKV
    elif kw["page_block_size"]:
        kw["family"] = Family.FWD_PAGEDKV
    else:
        kw["family"] = Family.FWD
    return kw


def _qscale(kv: dict[str, str], dtype: DType) -> QScale | None:
    """``-qscale`` (newer CK), else the older ``-squant`` (``auto``: on for the fp8 family); ``None``: neither."""
    qs = kv.get("qscale")
    if qs is not None:
        if qs not in _QSCALE_TOKENS:
            raise ProblemError(f"-qscale: {qs!r} unknown; allowed: n, pt, bs, mx")
        return _QSCALE_TOKENS[qs]
    if "squant" in kv:
        sq_v = kv["squant"]
        on = dtype.is_fp8_family if sq_v == "auto" else _to_bool("squant", sq_v)
        return QScale.PERTENSOR if on else QScale.NONE
    return None


# ---------------------------------------------------------------------- rendering
def problem_to_ck_args(problem: Problem) -> list[str]:
    """``-key=value`` tokens for ``tile_example_fmha_fwd`` / ``_bwd`` (non-default values only)."""
    p = problem
    if p.family is Family.BATCH_PREFILL:
        raise ProblemError("family: 'batch_prefill' has no tile_example command line")
    if p.min_seqlen_q:
        raise ProblemError(
            f"min_seqlen_q: {p.min_seqlen_q} cannot be given to tile_example_fmha_fwd, which has no argument for it"
        )
    if p.is_backward and p.mode is Mode.GROUP and p.s_kpad is not None:
        raise ProblemError(
            f"s_kpad: {p.s_kpad!r} cannot be given to tile_example_fmha_bwd, which has no -s_kpad argument"
        )
    pairs = _shape_args(p) + _common_args(p) + (_bwd_args(p) if p.is_backward else _fwd_args(p))
    return [f"-{k}={v}" for k, v in pairs if v is not None]


def problem_to_ck_command(problem: Problem) -> str:
    """The whole command line: ``tile_example_fmha_fwd`` / ``_bwd`` and :func:`problem_to_ck_args`."""
    return " ".join([f"tile_example_fmha_{problem.ck_binary}"] + problem_to_ck_args(problem))


# Each of the following lists (argument, value) in the order they are written; None: CK's default, not written.
def _shape_args(p: Problem) -> list[tuple[str, Any]]:
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
            ("s_kpad", None if p.s_kpad is None else ",".join(map(str, p.s_kpad))),
        ]
    else:
        out += [("s", p.seqlen_q), ("s_k", p.seqlen_k)]
    return out + [("d", p.hdim_q), ("d_v", p.hdim_v if p.hdim_v != p.hdim_q else None)]


def _common_args(p: Problem) -> list[tuple[str, Any]]:
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


def _bwd_args(p: Problem) -> list[tuple[str, Any]]:
    return [("dbias", 1 if p.dbias else None), ("deterministic", 1 if p.deterministic else None)]


def _fwd_args(p: Problem) -> list[tuple[str, Any]]:
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
