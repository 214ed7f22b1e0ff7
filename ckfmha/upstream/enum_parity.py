"""``ckfmha parity-enum``: diff ckfmha's enumeration with a CK checkout's own generator.

For every api (``fwd``, ``fwd_splitkv``, ``fwd_appendkv``, ``pagedkv_prefill``, ``batch_prefill``, ``bwd``) and
arch, run ``<ck-root>/example/ck_tile/01_fmha/generate.py -d <api> --targets <arch> -r <receipt> -m <mask mode>
-l <file>`` (list mode, in a subprocess whose ``PYTHONPATH`` starts with the generator's directory), drop the
dispatch ``*_api.cpp`` line, and compare the file names with :func:`ckfmha.enumeration.ck_instance_names`:
counts, missing (CK has, we lack) and extra (we have, CK lacks) per family and per api.

Exit status of the command: 0 no difference, 1 any difference, 2 the checkout cannot be used (no such
directory, no generate.py, the generator crashed or timed out -- the message says which and why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ckfmha.kernel import Api

GENERATOR_REL = Path("example") / "ck_tile" / "01_fmha" / "generate.py"
ALL_APIS = tuple(a.value for a in Api)


class CheckoutError(RuntimeError):
    """The CK checkout cannot be used (the message says why)."""


def find_generator(ck_root: str | Path) -> Path:
    root = Path(ck_root)
    if not root.is_dir():
        raise CheckoutError(f"--ck-root {root}: no such directory")
    gen = root / GENERATOR_REL
    if not gen.is_file():
        raise CheckoutError(f"--ck-root {root}: no {GENERATOR_REL} (not a CK checkout?)")
    return gen


def upstream_names(generator: Path, api: str, arch: str, receipt: int, mask_mode: str,
                   python: str = sys.executable, timeout_s: float = 900.0) -> list[str]:
    """The instance file names the checkout's generator lists (basenames, without the ``*_api.cpp`` line)."""
    with tempfile.TemporaryDirectory(prefix="ckfmha_enum_") as td:
        out = Path(td) / f"{api}_{arch}.txt"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(generator.parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        cmd = [python, str(generator), "-d", api, "--targets", arch, "-r", str(receipt), "-m", mask_mode,
               "-l", str(out)]
        try:
            proc = subprocess.run(cmd, cwd=generator.parent, env=env, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CheckoutError(f"generator timed out after {timeout_s:g}s: {' '.join(cmd)}") from None
        except OSError as e:
            raise CheckoutError(f"cannot run the generator ({' '.join(cmd)}): {e}") from None
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
            raise CheckoutError(f"generator crashed (exit {proc.returncode}) for api {api}, arch {arch}: {tail}")
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


@dataclass
class ApiDiff:
    arch: str
    api: str
    upstream: list[str]
    ours: list[str]
    missing: list[str] = field(default_factory=list)  # in CK's list, not in ours
    extra: list[str] = field(default_factory=list)  # in ours, not in CK's

    def __post_init__(self) -> None:
        u, o = set(self.upstream), set(self.ours)
        self.missing = sorted(u - o)
        self.extra = sorted(o - u)

    @property
    def same(self) -> bool:
        return not self.missing and not self.extra and len(self.upstream) == len(set(self.upstream))

    def per_family(self) -> dict[str, dict[str, int]]:
        cu, co = Counter(map(_family, self.upstream)), Counter(map(_family, self.ours))
        cm, ce = Counter(map(_family, self.missing)), Counter(map(_family, self.extra))
        return {f: {"upstream": cu[f], "ours": co[f], "missing": cm[f], "extra": ce[f]}
                for f in sorted(set(cu) | set(co))}


@dataclass
class EnumParityReport:
    ck_root: str
    receipt: int
    mask_mode: str
    diffs: list[ApiDiff]

    @property
    def same(self) -> bool:
        return all(d.same for d in self.diffs)

    def to_dict(self) -> dict:
        return {"ck_root": self.ck_root, "receipt": self.receipt, "mask_mode": self.mask_mode, "same": self.same,
                "apis": [{"arch": d.arch, "api": d.api, "upstream": len(d.upstream), "ours": len(d.ours),
                          "missing": d.missing, "extra": d.extra, "families": d.per_family()} for d in self.diffs]}

    def table(self, show: int = 20) -> str:
        rows = [("arch", "api", "family", "upstream", "ours", "missing", "extra")]
        for d in self.diffs:
            for fam, c in d.per_family().items():
                rows.append((d.arch, d.api, fam, c["upstream"], c["ours"], c["missing"], c["extra"]))
            rows.append((d.arch, d.api, "(total)", len(d.upstream), len(d.ours), len(d.missing), len(d.extra)))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        for d in self.diffs:
            for label, names in (("missing (CK lists, ckfmha lacks)", d.missing), ("extra (ckfmha has, CK lacks)", d.extra)):
                if names:
                    lines.append(f"{d.arch}/{d.api} {label}: {len(names)}")
                    lines += [f"  {n}" for n in names[:show]]
                    if len(names) > show:
                        lines.append(f"  ... {len(names) - show} more")
        lines.append("no differences" if self.same else
                     f"DIFFERENCES in {sum(not d.same for d in self.diffs)} of {len(self.diffs)} api/arch lists")
        return "\n".join(lines)


def enum_parity(ck_root: str | Path, archs: Sequence[str] = ("gfx942",), receipt: int | str = 0,
                mask_mode: str = "simplified", apis: Sequence[str] | None = None, python: str = sys.executable,
                timeout_s: float = 900.0) -> EnumParityReport:
    from ckfmha.enumeration import ck_instance_names
    from ckfmha.receipts import resolve_receipt

    gen = find_generator(ck_root)
    rec = resolve_receipt(receipt)
    diffs = []
    for arch in archs:
        for api in (apis or ALL_APIS):
            Api.parse(api, "api")
            up = upstream_names(gen, api, arch, rec, mask_mode, python, timeout_s)
            ours = [n for n in ck_instance_names(api, arch, rec, mask_mode) if not n.endswith("_api.cpp")]
            diffs.append(ApiDiff(arch, api, up, ours))
    return EnumParityReport(str(ck_root), rec, mask_mode, diffs)


def cmd_parity_enum(args) -> int:
    try:
        rep = enum_parity(args.ck_root, args.arch or ["gfx942"], args.receipt, args.mask_mode, args.api or None,
                          args.python)
    except CheckoutError as e:
        sys.stderr.write(f"ckfmha parity-enum: cannot use the checkout: {e}\n")
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(rep.to_dict(), indent=1) + "\n")
    else:
        sys.stdout.write(rep.table(args.show) + "\n")
    return 0 if rep.same else 1
