"""Fakes for the hip backend's tests: a CK checkout whose generator is a small script, a HIP compiler that builds
ckfmha's real wrapper with g++ against a fake CK (tests/data/fake_ck/README.md), and a ROCm root holding it.

:func:`make_fake_checkout` writes ``<dir>/example/ck_tile/01_fmha/generate.py`` (the options of CK's generator:
``--targets -d -l -r -m -f -o``; list mode writes the names of :data:`FAKE_NAMES` plus the api file, write mode
the instances whose name matches ``-f`` (fnmatch, without the arch suffix, as CK's ops do) and the api file; each
run appends a line to ``<dir>/generator_runs``), a ``codegen/`` package, the fake api headers next to it and
``include/ck_tile``.
:func:`install_fake_rocm` copies the fake ``hipcc`` into ``<dir>/bin`` and points ``ROCM_PATH`` at it.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

FAKE_CK = Path(__file__).resolve().parent / "data" / "fake_ck"

FWD_KERNEL = (
    "fmha_fwd_d64_fp16_batch_b128x64x32x64x32x64_r4x1x1_r4x1x1_w32x32x16_w32x32x16_qr_async_vr_psskddv_nlogits_nbias_"
    "nmask_lse_ndropout_nskip_nsquant_ntrload_gfx9"
)
FWD_KERNEL_NLSE = FWD_KERNEL.replace("_lse_", "_nlse_")
FAKE_NAMES = {"fwd": [FWD_KERNEL, FWD_KERNEL_NLSE]}

GENERATOR = r"""
import argparse, fnmatch, sys
from pathlib import Path
NAMES = @NAMES@
here = Path(__file__).resolve().parent
root = here.parent.parent.parent
p = argparse.ArgumentParser(prog="generate")
p.add_argument("--targets", default="gfx9")
p.add_argument("-d", "--direction", default="fwd")
p.add_argument("-o", "--output_dir")
p.add_argument("-l", "--list_blobs")
p.add_argument("-f", "--filter", default="")
p.add_argument("-m", "--mask", default="simplified")
p.add_argument("-r", "--receipt", default=0)
a = p.parse_args()
with open(root / "generator_runs", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\n")
if (root / "crash").exists():
    raise SystemExit("Traceback: fake generator crash: " + (root / "crash").read_text())
names = NAMES.get(a.direction, [])
extra = root / "extra_names"
if extra.exists():
    names = names + extra.read_text().split()
def stem(n):
    return n.rsplit("_gfx", 1)[0] if "_gfx" in n else n
api_file = f"fmha_{a.direction}_api.cpp"
if a.list_blobs:
    with open(a.list_blobs, "w") as fh:
        for n in names:
            fh.write(f"/gen/{n}.cpp\n")
        fh.write(f"/gen/{api_file}\n")
else:
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        if not a.filter or fnmatch.fnmatch(stem(n), a.filter):
            (out / f"{n}.cpp").write_text("// fake instance\n")
    (out / api_file).write_text("// fake api\n")
"""


def make_fake_checkout(root: Path, names: dict[str, list[str]] | None = None) -> Path:
    gen_dir = root / "example" / "ck_tile" / "01_fmha"
    (gen_dir / "codegen" / "ops").mkdir(parents=True, exist_ok=True)
    (root / "include" / "ck_tile").mkdir(parents=True, exist_ok=True)
    (root / "include" / "ck_tile" / "core.hpp").write_text("// fake\n")
    (gen_dir / "codegen" / "__init__.py").write_text("")
    (gen_dir / "codegen" / "ops" / "fmha_fwd.py").write_text("# fake op\n")
    (gen_dir / "generate.py").write_text(GENERATOR.replace("@NAMES@", repr(names or FAKE_NAMES)))
    for header in ("fmha_fwd.hpp", "fmha_bwd.hpp"):  # the api headers, as in CK's FMHA example
        shutil.copyfile(FAKE_CK / header, gen_dir / header)
    return root


def generator_runs(root: Path) -> list[str]:
    f = root / "generator_runs"
    return f.read_text().splitlines() if f.is_file() else []


def install_fake_rocm(rocm: Path, monkeypatch) -> Path:
    """``<rocm>/bin/hipcc`` = the fake compiler; ``ROCM_PATH`` and ``FAKE_CK_DIR`` set for the test."""
    (rocm / "bin").mkdir(parents=True, exist_ok=True)
    hipcc = rocm / "bin" / "hipcc"
    shutil.copyfile(FAKE_CK / "hipcc", hipcc)
    hipcc.chmod(hipcc.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    monkeypatch.setenv("FAKE_CK_DIR", str(FAKE_CK))
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    return hipcc


# ----------------------------------------------------------------------------- the real CK tree, host-only
#: the api functions as the amd-aiter CK tree declares them (example/ck_tile/01_fmha/fmha_fwd.hpp, fmha_bwd.hpp)
#: -> (api dispatch file the generator writes, the stub's definition)
HOST_STUBS = {
    "fwd": ("fmha_fwd_api.cpp", "float fmha_fwd(fmha_fwd_traits t, fmha_fwd_args a, const ck_tile::stream_config& s)"),
    "fwd_splitkv": (
        "fmha_fwd_splitkv_api.cpp",
        "float fmha_fwd_splitkv(fmha_fwd_splitkv_traits t, fmha_fwd_splitkv_args a, const ck_tile::stream_config& s)",
    ),
    "fwd_appendkv": (
        "fmha_fwd_appendkv_api.cpp",
        "float fmha_fwd_appendkv(fmha_fwd_appendkv_traits t, fmha_fwd_appendkv_args a, "
        "const ck_tile::stream_config& s)",
    ),
    "pagedkv_prefill": (
        "fmha_fwd_pagedkv_api.cpp",
        "float fmha_fwd_pagedkv(fmha_fwd_pagedkv_traits& t, fmha_fwd_pagedkv_args& a, const ck_tile::stream_config& s)",
    ),
    "batch_prefill": (
        "fmha_batch_prefill_api.cpp",
        "float fmha_batch_prefill(fmha_batch_prefill_traits t, fmha_batch_prefill_args a, "
        "const ck_tile::stream_config& s)",
    ),
    "bwd": (
        "fmha_bwd_api.cpp",
        "template <>\nfloat fmha_bwd<2>(fmha_bwd_traits t, fmha_bwd_args a, const ck_tile::stream_config& s)",
    ),
}

_STUB = r"""// Host stand-in for CK's @CALL@ and the HIP calls of ckfmha's wrapper (tests/hip_fakes.py): it records every
// member of the traits, args and stream config it was given; ckfmha_stub_report() returns the last record.
#include "@HEADER@"
#include <hip/hip_runtime.h>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace {
std::string report; // the last call's record (a test stub: one call at a time)

template <class V>
void record(const char* name, const V& v)
{
    char buf[96];
    if constexpr(std::is_pointer_v<V>)
        std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)(uintptr_t)v);
    else if constexpr(std::is_same_v<V, std::string>)
        std::snprintf(buf, sizeof buf, "%s", v.c_str());
    else if constexpr(std::is_same_v<V, bool>)
        std::snprintf(buf, sizeof buf, "%d", v ? 1 : 0);
    else if constexpr(std::is_enum_v<V> || std::is_integral_v<V>)
        std::snprintf(buf, sizeof buf, "%lld", (long long)v);
    else if constexpr(std::is_floating_point_v<V>)
        std::snprintf(buf, sizeof buf, "%.9g", (double)v);
    else if constexpr(requires { std::get<std::pair<uint64_t, uint64_t>>(v); })
    {
        const auto* p = std::get_if<std::pair<uint64_t, uint64_t>>(&v);
        std::snprintf(buf, sizeof buf, "%llu,%llu", p ? (unsigned long long)p->first : 0ull,
                      p ? (unsigned long long)p->second : 0ull);
    }
    else
        std::snprintf(buf, sizeof buf, "?");
    report += std::string(" ") + name + "=" + buf;
}
} // namespace

#define REC(obj, prefix, m)                  \
    if constexpr(requires { (obj).m; })      \
        record(prefix #m, (obj).m);

// a template: requires-expressions on dependent objects are what detects the members (as in the wrapper)
template <class T, class A, class S>
void record_all(const T& t, const A& a, const S& s)
{
    report = "api=@API@";
@RECORDS@
}

@SIGNATURE@
{
    record_all(t, a, s);
    return 0.0f;
}

hipError_t hipGetLastError(void) { return hipSuccess; }
hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
const char* hipGetErrorName(hipError_t) { return "hipSuccess"; }
const char* hipGetErrorString(hipError_t) { return "no error"; }
extern "C" const char* ckfmha_stub_report(void) { return report.c_str(); }
"""


def host_stub_source(api: str) -> str:
    """The stub of ``api``'s function for :data:`HOST_STUBS` (records every member the wrapper may set)."""
    from codegen.wrapper import API_CALLS, ARGS_MEMBERS, BY_NAME_MEMBERS, STREAM_MEMBERS, TRAITS_MEMBERS

    header, _, _, call = API_CALLS[api]
    members = [("t", m) for m, _, _ in TRAITS_MEMBERS] + [("t", m) for m in BY_NAME_MEMBERS["traits"]]
    members += [("a", m) for m, _, _ in ARGS_MEMBERS] + [("a", m) for m in BY_NAME_MEMBERS["args"]]
    members += [("s", m) for m, _, _ in STREAM_MEMBERS]
    records = "\n".join(f'    REC({obj}, "{obj}.", {m})' for obj, m in dict.fromkeys(members))
    return (
        _STUB.replace("@HEADER@", header)
        .replace("@CALL@", call)
        .replace("@API@", api)
        .replace("@SIGNATURE@", HOST_STUBS[api][1])
        .replace("@RECORDS@", records)
    )


def install_host_rocm(rocm: Path, stubs: Path, clang: Path, hip_include: Path, monkeypatch) -> Path:
    """``<rocm>/bin/hipcc`` = ``host_hipcc`` over ``clang``, the api stubs written into ``stubs``; environment set."""
    (rocm / "bin").mkdir(parents=True, exist_ok=True)
    stubs.mkdir(parents=True, exist_ok=True)
    for api, (name, _) in HOST_STUBS.items():
        (stubs / name).write_text(host_stub_source(api))
    hipcc = rocm / "bin" / "hipcc"
    shutil.copyfile(FAKE_CK / "host_hipcc", hipcc)
    hipcc.chmod(hipcc.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    monkeypatch.setenv("HOST_HIPCC_CLANG", str(clang))
    monkeypatch.setenv("HOST_HIPCC_HIP_INCLUDE", str(hip_include))
    monkeypatch.setenv("HOST_HIPCC_STUBS", str(stubs))
    return hipcc
