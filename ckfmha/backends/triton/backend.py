"""TritonBackend: availability, what it can realize, builds (Triton JIT + cache), stage execution."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ckfmha.backends.base import Availability, Backend, BackendError, BuiltKernel, StageResult
from ckfmha.backends.cache import BuildCache, cache_root
from ckfmha.kernel import DType, Family, KernelConfig, Mode, QScale, VLayout
from ckfmha.problem import BWD_DTYPES

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem

FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_SPLITKV_COMBINE, Family.FWD_PAGEDKV)
# the backward stages (kernels_bwd.py / launch_bwd.py); their 1-D kernels (dot_do_o, convert_dq) have tile (bm0,)
BWD_FAMILIES = (Family.BWD_DOT_DO_O, Family.BWD_DQ_DK_DV, Family.BWD_CONVERT_DQ)
BWD_ONE_D_FAMILIES = (Family.BWD_DOT_DO_O, Family.BWD_CONVERT_DQ)
# the KV-cache families (kernels_kvcache.py / launch_kvcache.py; batch prefill runs the forward kernel)
KVCACHE_FAMILIES = (Family.FWD_APPENDKV, Family.BATCH_PREFILL)
DTYPES = (DType.FP16, DType.BF16, DType.FP32, DType.FP8, DType.FP8BF16, DType.FP8FP32)
# plain fp8 (fp8 in, fp8 O): the forward-attention families and the combine; not the KV-cache families
FP8_OUT_FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_SPLITKV_COMBINE, Family.FWD_PAGEDKV)
# column-major V (CK's -vlayout=c): the forward family, the only one a problem may give it (ckfmha/problem.py);
# served by the row-major kernel over ckfmha's logical V (package table, "vlayout col")
VCOL_FAMILIES = (Family.FWD,)
RANDVAL_MAX_ELEMENTS = 1 << 26  # store dropout random values for checking up to 64 Mi elements
BACKEND_VERSION = "1"


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``, read through Triton's own knob): the
    kernels then run on the CPU on torch CPU tensors, no GPU needed (slow; for developing and testing kernels)."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") == "1"  # pragma: no cover - Triton before the knobs module


FORWARD_ATTENTION_FAMILIES = (Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV)
"""Kernel families that run kernels.attn_fwd_kernel on a problem's own lengths (batch prefill reads its page
tables; the backward's padding check is launch_bwd's)."""


def unhonoured_lengths(family: Family, p: "Problem") -> str | None:
    """The lengths of ``p`` a kernel of ``family`` in the Triton forward (kernels.attn_fwd_kernel) would not honour,
    as an error naming the field, its value and the rule; None when every length is honoured.  Batch mode: every
    batch runs ``seqlen_q`` query rows (no per-batch query length: ``q_eff_lens`` refused) and ``seqlen_k`` keys
    unless a ``cache_seqlens`` tensor gives per-batch key counts, which :func:`ckfmha.inputs.make_inputs` gives
    for paged caches and append-KV only (``kv_eff_lens`` refused otherwise).  Group mode: a sequence's query
    length is ``seqstart_q[b + 1] - seqstart_q[b]``, the padded length (``s_qpad`` other than ``seqlens_q``
    refused; ``s_kpad`` is honoured: the keys come from ``seqlen_k``).  Torch-free: launch.check_preconditions
    raises it as a PreconditionError."""
    if family not in FORWARD_ATTENTION_FAMILIES:
        return None
    if p.q_eff_lens is not None:
        return (
            f"q_eff_lens: {p.q_eff_lens}: the triton forward runs seqlen_q={p.seqlen_q} query rows in every batch "
            "(its batch mode reads no per-batch query length)"
        )
    if p.kv_eff_lens is not None and not (p.page_block_size > 0 or p.family is Family.FWD_APPENDKV):
        return (
            f"kv_eff_lens: {p.kv_eff_lens}: the triton forward attends to seqlen_k={p.seqlen_k} keys in every batch "
            "(it reads per-batch key lengths only from cache_seqlens, which paged caches and append-KV give)"
        )
    if p.mode is Mode.GROUP and tuple(p.qpad_list) != tuple(p.seqlens_q_list):
        return (
            f"s_qpad: {p.s_qpad}: the triton forward takes a sequence's query length from seqstart_q (the padded "
            f"lengths {p.s_qpad}, not seqlens_q {p.seqlens_q})"
        )
    return None


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


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
            return None if _pow2(bm0) and bm0 >= 16 else f"tile {a.tile}: bm0 must be a power of two >= 16"
        if len(a.tile) < 2:
            return f"tile {a.tile} has no bm0/bn0"
        bm0, bn0 = a.tile[0], a.tile[1]
        if not (_pow2(bm0) and _pow2(bn0) and bm0 >= 16 and bn0 >= 16):
            return f"tile bm0={bm0}, bn0={bn0}: Triton blocks must be powers of two >= 16"
        if a.warps:
            w = a.warps[0][0] * a.warps[0][1] * a.warps[0][2]
            if not _pow2(w) or w > 16:
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
        self.check_supported(config)
        if not self.available():
            raise BackendError(f"triton backend unavailable: {self.available().reason}")

        def compile_into(tmp) -> dict[str, Any]:
            t0 = time.perf_counter()
            from ckfmha.backends.triton.warmup import compile_config

            info = compile_config(config)
            return {"compile_seconds": time.perf_counter() - t0, **info}

        t0 = time.perf_counter()
        _, meta, cached = self.cache.get_or_build(config.kernel_id, compile_into)
        if cached:
            # Triton's own cache holds the binary; a warm-up still loads it into this process.
            from ckfmha.backends.triton.warmup import compile_config

            compile_config(config)
        return BuiltKernel(
            config,
            self.name,
            artifact=None,
            build_seconds=float(meta.get("compile_seconds", 0.0)) if not cached else time.perf_counter() - t0,
            cached=cached,
            info=meta,
        )

    # ------------------------------------------------------------------ running
    def run_stage(
        self, kernel: BuiltKernel, stage: "Stage", problem: "Problem", tensors: dict[str, Any], *, timing: bool = False
    ) -> StageResult:
        from ckfmha.backends.triton.execute import run_stage

        return run_stage(kernel.config, stage, problem, tensors, timing=timing)
