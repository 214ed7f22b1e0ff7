"""The HIP compiler and CK's compile flags for one FMHA kernel library.

:func:`find_hip_compiler` looks, in order, for ``$ROCM_PATH/bin/hipcc``, ``/opt/rocm/bin/hipcc``,
``$ROCM_PATH/llvm/bin/amdclang++`` / ``/opt/rocm/llvm/bin/amdclang++``, then ``hipcc`` and ``amdclang++`` on
``PATH``; None when there is none (:func:`missing_compiler_reason` says where it looked).

:func:`compile_flags` are the flags CK's CMake gives the FMHA instances (cited per flag below):

* top-level ``CMakeLists.txt``: ``-std=c++20`` (``CK_CXX_STANDARD`` 20), ``-fno-offload-uniform-block``,
  ``-mllvm --lsr-drop-solution=1``, ``-mllvm -enable-post-misched=0``, ``-mllvm -amdgpu-early-inline-all=true``,
  ``-mllvm -amdgpu-function-calls=false`` (each added by CK when the HIP version is new enough and the compiler
  takes it: ckfmha targets current ROCm and adds them all); per target: ``CK_USE_OCP_FP8`` (gfx950, gfx12),
  ``CK_USE_FNUZ_FP8`` (gfx90a, gfx94x), ``CK_USE_NATIVE_MX_SUPPORT`` and ``CK_GFX950_SUPPORT`` (gfx950),
  ``CK_USE_WMMA`` / ``CK_TILE_USE_WMMA=1`` (gfx11, gfx12; else ``CK_TILE_USE_WMMA=0``), ``CK_USE_WMMA_FP8`` (gfx12);
* ``example/ck_tile/01_fmha/CMakeLists.txt``: ``-Wno-undefined-func-template``, ``-Wno-float-equal``,
  ``-fgpu-flush-denormals-to-zero``; forward apis ``-DCK_TILE_FMHA_FWD_FAST_EXP2=1`` (its default) and
  ``-DCK_TILE_USE_OCP_FP8`` where CK_USE_OCP_FP8 is on; backward ``-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3``.

Plus ``-x hip --offload-arch=<arch> -O3 -fPIC`` (one shared object per kernel) and the include directories: the
output directory (``ckfmha_abi.h``), ``<ck>/include`` and ``<ck>/example/ck_tile/01_fmha``. The link:
``<compiler> -shared -fPIC --hip-link --offload-arch=<arch> <objects> -o <library>``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DEFAULT_ROCM_PATH = "/opt/rocm"

CK_COMMON_FLAGS = (
    "-std=c++20",
    "-O3",
    "-fPIC",
    "-fno-offload-uniform-block",
    "-mllvm",
    "--lsr-drop-solution=1",
    "-mllvm",
    "-enable-post-misched=0",
    "-mllvm",
    "-amdgpu-early-inline-all=true",
    "-mllvm",
    "-amdgpu-function-calls=false",
    "-Wno-undefined-func-template",
    "-Wno-float-equal",
    "-fgpu-flush-denormals-to-zero",
)


def _candidates() -> list[Path]:
    rocm = os.environ.get("ROCM_PATH")
    out = []
    for base in ([rocm] if rocm else []) + [DEFAULT_ROCM_PATH]:
        out.append(Path(base) / "bin" / "hipcc")
    for base in ([rocm] if rocm else []) + [DEFAULT_ROCM_PATH]:
        out.append(Path(base) / "llvm" / "bin" / "amdclang++")
    return out


def find_hip_compiler() -> Path | None:
    """The HIP compiler (see the module doc), or None."""
    for c in _candidates():
        if c.is_file() and os.access(c, os.X_OK):
            return c
    for name in ("hipcc", "amdclang++"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def missing_compiler_reason() -> str:
    where = ", ".join(str(c) for c in _candidates())
    return f"no HIP compiler: none of {where} exists and neither hipcc nor amdclang++ is on PATH (set ROCM_PATH)"


def arch_defines(arch: str) -> list[str]:
    """CK's per-target preprocessor definitions (top-level CMakeLists.txt; see the module doc)."""
    out = []
    wmma = arch.startswith(("gfx11", "gfx12"))
    if wmma:
        out.append("-DCK_USE_WMMA")
    out.append(f"-DCK_TILE_USE_WMMA={int(wmma)}")
    if arch.startswith("gfx12"):
        out.append("-DCK_USE_WMMA_FP8")
    if arch == "gfx950" or arch.startswith("gfx12"):
        out += ["-DCK_USE_OCP_FP8", "-DCK_TILE_USE_OCP_FP8"]
    if arch == "gfx90a" or arch.startswith("gfx94"):
        out.append("-DCK_USE_FNUZ_FP8")
    if arch == "gfx950":
        out += ["-DCK_USE_NATIVE_MX_SUPPORT", "-DCK_GFX950_SUPPORT"]
    return out


def api_defines(api: str) -> list[str]:
    """The FMHA example's per-api definitions (example/ck_tile/01_fmha/CMakeLists.txt)."""
    if api == "bwd":
        return ["-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3"]
    return ["-DCK_TILE_FMHA_FWD_FAST_EXP2=1"]


def compile_flags(arch: str, api: str, ck_root: Path, include_dir: Path) -> list[str]:
    """Every flag of one compile command but the compiler, ``-c`` and the files (see the module doc)."""
    return [
        "-x",
        "hip",
        f"--offload-arch={arch}",
        *CK_COMMON_FLAGS,
        *arch_defines(arch),
        *api_defines(api),
        f"-I{include_dir}",
        f"-I{ck_root / 'include'}",
        f"-I{ck_root / 'example' / 'ck_tile' / '01_fmha'}",
    ]


def link_flags(arch: str) -> list[str]:
    return ["-shared", "-fPIC", "--hip-link", f"--offload-arch={arch}"]
