"""A CK checkout: the directory that holds ``example/ck_tile/01_fmha/generate.py`` (and ``include/ck_tile``).

:func:`resolve_ck_root` checks a path (``--ck-root`` / ``--ckfmha-ck-root`` / ``$CK_ROOT``) and returns it
resolved, or raises :class:`CKTreeError` saying what is missing.  The rest of ckfmha that works on a checkout --
its generator's kernel space, its smoke scripts, its kernels for the hip backend -- takes the resolved root.
"""

from __future__ import annotations

import os
from pathlib import Path

FMHA_EXAMPLE = Path("example") / "ck_tile" / "01_fmha"
GENERATOR = FMHA_EXAMPLE / "generate.py"
ENV_VAR = "CK_ROOT"


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
