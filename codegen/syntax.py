"""A HIP syntax check of emitted sources on a machine without ROCm: Debian's clang and HIP headers.

What it needs (Debian 12: ``apt-get install clang-19 lld-19 libamdhip64-dev rocm-device-libs``): a clang that
compiles HIP (:func:`find_clang`: ``clang++-19``, ``clang++-20`` ... or ``$CKFMHA_HIP_SYNTAX_CLANG``) and the HIP
headers under ``/usr/include/hip``. Debian's HIP headers (5.2) declare user-written copy assignments in
``hip/amd_detail/amd_hip_vector_types.h`` (``HIP_vector_base& operator=(const HIP_vector_base& x_) noexcept
{...}``), which make the vector types non-trivially-copyable and CK's ``bit_cast`` rejects them;
:func:`patched_hip_include` makes a private copy of the headers with each of those replaced by ``= default;``
under ``<cache>/hip-headers/<sha256 of the original file>/`` (file lock, atomic publish; ``/usr`` is never
touched) and returns its include directory, which goes first on the include path.

:func:`syntax_command` turns one compile command of :mod:`codegen.emit` (the same CK flags) into a
``-fsyntax-only`` run of that clang for the same ``--offload-arch`` with ``--rocm-path=/usr -nogpulib``: the
front end checks host and device code; no object is generated (device code generation of one FMHA instance does
not finish in 20 minutes on a 2-core machine -- compiling belongs on ROCm machines). gfx950 needs a newer clang
(22) than Debian 12's and is not covered.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

SYSTEM_HIP_INCLUDE = Path("/usr/include")
VECTOR_TYPES = Path("hip") / "amd_detail" / "amd_hip_vector_types.h"
_COPY_ASSIGN = "HIP_vector_base& operator=(const HIP_vector_base& x_) noexcept {"
_DEFAULTED = "HIP_vector_base& operator=(const HIP_vector_base& x_) = default;"
CLANG_ENV = "CKFMHA_HIP_SYNTAX_CLANG"


def find_clang() -> Path | None:
    """``$CKFMHA_HIP_SYNTAX_CLANG``, else the first of clang++-19 .. clang++-22 on PATH; None when there is none."""
    env = os.environ.get(CLANG_ENV)
    if env:
        return Path(env)
    for v in (19, 20, 21, 22):
        found = shutil.which(f"clang++-{v}")
        if found:
            return Path(found)
    return None


def patch_vector_types(text: str) -> tuple[str, int]:
    """Replace every user-written ``HIP_vector_base`` copy assignment (signature to its closing brace) by a
    defaulted one; returns the text and the number replaced."""
    out, i, n = [], 0, 0
    while True:
        j = text.find(_COPY_ASSIGN, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out), n
        out.append(text[i:j])
        k, depth = j + len(_COPY_ASSIGN), 1
        while depth:
            if k >= len(text):
                raise ValueError(f"{VECTOR_TYPES}: unbalanced braces after the copy assignment at offset {j}")
            depth += (text[k] == "{") - (text[k] == "}")
            k += 1
        out.append(_DEFAULTED)
        i, n = k, n + 1


def patched_hip_include(cache: Path | None = None, system_include: Path = SYSTEM_HIP_INCLUDE) -> Path:
    """The include directory of a patched private copy of ``<system_include>/hip`` (see the module doc)."""
    from ckfmha.backends.cache import cache_root, file_lock

    src = system_include / VECTOR_TYPES
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no HIP headers (apt-get install libamdhip64-dev)")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    base = (cache or cache_root()) / "hip-headers"
    dest = base / digest
    if (dest / "complete").is_file():
        return dest
    base.mkdir(parents=True, exist_ok=True)
    with file_lock(base / f"{digest}.lock"):
        if (dest / "complete").is_file():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=base))
        try:
            shutil.copytree(system_include / "hip", tmp / "hip", symlinks=False)
            text, n = patch_vector_types((tmp / VECTOR_TYPES).read_text(encoding="utf-8"))
            if n == 0:
                raise ValueError(f"{src}: no user-written HIP_vector_base copy assignment to patch (newer headers?)")
            (tmp / VECTOR_TYPES).write_text(text, encoding="utf-8")
            (tmp / "complete").write_text(f"patched {n} copy assignments of {src}\n", encoding="utf-8")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def syntax_command(arguments: list[str] | tuple[str, ...], clang: Path, hip_include: Path) -> list[str]:
    """The ``-fsyntax-only`` form of one compile command (see the module doc)."""
    args = list(arguments[1:])
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in ("-c", "-fPIC"):
            continue
        out.append(a)
    return [str(clang), "--rocm-path=/usr", "-nogpulib", f"-I{hip_include}", "-fsyntax-only", *out]
