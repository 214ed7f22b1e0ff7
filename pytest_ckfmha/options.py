"""Command-line options and ini keys of the plugin, and their validation into :class:`Settings`.

Every option is also an ini key (``ckfmha_<name>``) except ``--ckfmha-category`` (so a project's ``pytest`` run
never turns into a matrix run by accident), ``--ckfmha-filter``/``--ckfmha-filter-file``/``--ckfmha-sweep`` and
``--ckfmha-report``.  The command line wins over the ini file.  A bad value raises ``pytest.UsageError`` naming
the option, the value and the rule.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_ckfmha.reporting import CHECKPOINT_SECONDS

CATEGORIES = ("smoke", "full", "nightly")
BACKENDS = ("auto", "cpu", "triton", "hip")
DEFAULT_ARCH = "gfx942"
DEFAULT_MAX_KERNELS = 2
DEFAULT_CPU_MAX_FLOPS = 5e9
DEFAULT_BENCH_REPEAT = 5
DEFAULT_TIMEOUT_S = 600.0
ISOLATIONS = ("process", "inline")

# name -> (help, ini?)
_OPTIONS: list[tuple[str, dict[str, Any], bool]] = [
    ("category", dict(metavar="{smoke,full,nightly}",
                      help="run the testing matrix of this category (smoke < full < nightly); without it the "
                           "plugin creates no items"), False),
    ("arch", dict(metavar="ARCH", help="kernel space to test (gfx90a, gfx942, gfx950, gfx1100, gfx1201, ...); "
                  "default: detected from the GPU through torch when importable, else gfx942"), True),
    ("backend", dict(metavar="{auto,cpu,triton,hip}", help="backend running the kernels; auto: triton with a GPU, "
                     "hip on ROCm with hipcc and a CK root, else cpu (default auto)"), True),
    ("family", dict(action="append", metavar="FAMILY",
                    help="only these problem families (fwd, fwd_splitkv, fwd_pagedkv, fwd_appendkv, batch_prefill, "
                         "bwd); repeatable or comma-separated"), True),
    ("receipt", dict(metavar="N", help="CK receipt selecting the kernel set (default 0)"), True),
    ("profile", dict(metavar="NAME", help="receipt by profile name (ck_default, flash, pytorch, fp32, fp8, ...)"), True),
    ("mask-mode", dict(metavar="{simplified,generic}", help="CK generator mask mode (default simplified)"), True),
    ("sweep", dict(metavar="FILE", help="tile-engine sweep JSON narrowing the kernel set"), False),
    ("filter", dict(metavar="EXPR", help="filter expression over c.<field> narrowing the kernel set"), False),
    ("filter-file", dict(metavar="FILE", help="Python file defining filter_config(c) -> bool"), False),
    ("max-kernels-per-shape", dict(metavar="N", help="kernel items per shape (best-ranked first, then spread over "
                                   "distinct pipeline/tile); 0 = all (default 2)"), True),
    ("seed", dict(metavar="N", help="seed of the inputs (default 0)"), True),
    ("report", dict(action="append", metavar="PATH", help="write the report to PATH (.json or .csv); repeatable"),
     False),
    ("bench", dict(action="store_true", default=None, help="time each item (warm-up + repeats, median)"), True),
    ("cpu-max-flops", dict(metavar="F", help="skip shapes above this many FLOPs on the cpu backend "
                           f"(default {DEFAULT_CPU_MAX_FLOPS:g})"), True),
    ("matrix", dict(action="append", metavar="PATH", help="matrix YAML files or directories to use instead of the "
                    "packaged ones; repeatable"), True),
    ("cache-dir", dict(metavar="DIR", help="build + reference cache root (default $CKFMHA_CACHE_DIR, else "
                       "~/.cache/ckfmha)"), True),
    ("parity", dict(metavar="UPSTREAM", help="parity against an upstream: tile_example or "
                    "torch[:math|efficient|flash|cudnn|flex]; items: upstream's 14 parity configurations plus the "
                    "category's shapes"), False),
    ("upstream-bin", dict(metavar="DIR", help="directory of tile_example_fmha_fwd/_bwd (default "
                          "$CK_TILE_EXAMPLE_DIR)"), True),
    ("timeout", dict(metavar="SECONDS", help="fail an item whose kernel work runs longer than this and kill its "
                     f"process (default {DEFAULT_TIMEOUT_S:g}; 0 = no limit)"), True),
    ("isolation", dict(metavar="{process,inline}", help="process (default): every item's kernel work runs in a "
                       "child process, so a crash or hang fails that item alone; inline: in the pytest process "
                       "(for --pdb and profilers; no containment, no timeout)"), True),
    ("report-every", dict(metavar="SECONDS", help="while the run goes on, rewrite the report files (atomically) "
                          f"at most this often, so a killed run leaves a report (default {CHECKPOINT_SECONDS:g})"), True),
    ("allow-empty", dict(action="store_true", default=None, help="let a run whose selection matches no kernel, or "
                         "whose every item is skipped, pass (default: that is an error)"), True),
]
PARITY_TORCH_BACKENDS = ("math", "efficient", "flash", "cudnn", "flex")


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ckfmha", "ckfmha FMHA testing matrix")
    for name, kw, ini in _OPTIONS:
        kw = dict(kw)
        kw.setdefault("default", None)
        group.addoption(f"--ckfmha-{name}", dest=f"ckfmha_{name.replace('-', '_')}", **kw)
        if ini:
            itype = "linelist" if name in ("family", "matrix") else \
                ("bool" if name in ("bench", "allow-empty") else "string")
            parser.addini(f"ckfmha_{name.replace('-', '_')}", help=f"default of --ckfmha-{name}", type=itype,
                          default=None)


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
    isolation: str = "process"
    allow_empty: bool = False

    @property
    def active(self) -> bool:
        return self.category is not None or self.parity is not None


def _bad(option: str, value: Any, rule: str) -> pytest.UsageError:
    return pytest.UsageError(f"--ckfmha-{option}: {value!r} {rule}")


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    dest = f"ckfmha_{name.replace('-', '_')}"
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


def parse(config: pytest.Config, detected_arch: str | None = None) -> Settings:
    """Validate every option (UsageError on the first bad one) and return the settings."""
    from ckfmha.archs import known_archs

    cat, _ = _raw(config, "category")
    if cat is not None and cat not in CATEGORIES:
        raise _bad("category", cat, f"is not a category; allowed: {', '.join(CATEGORIES)}")

    arch, src = _raw(config, "arch")
    archs = known_archs()
    if arch is not None:
        arch = str(arch).strip()
        if arch not in archs:
            raise _bad("arch", arch, f"is not a known arch; known: {', '.join(archs)}")
    else:
        arch, src = (detected_arch, "detected") if detected_arch in archs else (DEFAULT_ARCH, "default")

    backend, _ = _raw(config, "backend")
    backend = str(backend or "auto").strip()
    if backend not in BACKENDS:
        raise _bad("backend", backend, f"is not a backend; allowed: {', '.join(BACKENDS)}")

    fams_raw, _ = _raw(config, "family")
    families = None
    if fams_raw:
        from ckfmha.families import FamilyError, problem_family

        out: list[str] = []
        for item in fams_raw:
            for f in str(item).split(","):
                f = f.strip()
                if not f:
                    continue
                try:
                    f = problem_family(f)
                except FamilyError as e:
                    raise _bad("family", f, f"is not a problem family ({e})") from None
                if f not in out:
                    out.append(f)
        families = tuple(out)

    receipt, rsrc = _raw(config, "receipt")
    profile, psrc = _raw(config, "profile")
    if receipt is not None and profile is not None:
        raise _bad("profile", profile, f"cannot be combined with --ckfmha-receipt={receipt!r}; give one of them")
    from ckfmha.receipts import resolve_receipt

    try:
        resolve_receipt(receipt, profile=profile)
    except ValueError as e:
        which = "profile" if profile is not None else "receipt"
        raise _bad(which, profile if profile is not None else receipt, f"is not valid: {e}") from None

    mask_mode, _ = _raw(config, "mask-mode")
    mask_mode = str(mask_mode or "simplified").strip()
    if mask_mode not in ("simplified", "generic"):
        raise _bad("mask-mode", mask_mode, "is not a mask mode; allowed: simplified, generic")

    sweep, _ = _raw(config, "sweep")
    if sweep is not None:
        from ckfmha.sweep import load_sweep

        try:
            load_sweep(sweep)
        except (OSError, ValueError) as e:
            raise _bad("sweep", sweep, f"is not a valid sweep file: {e}") from None
    flt, _ = _raw(config, "filter")
    if flt is not None:
        from ckfmha.filters import FilterError, compile_filter

        try:
            compile_filter(flt)
        except FilterError as e:
            raise _bad("filter", flt, f"is not a valid filter expression: {e}") from None
    ff, _ = _raw(config, "filter-file")
    if ff is not None:
        from ckfmha.filters import load_filter_file

        if not Path(ff).is_file():
            raise _bad("filter-file", ff, "does not exist")
        try:
            load_filter_file(ff)
        except Exception as e:  # noqa: BLE001 - the user's file: any error is a usage error
            raise _bad("filter-file", ff, f"cannot be loaded: {e}") from None

    mk, _ = _raw(config, "max-kernels-per-shape")
    max_kernels = DEFAULT_MAX_KERNELS if mk is None else _int("max-kernels-per-shape", mk, 0)
    sd, _ = _raw(config, "seed")
    seed = 0 if sd is None else _int("seed", sd, 0)
    if seed >= 2 ** 32:
        raise _bad("seed", sd, "must be < 2**32")

    reports: list[Path] = []
    for r in _raw(config, "report")[0] or ():
        for part in str(r).split(","):
            part = part.strip()
            if not part:
                continue
            p = Path(part)
            if p.suffix.lower() not in (".json", ".csv"):
                raise _bad("report", part, "must end in .json or .csv")
            from pytest_ckfmha.reporting import check_writable

            why = check_writable(p)
            if why is not None:
                raise _bad("report", part, f"{why}: the report could not be written there (checked before "
                           "anything runs)")
            reports.append(p)

    bench, _ = _raw(config, "bench")
    bench = bool(bench) if not isinstance(bench, str) else bench.strip().lower() in ("1", "true", "yes", "on")
    allow_empty, _ = _raw(config, "allow-empty")
    allow_empty = bool(allow_empty) if not isinstance(allow_empty, str) else \
        allow_empty.strip().lower() in ("1", "true", "yes", "on")

    to, to_src = _raw(config, "timeout")
    timeout = DEFAULT_TIMEOUT_S
    if to is not None:
        try:
            timeout = float(str(to).strip())
        except ValueError:
            raise _bad("timeout", to, "is not a number of seconds") from None
        if not (timeout >= 0 and math.isfinite(timeout)):
            raise _bad("timeout", to, "must be a finite number of seconds >= 0 (0 = no limit)")
    re_, _ = _raw(config, "report-every")
    report_every = CHECKPOINT_SECONDS
    if re_ is not None:
        try:
            report_every = float(str(re_).strip())
        except ValueError:
            raise _bad("report-every", re_, "is not a number of seconds") from None
        if not (report_every > 0 and math.isfinite(report_every)):
            raise _bad("report-every", re_, "must be a finite number of seconds > 0")
    iso, _ = _raw(config, "isolation")
    isolation = str(iso or "process").strip()
    if isolation not in ISOLATIONS:
        raise _bad("isolation", isolation, f"is not an isolation; allowed: {', '.join(ISOLATIONS)}")
    if isolation == "inline" and to_src == "option" and timeout:
        raise _bad("timeout", to, "cannot be enforced with --ckfmha-isolation inline (nothing can stop a hung "
                   "kernel in the pytest process); use --ckfmha-isolation process")

    cmf, _ = _raw(config, "cpu-max-flops")
    if cmf is None:
        cpu_max_flops = DEFAULT_CPU_MAX_FLOPS
    else:
        try:
            cpu_max_flops = float(str(cmf).strip())
        except ValueError:
            raise _bad("cpu-max-flops", cmf, "is not a number") from None
        if not cpu_max_flops > 0 or cpu_max_flops != cpu_max_flops or cpu_max_flops == float("inf"):
            raise _bad("cpu-max-flops", cmf, "must be a finite number > 0")

    mats, msrc = _raw(config, "matrix")
    matrices = None
    if mats:
        base = config.rootpath if msrc == "ini" else config.invocation_params.dir
        matrices = []
        for m in mats:
            for part in str(m).split(","):
                part = part.strip()
                if part:
                    p = Path(part)
                    p = p if p.is_absolute() else base / p
                    if not p.exists():
                        raise _bad("matrix", part, "does not exist (a matrix YAML file or a directory of them)")
                    matrices.append(str(p))
        matrices = tuple(matrices)

    cd, _ = _raw(config, "cache-dir")
    from ckfmha.backends.cache import cache_root, check_cache_dir

    cache_dir = Path(cd) if cd is not None else cache_root()
    why = check_cache_dir(cache_dir)
    if why is not None:
        where = "--ckfmha-cache-dir" if cd is not None else "the cache directory ($CKFMHA_CACHE_DIR, else " \
            "$XDG_CACHE_HOME/ckfmha or ~/.cache/ckfmha)"
        raise pytest.UsageError(f"{where}: {str(cache_dir)!r} {why}; name a writable one with --ckfmha-cache-dir")

    parity, _ = _raw(config, "parity")
    if parity is not None:
        parity = str(parity).strip()
        kind, _, tb = parity.partition(":")
        ok = (parity == "tile_example") or (kind == "torch" and (not tb or tb in PARITY_TORCH_BACKENDS))
        if not ok:
            raise _bad("parity", parity, "is not an upstream; allowed: tile_example, torch, "
                       + ", ".join(f"torch:{b}" for b in PARITY_TORCH_BACKENDS))
    upstream_bin, ubsrc = _raw(config, "upstream-bin")
    if upstream_bin is not None:
        ub = Path(str(upstream_bin))
        ub = ub if ub.is_absolute() else (config.rootpath if ubsrc == "ini" else config.invocation_params.dir) / ub
        if not ub.is_dir():
            raise _bad("upstream-bin", str(upstream_bin), "is not a directory (it should hold tile_example_fmha_fwd "
                       "and tile_example_fmha_bwd)")
        upstream_bin = str(ub)

    return Settings(category=cat, arch=arch, arch_source=src, backend=backend, families=families,
                    receipt=None if receipt is None else str(receipt), profile=profile, mask_mode=mask_mode,
                    sweep=sweep, filter=flt, filter_file=ff, max_kernels_per_shape=max_kernels, seed=seed,
                    reports=tuple(reports), bench=bench, cpu_max_flops=cpu_max_flops, matrices=matrices,
                    cache_dir=cache_dir, gpu_marker=backend in ("triton", "hip"), parity=parity,
                    upstream_bin=upstream_bin, timeout=timeout, isolation=isolation, allow_empty=allow_empty,
                    report_every=report_every)


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
        out = subprocess.run([sys.executable, "-c", _DETECT_SCRIPT], capture_output=True, text=True,
                             timeout=DETECT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):  # detection is best effort
        return None
    arch = out.stdout.strip().splitlines()[-1].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return arch or None
