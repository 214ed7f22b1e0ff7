"""Arch specs: one YAML data file per GPU architecture (``ckfmha/data/archs/<arch>.yaml``).

Schema (documented in docs/arch_specs.md)::

    schema: 1
    arch: gfx942                 # must equal the file name
    description: CDNA3 (MI300)
    vendor: amd                  # amd | nvidia
    apis:                        # one section per generator api; each section's own schema is
      fwd: {...}                 # documented with its enumerator (ckfmha/enumeration/<api>.py)
      bwd: {...}

A section may instead read ``{inherit: <other arch>}`` to reuse that arch's section unchanged (gfx90a uses
the same generator factory as gfx942).

Errors name the file, the key path, what was expected and what was found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ckfmha.kernel import Api

CK_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")

try:  # the C loader is 5-10x faster; fall back to the pure-Python one
    _Loader = yaml.CSafeLoader  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Loader = yaml.SafeLoader


class ArchSpecError(ValueError):
    pass


def data_dir() -> Path:
    return Path(str(resources.files("ckfmha") / "data"))


def load_yaml(path: Path) -> Any:
    """Load a YAML data file; a malformed file is an error naming the file and the position."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.load(fh, Loader=_Loader)
    except yaml.YAMLError as e:
        raise ArchSpecError(f"{path}: malformed YAML: {e}") from None


def known_archs() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in (data_dir() / "archs").glob("*.yaml")))


@dataclass(frozen=True)
class ArchSpec:
    name: str
    description: str
    vendor: str
    path: Path
    sections: dict[str, Any] = field(repr=False)

    def section(self, api: Api | str) -> Any:
        """The api's section (after following ``inherit``); an error when the arch has none."""
        key = Api.parse(api, "api").value
        if key not in self.sections:
            raise ArchSpecError(f"{self.path}: apis.{key}: this arch has no section for api {key!r}")
        sec = self.sections[key]
        seen = [self.name]
        while isinstance(sec, dict) and set(sec) == {"inherit"}:
            other = sec["inherit"]
            if other in seen:
                raise ArchSpecError(f"{self.path}: apis.{key}.inherit: cycle {' -> '.join(seen + [other])}")
            seen.append(other)
            sec = load_arch_spec(other).sections.get(key)
            if sec is None:
                raise ArchSpecError(f"{self.path}: apis.{key}.inherit: arch {other!r} has no section {key!r}")
        return sec

    def section_owner(self, api: Api | str) -> str:
        """The arch whose file defines this api's section (follows ``inherit``)."""
        key = Api.parse(api, "api").value
        owner, sec, seen = self.name, self.sections.get(key), [self.name]
        while isinstance(sec, dict) and set(sec) == {"inherit"}:
            owner = sec["inherit"]
            if owner in seen:
                raise ArchSpecError(f"{self.path}: apis.{key}.inherit: cycle {' -> '.join(seen + [owner])}")
            seen.append(owner)
            sec = load_arch_spec(owner).sections.get(key)
        return owner

    def has_section(self, api: Api | str) -> bool:
        return Api.parse(api, "api").value in self.sections


@lru_cache(maxsize=None)
def load_arch_spec(arch: str) -> ArchSpec:
    """Load and check an arch's data file (cached)."""
    known = known_archs()
    if arch not in known:
        raise ArchSpecError(f"arch: unknown arch {arch!r}; known archs: {', '.join(known)}")
    path = data_dir() / "archs" / f"{arch}.yaml"
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise ArchSpecError(f"{path}: top level: expected a mapping, found {type(doc).__name__}")
    allowed = {"schema", "arch", "description", "vendor", "apis"}
    unknown = set(doc) - allowed
    if unknown:
        raise ArchSpecError(f"{path}: top level: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    if doc.get("schema") != 1:
        raise ArchSpecError(f"{path}: schema: expected 1, found {doc.get('schema')!r}")
    if doc.get("arch") != arch:
        raise ArchSpecError(f"{path}: arch: expected {arch!r} (the file name), found {doc.get('arch')!r}")
    vendor = doc.get("vendor", "amd")
    if vendor not in ("amd", "nvidia"):
        raise ArchSpecError(f"{path}: vendor: expected 'amd' or 'nvidia', found {vendor!r}")
    sections = dict(doc.get("apis") or {})
    for key in sections:
        try:
            Api(key)
        except ValueError:
            raise ArchSpecError(
                f"{path}: apis.{key}: unknown api; known apis: {', '.join(a.value for a in Api)}"
            ) from None
    return ArchSpec(arch, str(doc.get("description", "")), vendor, path, sections)
