"""Enumeration of CK's FMHA kernel space, reproducing CK's own generator exactly.

``ck_instance_names(api, arch, receipt, mask_mode)`` returns what
``generate.py -d <api> --targets <arch> -r <receipt> -m <mask_mode> -l`` lists (sorted, unique, without the
dispatch-API .cpp); ``enumerate_kernels(arch, families, receipt, mask_mode)`` returns the KernelConfigs.

Each api has one enumerator module (``fwd``, ``splitkv``, ``appendkv``, ``pagedkv``, ``batch_prefill``,
``bwd``) exposing ``enumerate_pairs(ctx: EnumContext)``, its kernels as (signature, algorithm) pairs
(:mod:`ckfmha.enumeration._pairs`), and ``enumerate_api(ctx) -> list[KernelConfig]``, the same as configs.
``fwd``, ``bwd``, ``batch_prefill`` and ``splitkv`` also expose ``enumerate_names(ctx)``: the CK names of their
kernels, in the same order, made from the parts of :func:`ckfmha.naming.ck_name_parts` (or the pieces of
:func:`ckfmha.naming.join_name_pieces`) without making the pairs; ``ck_instance_names`` uses it, and names the
pairs (``render_ck_names``) for the other apis.
The tile tables and rules come from the arch data files (:mod:`ckfmha.archs`); what each receipt keeps comes from
``data/receipt_rules/<api>.yaml`` (:mod:`ckfmha.receipts`).

Caches, per (api, arch owning the section, receipt, mask mode): ``ck_instance_names`` keeps the sorted names only
(the pairs it names are dropped, or the cached configs are named when ``enumerate_api`` / ``enumerate_kernels``
made them first); ``enumerate_api`` / ``enumerate_kernels`` keep the configs.  :func:`clear_caches` forgets both.

Each enumeration runs with the cyclic garbage collector paused (:func:`_no_cyclic_gc`, restored as it was).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice, starmap
from operator import eq
from typing import Any

from ckfmha.archs import ArchSpec, ArchSpecError, load_arch_spec
from ckfmha.enumeration._fwdlike import SectionError, section_source  # noqa: F401  (public here too)
from ckfmha.enumeration._pairs import Pair
from ckfmha.filters import ConfigPredicate
from ckfmha.kernel import API_FAMILIES, FAMILY_API, Api, Family, KernelConfig, MaskImpl, MaskMode, new_config
from ckfmha.naming import render_ck_names
from ckfmha.receipts import receipt_predicate, resolve_receipt

_MODULES: dict[Api, str] = {
    Api.FWD: "ckfmha.enumeration.fwd",
    Api.FWD_SPLITKV: "ckfmha.enumeration.splitkv",
    Api.FWD_APPENDKV: "ckfmha.enumeration.appendkv",
    Api.PAGEDKV_PREFILL: "ckfmha.enumeration.pagedkv",
    Api.BATCH_PREFILL: "ckfmha.enumeration.batch_prefill",
    Api.BWD: "ckfmha.enumeration.bwd",
}


class EnumerationError(ValueError):
    pass


@dataclass(frozen=True)
class EnumContext:
    """Everything an api enumerator needs."""

    api: Api
    arch: str
    spec: ArchSpec
    receipt: int
    mask_mode: MaskMode

    @property
    def section(self) -> Any:
        """This api's section of the arch data file."""
        return self.spec.section(self.api)

    @property
    def keep(self) -> ConfigPredicate:
        """The receipt's predicate for this api and mask mode."""
        return receipt_predicate(self.api, self.receipt, self.mask_mode)

    @property
    def masks(self) -> tuple[MaskImpl, ...]:
        """Mask implementations the generator emits under this mask mode (CK's get_mask_map)."""
        if self.mask_mode is MaskMode.SIMPLIFIED:
            return (MaskImpl.NONE, MaskImpl.ANY)
        return (MaskImpl.NONE, MaskImpl.CAUSAL, MaskImpl.GENERIC)

    def where(self, key_path: str) -> str:
        """A location for error messages: the file that really holds the section (following ``inherit``) and
        the key path in it."""
        owner = self.spec.section_owner(self.api)
        path = self.spec.path if owner == self.spec.name else load_arch_spec(owner).path
        return f"{path} (apis.{self.api.value}{'.' + key_path if key_path else ''})"


def _api(value: Api | str) -> Api:
    try:
        return Api.parse(value, "api")
    except ValueError as e:
        raise EnumerationError(str(e)) from None


def _mask_mode(value: MaskMode | str) -> MaskMode:
    try:
        return MaskMode.parse(value, "mask_mode")
    except ValueError as e:
        raise EnumerationError(str(e)) from None


def _spec(arch: str) -> ArchSpec:
    try:
        return load_arch_spec(arch)
    except ArchSpecError as e:
        raise EnumerationError(str(e)) from None


@contextlib.contextmanager
def _no_cyclic_gc():
    """Enumeration allocates hundreds of thousands of small immutable objects that form no reference cycles and
    live as long as the caches: the cyclic collector would scan them again and again (a third of the run time), so
    it pauses meanwhile and is switched back on as it was, also when the enumeration raises.  (``gc.freeze``
    afterwards would save most of what remains, but it freezes every object of the process, the caller's too: a
    library does not do that behind its back.)  Measured over a fresh process's enumeration of all apis, archs and mask
    modes: without the pause the collector ran 109 young, 10 middle and one full collection (about 0.1 s); with
    it, 22 young and 2 middle ones and no full one, always the same (about 0.013 s).  What remains is mostly the
    young-generation scan, after each call, of what the call keeps: the tuple of its names (scanned once: a tuple
    of strings is no longer tracked after that) and what the enumerators cache per section.  So a call drops its
    temporaries (the list of names, whose tuple it keeps; bwd's signatures) before the collector is back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_CACHE_SIZE = 512
_CONFIGS: dict[tuple[Api, str, int, MaskMode], tuple[KernelConfig, ...]] = {}


def _enumerate_api_cached(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> tuple[KernelConfig, ...]:
    """The configs of :func:`_enumerate_pairs`, remembered (the oldest of :data:`_CACHE_SIZE` entries goes first);
    an arch whose section is inherited shares its owner's configs."""
    owner = _owner(api, arch)
    key = (api, owner, receipt, mask_mode)
    configs = _CONFIGS.get(key)
    if configs is None:
        with _no_cyclic_gc():
            configs = tuple(starmap(new_config, _enumerate_pairs(*key)))
        if len(_CONFIGS) >= _CACHE_SIZE:
            del _CONFIGS[next(iter(_CONFIGS))]
        _CONFIGS[key] = configs
    return configs


def _owner(api: Api, arch: str) -> str:
    """The arch whose file defines ``arch``'s section of ``api`` (``inherit`` followed; itself when it has none)."""
    spec = _spec(arch)
    return spec.section_owner(api) if spec.has_section(api) else arch


def _enumerate_pairs(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> list[Pair]:
    """The kernels of the api's enumerator module for an arch that owns its section (see :func:`_owner`)."""
    found = _enumerator(api, arch, receipt, mask_mode)
    return [] if found is None else found[0].enumerate_pairs(found[1])


def _enumerate_names(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> list[str]:
    """The CK names of :func:`_enumerate_pairs`' kernels, in order: the module's ``enumerate_names(ctx)`` where it
    has one (it names its kernels without making them), else the pairs named by ``render_ck_names``."""
    found = _enumerator(api, arch, receipt, mask_mode)
    if found is None:
        return []
    module, ctx = found
    names = getattr(module, "enumerate_names", None)
    return names(ctx) if names is not None else render_ck_names(module.enumerate_pairs(ctx))


def _enumerator(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> tuple[Any, EnumContext] | None:
    """The api's enumerator module and context for an arch that owns its section; None without a section."""
    spec = _spec(arch)
    if not spec.has_section(api):
        return None
    # NVIDIA arch specs describe a GPU backend's own kernel space in one common schema.
    module = importlib.import_module(_MODULES[api] if spec.vendor == "amd" else "ckfmha.enumeration.nvidia")
    return module, EnumContext(api, arch, spec, receipt, mask_mode)


def enumerate_api(
    api: Api | str, arch: str, receipt: int | str = 0, mask_mode: MaskMode | str = MaskMode.SIMPLIFIED
) -> list[KernelConfig]:
    """The configs one generator api emits for an arch/receipt/mask mode, in generator order."""
    return list(_enumerate_api_cached(_api(api), arch, _receipt(receipt), _mask_mode(mask_mode)))


def _receipt(receipt: int | str) -> int:
    try:
        return resolve_receipt(receipt)
    except ValueError as e:
        raise EnumerationError(str(e)) from None


def ck_instance_names(
    api: Api | str, arch: str, receipt: int | str = 0, mask_mode: MaskMode | str = "simplified"
) -> list[str]:
    """Exactly what CK's ``generate.py -d api --targets arch -r receipt -m mask_mode`` lists (sorted, unique)."""
    a, r, m = _api(api), _receipt(receipt), _mask_mode(mask_mode)
    return list(_names_cached(a, _owner(a, arch), r, m))


@lru_cache(maxsize=_CACHE_SIZE)
def _names_cached(api: Api, arch: str, receipt: int, mask_mode: MaskMode) -> tuple[str, ...]:
    """The sorted, unique names of the kernels (of their configs when those are cached already).  Only the names are
    kept: the kernels enumerated here are dropped once named, so the cyclic collector never scans them."""
    key = (api, arch, receipt, mask_mode)
    configs = _CONFIGS.get(key)
    with _no_cyclic_gc():  # one pause for all steps: each switch back on soon costs a scan of the new objects
        # any pairs named are a temporary: gone before the collector is back on, so it never scans them
        if configs is None:
            names = _enumerate_names(*key)
        else:
            names = render_ck_names([(c.signature, c.algorithm) for c in configs])
        # sorted (the generated order has short sorted runs only: with the duplicate check below, this is about a
        # tenth of a fresh enumeration), then deduplicated: equal names are neighbours now, and comparing
        # neighbours is cheaper than hashing every name into a set
        names.sort()
        if any(map(eq, names, islice(names, 1, None))):
            names = list(dict.fromkeys(names))
        out = tuple(names)
        del names  # the list is gone too before the collector is back on: it scans only the tuple, once
    return out


def clear_caches() -> None:
    """Forget every cached enumeration (benchmarks measure cold runs)."""
    _CONFIGS.clear()
    _names_cached.cache_clear()


def enumerate_kernels(
    arch: str,
    families: Iterable[Family | str] | None = None,
    receipt: int | str = 0,
    mask_mode: MaskMode | str = "simplified",
    *,
    predicate: Callable[[KernelConfig], bool] | None = None,
) -> list[KernelConfig]:
    """All KernelConfigs of an arch (optionally only some families), deduplicated, in a stable order."""
    fams: Sequence[Family]
    if families is None:
        fams = list(Family)
    else:
        fams = []
        for f in families:
            try:
                fams.append(Family.parse(f, "family"))
            except ValueError as e:
                raise EnumerationError(str(e)) from None
    wanted = set(fams)
    apis = [a for a in Api if any(f in wanted for f in API_FAMILIES[a])]
    rec, mm = _receipt(receipt), _mask_mode(mask_mode)
    out: list[KernelConfig] = []
    seen: set[KernelConfig] = set()
    for api in apis:
        for c in _enumerate_api_cached(api, arch, rec, mm):
            if c.signature.family in wanted and c not in seen and (predicate is None or predicate(c)):
                seen.add(c)
                out.append(c)
    return out


__all__ = [
    "EnumContext",
    "EnumerationError",
    "ck_instance_names",
    "enumerate_api",
    "enumerate_kernels",
    "FAMILY_API",
]
