"""``ckfmha parity-enum``: diff ckfmha's enumeration with a CK checkout's own generator.

For every api (``fwd``, ``fwd_splitkv``, ``fwd_appendkv``, ``pagedkv_prefill``, ``batch_prefill``, ``bwd``) and
arch, run ``<ck-root>/example/ck_tile/01_fmha/generate.py -d <api> --targets <arch> -r <receipt> -m <mask mode>
-l <file>`` (list mode, in a subprocess whose ``PYTHONPATH`` starts with the generator's directory), drop the
dispatch ``*_api.cpp`` line, and compare the file names with :func:`ckfmha.enumeration.ck_instance_names`.

Before anything runs:

* ``--arch`` must be a CK arch (:data:`ckfmha.archs.CK_ARCHS`) or ``all``; anything else (``sm90``) is a
  :class:`ParityEnumError` naming the allowed archs (exit 2) -- CK's generator has no such target. ``all`` means
  every CK arch ckfmha knows; an arch the checkout's generator rejects (``Unsupported device target``) is then
  reported as skipped, not compared (an arch asked for by name is an error instead).
* ``generate.py --help`` tells which options the checkout's generator takes. One without ``--targets`` (CK before
  per-target factories, e.g. the ROCm/composable_kernel GitHub mirror frozen at 2024-10) gives "this CK predates
  --targets (generator options: ...)" instead of a crash; a missing ``-d``, ``-l``, ``-r`` or ``-m`` likewise.

CK renames tokens between versions (:class:`ckfmha.naming.CKNamingScheme`). Each upstream name is parsed in every
scheme ckfmha knows; when the checkout names kernels in an older scheme, the two lists are compared per kernel,
not per file name: a CK name and a ckfmha name *match* when their configs agree after
:func:`ckfmha.naming.cross_scheme_config` (what only one scheme determines is erased). The report then says, first:

* the scheme the checkout uses and the token renames that explain the matched pairs, with counts
  (``nsquant -> nqscale: 2,908 names (fwd 2,908)``, ``new token nsink: ...``, ``b64x128 -> b64: ...``) -- the
  token diff of each matched pair (difflib over the ``_``-separated tokens);
* the ckfmha kernels the checkout's scheme cannot spell, per field and value (``sink=True: N names`` -- features
  newer than that CK);

and only then the per-family counts and the residual lists: CK names no ckfmha kernel matches (missing) and
ckfmha names that match no CK kernel although the checkout's scheme could spell them (extra). With a checkout in
the current scheme the comparison is by file name, as always.

Exit status of the command: 0 no difference, 1 any difference (renamed tokens included: the names differ), 2 the
arguments or the checkout cannot be used (a non-CK arch, no such directory, no generate.py, a generator without
the needed options, a generator crash or timeout -- the message says which and why).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ckfmha.archs import CK_ARCHS, default_arch
from ckfmha.ck_generator import GENERATOR, generator_env, generator_tail
from ckfmha.kernel import Api, Family, MaskMode

ALL_APIS = tuple(a.value for a in Api)
ALL_ARCHS = "all"
REQUIRED_OPTIONS = {
    "--targets": "the target arch",
    "-d": "the api",
    "-l": "list mode",
    "-r": "the receipt",
    "-m": "the mask mode",
}
"""The generator options parity-enum passes, with what each one selects."""
_UNSUPPORTED_TARGET = re.compile(r"Unsupported device target[ \t]*\S*")


class CheckoutError(RuntimeError):
    """The CK checkout cannot be used (the message says why)."""


class UnsupportedTarget(CheckoutError):
    """The checkout's generator has no factory for the arch (it raised ``Unsupported device target``)."""


class ParityEnumError(ValueError):
    """A bad parity-enum argument (the message names the option, the value and the rule)."""


def find_generator(ck_root: str | Path) -> Path:
    root = Path(ck_root)
    if not root.is_dir():
        raise CheckoutError(f"--ck-root {root}: no such directory")
    gen = root / GENERATOR
    if not gen.is_file():
        raise CheckoutError(f"--ck-root {root}: no {GENERATOR} (not a CK checkout?)")
    return gen


def _run_generator(cmd: list[str], generator: Path, timeout_s: float, what: str) -> subprocess.CompletedProcess:
    """Run the checkout's generator (``cmd``) to its end; one that does not start or runs past ``timeout_s`` is a
    :class:`CheckoutError` (``what``: the run's name in the timeout's message)."""
    try:
        return subprocess.run(
            cmd, cwd=generator.parent, env=generator_env(generator), capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise CheckoutError(f"{what} timed out after {timeout_s:g}s: {' '.join(cmd)}") from None
    except OSError as e:
        raise CheckoutError(f"cannot run the generator ({' '.join(cmd)}): {e}") from None


def generator_options(generator: Path, python: str = sys.executable, timeout_s: float = 120.0) -> tuple[str, ...]:
    """The options the checkout's generator takes, read from ``generate.py --help`` (in the order printed)."""
    cmd = [python, str(generator), "--help"]
    proc = _run_generator(cmd, generator, timeout_s, "generator --help")
    if proc.returncode != 0:
        raise CheckoutError(f"generator --help failed (exit {proc.returncode}): {generator_tail(proc)}")
    found = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout)
    return tuple(dict.fromkeys(found))


def check_generator(generator: Path, python: str = sys.executable) -> tuple[str, ...]:
    """The generator's options; a :class:`CheckoutError` when it lacks one parity-enum needs."""
    opts = generator_options(generator, python)
    listed = ", ".join(opts) or "none"
    if "--targets" not in opts:
        raise CheckoutError(
            f"this CK predates --targets (generator options: {listed}); parity-enum lists one arch "
            "at a time with --targets <arch>: use a CK checkout whose generate.py takes --targets"
        )
    missing = [o for o in REQUIRED_OPTIONS if o not in opts]
    if missing:
        raise CheckoutError(
            f"this CK's generator lacks {', '.join(missing)} ("
            f"{', '.join(REQUIRED_OPTIONS[o] for o in missing)}; generator options: {listed})"
        )
    return opts


def resolve_archs(archs: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """The archs to compare (none given: the arch data's default arch) and whether they came from ``all``. Only CK
    archs are accepted: the checkout's generator has no other targets."""
    allowed = ", ".join(CK_ARCHS + (ALL_ARCHS,))
    out: list[str] = []
    from_all = False
    for a in archs or (default_arch(),):
        if a == ALL_ARCHS:
            from_all = True
            out.extend(CK_ARCHS)
        elif a in CK_ARCHS:
            out.append(a)
        else:
            raise ParityEnumError(
                f"--arch: {a!r} is not a CK arch (CK's generator has no such target); allowed: {allowed}"
            )
    return tuple(dict.fromkeys(out)), from_all


def upstream_names(
    generator: Path,
    api: str,
    arch: str,
    receipt: int,
    mask_mode: str,
    python: str = sys.executable,
    timeout_s: float = 900.0,
) -> list[str]:
    """The instance file names the checkout's generator lists (basenames, without the ``*_api.cpp`` line)."""
    with tempfile.TemporaryDirectory(prefix="ckfmha_enum_") as td:
        out = Path(td) / f"{api}_{arch}.txt"
        cmd = [
            python,
            str(generator),
            "-d",
            api,
            "--targets",
            arch,
            "-r",
            str(receipt),
            "-m",
            mask_mode,
            "-l",
            str(out),
        ]
        proc = _run_generator(cmd, generator, timeout_s, "generator")
        if proc.returncode != 0:
            # the exception's message, the traceback's last line (its source line, shown above it, matches too)
            unsupported = _UNSUPPORTED_TARGET.findall((proc.stdout or "") + (proc.stderr or ""))
            if unsupported:
                raise UnsupportedTarget(
                    f"this CK's generator does not support arch {arch} (api {api}: {unsupported[-1]!r})"
                )
            raise CheckoutError(
                f"generator crashed (exit {proc.returncode}) for api {api}, arch {arch}: {generator_tail(proc)}"
            )
        if not out.is_file():
            raise CheckoutError(f"generator wrote no list file for api {api}, arch {arch}")
        names = [Path(line.strip()).name for line in out.read_text().splitlines() if line.strip()]
    return [n for n in names if not n.endswith("_api.cpp")]


def _family(name: str) -> str:
    from ckfmha.naming import CKNameError, family_of_ck_name

    try:
        return family_of_ck_name(name).value
    except CKNameError:
        return "unknown"


def _strip(name: str) -> list[str]:
    return name[:-4].split("_") if name.endswith(".cpp") else name.split("_")


def _scheme_label(schemes) -> str:
    if len(schemes) == 1:
        return f"{schemes[0].value} only"
    return "alike in " + " and ".join(s.value for s in schemes)


def token_edits(ck_name: str, our_name: str) -> list[str]:
    """The token renames that turn a CK name into ours (difflib over the ``_``-separated tokens)."""
    a, b = _strip(ck_name), _strip(our_name)
    edits = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "replace":  # token for token, then what one side has more of
            k = min(i2 - i1, j2 - j1)
            edits += [f"{x} -> {y}" for x, y in zip(a[i1 : i1 + k], b[j1 : j1 + k])]
            if j2 - j1 > k:
                edits.append(f"new token {'_'.join(b[j1 + k : j2])}")
            if i2 - i1 > k:
                edits.append(f"dropped token {'_'.join(a[i1 + k : i2])}")
        elif op == "insert":
            edits.append(f"new token {'_'.join(b[j1:j2])}")
        elif op == "delete":
            edits.append(f"dropped token {'_'.join(a[i1:i2])}")
    return edits


def _extra_by_key(extra: list[str], scheme) -> tuple[dict, dict]:
    """Our extra names grouped by their cross-scheme config key, and the count of those the checkout's naming
    ``scheme`` cannot spell, per ``"field=value"`` and family (they are left out of the grouping)."""
    from ckfmha.naming import CKSchemeError, ck_instance_name, cross_scheme_config, parse_ck_name

    by_key: dict = defaultdict(list)
    unspellable: dict = defaultdict(Counter)
    for n in extra:
        key = cross_scheme_config(parse_ck_name(n).config)
        # a convert_dq key lacks the bn0 the 2025-11 spelling needs: keys compare without it, nothing to check
        if key.signature.family is not Family.BWD_CONVERT_DQ:
            try:
                ck_instance_name(key, scheme)
            except CKSchemeError as e:
                unspellable[f"{e.field}={e.value}"][key.signature.family.value] += 1
                continue
        by_key[key].append(n)
    return by_key, unspellable


@dataclass
class ApiDiff:
    """One (arch, api) comparison. ``missing`` / ``extra`` are the raw file-name differences; with a checkout in
    an older naming scheme the kernel-level analysis fills ``renames``, ``unspellable`` and the residual lists
    (see the module doc); ``schemes`` counts the upstream names per naming scheme."""

    arch: str
    api: str
    upstream: list[str]
    ours: list[str]
    missing: list[str] = field(default_factory=list)  # in CK's list, not in ours
    extra: list[str] = field(default_factory=list)  # in ours, not in CK's
    schemes: dict[str, int] = field(default_factory=dict)  # upstream names per naming scheme they belong to
    renames: dict[str, dict[str, int]] = field(default_factory=dict)  # edit -> family -> matched CK names
    unspellable: dict[str, dict[str, int]] = field(default_factory=dict)  # "field=value" -> family -> our names
    residual_missing: list[str] = field(default_factory=list)
    residual_extra: list[str] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)  # CK names in no scheme ckfmha knows (also in residual_missing)

    def __post_init__(self) -> None:
        u, o = set(self.upstream), set(self.ours)
        self.missing = sorted(u - o)
        self.extra = sorted(o - u)
        self._analyse()

    def _analyse(self) -> None:
        from ckfmha.naming import CKNameError, CKNamingScheme, ParsedCKName, cross_scheme_config, parse_ck_name

        parsed: dict[str, ParsedCKName] = {}
        sch: Counter = Counter()
        for n in self.missing:
            try:
                parsed[n] = parse_ck_name(n)
            except CKNameError:
                self.unparsed.append(n)
        for n in self.upstream:
            found = parsed.get(n)
            if found is None and n not in self.unparsed:
                try:
                    found = parse_ck_name(n)
                except CKNameError:
                    continue
            if found is not None:
                sch[_scheme_label(found.schemes)] += 1
        self.schemes = dict(sch)
        older = [p.scheme for p in parsed.values() if CKNamingScheme.CURRENT not in p.schemes]
        if not older:  # the checkout names kernels like ckfmha: file names are the comparison
            self.residual_missing = list(self.missing)
            self.residual_extra = list(self.extra)
            return
        by_key, unspellable = _extra_by_key(self.extra, Counter(older).most_common(1)[0][0])
        matched_ours: set[str] = set()
        renames: dict = defaultdict(Counter)
        for n, p in parsed.items():
            ours = by_key.get(cross_scheme_config(p.config))
            if not ours:
                self.residual_missing.append(n)
                continue
            matched_ours.update(ours)
            fam = p.config.signature.family.value
            for edit in dict.fromkeys(e for o in ours for e in token_edits(n, o)):
                renames[edit][fam] += 1
        self.residual_missing = sorted(self.residual_missing + self.unparsed)
        self.residual_extra = sorted(n for ns in by_key.values() for n in ns if n not in matched_ours)
        self.renames = {k: dict(v) for k, v in renames.items()}
        self.unspellable = {k: dict(v) for k, v in unspellable.items()}

    @property
    def same(self) -> bool:
        return not self.missing and not self.extra and len(self.upstream) == len(set(self.upstream))

    def per_family(self) -> dict[str, dict[str, int]]:
        cu, co = Counter(map(_family, self.upstream)), Counter(map(_family, self.ours))
        cm, ce = Counter(map(_family, self.missing)), Counter(map(_family, self.extra))
        return {
            f: {"upstream": cu[f], "ours": co[f], "missing": cm[f], "extra": ce[f]} for f in sorted(set(cu) | set(co))
        }


@dataclass
class SkippedArch:
    """An arch of ``--arch all`` the checkout's generator does not support for an api."""

    arch: str
    api: str
    reason: str


@dataclass
class EnumParityReport:
    ck_root: str
    receipt: int
    mask_mode: str
    diffs: list[ApiDiff]
    generator_options: tuple[str, ...] = ()
    skipped: list[SkippedArch] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return all(d.same for d in self.diffs)

    def token_summary(self) -> dict:
        """Over every api/arch: upstream names per naming scheme, the token renames of matched kernels, the
        ckfmha kernels the checkout's scheme cannot spell and the CK names in no known scheme (each with counts
        per family)."""
        schemes: Counter = Counter()
        renames: dict = defaultdict(Counter)
        unspellable: dict = defaultdict(Counter)
        unparsed: Counter = Counter()
        for d in self.diffs:
            schemes.update(d.schemes)
            unparsed.update(map(_family, d.unparsed))
            for k, v in d.renames.items():
                renames[k].update(v)
            for k, v in d.unspellable.items():
                unspellable[k].update(v)
        return {
            "schemes": dict(schemes),
            "renames": {k: dict(v) for k, v in renames.items()},
            "unspellable": {k: dict(v) for k, v in unspellable.items()},
            "unparsed": dict(unparsed),
        }

    def to_dict(self) -> dict:
        return {
            "ck_root": self.ck_root,
            "receipt": self.receipt,
            "mask_mode": self.mask_mode,
            "same": self.same,
            "generator_options": list(self.generator_options),
            "token_summary": self.token_summary(),
            "skipped": [{"arch": s.arch, "api": s.api, "reason": s.reason} for s in self.skipped],
            "apis": [
                {
                    "arch": d.arch,
                    "api": d.api,
                    "upstream": len(d.upstream),
                    "ours": len(d.ours),
                    "missing": d.missing,
                    "extra": d.extra,
                    "families": d.per_family(),
                    "schemes": d.schemes,
                    "renames": d.renames,
                    "unspellable": d.unspellable,
                    "residual_missing": d.residual_missing,
                    "residual_extra": d.residual_extra,
                    "unparsed": d.unparsed,
                }
                for d in self.diffs
            ],
        }

    def _summary_lines(self) -> list[str]:
        ts = self.token_summary()
        total = sum(ts["schemes"].values())
        lines = ["token summary (kernels compared across CK naming schemes; see ckfmha.naming):"]
        sch = ", ".join(f"{k} {v:,}" for k, v in sorted(ts["schemes"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  CK names per naming scheme: {sch or 'none'} (of {total:,})")

        def per_fam(c: dict[str, int]) -> str:
            return ", ".join(f"{f} {n:,}" for f, n in sorted(c.items()))

        if ts["renames"]:
            lines.append("  token renames in CK names that match a ckfmha kernel (CK -> ckfmha):")
            for edit, c in sorted(ts["renames"].items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
                lines.append(f"    {edit}: {sum(c.values()):,} names ({per_fam(c)})")
        if ts["unspellable"]:
            lines.append("  ckfmha kernels this CK's naming scheme cannot spell (features newer than that CK):")
            for what, c in sorted(ts["unspellable"].items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
                lines.append(f"    {what}: {sum(c.values()):,} names ({per_fam(c)})")
        if ts["unparsed"]:
            c = ts["unparsed"]
            lines.append(
                f"  CK names in no naming scheme ckfmha knows (a newer CK? listed under missing): "
                f"{sum(c.values()):,} ({per_fam(c)})"
            )
        if not ts["renames"] and not ts["unspellable"]:
            lines.append("  no token renames: the checkout names kernels in ckfmha's current scheme")
        for s in self.skipped:
            lines.append(f"  skipped {s.arch}/{s.api}: {s.reason}")
        return lines

    def table(self, show: int = 20) -> str:
        lines = self._summary_lines()
        rows: list[tuple[str | int, ...]] = [("arch", "api", "family", "upstream", "ours", "missing", "extra")]
        for d in self.diffs:
            for fam, c in d.per_family().items():
                rows.append((d.arch, d.api, fam, c["upstream"], c["ours"], c["missing"], c["extra"]))
            rows.append((d.arch, d.api, "(total)", len(d.upstream), len(d.ours), len(d.missing), len(d.extra)))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        table = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        table.insert(1, "  ".join("-" * w for w in widths))
        lines += [""] + table
        for d in self.diffs:
            for label, names in (
                ("missing (CK lists, ckfmha lacks)", d.residual_missing),
                ("extra (ckfmha has, CK lacks)", d.residual_extra),
            ):
                if names:
                    lines.append(f"{d.arch}/{d.api} {label}: {len(names)}")
                    lines += [f"  {n}" for n in names[:show]]
                    if len(names) > show:
                        lines.append(f"  ... {len(names) - show} more")
        if self.same:
            lines.append("no differences")
        else:
            residual = sum(len(d.residual_missing) + len(d.residual_extra) for d in self.diffs)
            lines.append(
                f"DIFFERENCES in {sum(not d.same for d in self.diffs)} of {len(self.diffs)} api/arch lists "
                f"({residual:,} names beyond the token summary)"
            )
        return "\n".join(lines)


def enum_parity(
    ck_root: str | Path,
    archs: Sequence[str] = (),
    receipt: int | str = 0,
    mask_mode: str = "simplified",
    apis: Sequence[str] | None = None,
    python: str = sys.executable,
    timeout_s: float = 900.0,
) -> EnumParityReport:
    """Compare (see the module doc). Arguments are checked before the checkout is touched
    (:class:`ParityEnumError`); an unusable checkout is a :class:`CheckoutError`."""
    from ckfmha.enumeration import ck_instance_names
    from ckfmha.receipts import resolve_receipt

    arch_list, from_all = resolve_archs(archs)
    api_list = [Api.parse(a, "--api").value for a in (apis or ALL_APIS)]
    mode = MaskMode.parse(mask_mode, "--mask-mode").value
    rec = resolve_receipt(receipt)
    gen = find_generator(ck_root)
    opts = check_generator(gen, python)
    diffs, skipped = [], []
    for arch in arch_list:
        for api in api_list:
            try:
                up = upstream_names(gen, api, arch, rec, mode, python, timeout_s)
            except UnsupportedTarget as e:
                if not from_all:
                    raise
                skipped.append(SkippedArch(arch, api, str(e)))
                continue
            ours = [n for n in ck_instance_names(api, arch, rec, mode) if not n.endswith("_api.cpp")]
            diffs.append(ApiDiff(arch, api, up, ours))
    return EnumParityReport(str(ck_root), rec, mode, diffs, opts, skipped)


def cmd_parity_enum(args) -> int:
    try:
        rep = enum_parity(args.ck_root, args.arch, args.receipt, args.mask_mode, args.api or None, args.python)
    except CheckoutError as e:
        sys.stderr.write(f"ckfmha parity-enum: cannot use the checkout: {e}\n")
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(rep.to_dict(), indent=1) + "\n")
    else:
        sys.stdout.write(rep.table(args.show) + "\n")
    return 0 if rep.same else 1
