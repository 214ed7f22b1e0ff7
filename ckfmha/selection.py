"""Kernel selection shared by the CLI and the pytest plugin: arch + families/api + receipt/profile + mask mode,
narrowed by a sweep config, a filter expression and a filter file (all AND-ed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ckfmha.enumeration import EnumerationError, enumerate_kernels
from ckfmha.filters import ConfigPredicate, combine, compile_filter, load_filter_file
from ckfmha.kernel import API_FAMILIES, Api, Family, KernelConfig, MaskMode
from ckfmha.receipts import resolve_receipt
from ckfmha.sweep import Sweep, load_sweep


@dataclass(frozen=True)
class KernelQuery:
    arch: str
    families: tuple[Family, ...] | None = None
    receipt: int = 0
    mask_mode: MaskMode = MaskMode.SIMPLIFIED
    sweep: Sweep | None = None
    filters: tuple[ConfigPredicate, ...] = field(default=(), compare=False)

    @classmethod
    def build(cls, arch: str, *, families: Sequence[str] | None = None, apis: Sequence[str] | None = None,
              receipt: int | str | None = None, profile: str | None = None, mask_mode: str = "simplified",
              sweep: str | Path | None = None, filter_expr: str | None = None,
              filter_file: str | Path | None = None) -> "KernelQuery":
        fams: list[Family] = []
        for f in families or ():
            fams.append(Family.parse(f, "family"))
        for a in apis or ():
            fams.extend(API_FAMILIES[Api.parse(a, "api")])
        sw = load_sweep(sweep) if sweep else None
        preds: list[ConfigPredicate] = []
        if filter_file:
            preds.append(load_filter_file(filter_file))
        if filter_expr:
            preds.append(compile_filter(filter_expr))
        return cls(
            arch=arch,
            families=tuple(dict.fromkeys(fams)) or None,
            receipt=resolve_receipt(receipt, profile=profile),
            mask_mode=MaskMode.parse(mask_mode, "mask_mode"),
            sweep=sw,
            filters=tuple(preds),
        )

    def run(self) -> list[KernelConfig]:
        families: Sequence[Family] | None = self.families
        if self.sweep is not None:
            sweep_fams = self.sweep.families
            families = tuple(f for f in (families or sweep_fams) if f in sweep_fams)
        predicate = combine([self.sweep, *self.filters])
        return enumerate_kernels(self.arch, families, self.receipt, self.mask_mode, predicate=predicate)


__all__ = ["KernelQuery", "EnumerationError"]
