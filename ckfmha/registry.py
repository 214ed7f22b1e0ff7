"""The kernel registry: the KernelConfigs available for one arch (and optionally one backend).

Fill it from the enumeration or a JSON file; query it by signature; export/import JSON.

JSON schema (``schema: "ckfmha.registry"``, ``version: 1``)::

    {
      "schema": "ckfmha.registry",
      "version": 1,
      "arch": "gfx942",
      "backend": "cpu",                 # or null: not bound to a backend
      "source": "enumeration receipt=0 mask_mode=simplified",
      "kernels": [
        {"kernel_id": "fwd.fp16.batch....", "family": "fwd", "dtype": "fp16", ..., "tile": [128, ...], ...}
      ]
    }

Each kernel entry carries its canonical ``kernel_id`` plus every KernelConfig field (flat, as
``KernelConfig.as_dict()``); on import both must agree, so a hand-edited entry cannot silently mean two things.
The file is read with :mod:`ckfmha.datafile`'s strict loader and checked against ``data/schemas/registry.schema.yaml``
first; errors name the file, the key path, the value and the rule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ckfmha.kernel import DType, Family, KernelConfig, Mode

REGISTRY_SCHEMA = "ckfmha.registry"
REGISTRY_VERSION = 1


class RegistryError(ValueError):
    pass


class Registry:
    def __init__(
        self, arch: str, configs: Iterable[KernelConfig] = (), *, backend: str | None = None, source: str = ""
    ) -> None:
        self.arch = arch
        self.backend = backend
        self.source = source
        self._configs: dict[KernelConfig, None] = {}
        self._index: dict[tuple[Family, DType, Mode], list[KernelConfig]] = defaultdict(list)
        for c in configs:
            self.add(c)

    # ------------------------------------------------------------------ filling
    def add(self, config: KernelConfig) -> None:
        if config in self._configs:
            return
        self._configs[config] = None
        s = config.signature
        self._index[(s.family, s.dtype, s.mode)].append(config)

    @classmethod
    def from_enumeration(
        cls,
        arch: str,
        *,
        receipt: int | str = 0,
        mask_mode: str = "simplified",
        families: Iterable[Family | str] | None = None,
        backend: str | None = None,
        predicate=None,
    ) -> "Registry":
        from ckfmha.enumeration import enumerate_kernels

        configs = enumerate_kernels(arch, families, receipt, mask_mode, predicate=predicate)
        return cls(arch, configs, backend=backend, source=f"enumeration receipt={receipt} mask_mode={mask_mode}")

    @classmethod
    def from_checkout(
        cls,
        ck_root: str | Path,
        arch: str,
        *,
        receipt: int | str = 0,
        mask_mode: str = "simplified",
        families: Iterable[Family | str] | None = None,
        backend: str | None = None,
    ) -> "Registry":
        """The kernel space of a CK checkout: the configs its own ``generate.py`` lists for ``arch``, ``receipt``
        (a number or profile name) and ``mask_mode`` (:func:`ckfmha.cktree.select_checkout_kernels`; the apis of
        ``families``, None: every api). An empty space is an :class:`~ckfmha.selection.EmptySelectionError`
        naming the checkout and the selection; a checkout that cannot be listed a :class:`ckfmha.cktree.
        CKTreeError`."""
        from ckfmha.cktree import resolve_ck_root, select_checkout_kernels
        from ckfmha.selection import KernelQuery

        root = resolve_ck_root(ck_root)
        query = KernelQuery.build(
            arch,
            families=None if families is None else [getattr(f, "value", f) for f in families],
            receipt=receipt,
            mask_mode=mask_mode,
        )
        kernels = select_checkout_kernels(root, query)
        return cls(
            arch,
            (k.config for k in kernels),
            backend=backend,
            source=f"CK checkout {root} receipt={query.receipt} mask_mode={query.mask_mode.value}",
        )

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._configs)

    def __iter__(self) -> Iterator[KernelConfig]:
        return iter(self._configs)

    def __contains__(self, config: object) -> bool:
        return config in self._configs

    def candidates(self, family: Family, dtype: DType | None = None, mode: Mode | None = None) -> list[KernelConfig]:
        """Configs of a family (optionally narrowed by dtype and mode) — the dispatcher's fast path."""
        if dtype is not None and mode is not None:
            return list(self._index.get((family, dtype, mode), ()))
        return [
            c
            for (f, d, m), cs in self._index.items()
            if f is family and (dtype is None or d is dtype) and (mode is None or m is mode)
            for c in cs
        ]

    def query(self, **fields: Any) -> list[KernelConfig]:
        """Configs whose fields equal the given values (tokens or enum members), e.g. ``query(hdim_q=128, lse=True)``."""
        probe = {k: v for k, v in fields.items()}
        out = []
        for c in self._configs:
            try:
                if all(getattr(c, k) == v for k, v in probe.items()):
                    out.append(c)
            except AttributeError as e:
                raise RegistryError(f"query: {e}") from None
        return out

    def families(self) -> set[Family]:
        return {f for (f, _, _) in self._index}

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REGISTRY_SCHEMA,
            "version": REGISTRY_VERSION,
            "arch": self.arch,
            "backend": self.backend,
            "source": self.source,
            "kernels": [{"kernel_id": c.kernel_id, **c.as_dict()} for c in self._configs],
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, doc: Any, source: str = "<registry json>") -> "Registry":
        from ckfmha.datafile import DataFileError, check_schema

        try:
            check_schema(doc, "registry", source)
        except DataFileError as e:
            raise RegistryError(str(e)) from None
        configs = []
        for i, entry in enumerate(doc["kernels"]):
            where = f"{source}: kernels[{i}]"
            fields = {k: v for k, v in entry.items() if k != "kernel_id"}
            try:
                c = KernelConfig.make(**fields) if fields else KernelConfig.from_id(entry["kernel_id"])
            except (ValueError, TypeError) as e:
                raise RegistryError(f"{where}: {e}") from None
            if c.kernel_id != entry["kernel_id"]:
                raise RegistryError(
                    f"{where}: kernel_id {entry['kernel_id']!r} does not match its fields "
                    f"(the fields say {c.kernel_id!r})"
                )
            configs.append(c)
        return cls(doc["arch"], configs, backend=doc.get("backend"), source=str(doc.get("source", source)))

    @classmethod
    def load(cls, path: str | Path) -> "Registry":
        from ckfmha.datafile import DataFileError, MissingDataFileError, load_json

        p = Path(path)
        try:
            doc = load_json(p)
        except MissingDataFileError:
            raise RegistryError(f"{p}: no such registry file") from None
        except DataFileError as e:
            raise RegistryError(str(e)) from None
        return cls.from_json(doc, str(p))
