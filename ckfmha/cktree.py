"""A CK checkout: the directory that holds ``example/ck_tile/01_fmha/generate.py`` (and ``include/ck_tile``).

:func:`resolve_ck_root` checks a path (``--ck-root`` / ``--ckfmha-ck-root`` / ``$CK_ROOT``) and returns it
resolved, or raises :class:`CKTreeError` saying what is missing.  The rest of ckfmha that works on a checkout --
its generator's kernel space, its smoke scripts, its kernels for the hip backend -- takes the resolved root.

The checkout's kernel space
---------------------------
The checkout is the source of truth for what it can build: :func:`checkout_names` runs its own ``generate.py`` in
list mode (``-d <api> --targets <arch> -r <receipt> -m <mask mode> -l FILE``, through
:func:`ckfmha.upstream.enum_parity.upstream_names`) and returns the instance file names it lists, without the api
dispatch file.  The list is cached under ``<cache>/ck-spaces/<codegen hash>/`` (``<cache>``:
:func:`ckfmha.backends.cache.cache_root`), keyed by :func:`codegen_hash` -- the sha256 of ``generate.py`` and every
file under ``codegen/`` (paths and contents) -- so an edit to the checkout's generator lists afresh and an
unchanged one lists once; writers hold a file lock and publish with one ``os.replace``.

:func:`checkout_kernels` parses every listed name with :func:`ckfmha.naming.parse_ck_name` (whatever naming scheme
that CK uses) into a :class:`CheckoutKernel` (the name as listed, its :class:`~ckfmha.kernel.KernelConfig` and
the naming scheme); a name no scheme parses, or two names that parse to one config, is a :class:`CKTreeError`
naming it. :func:`select_checkout_kernels` applies a :class:`ckfmha.selection.KernelQuery` (families, sweep,
filters; its arch, receipt and mask mode go to the generator) and raises
:class:`~ckfmha.selection.EmptySelectionError` naming the checkout and the selection when nothing is left.
Only CK archs (:data:`ckfmha.archs.CK_ARCHS`) can be listed; a generator that rejects the arch, lacks an option
or crashes is a :class:`CKTreeError` with the generator's reason.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ckfmha.ck_generator import FMHA_EXAMPLE, GENERATOR

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.kernel import KernelConfig
    from ckfmha.naming import CKNamingScheme
    from ckfmha.selection import KernelQuery

CODEGEN_DIR = FMHA_EXAMPLE / "codegen"
ENV_VAR = "CK_ROOT"
SPACE_CACHE = "ck-spaces"
#: layout of the cached lists (part of the cache path: lists of another layout are never read)
SPACE_LAYOUT = "1"


class CKTreeError(ValueError):
    """A path that is not a usable CK checkout; the message says what is missing."""


def resolve_ck_root(path: str | os.PathLike) -> Path:
    """The checkout at ``path`` (resolved), checked: a directory holding the FMHA generator and CK's headers."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise CKTreeError("is not a directory (a CK checkout holds example/ck_tile/01_fmha/generate.py)")
    if not (p / GENERATOR).is_file():
        raise CKTreeError(f"has no {GENERATOR} (not a CK checkout, or one without the ck_tile FMHA example)")
    if not (p / "include" / "ck_tile").is_dir():
        raise CKTreeError("has no include/ck_tile (the CK headers the kernels are built from)")
    return p.resolve()


def ck_root_from_env() -> Path | None:
    """``$CK_ROOT`` resolved, None when unset; a set but unusable value is an error naming the variable."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return None
    try:
        return resolve_ck_root(value)
    except CKTreeError as e:
        raise CKTreeError(f"${ENV_VAR}: {value!r} {e}") from None


# --------------------------------------------------------------------------------------------- kernel space
def codegen_hash(root: str | os.PathLike) -> str:
    """sha256 (hex) of the checkout's codegen sources: ``generate.py`` and every file under ``codegen/`` (relative
    path and contents, in path order; ``__pycache__`` ignored)."""
    base = Path(root)
    files = [base / GENERATOR]
    codegen = base / CODEGEN_DIR
    if codegen.is_dir():
        files += sorted(p for p in codegen.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    h = hashlib.sha256(SPACE_LAYOUT.encode())
    for f in files:
        h.update(b"\0" + str(f.relative_to(base)).encode() + b"\0")
        try:
            h.update(f.read_bytes())
        except OSError as e:
            raise CKTreeError(
                f"{base}: cannot read the codegen source {f.relative_to(base)} ({e.strerror or e})"
            ) from None
    return h.hexdigest()


@lru_cache(maxsize=16)
def _checked_generator(generator: Path, python: str) -> None:
    """The generator takes the options list mode needs (``--targets``, ``-d``, ``-l``, ``-r``, ``-m``); once per
    generator and process."""
    from ckfmha.upstream.enum_parity import CheckoutError, check_generator

    try:
        check_generator(generator, python)
    except CheckoutError as e:
        raise CKTreeError(f"{generator}: {e}") from None


def _check_ck_arch(arch: str) -> None:
    from ckfmha.archs import CK_ARCHS

    if arch not in CK_ARCHS:
        raise CKTreeError(
            f"arch: {arch!r} is not a CK arch (a CK checkout's generator has no such target); "
            f"allowed: {', '.join(CK_ARCHS)}"
        )


def checkout_names(
    root: str | os.PathLike,
    api: str,
    arch: str,
    receipt: int = 0,
    mask_mode: str = "simplified",
    *,
    python: str = sys.executable,
) -> list[str]:
    """The instance file names the checkout's generator lists for one api and arch (see the module doc; cached
    by the checkout's :func:`codegen_hash`)."""
    from ckfmha.backends.cache import cache_root, file_lock
    from ckfmha.kernel import Api, MaskMode
    from ckfmha.upstream.enum_parity import CheckoutError, upstream_names

    base = resolve_ck_root(root)
    api_name = Api.parse(api, "api").value
    mode = MaskMode.parse(mask_mode, "mask_mode").value
    _check_ck_arch(arch)
    d = cache_root() / SPACE_CACHE / codegen_hash(base)[:24]
    cached = d / f"{api_name}_{arch}_r{receipt}_{mode}.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8").split()
    with file_lock(d / ".lock"):
        if cached.is_file():
            return cached.read_text(encoding="utf-8").split()
        gen = base / GENERATOR
        _checked_generator(gen, python)
        try:
            names = upstream_names(gen, api_name, arch, receipt, mode, python)
        except CheckoutError as e:
            raise CKTreeError(f"{base}: {e}") from None
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join(n + "\n" for n in names))
        os.replace(tmp, cached)
    return names


@dataclass(frozen=True)
class CheckoutKernel:
    """One kernel a checkout's generator lists: the file name as listed, its config and the naming scheme it is
    spelled in (the first of the parse's schemes, newest first)."""

    name: str
    config: "KernelConfig"
    scheme: "CKNamingScheme"

    @property
    def stem(self) -> str:
        """The name without ``.cpp``: what the generator's ``-f`` filter matches."""
        return self.name[:-4] if self.name.endswith(".cpp") else self.name


def checkout_kernels(
    root: str | os.PathLike,
    arch: str,
    apis: Sequence[str] | None = None,
    receipt: int = 0,
    mask_mode: str = "simplified",
    *,
    python: str = sys.executable,
) -> list[CheckoutKernel]:
    """Every kernel the checkout lists for ``arch`` and ``apis`` (None: every api), in the generator's order."""
    from ckfmha.kernel import Api
    from ckfmha.naming import CKNameError, parse_ck_name

    out: list[CheckoutKernel] = []
    seen: dict[KernelConfig, str] = {}
    for api in apis or [a.value for a in Api]:
        for name in checkout_names(root, api, arch, receipt, mask_mode, python=python):
            try:
                parsed = parse_ck_name(name)
            except CKNameError as e:
                raise CKTreeError(
                    f"{root}: the generator lists {name!r} (api {api}, arch {arch}), which no naming scheme "
                    f"ckfmha knows parses ({e}); a CK newer than ckfmha's naming (ckfmha.naming)?"
                ) from None
            if parsed.config in seen:
                raise CKTreeError(
                    f"{root}: the generator lists {seen[parsed.config]!r} and {name!r} (api {api}, arch {arch}), "
                    "which parse to one kernel config: ckfmha's naming cannot tell them apart"
                )
            seen[parsed.config] = name
            out.append(CheckoutKernel(name, parsed.config, parsed.schemes[0]))
    return out


def select_checkout_kernels(
    root: str | os.PathLike, query: "KernelQuery", *, allow_empty: bool = False, python: str = sys.executable
) -> list[CheckoutKernel]:
    """The checkout's kernels for ``query``'s arch, receipt and mask mode (the generator's apis of its families),
    narrowed by its families, sweep and filters (AND-ed); an :class:`~ckfmha.selection.EmptySelectionError`
    naming the checkout and the selection when none is left, unless ``allow_empty``."""
    from ckfmha.filters import combine
    from ckfmha.kernel import FAMILY_API
    from ckfmha.selection import EmptySelectionError

    families = query.families
    if query.sweep is not None:
        families = tuple(f for f in (families or query.sweep.families) if f in query.sweep.families)
    apis = None if families is None else list(dict.fromkeys(FAMILY_API[f].value for f in families))
    kernels = checkout_kernels(root, query.arch, apis, query.receipt, query.mask_mode.value, python=python)
    listed = len(kernels)
    if families is not None:
        kernels = [k for k in kernels if k.config.signature.family in families]
    of_families = len(kernels)
    pred = combine([query.sweep, *query.filters])
    if pred is not None:
        kernels = [k for k in kernels if pred(k.config)]
    if not kernels and not allow_empty:
        raise EmptySelectionError(
            f"no kernel of the CK checkout {root} matches the selection: {query.describe()}\n"
            f"  its generator lists {listed} kernel(s) for these apis, {of_families} of the selected families"
            + ("; the sweep and filters keep none" if pred is not None and of_families else ""),
            query,
        )
    return kernels


@lru_cache(maxsize=8)
def _checkout_hash(base: Path) -> str:
    h = hashlib.sha256(codegen_hash(base).encode())
    files = sorted(p for p in (base / FMHA_EXAMPLE).glob("*.hpp") if p.is_file())
    files += sorted(p for p in (base / "include" / "ck_tile").rglob("*") if p.is_file())
    for f in files:
        h.update(b"\0" + str(f.relative_to(base)).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def checkout_hash(root: str | os.PathLike) -> str:
    """sha256 (hex) of what a kernel library is built from: the :func:`codegen_hash` sources, the FMHA example's
    headers (``example/ck_tile/01_fmha/*.hpp``) and every file under ``include/ck_tile`` (paths and contents);
    computed once per checkout and process (an edited checkout needs a new process to be seen)."""
    return _checkout_hash(resolve_ck_root(root))
