"""Arch specs: one YAML data file per GPU architecture (``ckfmha/data/archs/<arch>.yaml``).

Schema (documented in docs/arch_specs.md)::

    schema: 1
    arch: gfx942                 # must equal the file name
    description: CDNA3 (MI300)
    vendor: amd                  # amd (CK generator factories) | nvidia
    num_cus: 304                 # compute units (NVIDIA: SMs) of one device: sizes the split-KV grids
    fp8_format: fnuz             # fnuz | ocp: the fp8 encoding CK compiles for this arch
    default: true                # optional, false when absent: the arch used when none is given (exactly one)
    apis:                        # one section per generator api; each section's own schema is
      fwd: {...}                 # documented with its enumerator (ckfmha/enumeration/<api>.py)
      bwd: {...}

A section may instead read ``{inherit: <other arch>}`` to reuse that arch's section unchanged (gfx90a uses
the same generator factory as gfx942).

The arch facts are data, read from these files: :func:`default_arch` (the one file with ``default: true``),
:data:`CK_ARCHS` / :func:`ck_archs` (the ``vendor: amd`` archs, in LLVM target order: gfx90a, gfx942, gfx950,
gfx1100, gfx1201), :func:`fp8_format` and ``load_arch_spec(arch).num_cus``.

:func:`load_arch_spec` reads a file with the strict :func:`ckfmha.datafile.load_yaml` (a key written twice in one
mapping, bytes that are not UTF-8, nesting deeper than ``MAX_NESTING_DEPTH`` and files over ``MAX_FILE_BYTES`` are
errors) and checks its top level against ``data/schemas/arch.schema.yaml`` (both through
:func:`ckfmha.datafile.load_checked_yaml`, which keeps checked content in a cache like Python's bytecode cache): every key above but ``description``
and ``default`` required, no other key, ``schema`` 1, ``vendor`` / ``fp8_format`` from their lists, ``num_cus`` an
integer >= 1, ``default`` true or false, ``apis`` an object whose keys are api names (:class:`ckfmha.kernel.Api`)
and whose sections are objects -- an ``inherit`` section holds nothing else.  A NaN or infinity anywhere in the
file is an error too.  What the schema cannot see is checked here: ``arch`` equals the file name, ``num_cus`` is
written as an integer (``304.0`` is an integer to JSON Schema), exactly one file says ``default: true``
(:func:`default_arch`), a ``vendor: amd`` arch is an AMDGPU target name (:func:`ck_archs`), an ``inherit`` names
an arch that has the section and makes no cycle (:meth:`ArchSpec.section`).  Each section's own keys are checked
by its enumerator (``ckfmha/enumeration/<api>.py``).

Errors are :class:`ArchSpecError` and name the file, the key path, what was expected and what was found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ckfmha.kernel import Api

#: the fp8 encodings an arch file may name (its schema's ``fp8_format`` enum; the message of :func:`fp8_format`)
FP8_FORMATS = ("fnuz", "ocp")


class ArchSpecError(ValueError):
    pass


def data_dir() -> Path:
    """``ckfmha/data`` (the package's own directory: importlib.resources would cost more to import than it reads)."""
    return Path(__file__).resolve().parent / "data"


def known_archs() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (data_dir() / "archs").glob("*.yaml")))


@dataclass(frozen=True)
class ArchSpec:
    """One arch's data file. ``num_cus`` / ``fp8_format`` are ``None`` only in specs built by hand (tests of the
    enumerators); :func:`load_arch_spec` requires them."""

    name: str
    description: str
    vendor: str
    path: Path
    sections: dict[str, Any] = field(repr=False)
    num_cus: int | None = None
    fp8_format: str | None = None
    default: bool = False

    def section(self, api: Api | str) -> Any:
        """The api's section (after following ``inherit``); an error when the arch has none."""
        key = Api.parse(api, "api").value
        if key not in self.sections:
            raise ArchSpecError(f"{self.path}: apis.{key}: this arch has no section for api {key!r}")
        owner, sec = self._follow_inherit(key)
        if sec is None and owner != self.name:
            raise ArchSpecError(f"{self.path}: apis.{key}.inherit: arch {owner!r} has no section {key!r}")
        return sec

    def section_owner(self, api: Api | str) -> str:
        """The arch whose file defines this api's section (follows ``inherit``)."""
        return self._follow_inherit(Api.parse(api, "api").value)[0]

    def _follow_inherit(self, key: str) -> tuple[str, Any]:
        """(arch, section) at the end of the api section's ``inherit`` chain from this arch's own: the first
        section that is not ``{inherit: ARCH}``, or None where an arch of the chain has none; a cycle is an error."""
        owner, sec, seen = self.name, self.sections.get(key), [self.name]
        while isinstance(sec, dict) and set(sec) == {"inherit"}:
            owner = sec["inherit"]
            if owner in seen:
                raise ArchSpecError(f"{self.path}: apis.{key}.inherit: cycle {' -> '.join(seen + [owner])}")
            seen.append(owner)
            sec = load_arch_spec(owner).sections.get(key)
        return owner, sec

    def has_section(self, api: Api | str) -> bool:
        return Api.parse(api, "api").value in self.sections


@cache
def load_arch_spec(arch: str) -> ArchSpec:
    """Load and check an arch's data file (cached; see the module doc for the checks)."""
    from ckfmha.datafile import DataFileError, load_checked_yaml

    known = known_archs()
    if arch not in known:
        raise ArchSpecError(f"arch: unknown arch {arch!r}; known archs: {', '.join(known)}")
    path = data_dir() / "archs" / f"{arch}.yaml"
    try:
        doc = load_checked_yaml(path, "arch")
    except DataFileError as e:
        raise ArchSpecError(str(e)) from None
    if doc["arch"] != arch:
        raise ArchSpecError(f"{path}: arch: expected {arch!r} (the file name), found {doc['arch']!r}")
    num_cus = doc["num_cus"]
    if not isinstance(num_cus, int):  # JSON Schema's "integer" takes 304.0; a count of compute units is an int
        raise ArchSpecError(
            f"{path}: num_cus: expected an integer written without a fraction (compute units of one device), "
            f"found {num_cus!r}"
        )
    return ArchSpec(
        arch,
        str(doc.get("description", "")),
        doc["vendor"],
        path,
        dict(doc["apis"]),
        num_cus,
        doc["fp8_format"],
        doc.get("default", False),
    )


def default_arch() -> str:
    """The arch whose data file says ``default: true`` (exactly one must)."""
    marked = [a for a in known_archs() if load_arch_spec(a).default]
    if len(marked) != 1:
        raise ArchSpecError(
            f"{data_dir() / 'archs'}: default: exactly one arch file must say 'default: true', "
            f"found {len(marked)}{': ' + ', '.join(marked) if marked else ''}"
        )
    return marked[0]


def _gfx_order(path: Path, name: str) -> tuple[int, int, int]:
    """LLVM's AMDGPU target names are gfx<major><minor><stepping>, minor and stepping one hex digit each."""
    m = re.fullmatch(r"gfx([0-9]+)([0-9a-f])([0-9a-f])", name)
    if m is None:
        raise ArchSpecError(f"{path}: arch: {name!r} is not an AMDGPU target name gfx<major><minor><stepping>")
    return int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16)


def ck_archs() -> tuple[str, ...]:
    """The CK archs: those whose data file says ``vendor: amd``, in LLVM target order (gfx90a < gfx942 < gfx950 <
    gfx1100 < gfx1201)."""
    specs = [load_arch_spec(a) for a in known_archs()]
    return tuple(
        s.name for s in sorted((s for s in specs if s.vendor == "amd"), key=lambda s: _gfx_order(s.path, s.name))
    )


def fp8_format(arch: str) -> str:
    """The fp8 encoding (``fnuz`` or ``ocp``) CK's kernels use on ``arch`` (its data file's ``fp8_format``); an
    :class:`ArchSpecError` naming the file for a spec without one."""
    spec = load_arch_spec(arch)
    if spec.fp8_format is None:  # load_arch_spec requires the key: only a hand-built ArchSpec lacks it
        raise ArchSpecError(f"{spec.path}: fp8_format: missing; expected one of {', '.join(FP8_FORMATS)}")
    return spec.fp8_format


def __getattr__(name: str) -> Any:
    """``CK_ARCHS``: :func:`ck_archs`, read from the data on first use (PEP 562)."""
    if name == "CK_ARCHS":
        return ck_archs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
