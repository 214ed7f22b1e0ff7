"""TritonBackend, the top of the package: availability, what it can realize, builds (Triton JIT + cache) and
:meth:`~TritonBackend.run_stage`, which hands the stage to the stage module :mod:`.execute`.

Importing this module imports neither torch nor triton: it reads :mod:`.capability` (torch-free) at import time and
imports :mod:`.execute` (the stage module) and :mod:`.warmup` (compiles) only when it runs or builds a kernel.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ckfmha.backends.base import Availability, Backend, BackendError, BuiltKernel, RunContext, StageResult
from ckfmha.backends.cache import BuildCache, cache_root
from ckfmha.backends.triton.capability import (  # noqa: F401  (re-exported for older imports)
    BWD_FAMILIES,
    BWD_ONE_D_FAMILIES,
    DTYPES,
    FAMILIES,
    FORWARD_ATTENTION_FAMILIES,
    FP8_OUT_FAMILIES,
    KVCACHE_FAMILIES,
    VCOL_FAMILIES,
    interpreting,
    is_pow2,
    unaddressed_problem,
    unhonoured_lengths,
)
from ckfmha.kernel import DType, Family, KernelConfig, QScale, VLayout
from ckfmha.problem import BWD_DTYPES

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem

BACKEND_VERSION = "1"


class TritonBackend(Backend):
    name = "triton"

    def __init__(self) -> None:
        self._availability: Availability | None = None
        self._cache: BuildCache | None = None
        self._flush: Any = None  # the L2 flush buffer (a torch tensor), made on first use

    # ------------------------------------------------------------------ availability
    def available(self) -> Availability:
        if self._availability is None:
            self._availability = self._probe()
        return self._availability

    @staticmethod
    def _probe() -> Availability:
        try:
            import torch
        except ImportError:
            return Availability.no("torch is not installed (pip install 'ckfmha[gpu]')")
        try:
            import triton  # noqa: F401
        except ImportError:
            return Availability.no("triton is not installed (pip install 'ckfmha[gpu]')")
        if interpreting():
            return Availability.yes()
        if not torch.cuda.is_available():
            return Availability.no("no GPU: torch.cuda.is_available() is False (TRITON_INTERPRET=1 runs on the CPU)")
        return Availability.yes()

    def device(self) -> str:
        import torch

        if interpreting():
            return "Triton interpreter (CPU)"
        return torch.cuda.get_device_name()

    def flush_cache(self) -> None:
        """Overwrite a buffer of twice the L2 size (zeros), so no operand of the last run is still cached."""
        import torch

        if interpreting():
            return  # no cache between the interpreter's NumPy arrays worth flushing
        if self._flush is None:
            l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 * 2**20)
            self._flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self._flush.zero_()

    def warm_up(self) -> None:
        """Import the stage modules (the launchers and every ``@triton.jit`` kernel definition) and create the CUDA
        context: a kernel process's first item then starts with them loaded."""
        import ckfmha.backends.triton.execute  # noqa: F401  (the launchers and kernels)

        if not interpreting():
            import torch

            torch.zeros(1, device="cuda")  # the context, and torch's allocator on the device

    def release_memory(self) -> None:
        """torch's caching allocator keeps freed blocks for this process: hand them back (the Triton stages and the
        torch reference twin allocate through it), so the other processes on this GPU can use them."""
        import sys

        torch = sys.modules.get("torch")  # never imported here only to release nothing
        if torch is not None and not interpreting() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def clocks(self) -> str:
        """SM and memory clocks from nvidia-smi / rocm-smi, as printed ("" where neither answers)."""
        import subprocess

        for cmd in (
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem", "--format=csv,noheader", "-i", "0"],
            ["rocm-smi", "--showclocks", "--csv"],
        ):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0 and out.stdout.strip():
                line = out.stdout.strip().splitlines()[0] if cmd[0] == "nvidia-smi" else out.stdout.strip()
                return ("sm, mem: " + line) if cmd[0] == "nvidia-smi" else " ".join(line.split())[:200]
        return ""

    # ------------------------------------------------------------------ capability
    def declines(self, problem: "Problem") -> str | None:
        """:func:`~ckfmha.backends.triton.capability.unaddressed_problem`: group-mode query padding, the forward's
        per-batch lengths."""
        return unaddressed_problem(problem)

    def supports(self, config: KernelConfig) -> str | None:
        s, a = config.signature, config.algorithm
        if s.family not in FAMILIES + BWD_FAMILIES + KVCACHE_FAMILIES:
            return f"family {s.family.value} is not realized (the triton backend covers the forward, KV-cache and backward families)"
        if s.dtype not in DTYPES:
            return f"dtype {s.dtype.value} is not realized ({', '.join(d.value for d in DTYPES)})"
        if s.dtype is DType.FP8 and s.family not in FP8_OUT_FAMILIES:
            return f"dtype fp8 (fp8 output) is realized for {', '.join(f.value for f in FP8_OUT_FAMILIES)} only"
        if s.vlayout is not VLayout.ROW and s.family not in VCOL_FAMILIES:
            return f"column-major V is realized for {', '.join(f.value for f in VCOL_FAMILIES)} only"
        if s.qscale is QScale.KV_BLOCKSCALE and s.family is not Family.BATCH_PREFILL:
            return "qscale kv_blockscale (per-page K/V descales) is realized for batch prefill only"
        if s.qscale not in (QScale.NONE, QScale.PERTENSOR, QScale.BLOCKSCALE, QScale.KV_BLOCKSCALE):
            return f"qscale {s.qscale.value} is not realized"
        if s.fp8_static_quant and not s.dtype.is_fp8_family:
            return "fp8 static quant needs an fp8 dtype"
        if max(s.hdim_q, s.hdim_v) > 256:
            return "head dims above 256 are not realized"
        if s.family is Family.FWD_SPLITKV_COMBINE:
            return None
        if s.family in BWD_FAMILIES and s.dtype not in BWD_DTYPES:
            return f"dtype {s.dtype.value} is not realized by the backward ({', '.join(d.value for d in BWD_DTYPES)})"
        if s.family in BWD_ONE_D_FAMILIES:
            bm0 = a.tile[0] if a.tile else 0
            return None if is_pow2(bm0) and bm0 >= 16 else f"tile {a.tile}: bm0 must be a power of two >= 16"
        if len(a.tile) < 2:
            return f"tile {a.tile} has no bm0/bn0"
        bm0, bn0 = a.tile[0], a.tile[1]
        if not (is_pow2(bm0) and is_pow2(bn0) and bm0 >= 16 and bn0 >= 16):
            return f"tile bm0={bm0}, bn0={bn0}: Triton blocks must be powers of two >= 16"
        if a.warps:
            w = a.warps[0][0] * a.warps[0][1] * a.warps[0][2]
            if not is_pow2(w) or w > 16:
                return f"{w} warps per block: Triton needs a power of two <= 16"
        return None

    # ------------------------------------------------------------------ builds
    @property
    def cache(self) -> BuildCache:
        if self._cache is None:
            os.environ.setdefault("TRITON_CACHE_DIR", str(cache_root() / "triton-jit"))
            self._cache = BuildCache("triton", BACKEND_VERSION)
        return self._cache

    def build(self, config: KernelConfig) -> BuiltKernel:
        """Check the config can run here; compile nothing.  Triton's JIT compiles a kernel per specialization
        (the problem's integer arguments, its compile-time flags), so a compile ahead of the problem compiles a
        specialization the run may never launch (the double compile of issue 25): the first launch of each
        specialization compiles instead (Triton's on-disk cache, ``TRITON_CACHE_DIR`` under ckfmha's cache root,
        shares it between processes), and the stage reports that compile as ``StageResult.compile_seconds``, which
        the runner counts as the build.  :meth:`compile_ahead` compiles on a synthetic problem (ahead-of-time
        compiles, PTX dumps)."""
        self.check_supported(config)
        if not self.available():
            raise BackendError(f"triton backend unavailable: {self.available().reason}")
        self.cache  # noqa: B018 - sets TRITON_CACHE_DIR before the first compile
        return BuiltKernel(config, self.name, artifact=None, build_seconds=0.0, cached=True,
                           info={"compiles": "at the first launch of each specialization"})  # fmt: skip

    def compile_ahead(self, config: KernelConfig) -> dict[str, Any]:
        """Compile ``config`` now by one launch on :func:`.warmup.synthetic_problem` (a specialization of its
        own); returns ``compile_seconds``, ``warmup_seconds`` and ``device``.  Cached entries record the
        compile in ckfmha's build cache."""
        self.check_supported(config)
        if not self.available():
            raise BackendError(f"triton backend unavailable: {self.available().reason}")

        def compile_into(tmp) -> dict[str, Any]:
            t0 = time.perf_counter()
            from ckfmha.backends.triton.warmup import compile_config

            info = compile_config(config)
            return {"compile_seconds": time.perf_counter() - t0, **info}

        _, meta, cached = self.cache.get_or_build(config.kernel_id, compile_into)
        if cached:  # Triton's own cache holds the binary; one launch loads it into this process
            from ckfmha.backends.triton.warmup import compile_config

            meta = {**meta, **compile_config(config)}
        return dict(meta)

    # ------------------------------------------------------------------ running
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
        """Run one plan stage by the stage contract (:mod:`ckfmha.backends.base`; :func:`.execute.run_stage`)."""
        from ckfmha.backends.triton.execute import run_stage

        return run_stage(kernel.config, stage, problem, inputs, timing=timing, context=context)
