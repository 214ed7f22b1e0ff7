"""Command-line options and ini keys of the plugin, and their validation into :class:`Settings`.

**One table.**  Each option is one row: a field of :class:`Settings` declared with :func:`option`, whose
:class:`Option` names the option (``--ckfmha-<name>``), its help, its converter (or its ``choices``), its default
(or the function computing it), its metavar and argparse action, its ini type and a rule it has with earlier
options (``check``).  Everything else derives from the rows (:data:`OPTIONS`, in the fields' order):
:func:`addoption` (the argparse options and ini keys), :func:`parse` (each value converted and checked, in the
table's order, each ``check`` right after its option, so the first bad value is the error) and the
:class:`Settings` object itself (the converted values; ``arch_source`` and ``gpu_marker`` are computed).

| concern | rule |
|---|---|
| ini keys | every option is also an ini key (``ckfmha_<name>``) except ``--ckfmha-category`` and ``--ckfmha-ck-smoke`` (so a project's ``pytest`` run never turns into a matrix or smoke-suite run by accident), ``--ckfmha-filter`` / ``--ckfmha-filter-file`` / ``--ckfmha-sweep``, ``--ckfmha-report``, ``--ckfmha-shard``, ``--ckfmha-shard-total``, ``--ckfmha-resume``, ``--ckfmha-compare``, ``--ckfmha-compare-fail``, ``--ckfmha-parity``, ``--ckfmha-fault``, ``--ckfmha-sample`` and ``--ckfmha-flash-attn-compat``; the command line wins over the ini file |
| a bad value | ``pytest.UsageError`` ``--ckfmha-<option>: '<value>' <rule>``, naming the option, the value and the rule |
| choices | ``category``, ``ck-smoke``, ``backend``, ``mask-mode``, ``isolation`` and ``reference`` show their choices in the metavar; the converter checks them, not argparse (ini values bypass argparse, and the message is ckfmha's own); an ini-able choice is stripped of blanks, a command-line-only one taken as given |
| vocabularies | read when the options are added or parsed (importing this module imports no ckfmha module but the package and its categories): categories from :mod:`ckfmha.categories`, backends from :func:`ckfmha.backends.backend_names` (+ ``auto``), mask modes from :class:`ckfmha.kernel.MaskMode`, families from :mod:`ckfmha.families`, smoke suites from :mod:`pytest_ckfmha.smoke_lines`, the receipt/profile rule from :func:`ckfmha.receipts.resolve_receipt` |
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from ckfmha.categories import CATEGORIES
from pytest_ckfmha.reporting import CHECKPOINT_SECONDS, check_writable
from pytest_ckfmha.sampling import Sample, to_sample
from pytest_ckfmha.smoke_lines import BINARIES

CK_SMOKE_CHOICES = tuple(BINARIES)
ISOLATIONS = ("process", "inline")
REFERENCES = ("numpy", "torch", "auto")
PARITY_TORCH_BACKENDS = ("math", "efficient", "flash", "cudnn", "flex")
DEFAULT_MAX_KERNELS = 2
DEFAULT_CPU_MAX_FLOPS = 5e9
DEFAULT_BENCH_REPEAT = 10
DEFAULT_TIMEOUT_S = 600.0


# The vocabularies other modules own, read when the options are added or parsed (importing this module, at every
# pytest start, imports no ckfmha module beyond the package file and its category list)
def backends() -> tuple[str, ...]:
    """``auto`` and :func:`ckfmha.backends.backend_names`."""
    from ckfmha.backends import backend_names

    return ("auto", *backend_names())


def mask_modes() -> tuple[str, ...]:
    """:class:`ckfmha.kernel.MaskMode`'s values."""
    from ckfmha.kernel import MaskMode

    return tuple(m.value for m in MaskMode)


def problem_families() -> tuple[str, ...]:
    """:data:`ckfmha.families.PROBLEM_FAMILIES`."""
    from ckfmha.families import PROBLEM_FAMILIES

    return PROBLEM_FAMILIES


# the ini value types this plugin declares (a subset of what pytest's Parser.addini accepts)
IniType = Literal["string", "linelist", "bool"]


def _dest(name: str) -> str:
    """The option's dest and ini key: ``ckfmha_<name>`` with ``_`` for ``-``."""
    return f"ckfmha_{name.replace('-', '_')}"


# ---------------------------------------------------------------------- converters: a given value -> its setting
def _bad(option: str, value: Any, rule: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-{option}: {value!r} {rule}")


def raw_value(config: pytest.Config, name: str) -> tuple[Any, str]:
    """The option ``name``'s value as given and where: ``option`` (command line), ``ini``, or ``(None,
    "default")`` (not given; an ini key left empty counts as not given)."""
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


# ---------------------------------------------------------------------- converters: a given value -> its setting
@dataclass(frozen=True)
class Given:
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


Converter = Callable[[Given], Any]


def _number(what: str, in_range: Callable[[float], bool], rule: str) -> Converter:
    """A converter to a finite float: ``is not <what>`` when the value is no number, ``rule`` when it is not
    finite or not ``in_range``."""

    def convert(given: Given) -> float:
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


def _as_given(given: Given) -> Any:
    return given.value


def _as_text(given: Given) -> str:
    return str(given.value)


def _to_known_arch(given: Given) -> str:
    from ckfmha.archs import known_archs

    archs = known_archs()
    arch = str(given.value).strip()
    if arch not in archs:
        raise _bad("arch", arch, f"is not a known arch; known: {', '.join(archs)}")
    return arch


def _to_families(given: Given) -> tuple[str, ...]:
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


def _to_sweep(given: Given) -> str:
    from ckfmha.sweep import load_sweep

    try:
        load_sweep(given.value)
    except (OSError, ValueError) as e:
        raise _bad("sweep", given.value, f"is not a valid sweep file: {e}") from None
    return given.value


def _to_filter(given: Given) -> str:
    from ckfmha.filters import FilterError, compile_filter

    try:
        compile_filter(given.value)
    except FilterError as e:
        raise _bad("filter", given.value, f"is not a valid filter expression: {e}") from None
    return given.value


def _to_filter_file(given: Given) -> str:
    from ckfmha.filters import load_filter_file

    if not Path(given.value).is_file():
        raise _bad("filter-file", given.value, "does not exist")
    try:
        load_filter_file(given.value)
    except Exception as e:  # noqa: BLE001 - the user's file: any error is a usage error
        raise _bad("filter-file", given.value, f"cannot be loaded: {e}") from None
    return given.value


def _to_count(given: Given) -> int:
    return _int(given.option, given.value, 0)


def _to_repeat(given: Given) -> int:
    return _int(given.option, given.value, 1)


def _to_shard(given: Given) -> tuple[int, int]:
    """K/N, or ``auto`` from the CI's variables (:func:`pytest_ckfmha.shard_spec.parse_shard`; ``auto`` reads
    ``--ckfmha-shard-total`` too)."""
    from pytest_ckfmha.shard_spec import parse_shard

    raw, source = raw_value(given.config, "shard-total")
    total = None if raw is None else _to_shard_total(Given("shard-total", raw, source, given.config))
    return parse_shard(given.value, total, os.environ)


def _to_shard_total(given: Given) -> int:
    from pytest_ckfmha.shard_spec import check_count

    return check_count(given.option, given.value, _int(given.option, given.value, 1))


def _to_durations(given: Given) -> str:
    from ckfmha.runreport import ReportError
    from pytest_ckfmha.durations import load_durations

    path = str(given.path(str(given.value)))
    try:
        load_durations(path)
    except (ReportError, OSError) as e:
        raise _bad(given.option, given.value, f"is not a report to read durations from: {e}") from None
    return path


#: --ckfmha-memory-budget's default: this share of the machine's memory (MemTotal) for the items running at once
DEFAULT_MEMORY_SHARE = 0.6


def _to_memory_budget(given: Given) -> tuple[str, float] | None:
    """``auto`` -> ("share", DEFAULT_MEMORY_SHARE); ``none`` -> None; ``0.5`` -> ("share", 0.5); ``48GB`` /
    ``48GiB`` -> ("bytes", 48e9 / 48 * 2**30)."""
    import re

    text = str(given.value).strip().lower()
    if text == "auto":
        return ("share", DEFAULT_MEMORY_SHARE)
    if text == "none":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*(gb|gib)?", text)
    rule = "is not auto, none, a share of the machine's memory (0 < x <= 1) or a size (48GB, 40GiB)"
    if m is None:
        raise _bad(given.option, given.value, rule)
    x = float(m.group(1))
    if m.group(2):
        if x <= 0:
            raise _bad(given.option, given.value, "is no memory: a size must be > 0")
        return ("bytes", x * (2**30 if m.group(2) == "gib" else 1e9))
    if not 0 < x <= 1:
        raise _bad(given.option, given.value, "is not a share in (0, 1]: write a size with its unit (48GB)")
    return ("share", x)


def _to_compare(given: Given) -> str:
    from ckfmha.runreport import ReportError, load_report

    path = str(given.path(str(given.value)))
    try:
        load_report(path)
    except (ReportError, OSError) as e:
        raise _bad(given.option, given.value, f"is not a report to compare with: {e}") from None
    return path


def _to_compare_fail(given: Given) -> float:
    """PCT (``5`` or ``5%``) -> a fraction (0.05); 0 <= PCT < 1000."""
    text = str(given.value).strip().removesuffix("%")
    pct = _number("a percentage", lambda x: 0 <= x < 1000, "must be a percentage in [0, 1000)")(
        Given(given.option, text, given.source, given.config)
    )
    return pct / 100


def _to_resume(given: Given) -> str:
    from ckfmha.runreport import ReportError, load_report

    try:
        load_report(given.value)
    except ReportError as e:
        raise _bad(given.option, given.value, f"is not a report to resume from: {e}") from None
    return str(given.value)


def _to_heuristics(given: Given) -> str:
    from ckfmha.dispatcher import HeuristicsError, load_heuristics

    try:
        load_heuristics(given.value)
    except HeuristicsError as e:
        raise _bad(given.option, given.value, f"is not a heuristics file: {e}") from None
    return str(given.value)


def _to_ck_root(given: Given) -> Path:
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


def _to_seed(given: Given) -> int:
    seed = _int("seed", given.value, 0)
    if seed >= 2**32:
        raise _bad("seed", given.value, "must be < 2**32")
    return seed


def _to_reports(given: Given) -> tuple[Path, ...]:
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


def _to_flag(given: Given) -> bool:
    """``store_true`` options and ``bool`` ini keys (a string: 1/true/yes/on or 0/false/no/off; anything else is an
    error, never a silent false)."""
    v = given.value
    if not isinstance(v, str):
        return bool(v)
    word = v.strip().lower()
    if word not in _TRUE_WORDS + _FALSE_WORDS:
        raise _bad(given.option, v, f"is not a flag value; allowed: {', '.join(_TRUE_WORDS + _FALSE_WORDS)}")
    return word in _TRUE_WORDS


def _to_matrices(given: Given) -> tuple[str, ...]:
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


def _to_cache_dir(given: Given) -> Path:
    return _usable_cache_dir(Path(given.value), "--ckfmha-cache-dir")


def _default_cache_dir() -> Path:
    from ckfmha.backends.cache import cache_root

    return _usable_cache_dir(cache_root(), _DEFAULT_CACHE_DIR)


def _to_parity(given: Given) -> str:
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


def _to_upstream_bin(given: Given) -> str:
    ub = given.path(str(given.value))
    if not ub.is_dir():
        raise _bad(
            "upstream-bin",
            str(given.value),
            "is not a directory (it should hold tile_example_fmha_fwd and tile_example_fmha_bwd)",
        )
    return str(ub)


def _to_fault(given: Given) -> str:
    """A catalogued fault (:func:`ckfmha.faults.get_fault`) that the backend named by ``--ckfmha-backend`` can host
    (:func:`ckfmha.faults.injectable_fault`: the cpu and triton backends have hooks; ``auto`` names none)."""
    from ckfmha.faults import FaultError, get_fault, injectable_fault

    name = str(given.value).strip()
    try:
        get_fault(name)
    except FaultError as e:
        raise _bad(given.option, name, f"is not a catalogued fault ({e})") from None
    backend = str(raw_value(given.config, "backend")[0] or "auto").strip()
    if backend == "auto":
        raise _bad(given.option, name, "needs --ckfmha-backend naming the backend to inject it into (given: auto)")
    try:
        injectable_fault(name, backend, f"backend {backend}")
    except FaultError as e:
        raise _bad(given.option, name, str(e)) from None
    return name


# ---------------------------------------------------------------------- rules between options
CrossCheck = Callable[[dict[str, Given], dict[str, Any]], None]
"""A rule between options: (the given values, the converted values so far) -> None or the UsageError."""


def _check_receipt_or_profile(given: dict[str, Given], values: dict[str, Any]) -> None:
    """The receipt and profile resolve to a known receipt (:func:`ckfmha.receipts.resolve_receipt`: its rules,
    one of them only among them); its error names the profile when one is given, else the receipt."""
    from ckfmha.receipts import resolve_receipt

    receipt, profile = given["receipt"].value, given["profile"].value
    try:
        resolve_receipt(receipt, profile=profile)
    except ValueError as e:
        which = "profile" if profile is not None else "receipt"
        raise _bad(which, profile if profile is not None else receipt, f"is not valid: {e}") from None


def _check_timeout_is_enforceable(given: dict[str, Given], values: dict[str, Any]) -> None:
    """A --ckfmha-timeout on the command line needs the process isolation."""
    if values["isolation"] == "inline" and given["timeout"].source == "option" and values["timeout"]:
        raise _bad(
            "timeout",
            given["timeout"].value,
            "cannot be enforced with --ckfmha-isolation inline (nothing "
            "can stop a hung kernel in the pytest process); use --ckfmha-isolation process",
        )


def _check_compare_needs_bench(given: dict[str, Given], values: dict[str, Any]) -> None:
    """--ckfmha-compare compares this run's timings: it needs --ckfmha-bench."""
    if values["compare"] is not None and not values["bench"]:
        raise _bad(
            "compare", given["compare"].value, "needs --ckfmha-bench (it compares this run's timings with PREV's)"
        )


def _check_compare_fail_needs_compare(given: dict[str, Given], values: dict[str, Any]) -> None:
    """--ckfmha-compare-fail is a threshold of --ckfmha-compare."""
    if values["compare-fail"] is not None and values["compare"] is None:
        raise _bad(
            "compare-fail",
            given["compare-fail"].value,
            "needs --ckfmha-compare PREV.json (the earlier run to compare the timings with)",
        )


def _check_ck_smoke_has_a_checkout(given: dict[str, Given], values: dict[str, Any]) -> None:
    """--ckfmha-ck-smoke runs a checkout's scripts: it needs --ckfmha-ck-root (or $CK_ROOT)."""
    if values["ck-smoke"] is not None and values["ck-root"] is None:
        raise _bad(
            "ck-smoke",
            values["ck-smoke"],
            "needs a CK checkout whose smoke scripts it runs: give --ckfmha-ck-root PATH (or set $CK_ROOT)",
        )


# ---------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Option:
    """One row of the option table (module doc)."""

    name: str  # --ckfmha-<name>; the dest and ini key are ckfmha_<name> with _ for -
    help: str
    convert: Converter | None = None  # a given value -> its setting, or the UsageError; None: one of ``choices``
    choices: Callable[[], tuple[str, ...]] | None = None  # the allowed values (in the metavar, checked by convert)
    noun: str = ""  # what a choice is, for the error: "is not <noun>; allowed: ..."
    default: Any = None  # the setting when not given
    default_from: Callable[[], Any] | None = None  # or: computes (and checks) the setting when not given
    metavar: str | None = None
    action: str | None = None  # argparse action (append, store_true)
    ini: IniType | None = None  # the ini key's type; None: no ini key
    check: CrossCheck | None = None  # a rule with earlier options, run right after this option

    @property
    def dest(self) -> str:
        return _dest(self.name)

    @property
    def flag(self) -> str:
        return f"--ckfmha-{self.name}"

    @property
    def shown_metavar(self) -> str | None:
        """The metavar: the choices as argparse writes them (``{a,b,c}``), else the row's."""
        return "{" + ",".join(self.choices()) + "}" if self.choices is not None else self.metavar

    @property
    def help_text(self) -> str:
        """The help, its ``{families}`` replaced by the problem families."""
        return self.help.replace("{families}", ", ".join(problem_families()))

    def setting(self, given: Given) -> Any:
        """The setting of the value ``given`` (not given: the default)."""
        if given.value is None:
            return self.default_from() if self.default_from is not None else self.default
        if self.convert is not None:
            return self.convert(given)
        # an ini-able choice is stripped of blanks (and, empty in the ini file, not given); a command-line-only
        # one is taken exactly as given
        value = given.value if self.ini is None else str(given.value).strip()
        allowed = self.choices() if self.choices is not None else ()
        if value not in allowed:
            raise _bad(self.name, value, f"is not {self.noun}; allowed: {', '.join(allowed)}")
        return value

    def add_to(self, parser: pytest.Parser, group: Any) -> None:
        kw: dict[str, Any] = {"dest": self.dest, "help": self.help_text, "default": None}
        if self.action is not None:
            kw["action"] = self.action
        if self.action != "store_true":
            kw["metavar"] = self.shown_metavar
        group.addoption(self.flag, **kw)
        if self.ini is not None:
            parser.addini(self.dest, help=f"default of {self.flag}", type=self.ini, default=None)


def option(name: str, help: str, **row: Any) -> Any:
    """A :class:`Settings` field that is an option: the field's default is the option's (module doc)."""
    return dataclasses.field(default=row.get("default"), metadata={"option": Option(name, help, **row)})


def _seconds(rule: str, in_range: Callable[[float], bool]) -> Converter:
    return _number("a number of seconds", in_range, rule)


@dataclass(frozen=True)
class Settings:
    """The validated options (each field with an :class:`Option` is one row of the table, in check order)."""

    category: str | None = option(
        "category",
        "run the testing matrix of this category (smoke < full < nightly); without it the plugin creates no items",
        choices=lambda: CATEGORIES,
        noun="a category",
    )
    ck_smoke: str | None = option(
        "ck-smoke",
        "run a CK checkout's own smoke scripts (--ckfmha-ck-root): every command line they give "
        "tile_example_fmha_fwd / _bwd is an item (docs/ck_smoke.md)",
        choices=lambda: CK_SMOKE_CHOICES,
        noun="a smoke suite",
    )
    arch: str = option(  # not given: the detected arch or the arch data's default (parse)
        "arch",
        "kernel space to test (gfx90a, gfx942, gfx950, gfx1100, gfx1201, ...); default: detected from the GPU "
        "through torch when importable, else the arch data's default arch",
        convert=_to_known_arch,
        metavar="ARCH",
        ini="string",
    )
    backend: str = option(
        "backend",
        "backend running the kernels; auto: hip on ROCm with a HIP compiler and a CK checkout "
        "(--ckfmha-ck-root / $CK_ROOT), else triton with a GPU, else cpu (default auto)",
        choices=backends,
        noun="a backend",
        default="auto",
        ini="string",
    )
    families: tuple[str, ...] | None = option(
        "family",
        "only these problem families ({families}); repeatable or comma-separated",
        convert=_to_families,
        metavar="FAMILY",
        action="append",
        ini="linelist",
    )
    receipt: str | None = option(
        "receipt", "CK receipt selecting the kernel set (default 0)", convert=_as_text, metavar="N", ini="string"
    )
    profile: str | None = option(
        "profile",
        "receipt by profile name (ck_default, flash, pytorch, fp32, fp8, ...)",
        convert=_as_given,
        metavar="NAME",
        ini="string",
        check=_check_receipt_or_profile,
    )
    mask_mode: str = option(
        "mask-mode",
        "CK generator mask mode (default simplified)",
        choices=mask_modes,
        noun="a mask mode",
        default="simplified",  # MaskMode.SIMPLIFIED
        ini="string",
    )
    sweep: str | None = option(
        "sweep", "tile-engine sweep JSON narrowing the kernel set", convert=_to_sweep, metavar="FILE"
    )
    filter: str | None = option(
        "filter", "filter expression over c.<field> narrowing the kernel set", convert=_to_filter, metavar="EXPR"
    )
    filter_file: str | None = option(
        "filter-file", "Python file defining filter_config(c) -> bool", convert=_to_filter_file, metavar="FILE"
    )
    max_kernels_per_shape: int = option(
        "max-kernels-per-shape",
        "kernel items per shape (best-ranked first, then spread over distinct pipeline/tile); 0 = all "
        f"(default {DEFAULT_MAX_KERNELS})",
        convert=_to_count,
        default=DEFAULT_MAX_KERNELS,
        metavar="N",
        ini="string",
    )
    seed: int = option("seed", "seed of the inputs (default 0)", convert=_to_seed, default=0, metavar="N", ini="string")
    reports: tuple[Path, ...] = option(
        "report",
        "write the report to PATH (.json or .csv); repeatable",
        convert=_to_reports,
        default=(),
        metavar="PATH",
        action="append",
    )
    bench: bool = option(
        "bench",
        "time each item: a warm-up, then --ckfmha-bench-repeat runs (the L2 cache flushed before each on GPUs); "
        "the report gets the median, the fastest and the slowest",
        convert=_to_flag,
        default=False,
        action="store_true",
        ini="bool",
    )
    bench_repeat: int = option(
        "bench-repeat",
        f"timed runs per item with --ckfmha-bench (default {DEFAULT_BENCH_REPEAT})",
        convert=_to_repeat,
        default=DEFAULT_BENCH_REPEAT,
        metavar="N",
        ini="string",
    )
    compare: str | None = option(
        "compare",
        "with --ckfmha-bench: at the end, compare this run's timings with an earlier report's (a run of the same "
        "selection and seed, timed on a GPU): the change per item in the benchmark table, the items slower past "
        "--ckfmha-compare-fail; runs not like for like (devices, clocks, emulated timings) fail the session",
        convert=_to_compare,
        metavar="PREV.json",
        check=_check_compare_needs_bench,
    )
    compare_fail: float | None = option(  # a fraction: 5 (%) -> 0.05
        "compare-fail",
        "with --ckfmha-compare: fail the session (exit 1) when an item's median is more than PCT percent slower "
        "than in PREV and outside both runs' spread (as ckfmha compare --threshold counts it)",
        convert=_to_compare_fail,
        metavar="PCT",
        check=_check_compare_fail_needs_compare,
    )
    shard: tuple[int, int] | None = option(  # (K, N)
        "shard",
        "run shard K of N (1 <= K <= N), or auto (K/N from CI_NODE_INDEX/CI_NODE_TOTAL or JOB_COMPLETION_INDEX): "
        "the items are split by kernel (each kernel's items in one shard), "
        "balanced by estimated cost, the same way on every machine; merge the reports with ckfmha merge",
        convert=_to_shard,
        metavar="K/N",
    )
    shard_total: int | None = option(
        "shard-total",
        "the shard count N for --ckfmha-shard auto under a Kubernetes Indexed Job (JOB_COMPLETION_INDEX is K-1)",
        convert=_to_shard_total,
        metavar="N",
    )
    durations: str | None = option(
        "durations",
        "a previous run's report: its measured durations order the items (longest first) and balance "
        "--ckfmha-shard instead of the FLOPs estimate",
        convert=_to_durations,
        metavar="REPORT",
        ini="string",
    )
    memory_budget: tuple[str, float] | None = option(
        "memory-budget",
        "how much memory the items running at once may hold (their estimated peaks, ckfmha.work.host_bytes): the "
        f"xdist scheduler starts an item only within it; auto ({DEFAULT_MEMORY_SHARE:g} of the machine's memory, "
        "default), a share (0.5), a size (48GB) or none; one item always runs, however large",
        convert=_to_memory_budget,
        default=("share", DEFAULT_MEMORY_SHARE),
        metavar="auto|none|SHARE|SIZE",
        ini="string",
    )
    reference: str = option(
        "reference",
        "what computes the reference and compares the outputs with it: numpy, torch (the torch twin and the "
        "validator's rule in torch, on the run's GPU when the backend runs on one, else on the cpu), auto (torch "
        "on the GPU for a GPU backend -- triton, hip -- when torch sees one, else numpy; default)",
        choices=lambda: REFERENCES,
        noun="a reference",
        default="auto",
        ini="string",
    )
    resume: str | None = option(
        "resume",
        "skip the items an earlier (interrupted) report of the same run already completed and carry their rows "
        "into this report",
        convert=_to_resume,
        metavar="REPORT",
    )
    heuristics: str | None = option(
        "heuristics",
        "the dispatcher's tie-break table (heuristics YAML, e.g. from ckfmha tune) instead of the packaged one",
        convert=_to_heuristics,
        metavar="FILE",
        ini="string",
    )
    ck_root: Path | None = option(
        "ck-root",
        "a CK checkout (holds example/ck_tile/01_fmha/generate.py): its kernel space, its smoke scripts and its "
        "kernels for the hip backend (default $CK_ROOT)",
        convert=_to_ck_root,
        default_from=_default_ck_root,
        metavar="PATH",
        ini="string",
        check=_check_ck_smoke_has_a_checkout,
    )
    allow_empty: bool = option(
        "allow-empty",
        "let a run whose selection matches no kernel, or whose every item is skipped, pass (default: that is an error)",
        convert=_to_flag,
        default=False,
        action="store_true",
        ini="bool",
    )
    timeout: float = option(  # 0 = no limit
        "timeout",
        "fail an item whose kernel work runs longer than this and kill its process "
        f"(default {DEFAULT_TIMEOUT_S:g}; 0 = no limit)",
        convert=_seconds("must be a finite number of seconds >= 0 (0 = no limit)", lambda s: s >= 0),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        ini="string",
    )
    report_every: float = option(
        "report-every",
        "while the run goes on, a background thread rewrites the report files (atomically) every this many "
        f"seconds, also while items run, so a killed run leaves a report of this run (default {CHECKPOINT_SECONDS:g})",
        convert=_seconds("must be a finite number of seconds > 0", lambda s: s > 0),
        default=CHECKPOINT_SECONDS,
        metavar="SECONDS",
        ini="string",
    )
    isolation: str = option(
        "isolation",
        "process (default): every item's kernel work runs in a child process, so a crash or hang fails that "
        "item alone; inline: in the pytest process (for --pdb and profilers; no containment, no timeout)",
        choices=lambda: ISOLATIONS,
        noun="an isolation",
        default="process",
        ini="string",
        check=_check_timeout_is_enforceable,
    )
    cpu_max_flops: float = option(
        "cpu-max-flops",
        f"skip shapes above this many FLOPs on the cpu backend (default {DEFAULT_CPU_MAX_FLOPS:g})",
        convert=_number("a number", lambda f: f > 0, "must be a finite number > 0"),
        default=DEFAULT_CPU_MAX_FLOPS,
        metavar="F",
        ini="string",
    )
    matrices: tuple[str, ...] | None = option(
        "matrix",
        "matrix YAML files or directories to use instead of the packaged ones; repeatable",
        convert=_to_matrices,
        metavar="PATH",
        action="append",
        ini="linelist",
    )
    cache_dir: Path = option(
        "cache-dir",
        "build + reference cache root (default $CKFMHA_CACHE_DIR, else ~/.cache/ckfmha)",
        convert=_to_cache_dir,
        default_from=_default_cache_dir,
        metavar="DIR",
        ini="string",
    )
    parity: str | None = option(
        "parity",
        f"parity against an upstream: tile_example or torch[:{'|'.join(PARITY_TORCH_BACKENDS)}]; items: "
        "upstream's 14 parity configurations plus the category's shapes; with --ckfmha-ck-smoke the smoke lines "
        "instead (tile_example runs each line as the script did)",
        convert=_to_parity,
        metavar="UPSTREAM",
    )
    upstream_bin: str | None = option(
        "upstream-bin",
        "directory of tile_example_fmha_fwd/_bwd (default $CK_TILE_EXAMPLE_DIR)",
        convert=_to_upstream_bin,
        metavar="DIR",
        ini="string",
    )
    fault: str | None = option(
        "fault",
        "inject this catalogued fault into the backend named by --ckfmha-backend (cpu or triton) for every item "
        "(ckfmha/data/faults.yaml, docs/faults.md): the run is expected to fail; `ckfmha adequacy` runs a category "
        "once per fault",
        convert=_to_fault,
        metavar="NAME",
    )
    sample: Sample | None = option(
        "sample",
        "run a deterministic sample of the collected items of any suite, chosen by a hash of the node id: FRACTION "
        "in (0, 1], optional SEED (default 0) (docs/flash_attn.md)",
        convert=to_sample,
        metavar="FRACTION[:SEED]",
    )
    flash_attn_compat: bool = option(
        "flash-attn-compat",
        "register ckfmha.compat.flash_attn as flash_attn_2_cuda before collection, so FlashAttention's Python layer "
        "and tests run on ckfmha (--ckfmha-backend for CUDA tensors, --ckfmha-arch the kernel space); with "
        "--ckfmha-report each process also writes its kernel log beside the report (docs/flash_attn.md)",
        convert=_to_flag,
        default=False,
        action="store_true",
    )
    # computed by parse, not options
    arch_source: str = "default"  # option | ini | detected | default | controller
    gpu_marker: bool = False  # the items get the gpu marker (--ckfmha-backend triton|hip)

    @property
    def active(self) -> bool:
        return self.category is not None or self.parity is not None or self.ck_smoke is not None


def _rows() -> Iterator[tuple[str, Option]]:
    """(Settings field, its Option), in the table's order."""
    for f in dataclasses.fields(Settings):
        if "option" in f.metadata:
            yield f.name, f.metadata["option"]


OPTIONS: tuple[Option, ...] = tuple(row for _, row in _rows())
"""The option table, in check (and ``--help``) order."""


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ckfmha", "ckfmha FMHA testing matrix")
    for row in OPTIONS:
        row.add_to(parser, group)


def any_given(config: pytest.Config) -> bool:
    return any(raw_value(config, row.name)[1] == "option" for row in OPTIONS)


def parse(config: pytest.Config, detected_arch: str | None = None) -> Settings:
    """Validate every option (UsageError on the first bad one, in the table's order) and return the settings."""
    given: dict[str, Given] = {}
    values: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for field_name, row in _rows():
        g = given[row.name] = Given(row.name, *raw_value(config, row.name), config)
        fields[field_name] = values[row.name] = row.setting(g)
        if row.check is not None:
            row.check(given, values)
    src = given["arch"].source
    if fields["arch"] is None:
        from ckfmha.archs import default_arch, known_archs

        detected = detected_arch in known_archs()
        fields["arch"], src = (detected_arch, "detected") if detected else (default_arch(), "default")
    return Settings(**fields, arch_source=src, gpu_marker=fields["backend"] in ("triton", "hip"))


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


def nvidia_smi_arch() -> str | None:
    """``sm<major><minor>`` of the first GPU CUDA makes visible (``CUDA_VISIBLE_DEVICES``' first entry, an index or
    a UUID; GPU 0 without it), from ``nvidia-smi --query-gpu=compute_cap`` (a tenth of a second, no CUDA context);
    None when nvidia-smi is not installed, fails, answers something else, or no GPU is visible."""
    import re
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = "0" if visible is None else visible.split(",")[0].strip()
    if exe is None or not first or first.startswith("-"):
        return None
    cmd = [exe, "--query-gpu=compute_cap", "--format=csv,noheader", "-i", first]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"(\d+)\.(\d+)", out.stdout.strip()) if out.returncode == 0 else None
    return f"sm{m.group(1)}{m.group(2)}" if m else None


def detect_arch() -> str | None:
    """The arch of GPU 0: :func:`nvidia_smi_arch` where nvidia-smi answers (CUDA), else through torch (ROCm: gfx
    name, CUDA: ``sm<major><minor>``), or None.

    Only when torch is installed (the GPU backends need it), and torch runs in a subprocess: the pytest process
    must never initialize CUDA, or the kernel child processes it forks could not use the GPU (isolation.py); asking
    nvidia-smi first saves that subprocess's seconds of torch import and CUDA start at every run's start.  Never
    called in xdist workers (the controller passes its answer).  Set ``CKFMHA_NO_DETECT=1`` to skip it."""
    import importlib.util
    import subprocess
    import sys

    if os.environ.get("CKFMHA_NO_DETECT") or importlib.util.find_spec("torch") is None:
        return None
    smi = nvidia_smi_arch()
    if smi is not None:
        return smi
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
