"""Command-line options and ini keys of the plugin, and their validation into :class:`Settings`.

Every option is also an ini key (``ckfmha_<name>``) except ``--ckfmha-category`` and ``--ckfmha-ck-smoke`` (so a
project's ``pytest`` run never turns into a matrix or smoke-suite run by accident),
``--ckfmha-filter``/``--ckfmha-filter-file``/``--ckfmha-sweep`` and ``--ckfmha-report``.  The command line wins over the ini file.  A bad value raises ``pytest.UsageError`` naming
the option, the value and the rule.

Validation is one place: :data:`_CONVERTERS` maps each option to its converter (a given value -> its setting, or
the ``UsageError`` ``--ckfmha-<option>: '<value>' <rule>``) and its default; :func:`parse` runs them in the table's
order and each rule between options (:data:`_CROSS_CHECKS`) right after the later of its options, so the first
bad value is the error.  The choices of ``category``, ``backend``, ``mask-mode`` and ``isolation`` are shown in
their metavars but checked by the converters, not by argparse: ini values bypass argparse, and the message is
ckfmha's own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pytest

from ckfmha.categories import CATEGORIES  # noqa: E402  (imports nothing but the ckfmha package file)
from pytest_ckfmha.reporting import CHECKPOINT_SECONDS, check_writable

BACKENDS = ("auto", "cpu", "triton", "hip")
DEFAULT_MAX_KERNELS = 2
DEFAULT_CPU_MAX_FLOPS = 5e9
DEFAULT_BENCH_REPEAT = 10
DEFAULT_TIMEOUT_S = 600.0
ISOLATIONS = ("process", "inline")
CK_SMOKE_CHOICES = ("fwd", "bwd", "all")
MASK_MODES = ("simplified", "generic")
PARITY_TORCH_BACKENDS = ("math", "efficient", "flash", "cudnn", "flex")


def _choices(allowed: tuple[str, ...]) -> str:
    """A metavar listing an option's choices as argparse writes them: ``{a,b,c}``."""
    return "{" + ",".join(allowed) + "}"


# the ini value types this plugin declares (a subset of what pytest's Parser.addini accepts)
IniType = Literal["string", "linelist", "bool"]

# (name, argparse keywords, ini type -- None: no ini key)
_OPTIONS: list[tuple[str, dict[str, Any], IniType | None]] = [
    (
        "category",
        dict(
            metavar=_choices(CATEGORIES),
            help="run the testing matrix of this category (smoke < full < nightly); without it the "
            "plugin creates no items",
        ),
        None,
    ),
    (
        "ck-smoke",
        dict(
            metavar=_choices(("fwd", "bwd", "all")),
            help="run a CK checkout's own smoke scripts (--ckfmha-ck-root): every command line they give "
            "tile_example_fmha_fwd / _bwd is an item (docs/ck_smoke.md)",
        ),
        None,
    ),
    (
        "arch",
        dict(
            metavar="ARCH",
            help="kernel space to test (gfx90a, gfx942, gfx950, gfx1100, gfx1201, ...); "
            "default: detected from the GPU through torch when importable, else the arch data's default "
            "arch",
        ),
        "string",
    ),
    (
        "backend",
        dict(
            metavar=_choices(BACKENDS),
            help="backend running the kernels; auto: hip on ROCm with a HIP compiler and a CK checkout "
            "(--ckfmha-ck-root / $CK_ROOT), else triton with a GPU, else cpu (default auto)",
        ),
        "string",
    ),
    (
        "family",
        dict(
            action="append",
            metavar="FAMILY",
            help="only these problem families (fwd, fwd_splitkv, fwd_pagedkv, fwd_appendkv, batch_prefill, "
            "bwd); repeatable or comma-separated",
        ),
        "linelist",
    ),
    ("receipt", dict(metavar="N", help="CK receipt selecting the kernel set (default 0)"), "string"),
    (
        "profile",
        dict(metavar="NAME", help="receipt by profile name (ck_default, flash, pytorch, fp32, fp8, ...)"),
        "string",
    ),
    ("mask-mode", dict(metavar=_choices(MASK_MODES), help="CK generator mask mode (default simplified)"), "string"),
    ("sweep", dict(metavar="FILE", help="tile-engine sweep JSON narrowing the kernel set"), None),
    ("filter", dict(metavar="EXPR", help="filter expression over c.<field> narrowing the kernel set"), None),
    ("filter-file", dict(metavar="FILE", help="Python file defining filter_config(c) -> bool"), None),
    (
        "max-kernels-per-shape",
        dict(
            metavar="N",
            help="kernel items per shape (best-ranked first, then spread over "
            "distinct pipeline/tile); 0 = all (default 2)",
        ),
        "string",
    ),
    ("seed", dict(metavar="N", help="seed of the inputs (default 0)"), "string"),
    (
        "report",
        dict(action="append", metavar="PATH", help="write the report to PATH (.json or .csv); repeatable"),
        None,
    ),
    (
        "bench",
        dict(
            action="store_true",
            default=None,
            help="time each item: a warm-up, then --ckfmha-bench-repeat runs (the L2 cache flushed before each on "
            "GPUs); the report gets the median, the fastest and the slowest",
        ),
        "bool",
    ),
    (
        "bench-repeat",
        dict(metavar="N", help=f"timed runs per item with --ckfmha-bench (default {DEFAULT_BENCH_REPEAT})"),
        "string",
    ),
    (
        "shard",
        dict(
            metavar="K/N",
            help="run shard K of N (1 <= K <= N): the items are split by kernel (each kernel's items in one shard), "
            "balanced by estimated cost, the same way on every machine; merge the reports with ckfmha merge",
        ),
        None,
    ),
    (
        "resume",
        dict(
            metavar="REPORT",
            help="skip the items an earlier (interrupted) report of the same run already completed and carry their "
            "rows into this report",
        ),
        None,
    ),
    (
        "ck-root",
        dict(
            metavar="PATH",
            help="a CK checkout (holds example/ck_tile/01_fmha/generate.py): its kernel space, its smoke scripts "
            "and its kernels for the hip backend (default $CK_ROOT)",
        ),
        "string",
    ),
    (
        "heuristics",
        dict(
            metavar="FILE",
            help="the dispatcher's tie-break table (heuristics YAML, e.g. from ckfmha tune) instead of the packaged "
            "one",
        ),
        "string",
    ),
    (
        "cpu-max-flops",
        dict(
            metavar="F",
            help=f"skip shapes above this many FLOPs on the cpu backend (default {DEFAULT_CPU_MAX_FLOPS:g})",
        ),
        "string",
    ),
    (
        "matrix",
        dict(
            action="append",
            metavar="PATH",
            help="matrix YAML files or directories to use instead of the packaged ones; repeatable",
        ),
        "linelist",
    ),
    (
        "cache-dir",
        dict(metavar="DIR", help="build + reference cache root (default $CKFMHA_CACHE_DIR, else ~/.cache/ckfmha)"),
        "string",
    ),
    (
        "parity",
        dict(
            metavar="UPSTREAM",
            help="parity against an upstream: tile_example or "
            f"torch[:{'|'.join(PARITY_TORCH_BACKENDS)}]; items: upstream's 14 parity configurations plus "
            "the category's shapes; with --ckfmha-ck-smoke the smoke lines instead (tile_example runs each line "
            "as the script did)",
        ),
        None,
    ),
    (
        "upstream-bin",
        dict(metavar="DIR", help="directory of tile_example_fmha_fwd/_bwd (default $CK_TILE_EXAMPLE_DIR)"),
        "string",
    ),
    (
        "timeout",
        dict(
            metavar="SECONDS",
            help="fail an item whose kernel work runs longer than this and kill its "
            f"process (default {DEFAULT_TIMEOUT_S:g}; 0 = no limit)",
        ),
        "string",
    ),
    (
        "isolation",
        dict(
            metavar=_choices(ISOLATIONS),
            help="process (default): every item's kernel work runs in a "
            "child process, so a crash or hang fails that item alone; inline: in the pytest process "
            "(for --pdb and profilers; no containment, no timeout)",
        ),
        "string",
    ),
    (
        "report-every",
        dict(
            metavar="SECONDS",
            help="while the run goes on, rewrite the report files (atomically) "
            f"at most this often, so a killed run leaves a report (default {CHECKPOINT_SECONDS:g})",
        ),
        "string",
    ),
    (
        "allow-empty",
        dict(
            action="store_true",
            default=None,
            help="let a run whose selection matches no kernel, or "
            "whose every item is skipped, pass (default: that is an error)",
        ),
        "bool",
    ),
]


def _dest(name: str) -> str:
    """The option's dest and ini key: ``ckfmha_<name>`` with ``_`` for ``-``."""
    return f"ckfmha_{name.replace('-', '_')}"


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ckfmha", "ckfmha FMHA testing matrix")
    for name, kw, ini_type in _OPTIONS:
        kw = dict(kw)
        kw.setdefault("default", None)
        group.addoption(f"--ckfmha-{name}", dest=_dest(name), **kw)
        if ini_type is not None:
            parser.addini(_dest(name), help=f"default of --ckfmha-{name}", type=ini_type, default=None)


@dataclass(frozen=True)
class Settings:
    category: str | None
    arch: str
    arch_source: str  # option | ini | detected | default | controller
    backend: str
    families: tuple[str, ...] | None
    receipt: str | None
    profile: str | None
    mask_mode: str
    sweep: str | None
    filter: str | None
    filter_file: str | None
    max_kernels_per_shape: int
    seed: int
    reports: tuple[Path, ...]
    bench: bool
    cpu_max_flops: float
    matrices: tuple[str, ...] | None
    cache_dir: Path
    gpu_marker: bool = field(default=False)
    parity: str | None = None
    upstream_bin: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S  # 0 = no limit
    report_every: float = CHECKPOINT_SECONDS
    bench_repeat: int = DEFAULT_BENCH_REPEAT
    shard: tuple[int, int] | None = None  # (K, N)
    resume: str | None = None
    heuristics: str | None = None
    ck_root: Path | None = None
    isolation: str = "process"
    allow_empty: bool = False
    ck_smoke: str | None = None  # fwd | bwd | all: the checkout's smoke scripts (pytest_ckfmha/ck_smoke.py)

    @property
    def active(self) -> bool:
        return self.category is not None or self.parity is not None or self.ck_smoke is not None


def _bad(option: str, value: Any, rule: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-{option}: {value!r} {rule}")


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    dest = _dest(name)
    v = config.getoption(dest, None)
    if v is not None:
        return v, "option"
    try:
        iv = config.getini(dest)
    except ValueError:
        return None, "default"
    if iv in (None, "", []):
        return None, "default"
    return iv, "ini"


def _int(option: str, v: Any, lo: int = 0) -> int:
    try:
        n = int(str(v).strip(), 0)
    except ValueError:
        raise _bad(option, v, "is not an integer") from None
    if n < lo:
        raise _bad(option, v, f"must be >= {lo}")
    return n


def any_given(config: pytest.Config) -> bool:
    return any(_raw(config, name)[1] == "option" for name, _, _ in _OPTIONS)


# ---------------------------------------------------------------------- converters: a given value -> its setting
@dataclass(frozen=True)
class _Given:
    """One option's value as given (``None``: not given) and where: ``option`` (command line), ``ini`` or
    ``default``."""

    option: str
    value: Any
    source: str
    config: pytest.Config

    def path(self, text: str) -> Path:
        """``text`` as a path; a relative one from the rootdir for an ini value, else from the invocation
        directory."""
        p = Path(text)
        return (
            p
            if p.is_absolute()
            else (self.config.rootpath if self.source == "ini" else self.config.invocation_params.dir) / p
        )


_Converter = Callable[[_Given], Any]


def _one_of(allowed: tuple[str, ...], noun: str, empty: str | None = None) -> _Converter:
    """A converter to one of ``allowed`` (``... is not <noun>; allowed: ...``).  With ``empty`` (the ini-able
    backend, mask-mode, isolation) surrounding blanks are stripped; an empty value given on the command line is an
    error like any other (an ini key left empty counts as not given, see :func:`_raw`); without it (category, a
    command-line-only option) the value is taken exactly as given."""

    def convert(given: _Given) -> str:
        value = given.value if empty is None else str(given.value).strip()
        if value not in allowed:
            raise _bad(given.option, value, f"is not {noun}; allowed: {', '.join(allowed)}")
        return value

    return convert


def _number(what: str, in_range: Callable[[float], bool], rule: str) -> _Converter:
    """A converter to a finite float: ``is not <what>`` when the value is no number, ``rule`` when it is not
    finite or not ``in_range``."""

    def convert(given: _Given) -> float:
        try:
            x = float(str(given.value).strip())
        except ValueError:
            raise _bad(given.option, given.value, f"is not {what}") from None
        if not (in_range(x) and math.isfinite(x)):
            raise _bad(given.option, given.value, rule)
        return x

    return convert


def _items(values: Iterable[Any]) -> list[str]:
    """The items of a repeatable option's values, each also split at commas; blanks stripped, empty items
    dropped."""
    return [part.strip() for value in values for part in str(value).split(",") if part.strip()]


def _as_given(given: _Given) -> Any:
    return given.value


def _as_text(given: _Given) -> str:
    return str(given.value)


def _to_known_arch(given: _Given) -> str:
    from ckfmha.archs import known_archs

    archs = known_archs()
    arch = str(given.value).strip()
    if arch not in archs:
        raise _bad("arch", arch, f"is not a known arch; known: {', '.join(archs)}")
    return arch


def _to_families(given: _Given) -> tuple[str, ...]:
    from ckfmha.families import FamilyError, problem_family

    out: list[str] = []
    for item in _items(given.value):
        try:
            family = problem_family(item)
        except FamilyError as e:
            raise _bad("family", item, f"is not a problem family ({e})") from None
        if family not in out:
            out.append(family)
    return tuple(out)


def _to_sweep(given: _Given) -> str:
    from ckfmha.sweep import load_sweep

    try:
        load_sweep(given.value)
    except (OSError, ValueError) as e:
        raise _bad("sweep", given.value, f"is not a valid sweep file: {e}") from None
    return given.value


def _to_filter(given: _Given) -> str:
    from ckfmha.filters import FilterError, compile_filter

    try:
        compile_filter(given.value)
    except FilterError as e:
        raise _bad("filter", given.value, f"is not a valid filter expression: {e}") from None
    return given.value


def _to_filter_file(given: _Given) -> str:
    from ckfmha.filters import load_filter_file

    if not Path(given.value).is_file():
        raise _bad("filter-file", given.value, "does not exist")
    try:
        load_filter_file(given.value)
    except Exception as e:  # noqa: BLE001 - the user's file: any error is a usage error
        raise _bad("filter-file", given.value, f"cannot be loaded: {e}") from None
    return given.value


def _to_count(given: _Given) -> int:
    return _int(given.option, given.value, 0)


def _to_repeat(given: _Given) -> int:
    return _int(given.option, given.value, 1)


def _to_shard(given: _Given) -> tuple[int, int]:
    import re

    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(given.value))
    if not m:
        raise _bad(given.option, given.value, "is not K/N (shard K of N, e.g. 2/4)")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise _bad(given.option, given.value, "needs 1 <= K <= N")
    return k, n


def _to_resume(given: _Given) -> str:
    from ckfmha.runreport import ReportError, load_report

    try:
        load_report(given.value)
    except ReportError as e:
        raise _bad(given.option, given.value, f"is not a report to resume from: {e}") from None
    return str(given.value)


def _to_heuristics(given: _Given) -> str:
    from ckfmha.dispatcher import HeuristicsError, load_heuristics

    try:
        load_heuristics(given.value)
    except HeuristicsError as e:
        raise _bad(given.option, given.value, f"is not a heuristics file: {e}") from None
    return str(given.value)


def _to_ck_root(given: _Given) -> Path:
    from ckfmha.cktree import CKTreeError, resolve_ck_root

    try:
        return resolve_ck_root(given.value)
    except CKTreeError as e:
        raise _bad(given.option, given.value, str(e)) from None


def _default_ck_root() -> Path | None:
    """``$CK_ROOT`` when set (checked like the option), else no checkout."""
    from ckfmha.cktree import CKTreeError, ck_root_from_env

    try:
        return ck_root_from_env()
    except CKTreeError as e:
        raise pytest.UsageError(str(e)) from None


def _to_seed(given: _Given) -> int:
    seed = _int("seed", given.value, 0)
    if seed >= 2**32:
        raise _bad("seed", given.value, "must be < 2**32")
    return seed


def _to_reports(given: _Given) -> tuple[Path, ...]:
    reports: list[Path] = []
    for part in _items(given.value):
        p = Path(part)
        if p.suffix.lower() not in (".json", ".csv"):
            raise _bad("report", part, "must end in .json or .csv")
        why = check_writable(p)
        if why is not None:
            raise _bad("report", part, f"{why}: the report could not be written there (checked before anything runs)")
        reports.append(p)
    return tuple(reports)


_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


def _to_flag(given: _Given) -> bool:
    """``store_true`` options and ``bool`` ini keys (a string: 1/true/yes/on or 0/false/no/off; anything else is an
    error, never a silent false)."""
    v = given.value
    if not isinstance(v, str):
        return bool(v)
    word = v.strip().lower()
    if word not in _TRUE_WORDS + _FALSE_WORDS:
        raise _bad(given.option, v, f"is not a flag value; allowed: {', '.join(_TRUE_WORDS + _FALSE_WORDS)}")
    return word in _TRUE_WORDS


def _to_matrices(given: _Given) -> tuple[str, ...]:
    matrices: list[str] = []
    for part in _items(given.value):
        p = given.path(part)
        if not p.exists():
            raise _bad("matrix", part, "does not exist (a matrix YAML file or a directory of them)")
        matrices.append(str(p))
    return tuple(matrices)


_DEFAULT_CACHE_DIR = "the cache directory ($CKFMHA_CACHE_DIR, else $XDG_CACHE_HOME/ckfmha or ~/.cache/ckfmha)"


def _usable_cache_dir(path: Path, where: str) -> Path:
    from ckfmha.backends.cache import check_cache_dir

    why = check_cache_dir(path)
    if why is not None:
        raise pytest.UsageError(f"{where}: {str(path)!r} {why}; name a writable one with --ckfmha-cache-dir")
    return path


def _to_cache_dir(given: _Given) -> Path:
    return _usable_cache_dir(Path(given.value), "--ckfmha-cache-dir")


def _default_cache_dir() -> Path:
    from ckfmha.backends.cache import cache_root

    return _usable_cache_dir(cache_root(), _DEFAULT_CACHE_DIR)


def _to_parity(given: _Given) -> str:
    parity = str(given.value).strip()
    kind, _, torch_backend = parity.partition(":")
    if not (
        parity == "tile_example" or (kind == "torch" and (not torch_backend or torch_backend in PARITY_TORCH_BACKENDS))
    ):
        raise _bad(
            "parity",
            parity,
            "is not an upstream; allowed: tile_example, torch, "
            + ", ".join(f"torch:{b}" for b in PARITY_TORCH_BACKENDS),
        )
    return parity


def _to_upstream_bin(given: _Given) -> str:
    ub = given.path(str(given.value))
    if not ub.is_dir():
        raise _bad(
            "upstream-bin",
            str(given.value),
            "is not a directory (it should hold tile_example_fmha_fwd and tile_example_fmha_bwd)",
        )
    return str(ub)


class _Option(NamedTuple):
    convert: _Converter  # a given value -> its setting, or the UsageError
    default: Any = None  # the setting when not given
    default_from: Callable[[], Any] | None = None  # or: computes (and checks) the setting when not given


def _choice(allowed: tuple[str, ...], noun: str, default: str) -> _Option:
    """An ini-able choice: not given or empty, it is ``default``."""
    return _Option(_one_of(allowed, noun, empty=default), default)


_CONVERTERS: dict[str, _Option] = {  # in the order parse checks them
    "category": _Option(_one_of(CATEGORIES, "a category")),
    "ck-smoke": _Option(_one_of(CK_SMOKE_CHOICES, "a smoke suite")),
    "arch": _Option(_to_known_arch),  # not given: the detected arch or the arch data's default (parse)
    "backend": _choice(BACKENDS, "a backend", "auto"),
    "family": _Option(_to_families),
    "receipt": _Option(_as_text),
    "profile": _Option(_as_given),
    "mask-mode": _choice(MASK_MODES, "a mask mode", "simplified"),
    "sweep": _Option(_to_sweep),
    "filter": _Option(_to_filter),
    "filter-file": _Option(_to_filter_file),
    "max-kernels-per-shape": _Option(_to_count, DEFAULT_MAX_KERNELS),
    "seed": _Option(_to_seed, 0),
    "report": _Option(_to_reports, ()),
    "bench": _Option(_to_flag, False),
    "bench-repeat": _Option(_to_repeat, DEFAULT_BENCH_REPEAT),
    "shard": _Option(_to_shard),
    "resume": _Option(_to_resume),
    "heuristics": _Option(_to_heuristics),
    "ck-root": _Option(_to_ck_root, default_from=_default_ck_root),
    "allow-empty": _Option(_to_flag, False),
    "timeout": _Option(
        _number("a number of seconds", lambda s: s >= 0, "must be a finite number of seconds >= 0 (0 = no limit)"),
        DEFAULT_TIMEOUT_S,
    ),
    "report-every": _Option(
        _number("a number of seconds", lambda s: s > 0, "must be a finite number of seconds > 0"), CHECKPOINT_SECONDS
    ),
    "isolation": _choice(ISOLATIONS, "an isolation", "process"),
    "cpu-max-flops": _Option(
        _number("a number", lambda f: f > 0, "must be a finite number > 0"), DEFAULT_CPU_MAX_FLOPS
    ),
    "matrix": _Option(_to_matrices),
    "cache-dir": _Option(_to_cache_dir, default_from=_default_cache_dir),
    "parity": _Option(_to_parity),
    "upstream-bin": _Option(_to_upstream_bin),
}


# ---------------------------------------------------------------------- rules between options
def _check_receipt_or_profile(given: dict[str, _Given], values: dict[str, Any]) -> None:
    """One of --ckfmha-receipt and --ckfmha-profile, naming a known receipt."""
    receipt, profile = given["receipt"].value, given["profile"].value
    if receipt is not None and profile is not None:
        raise _bad("profile", profile, f"cannot be combined with --ckfmha-receipt={receipt!r}; give one of them")
    from ckfmha.receipts import resolve_receipt

    try:
        resolve_receipt(receipt, profile=profile)
    except ValueError as e:
        which = "profile" if profile is not None else "receipt"
        raise _bad(which, profile if profile is not None else receipt, f"is not valid: {e}") from None


def _check_timeout_is_enforceable(given: dict[str, _Given], values: dict[str, Any]) -> None:
    """A --ckfmha-timeout on the command line needs the process isolation."""
    if values["isolation"] == "inline" and given["timeout"].source == "option" and values["timeout"]:
        raise _bad(
            "timeout",
            given["timeout"].value,
            "cannot be enforced with --ckfmha-isolation inline (nothing "
            "can stop a hung kernel in the pytest process); use --ckfmha-isolation process",
        )


def _check_ck_smoke_has_a_checkout(given: dict[str, _Given], values: dict[str, Any]) -> None:
    """--ckfmha-ck-smoke runs a checkout's scripts: it needs --ckfmha-ck-root (or $CK_ROOT)."""
    if values["ck-smoke"] is not None and values["ck-root"] is None:
        raise _bad(
            "ck-smoke",
            values["ck-smoke"],
            "needs a CK checkout whose smoke scripts it runs: give --ckfmha-ck-root PATH (or set $CK_ROOT)",
        )


_CROSS_CHECKS: dict[str, Callable[[dict[str, _Given], dict[str, Any]], None]] = {
    "ck-root": _check_ck_smoke_has_a_checkout,
    "profile": _check_receipt_or_profile,
    "isolation": _check_timeout_is_enforceable,
}
"""Rules between options, each run right after the option it is keyed by (the later of its options)."""


def parse(config: pytest.Config, detected_arch: str | None = None) -> Settings:
    """Validate every option (UsageError on the first bad one, in :data:`_CONVERTERS`' order) and return the
    settings."""
    given: dict[str, _Given] = {}
    v: dict[str, Any] = {}
    for name, option in _CONVERTERS.items():
        g = given[name] = _Given(name, *_raw(config, name), config)
        if g.value is not None:
            v[name] = option.convert(g)
        else:
            v[name] = option.default_from() if option.default_from is not None else option.default
        if name in _CROSS_CHECKS:
            _CROSS_CHECKS[name](given, v)
    arch, src = v["arch"], given["arch"].source
    if arch is None:
        from ckfmha.archs import default_arch, known_archs

        archs = known_archs()
        arch, src = (detected_arch, "detected") if detected_arch in archs else (default_arch(), "default")
    return Settings(
        category=v["category"],
        arch=arch,
        arch_source=src,
        backend=v["backend"],
        families=v["family"],
        receipt=v["receipt"],
        profile=v["profile"],
        mask_mode=v["mask-mode"],
        sweep=v["sweep"],
        filter=v["filter"],
        filter_file=v["filter-file"],
        max_kernels_per_shape=v["max-kernels-per-shape"],
        seed=v["seed"],
        reports=v["report"],
        bench=v["bench"],
        cpu_max_flops=v["cpu-max-flops"],
        matrices=v["matrix"],
        cache_dir=v["cache-dir"],
        gpu_marker=v["backend"] in ("triton", "hip"),
        parity=v["parity"],
        upstream_bin=v["upstream-bin"],
        timeout=v["timeout"],
        isolation=v["isolation"],
        allow_empty=v["allow-empty"],
        report_every=v["report-every"],
        bench_repeat=v["bench-repeat"],
        shard=v["shard"],
        resume=v["resume"],
        heuristics=v["heuristics"],
        ck_root=v["ck-root"],
        ck_smoke=v["ck-smoke"],
    )


_DETECT_SCRIPT = """
import torch
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    gcn = str(getattr(props, "gcnArchName", "") or "")
    if getattr(torch.version, "hip", None) and gcn.startswith("gfx"):
        print(gcn.split(":")[0])
    else:
        major, minor = torch.cuda.get_device_capability(0)
        print(f"sm{major}{minor}")
"""
DETECT_TIMEOUT_S = 120.0


def detect_arch() -> str | None:
    """The arch of GPU 0 through torch (ROCm: gfx name, CUDA: ``sm<major><minor>``), or None.

    Runs in a subprocess, and only when torch is installed: the pytest process must never initialize CUDA, or the
    kernel child processes it forks could not use the GPU (isolation.py).  Never called in xdist workers (the
    controller passes its answer).  Set ``CKFMHA_NO_DETECT=1`` to skip it."""
    import importlib.util
    import subprocess
    import sys

    if os.environ.get("CKFMHA_NO_DETECT") or importlib.util.find_spec("torch") is None:
        return None
    try:
        out = subprocess.run(
            [sys.executable, "-c", _DETECT_SCRIPT],
            capture_output=True,
            text=True,
            timeout=DETECT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):  # detection is best effort
        return None
    arch = out.stdout.strip().splitlines()[-1].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return arch or None
