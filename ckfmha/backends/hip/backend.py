"""HipBackend: availability, the checkout's kernels, builds (codegen + hipcc, cached), stage calls through ctypes."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ckfmha.backends.base import Availability, Backend, BackendError, BuiltKernel, RunContext, StageResult
from ckfmha.backends.cache import BuildCache, cache_root
from ckfmha.kernel import FAMILY_API, Family, KernelConfig
from ckfmha.plan import StageRole

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.cktree import CheckoutKernel
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem

BACKEND_VERSION = "1"

#: the role whose stage calls CK's api -> that api
ROLE_API: dict[StageRole, str] = {
    StageRole.FWD: "fwd",
    StageRole.SPLITKV: "fwd_splitkv",
    StageRole.PAGEDKV: "pagedkv_prefill",
    StageRole.APPENDKV: "fwd_appendkv",
    StageRole.BATCH_PREFILL: "batch_prefill",
    StageRole.DQ_DK_DV: "bwd",
}
#: stages CK's api runs inside another stage's call: role -> the role whose call runs it
RUN_BY: dict[StageRole, StageRole] = {
    StageRole.COMBINE: StageRole.SPLITKV,
    StageRole.DOT_DO_O: StageRole.DQ_DK_DV,
    StageRole.CONVERT_DQ: StageRole.DQ_DK_DV,
}
STAGE_ONLY = (Family.FWD_SPLITKV_COMBINE, Family.BWD_DOT_DO_O, Family.BWD_CONVERT_DQ)


def _default_progress(line: str) -> None:
    sys.stderr.write(f"ckfmha hip: {line}\n")
    sys.stderr.flush()


class HipBackend(Backend):
    """CK's own kernels from a CK checkout (see the package doc)."""

    name = "hip"
    settings = ("ck_root", "arch", "receipt", "mask_mode", "memory", "progress")

    def __init__(
        self,
        *,
        ck_root: str | os.PathLike | None = None,
        arch: str | None = None,
        receipt: int = 0,
        mask_mode: str = "simplified",
        memory: Any = None,
        cache_dir: Path | None = None,
        progress: Callable[[str], None] | None = _default_progress,
    ) -> None:
        self._ck_root: Path | None = None
        self._ck_root_given = ck_root
        self.arch = arch
        self.receipt = receipt
        self.mask_mode = mask_mode
        self._memory = memory
        self._cache = BuildCache("hip", BACKEND_VERSION, cache_dir)
        self._cache_dir = cache_dir
        self.progress = progress
        self._index: dict[tuple[str, str], dict[KernelConfig, CheckoutKernel]] = {}
        self._libraries: dict[str, Any] = {}
        self._lock = threading.Lock()

    def configure(self, **settings: Any) -> "HipBackend":
        """Change ``ck_root``, ``arch``, ``receipt``, ``mask_mode``, ``memory``, ``progress`` (unknown names are
        errors naming them); the kernel index is rebuilt on next use."""
        super().configure(**settings)  # an unknown name is an error naming it and the ones it takes
        if "ck_root" in settings:
            self._ck_root_given, self._ck_root = settings.pop("ck_root"), None
        if "memory" in settings:
            self._memory = settings.pop("memory")
        for k, v in settings.items():
            setattr(self, k, v)
        self._index.clear()
        return self

    # ------------------------------------------------------------------ what is there
    def kernel_source(self) -> Path | None:
        """The checkout whose generator lists the kernels this backend builds (:meth:`ck_root`)."""
        return self.ck_root()

    def ck_root(self) -> Path | None:
        """The checkout: the configured one, else ``$CK_ROOT``; None when neither is set (errors name the source)."""
        if self._ck_root is None:
            from ckfmha.cktree import ck_root_from_env, resolve_ck_root

            given = self._ck_root_given
            self._ck_root = resolve_ck_root(given) if given is not None else ck_root_from_env()
        return self._ck_root

    @staticmethod
    def _rocm_gpu() -> tuple[str | None, str]:
        """(arch of GPU 0 or None, why not)."""
        try:
            import torch
        except ImportError:
            return None, "no ROCm GPU: torch is not installed (a ROCm build of torch gives device memory and timing)"
        if getattr(torch.version, "hip", None) is None:
            return None, f"no ROCm GPU: torch {torch.__version__} is not a ROCm build (torch.version.hip is None)"
        if not torch.cuda.is_available():
            return None, "no ROCm GPU: torch.cuda.is_available() is False"
        arch = str(getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")).split(":")[0]
        return arch or None, "" if arch else "no ROCm GPU: the device reports no gcnArchName"

    def available(self) -> Availability:
        """Usable only with a ROCm GPU, a HIP compiler and a CK checkout; otherwise says everything missing."""
        from ckfmha.cktree import CKTreeError
        from codegen.flags import find_hip_compiler, missing_compiler_reason

        missing = []
        arch, why = self._rocm_gpu()
        if arch is None:
            missing.append(why)
        if find_hip_compiler() is None:
            missing.append(missing_compiler_reason())
        try:
            if self.ck_root() is None:
                missing.append("no CK checkout: give --ckfmha-ck-root / --ck-root PATH or set $CK_ROOT")
        except CKTreeError as e:
            missing.append(f"no usable CK checkout: {e}")
        return Availability.no("; ".join(missing)) if missing else Availability.yes()

    def device(self) -> str:
        import torch

        return torch.cuda.get_device_name()

    def target_arch(self) -> str:
        if self.arch is None:
            arch, why = self._rocm_gpu()
            if arch is None:
                raise BackendError(f"hip backend: no target arch configured and none detected ({why})")
            self.arch = arch
        return self.arch

    def _kernels_of(self, api: str) -> dict[KernelConfig, CheckoutKernel]:
        from ckfmha.cktree import checkout_kernels

        root = self.ck_root()
        if root is None:
            raise BackendError("hip backend: no CK checkout (--ckfmha-ck-root / --ck-root PATH or $CK_ROOT)")
        key = (self.target_arch(), api)
        with self._lock:
            if key not in self._index:
                ks = checkout_kernels(root, key[0], [api], self.receipt, self.mask_mode)
                self._index[key] = {k.config: k for k in ks}
            return self._index[key]

    def checkout_kernel(self, config: KernelConfig) -> CheckoutKernel | None:
        return self._kernels_of(FAMILY_API[config.signature.family].value).get(config)

    def supports(self, config: KernelConfig) -> str | None:
        try:
            found = self.checkout_kernel(config)
        except (BackendError, ValueError) as e:
            return str(e)
        if found is None:
            return (
                f"not in the CK checkout's kernel space ({self.ck_root()}, arch {self.arch}, receipt {self.receipt}, "
                f"mask mode {self.mask_mode})"
            )
        return None

    # ------------------------------------------------------------------ builds
    def build(self, config: KernelConfig) -> BuiltKernel:
        from ckfmha.backends.hip.build import build_into, build_key
        from ckfmha.backends.hip.library import KernelLibrary
        from ckfmha.cktree import checkout_hash
        from codegen.emit import emit_library
        from codegen.flags import compile_flags, find_hip_compiler, missing_compiler_reason

        self.check_supported(config)
        if config.signature.family in STAGE_ONLY:
            return BuiltKernel(
                config, self.name, artifact=None, cached=True, info={"runs_with": "the library of its api's main stage"}
            )
        ck = self.checkout_kernel(config)
        assert ck is not None  # check_supported
        root, arch = self.ck_root(), self.target_arch()
        assert root is not None
        compiler = find_hip_compiler()
        if compiler is None:
            raise BackendError(f"hip backend cannot build {ck.stem}: {missing_compiler_reason()}")
        api = FAMILY_API[config.signature.family].value
        key = build_key(
            ck.stem,
            arch,
            checkout_hash(root),
            compiler,
            compile_flags(arch, api, root, Path("<out>")),
            self.receipt,
            self.mask_mode,
        )
        failed = (self._cache_dir or cache_root()) / "hip" / "failed" / self._cache.entry(key).name

        def emit(src: Path):
            return emit_library(
                root, arch, ck.stem, src, receipt=self.receipt, mask_mode=self.mask_mode, compiler=compiler
            )

        t0 = time.perf_counter()
        entry, meta, cached = self._cache.get_or_build(key, lambda tmp: build_into(tmp, emit, failed))
        lib_path = entry / meta["library"]
        with self._lock:
            lib = self._libraries.get(str(lib_path))
            if lib is None:
                lib = self._libraries[str(lib_path)] = KernelLibrary(lib_path)
        seconds = float(meta.get("build_seconds", 0.0)) if not cached else time.perf_counter() - t0
        return BuiltKernel(config, self.name, artifact=lib, build_seconds=seconds, cached=cached, info=dict(meta))

    def build_many(self, configs: Sequence[KernelConfig], workers: int = 1) -> list[BuiltKernel | BaseException]:
        """Build in parallel (threads: the compilers are subprocesses); a line per finished kernel with its time,
        then the slowest (through ``progress``)."""
        from concurrent.futures import ThreadPoolExecutor

        done: list[tuple[float, str]] = []
        n = len(configs)

        def one(c: KernelConfig) -> BuiltKernel | BaseException:
            t0 = time.perf_counter()
            try:
                bk: BuiltKernel | BaseException = self.build(c)
            except Exception as e:  # reported per kernel, never dropped
                bk = e
            secs = time.perf_counter() - t0
            with self._lock:
                done.append((secs, c.kernel_id))
                i = len(done)
            if self.progress is not None:
                state = (
                    f"FAILED ({type(bk).__name__})"
                    if isinstance(bk, BaseException)
                    else ("cached" if bk.cached else "built")
                )
                self.progress(f"[{i}/{n}] {state} {c.kernel_id} in {secs:.1f}s")
            return bk

        if workers <= 1 or n <= 1:
            out = [one(c) for c in configs]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                out = list(pool.map(one, configs))
        if self.progress is not None and done:
            secs, kid = max(done)
            self.progress(f"slowest: {kid} ({secs:.1f}s)")
        return out

    # ------------------------------------------------------------------ running
    def memory(self):
        if self._memory is None:
            from ckfmha.backends.hip.memory import TorchMemory

            self._memory = TorchMemory()
        return self._memory

    def run_stage(
        self,
        kernel: BuiltKernel,
        stage: "Stage",
        problem: "Problem",
        inputs: Mapping[str, Any],
        *,
        timing: bool = False,
        context: RunContext | None = None,
    ) -> StageResult:
        """One call of CK's api for the stage (the stage contract of :mod:`ckfmha.backends.base`): the inputs and
        the NaN-poisoned outputs go to the device, the api runs, every output comes back as a new array.  CK's api
        runs the combine (dot_do_o, convert_dq) kernels inside the split (dq_dk_dv) call: that call also returns
        the outputs those stages of the run's plan (``context.plan``) declare, and their own stages return
        nothing."""
        from ckfmha.backends.hip.descriptor import API_OUTPUTS, stage_descriptor

        if stage.role in RUN_BY:  # CK's api ran it inside the main stage's call
            return StageResult({}, None)
        api = ROLE_API[stage.role]
        lib = kernel.artifact
        if lib is None:
            raise BackendError(f"hip backend: {kernel.config.kernel_id} has no library to run")
        plan = context.plan if context is not None else None
        inside = [st for st in (plan.stages if plan is not None else ()) if RUN_BY.get(st.role) is stage.role]
        specs = [s for s in (*stage.outputs, *(o for st in inside for o in st.outputs)) if s.name in API_OUTPUTS[api]]
        work = {n: a for n, a in inputs.items() if isinstance(a, np.ndarray)}
        work.update({s.name: inputs[s.updates] if s.updates and s.updates in inputs else s.allocate() for s in specs})
        mem = self.memory()
        arrays = {n: mem.put(n, a) for n, a in work.items()}
        try:
            desc = stage_descriptor(
                problem,
                api,
                arrays,
                num_splits=stage.launch.num_splits or 1,
                is_deterministic=bool(kernel.config.signature.deterministic)
                if kernel.config.signature.family is Family.BWD_DQ_DK_DV
                else False,
                stream=mem.stream,
            )
            with mem.timer() as t:
                lib.call(api, desc)
            written = {}
            for spec in specs:
                out = spec.allocate()
                out[...] = mem.get(spec.name)
                written[spec.name] = out
        finally:
            mem.release()
        return StageResult(written, t["ms"] if timing else None)
