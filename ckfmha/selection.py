"""Kernel selection shared by the CLI and the pytest plugin: arch + families/api + receipt/profile + mask mode,
narrowed by a sweep config, a filter expression and a filter file (all AND-ed).

    query = KernelQuery.build("gfx942", families=["bwd"], profile="pytorch", filter_expr="c.hdim_q == 128")
    kernels = query.run()                    # raises EmptySelectionError when nothing matches
    kernels = query.run(allow_empty=True)    # an empty list instead

Family names (``families=``) are those of :mod:`ckfmha.families`: a problem family or alias selects every kernel
family its generator api emits (``bwd`` = the three backward stages, ``fwd_splitkv`` = split-KV + combine), a
kernel-stage token that names no problem (``fwd_splitkv_combine``, ``bwd_dot_do_o``, ``bwd_convert_dq``) that
stage alone.  ``apis=`` takes CK generator api names (:class:`ckfmha.kernel.Api`).

Empty selections are errors: :meth:`KernelQuery.run` raises :class:`EmptySelectionError` (a ValueError) when no
kernel matches, unless ``allow_empty=True``.  Its message names the whole selection (arch, families, receipt and
profile name, mask mode, sweep file, filter expression, filter file), says which step removed the kernels (an
api the arch defines no kernels for, the receipt/mask mode, the sweep, the filters), and for each field the
filter expression compares with a literal, the values that field takes in the selection before the filters
(``mask takes: none, any`` explains why ``c.mask == 'causal'`` matches nothing under the simplified mask mode).
An unknown arch is a bad argument (:class:`ckfmha.archs.ArchSpecError`, also a ValueError) whether or not empty
selections are allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ckfmha.archs import load_arch_spec
from ckfmha.enumeration import EnumerationError, enumerate_kernels
from ckfmha.families import kernel_families
from ckfmha.filters import ConfigPredicate, combine, compile_filter, literal_field_values, load_filter_file
from ckfmha.kernel import API_FAMILIES, FAMILY_API, Api, Family, KernelConfig, MaskMode
from ckfmha.receipts import receipts, resolve_receipt
from ckfmha.sweep import Sweep, load_sweep

MAX_VALUES_SHOWN = 24  # values listed per field in an empty-selection message


class EmptySelectionError(ValueError):
    """No kernel matches a selection; the message names the selection and why it is empty."""

    def __init__(self, message: str, query: "KernelQuery") -> None:
        super().__init__(message)
        self.query = query


@dataclass(frozen=True)
class KernelQuery:
    arch: str
    families: tuple[Family, ...] | None = None
    receipt: int = 0
    mask_mode: MaskMode = MaskMode.SIMPLIFIED
    sweep: Sweep | None = None
    filters: tuple[ConfigPredicate, ...] = field(default=(), compare=False)
    # the sources of ``filters``, for messages
    filter_expr: str | None = field(default=None, compare=False)
    filter_file: str | None = field(default=None, compare=False)

    @classmethod
    def build(
        cls,
        arch: str,
        *,
        families: Sequence[str] | None = None,
        apis: Sequence[str] | None = None,
        receipt: int | str | None = None,
        profile: str | None = None,
        mask_mode: str = "simplified",
        sweep: str | Path | None = None,
        filter_expr: str | None = None,
        filter_file: str | Path | None = None,
    ) -> "KernelQuery":
        """Check every argument (bad values raise ValueErrors naming the argument) and build the query."""
        load_arch_spec(arch)  # an unknown arch: ArchSpecError naming the known archs
        fams: list[Family] = []
        for f in families or ():
            fams.extend(kernel_families(f, "family"))
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
            filter_expr=filter_expr or None,
            filter_file=str(filter_file) if filter_file else None,
        )

    def _families(self) -> Sequence[Family] | None:
        families: Sequence[Family] | None = self.families
        if self.sweep is not None:
            sweep_fams = self.sweep.families
            families = tuple(f for f in (families or sweep_fams) if f in sweep_fams)
        return families

    def run(self, *, allow_empty: bool = False) -> list[KernelConfig]:
        """The selected kernels; :class:`EmptySelectionError` when there are none, unless ``allow_empty``."""
        load_arch_spec(self.arch)
        predicate = combine([self.sweep, *self.filters])
        configs = enumerate_kernels(self.arch, self._families(), self.receipt, self.mask_mode, predicate=predicate)
        if not configs and not allow_empty:
            raise EmptySelectionError(self.explain_empty(), self)
        return configs

    # ------------------------------------------------------------------------------------------- messages
    def describe(self) -> str:
        """The selection in words: arch, families, receipt, mask mode, sweep, filter, filter file."""
        rec = receipts().get(self.receipt)
        parts = [
            f"arch {self.arch}",
            "families " + (", ".join(f.value for f in self.families) if self.families else "all"),
            f"receipt {self.receipt}" + (f" (profile {rec.name})" if rec else ""),
            f"mask mode {self.mask_mode.value}",
        ]
        if self.sweep is not None:
            parts.append(f"sweep {self.sweep.source}")
        if self.filter_expr:
            parts.append(f"filter {self.filter_expr!r}")
        if self.filter_file:
            parts.append(f"filter file {self.filter_file}")
        return ", ".join(parts)

    def explain_empty(self) -> str:
        """Why the selection is empty: which step removed every kernel, and the values the filter's fields take
        before the filters."""
        lines = [f"no kernel matches the selection: {self.describe()}"]
        spec = load_arch_spec(self.arch)
        wanted = self.families or tuple(Family)
        apis = tuple(dict.fromkeys(FAMILY_API[f] for f in wanted))
        missing = [a for a in apis if not spec.has_section(a)]
        if missing:
            defined = [a.value for a in Api if spec.has_section(a)]
            lines.append(
                f"  arch {self.arch} defines no kernels for api(s) {', '.join(a.value for a in missing)} "
                f"(it defines: {', '.join(defined) or 'none'})"
            )
        families = self._families()
        if self.sweep is not None and self.families and not families:
            lines.append(
                f"  the sweep {self.sweep.source} (variant {self.sweep.variant}) covers families "
                f"{', '.join(f.value for f in self.sweep.families)}, none of the selected families"
            )
            return "\n".join(lines)
        base = enumerate_kernels(self.arch, families, self.receipt, self.mask_mode)
        if not base:
            if not missing:
                lines.append(
                    f"  receipt {self.receipt} under mask mode {self.mask_mode.value} keeps no kernel of these families"
                )
            return "\n".join(lines)
        step = f"{len(base)} kernel(s) match the arch, families, receipt and mask mode"
        after_sweep = base
        if self.sweep is not None:
            after_sweep = [c for c in base if self.sweep(c)]
            step += f"; the sweep {self.sweep.source} keeps {len(after_sweep)}"
        if self.filters and after_sweep:
            step += "; the filter expression and filter file keep none"
        lines.append("  " + step)
        if after_sweep:
            for pred in self.filters:
                for label, values in literal_field_values(pred, after_sweep).items():
                    shown = ", ".join(str(v) for v in values[:MAX_VALUES_SHOWN])
                    more = f", ... ({len(values)} values)" if len(values) > MAX_VALUES_SHOWN else ""
                    lines.append(f"  before the filter, {label} takes: {shown or '(no value)'}{more}")
        return "\n".join(lines)


__all__ = ["EmptySelectionError", "EnumerationError", "KernelQuery"]
