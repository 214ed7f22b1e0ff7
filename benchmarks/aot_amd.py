"""Ahead-of-time compile of the Triton backend's kernels for an AMD target, on a machine without a GPU.

Triton (3.9) ships its AMD backend whole: the ``libtriton_amd_codegen`` library, the ROCm device libraries
(``ocml.bc`` / ``ockl.bc``) and an in-process lld link (``amd.link_hsaco``), so neither ROCm, ``ld.lld`` nor a
GPU is needed to produce a gfx942 code object. This script runs one launch of every kernel of the backend
(representative configs of every family of the ``sm90`` space: fwd incl. the TMA path, group mode, dropout, fp8;
split-KV + combine; paged-KV; append-KV; batch prefill with both tables and layouts; the backward stages) with
torch CPU tensors, and compiles each launch for ``--arch`` (GPUTarget("hip", arch, 64)) through Triton's own JIT
path -- a driver stand-in answers "current target = gfx942" and every launch becomes a compile-only warm-up
(``JITFunction.run(..., warmup=True)``): nothing is launched and outputs are not computed.

Usage: python benchmarks/aot_amd.py [--arch gfx942] [--json PATH]   (torch + triton with its amd backend)
Prints pass/fail per (config, kernel) and the hsaco size; exit status 1 when any compile failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass


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
    """Why this Triton cannot compile for AMD (None when it can)."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as e:
        return f"torch and triton are needed ({e})"
    from triton.backends import backends

    if "amd" not in backends:
        return f"this triton has no AMD backend (backends: {sorted(backends)})"
    return None


@contextmanager
def compile_only_for(arch: str) -> Iterator[list]:
    """Within the block every ``kernel[grid](...)`` launch compiles for ``arch`` and launches nothing; yields the
    list of (kernel name, CompiledKernel) compiled."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    from ckfmha.backends.triton import launch

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

    saved_device, saved_driver = launch.DEVICE, driver._active  # no public getter that works without a GPU
    driver.set_active(_TargetDriver(GPUTarget("hip", arch, 64)))
    JITFunction.run = compile_run  # type: ignore[method-assign]
    launch.DEVICE = "cpu"  # the launchers' tensors: torch CPU tensors (only their dtypes and strides matter)
    try:
        yield compiled
    finally:
        JITFunction.run = run  # type: ignore[method-assign]
        for kern, caches in saved_caches.items():
            kern.device_caches = caches
        driver._active = saved_driver
        launch.DEVICE = saved_device


def representative_configs() -> list:
    """One config per family of the sm90 space and the variants that compile different kernel code (TMA loads,
    group mode, dropout, fp8, paged / split, both batch-prefill tables and layouts, RoPE, deterministic)."""
    from ckfmha.registry import Registry

    reg = list(Registry.from_enumeration("sm90", mask_mode="generic"))
    wanted = [
        ("fwd", lambda c: c.dtype.value == "fp16" and c.mode.value == "batch" and c.pad_s == 0 and not c.lse),
        ("fwd", lambda c: c.mode.value == "group" and c.mask.value == "causal" and c.lse),
        ("fwd", lambda c: c.dropout.value != "none" and c.bias.value == "alibi"),
        ("fwd", lambda c: c.dtype.value == "fp8bf16" and c.qscale.value == "blockscale"),
        ("fwd_splitkv", lambda c: c.paged_kv and c.sink),
        ("fwd_splitkv_combine", lambda c: c.lse),
        ("fwd_pagedkv", lambda c: c.bias.value == "elementwise"),
        ("fwd_appendkv", lambda c: c.paged_kv and c.rope.value == "interleaved"),
        ("fwd_appendkv", lambda c: not c.paged_kv and c.rope.value == "half_rotated"),
        ("batch_prefill", lambda c: c.kv_lookup_table.value == "sglang" and c.kv_memory_layout.value == "vectorized"),
        ("batch_prefill", lambda c: c.kv_lookup_table.value == "vllm" and c.kv_memory_layout.value == "linear"),
        ("batch_prefill", lambda c: c.qscale.value == "kv_blockscale"),
        ("bwd_dot_do_o", lambda c: True),
        ("bwd_dq_dk_dv", lambda c: c.deterministic and c.mask.value == "causal"),
        ("bwd_dq_dk_dv", lambda c: not c.deterministic and c.bias.value == "elementwise" and c.dbias),
        ("bwd_convert_dq", lambda c: c.deterministic),
    ]
    out = []
    for family, pick in wanted:
        c = next((c for c in reg if c.family.value == family and c.hdim_q == 128 and pick(c)), None)
        if c is not None:
            out.append(c)
    return out


def compile_config_for(c, arch: str) -> Compiled:
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
    ok = not error and bool(compiled)
    if not compiled and not error:
        error = "no kernel was launched"
    return Compiled(c.family.value, c.kernel_id, names, ok, size, time.perf_counter() - t0, error)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gfx942", help="AMD target (default gfx942)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    missing = amd_backend_missing()
    if missing:
        print(f"cannot compile for AMD: {missing}", file=sys.stderr)
        return 2
    import triton

    results = [compile_config_for(c, args.arch) for c in representative_configs()]
    print(f"triton {triton.__version__}, target hip/{args.arch} (wave 64), no GPU")
    for r in results:
        verdict = "PASS" if r.ok else "FAIL"
        print(f"{verdict} {r.family:22s} {','.join(r.kernels):40s} {r.hsaco_bytes:8d} B {r.seconds:6.1f} s {r.error}")
        print(f"     {r.kernel_id}")
    n_ok = sum(r.ok for r in results)
    print(f"{n_ok}/{len(results)} configs compiled for {args.arch}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"triton": triton.__version__, "arch": args.arch, "results": [asdict(r) for r in results]}, fh)
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
