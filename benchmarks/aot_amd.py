"""Ahead-of-time compile of the Triton backend's kernels for an AMD target, on a machine without a GPU.

Triton (3.9) ships its AMD backend whole: the ``libtriton_amd_codegen`` library, the ROCm device libraries
(``ocml.bc`` / ``ockl.bc``) and an in-process lld link (``amd.link_hsaco``), so neither ROCm, ``ld.lld`` nor a
GPU is needed to produce a gfx942 code object. This script runs one launch of every kernel of the backend
(representative configs of every family of the ``sm90`` space: fwd incl. the TMA path, group mode, dropout, fp8;
split-KV + combine; paged-KV; append-KV; batch prefill with both tables and layouts; the backward stages) with
torch CPU tensors, and compiles each launch for ``--arch`` (GPUTarget("hip", arch, 64)) through Triton's own JIT
path -- a driver stand-in answers "current target = gfx942" and every launch becomes a compile-only warm-up
(``JITFunction.run(..., warmup=True)``): nothing is launched and outputs are not computed.

A launch passes only when it compiled at least one kernel and every kernel's code object is an AMDGPU ELF for
``--arch`` (``code_object_problem``: magic, ``e_machine`` EM_AMDGPU, the arch's ``EF_AMDGPU_MACH`` in ``e_flags``).
Coverage: every top-level ``@triton.jit`` kernel of ``ckfmha.backends.triton`` (``backend_kernels``: the JIT
functions no other JIT function calls) must be compiled by at least one representative config, and every
representative (``REPRESENTATIVES``) must match a config of the sm90 space (``NoRepresentativeError`` names the
one that matches none): a new kernel or a renamed config fails the run instead of shrinking it.
tests/test_triton_aot.py runs all of it as a test (CI's "AMD ahead-of-time compile" step, .ci/run).

Usage: python benchmarks/aot_amd.py [--arch gfx942] [--json PATH]   (torch + triton with its amd backend)
Prints pass/fail per (config, kernel) and the hsaco size, and the backend kernels no config compiled; exit status
1 when any compile failed or a kernel was not compiled, 2 when this Python cannot compile for AMD (the reason on
stderr). ``--check-backend`` only makes that last check (CI runs it first, so that its AOT step cannot pass by
skipping).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

ARCHS: dict[str, tuple[int, int]] = {
    "gfx90a": (0x03F, 64),
    "gfx942": (0x04C, 64),
    "gfx950": (0x04F, 64),
    "gfx1100": (0x041, 32),
    "gfx1201": (0x04E, 32),
}
"""CK's AMD targets: (``EF_AMDGPU_MACH_*`` value of LLVM's ELF.h, which a code object for it carries in the low
byte of ``e_flags``; the wave size Triton compiles for)."""

EM_AMDGPU = 224
EF_AMDGPU_MACH_MASK = 0x0FF


class NoRepresentativeError(ValueError):
    """A representative of ``REPRESENTATIVES`` matches no config of the kernel space."""


@dataclass(frozen=True)
class Representative:
    """One config the run compiles: the first hdim-128 config of ``family`` that ``pick`` accepts; ``name`` says
    which variant of the kernel code it stands for (and is the test id)."""

    name: str
    family: str
    pick: Callable[[Any], bool]


REPRESENTATIVES: tuple[Representative, ...] = (
    Representative(
        "fwd-fp16-batch",
        "fwd",
        lambda c: c.dtype.value == "fp16" and c.mode.value == "batch" and c.pad_s == 0 and not c.lse,
    ),
    Representative(
        "fwd-group-causal-lse", "fwd", lambda c: c.mode.value == "group" and c.mask.value == "causal" and c.lse
    ),
    Representative("fwd-dropout-alibi", "fwd", lambda c: c.dropout.value != "none" and c.bias.value == "alibi"),
    Representative(
        "fwd-fp8bf16-blockscale", "fwd", lambda c: c.dtype.value == "fp8bf16" and c.qscale.value == "blockscale"
    ),
    Representative("splitkv-paged-sink", "fwd_splitkv", lambda c: c.paged_kv and c.sink),
    Representative("splitkv-combine-lse", "fwd_splitkv_combine", lambda c: c.lse),
    Representative("pagedkv-elementwise-bias", "fwd_pagedkv", lambda c: c.bias.value == "elementwise"),
    Representative(
        "appendkv-paged-rope-interleaved",
        "fwd_appendkv",
        lambda c: c.paged_kv and c.rope.value == "interleaved",
    ),
    Representative(
        "appendkv-rope-half-rotated",
        "fwd_appendkv",
        lambda c: not c.paged_kv and c.rope.value == "half_rotated",
    ),
    Representative(
        "batch-prefill-sglang-vectorized",
        "batch_prefill",
        lambda c: c.kv_lookup_table.value == "sglang" and c.kv_memory_layout.value == "vectorized",
    ),
    Representative(
        "batch-prefill-vllm-linear",
        "batch_prefill",
        lambda c: c.kv_lookup_table.value == "vllm" and c.kv_memory_layout.value == "linear",
    ),
    Representative("batch-prefill-kv-blockscale", "batch_prefill", lambda c: c.qscale.value == "kv_blockscale"),
    Representative("bwd-dot-do-o", "bwd_dot_do_o", lambda c: True),
    Representative(
        "bwd-dq-dk-dv-deterministic-causal",
        "bwd_dq_dk_dv",
        lambda c: c.deterministic and c.mask.value == "causal",
    ),
    Representative(
        "bwd-dq-dk-dv-elementwise-dbias",
        "bwd_dq_dk_dv",
        lambda c: not c.deterministic and c.bias.value == "elementwise" and c.dbias,
    ),
    Representative("bwd-convert-dq-deterministic", "bwd_convert_dq", lambda c: c.deterministic),
)
"""One config per family of the sm90 space and the variants that compile different kernel code (TMA loads,
group mode, dropout, fp8, paged / split, both batch-prefill tables and layouts, RoPE, deterministic)."""


@dataclass
class Compiled:
    """One config's launch(es) compiled for the AMD target."""

    family: str
    kernel_id: str
    kernels: list[str]  # the Triton kernels the config's launch compiled
    ok: bool
    hsaco_bytes: int
    seconds: float
    error: str = ""


class _TargetDriver:
    """Stands in for Triton's GPU driver where there is none: the current device is 0 and its target the AMD one
    (all Triton's JIT asks before compiling)."""

    def __init__(self, target) -> None:
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    def is_active(self) -> bool:
        return True


def amd_backend_missing() -> str | None:
    """Why this Python cannot compile the backend's kernels for AMD ahead of time (None when it can): torch or
    triton missing, a triton without its AMD backend, or ``TRITON_INTERPRET=1`` (the interpreter replaces Triton's
    JIT: nothing is compiled)."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as e:
        return f"torch and triton are needed ({e})"
    from triton.backends import backends

    if "amd" not in backends:
        return f"this triton has no AMD backend (backends: {sorted(backends)})"
    from ckfmha.backends.triton.backend import interpreting

    if interpreting():
        return "TRITON_INTERPRET=1 replaces Triton's JIT: no ahead-of-time compile"
    return None


def code_object_problem(hsaco: bytes, arch: str) -> str | None:
    """What is wrong with ``hsaco`` as a code object for ``arch`` (None when it is one): empty, not an ELF, not
    for AMDGPU (``e_machine``), or for another AMD target (the ``EF_AMDGPU_MACH`` byte of ``e_flags``)."""
    mach, _ = ARCHS[arch]
    if not hsaco:
        return "empty code object"
    if hsaco[:4] != b"\x7fELF" or len(hsaco) < 52:
        return f"not an ELF file (starts {hsaco[:4]!r}, {len(hsaco)} bytes)"
    e_machine = int.from_bytes(hsaco[18:20], "little")
    if e_machine != EM_AMDGPU:
        return f"ELF e_machine {e_machine}, not EM_AMDGPU ({EM_AMDGPU})"
    got = int.from_bytes(hsaco[48:52], "little") & EF_AMDGPU_MACH_MASK
    if got != mach:
        other = next((a for a, (m, _) in ARCHS.items() if m == got), "an unknown target")
        return f"code object for {other} (EF_AMDGPU_MACH {got:#04x}), not {arch} ({mach:#04x})"
    return None


@contextmanager
def compile_only_for(arch: str) -> Iterator[list]:
    """Within the block every ``kernel[grid](...)`` launch compiles for ``arch`` and launches nothing; yields the
    list of (kernel name, CompiledKernel) compiled."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    from ckfmha.backends.triton import device

    _, wave = ARCHS[arch]
    compiled: list = []
    run = JITFunction.run
    saved_caches: dict = {}  # kernel -> its per-device caches of the real target, restored on exit

    def compile_run(self, *args, grid, warmup, **kwargs):
        if self not in saved_caches:  # the AMD binder and binaries must not stay in the caches a GPU run uses
            saved_caches[self] = self.device_caches
            self.device_caches = defaultdict(self.create_binder)
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        compiled.append((self.__name__, kernel))
        return kernel

    saved_device, saved_driver = device.DEVICE, driver._active  # no public getter that works without a GPU
    driver.set_active(_TargetDriver(GPUTarget("hip", arch, wave)))
    JITFunction.run = compile_run  # type: ignore[method-assign, unused-ignore]
    device.DEVICE = "cpu"  # the launchers' tensors: torch CPU tensors (only their dtypes and strides matter)
    try:
        yield compiled
    finally:
        JITFunction.run = run  # type: ignore[method-assign, unused-ignore]
        for kern, caches in saved_caches.items():
            kern.device_caches = caches
        driver._active = saved_driver
        device.DEVICE = saved_device


def representative_configs(registry: Iterable | None = None) -> list[tuple[Representative, Any]]:
    """(representative, config) for each of ``REPRESENTATIVES``, from ``registry`` (default: the sm90 space with
    generic masks); raises ``NoRepresentativeError`` naming a representative that matches no config."""
    from ckfmha.registry import Registry

    reg = list(registry if registry is not None else Registry.from_enumeration("sm90", mask_mode="generic"))
    out = []
    for rep in REPRESENTATIVES:
        c = next((c for c in reg if c.family.value == rep.family and c.hdim_q == 128 and rep.pick(c)), None)
        if c is None:
            raise NoRepresentativeError(
                f"representative {rep.name!r}: no hdim-128 config of family {rep.family!r} matches its pick "
                f"(among {len(reg)} configs); update REPRESENTATIVES in benchmarks/aot_amd.py"
            )
        out.append((rep, c))
    return out


def launch_verdict(compiled: list, error: str, arch: str) -> str:
    """The failure of one config's compile-only launch ('' when it passed): the exception it raised, no kernel
    launched, or a kernel whose code object is not one for ``arch`` (``code_object_problem``)."""
    if error:
        return error
    if not compiled:
        return "no kernel was launched"
    bad = []
    for name, kernel in compiled:
        problem = code_object_problem(kernel.asm.get("hsaco", b"") if kernel is not None else b"", arch)
        if problem:
            bad.append(f"{name}: {problem}")
    return "; ".join(bad)


def compile_config_for(c, arch: str) -> Compiled:
    """Compile config ``c``'s launch(es) for ``arch`` (``ckfmha.backends.triton.warmup.compile_config`` under
    ``compile_only_for``); every failure, an exception included, is reported in the result."""
    from ckfmha.backends.triton.warmup import compile_config

    t0 = time.perf_counter()
    with compile_only_for(arch) as compiled:
        try:
            compile_config(c)
            error = ""
        except Exception as e:  # noqa: BLE001 - the report names every failure
            error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]
    names = sorted({name for name, _ in compiled})
    size = sum(len(k.asm.get("hsaco", b"")) for _, k in compiled if k is not None)
    error = launch_verdict(compiled, error, arch)
    return Compiled(c.family.value, c.kernel_id, names, not error, size, time.perf_counter() - t0, error)


def backend_kernels(module_names: Iterable[str] | None = None) -> set[str]:
    """Names of the top-level ``@triton.jit`` kernels of ``module_names`` (default: every module of
    ``ckfmha.backends.triton``): the JIT functions defined there that no JIT function of those modules calls
    (``_attn_block``, ``_rope``, ... are helpers inlined into the kernels)."""
    from triton.runtime.jit import JITFunction

    if module_names is None:
        import ckfmha.backends.triton as pkg

        module_names = [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)]
    jitted: dict[str, JITFunction] = {}
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for obj in vars(module).values():
            if isinstance(obj, JITFunction) and obj.fn.__module__ == module_name:
                jitted[obj.__name__] = obj
    called = {
        name
        for name in jitted
        for caller in jitted.values()
        if caller.__name__ != name and re.search(rf"\b{re.escape(name)}\s*\(", caller.src)
    }
    return set(jitted) - called


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx942", choices=sorted(ARCHS), help="AMD target (default gfx942)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument(
        "--check-backend",
        action="store_true",
        help="only check that this Python can compile for AMD (exit 0, or 2 with the reason) and compile nothing",
    )
    args = ap.parse_args(argv)
    missing = amd_backend_missing()
    if missing:
        print(f"cannot compile for AMD: {missing}", file=sys.stderr)
        return 2
    if args.check_backend:
        print("this Python can compile for AMD ahead of time (torch, triton and its amd backend)")
        return 0
    import triton

    results = [compile_config_for(c, args.arch) for _, c in representative_configs()]
    print(f"triton {triton.__version__}, target hip/{args.arch} (wave {ARCHS[args.arch][1]}), no GPU")
    for r in results:
        verdict = "PASS" if r.ok else "FAIL"
        print(f"{verdict} {r.family:22s} {','.join(r.kernels):40s} {r.hsaco_bytes:8d} B {r.seconds:6.1f} s {r.error}")
        print(f"     {r.kernel_id}")
    n_ok = sum(r.ok for r in results)
    print(f"{n_ok}/{len(results)} configs compiled for {args.arch}")
    uncompiled = sorted(backend_kernels() - {k for r in results for k in r.kernels})
    if uncompiled:
        print(f"FAIL backend kernels no config compiled: {', '.join(uncompiled)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "triton": triton.__version__,
                    "arch": args.arch,
                    "results": [asdict(r) for r in results],
                    "uncompiled_kernels": uncompiled,
                },
                fh,
            )
    return 0 if n_ok == len(results) and not uncompiled else 1


if __name__ == "__main__":
    sys.exit(main())
