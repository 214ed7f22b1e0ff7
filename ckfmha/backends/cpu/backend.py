"""The cpu backend: supports / build (through the on-disk BuildCache) / run_stage with the kernels' host checks."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ckfmha.backends.base import (
    Availability,
    Backend,
    BackendError,
    BuiltKernel,
    PreconditionError,
    RunContext,
    StageResult,
)
from ckfmha.backends.cache import BuildCache
from ckfmha.backends.cpu.blas import blas_threads
from ckfmha.kernel import Family, KernelConfig, Pipeline, QScale
from ckfmha.plan import StageRole
from ckfmha.rules import misfit

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem

CPU_BACKEND_VERSION = "1"
PLAN_SCHEMA = "ckfmha.cpu.plan"

TILE_NAMES: dict[Family, tuple[str, ...]] = {
    Family.FWD: ("bm0", "bn0", "bk0", "bn1", "bk1", "bk0max"),
    Family.FWD_SPLITKV: ("bm0", "bn0", "bk0", "bn1", "bk1", "bk0max"),
    Family.FWD_PAGEDKV: ("bm0", "bn0", "bk0", "bn1", "bk1", "bk0max"),
    Family.BATCH_PREFILL: ("bm0", "bn0", "bk0", "bn1", "bk1", "bk0max"),
    Family.FWD_SPLITKV_COMBINE: ("bn1",),
    Family.FWD_APPENDKV: ("bs", "bsk", "bd", "bdv"),
    Family.BWD_DOT_DO_O: ("bm0",),
    Family.BWD_DQ_DK_DV: ("bm0", "bn0", "bk0", "bk1", "bk2", "bk3", "bk4", "bhdq", "bhdv"),
    Family.BWD_CONVERT_DQ: ("bm0",),
}

CONVERT_DQ_TILE_NAMES_CK_2025_11 = ("bm0", "bn0")
"""The convert_dq tile of the older CK (amd-aiter 0.1.7.post2.dev18, naming scheme ``ck-2025-11``:
``..._b{bm0}x{bn0}_...``): ``bn0`` is its ``kN0``, the dq_dk_dv tile's ``bn0`` when deterministic, else 0
(codegen/ops/fmha_bwd.py ``convert_dq_bn0``); the deterministic kernel sums ``ceil(seqlen_k / kN0)`` dq_acc
slices per sequence (fmha_bwd_kernel.hpp ``FmhaBwdConvertQGradKernel``), the non-deterministic one reads the one
slice and never uses kN0.  Newer CK spells ``b{bm0}`` alone (:data:`TILE_NAMES`)."""


def tile_names(c: KernelConfig) -> tuple[str, ...] | None:
    """The names of ``c``'s tile entries (None: a family the emulation has no tile loop for): :data:`TILE_NAMES`,
    or :data:`CONVERT_DQ_TILE_NAMES_CK_2025_11` for an older CK's two-entry convert_dq tile."""
    if c.family is Family.BWD_CONVERT_DQ and len(c.tile) == len(CONVERT_DQ_TILE_NAMES_CK_2025_11):
        return CONVERT_DQ_TILE_NAMES_CK_2025_11
    return TILE_NAMES.get(c.family)


STAGE_KIND: dict[Family, str] = {
    Family.FWD: "attention",
    Family.FWD_SPLITKV: "attention_split",
    Family.FWD_PAGEDKV: "attention_paged",
    Family.BATCH_PREFILL: "attention_paged",
    Family.FWD_SPLITKV_COMBINE: "combine",
    Family.FWD_APPENDKV: "append_rope",
    Family.BWD_DOT_DO_O: "row_dot",
    Family.BWD_DQ_DK_DV: "attention_backward",
    Family.BWD_CONVERT_DQ: "convert",
}


def make_plan(c: KernelConfig) -> dict:
    """The build artifact: the tile loop the emulation runs for this kernel."""
    names = tile_names(c) or ()
    tile = dict(zip(names, c.tile))
    loop: dict = {}
    if c.family is Family.BWD_CONVERT_DQ:
        loop = {"row_tile": tile["bm0"]}
        if c.deterministic and "bn0" in tile:  # the older CK: ceil(seqlen_k / kN0) slices per sequence
            loop["split_key_tile"] = tile["bn0"]
    elif "bm0" in tile and "bn0" in tile:
        loop = {
            "query_tile": tile["bm0"],
            "key_tile": tile["bn0"],
            "order": "key tiles inside query tiles"
            if c.family is not Family.BWD_DQ_DK_DV
            else "query tiles inside key tiles",
        }
    elif "bm0" in tile:
        loop = {"row_tile": tile["bm0"]}
    elif "bs" in tile:
        loop = {"q_tile": tile["bs"], "knew_tile": tile["bsk"]}
    return {
        "schema": PLAN_SCHEMA,
        "version": CPU_BACKEND_VERSION,
        "kernel_id": c.kernel_id,
        "family": c.family.value,
        "stage_kind": STAGE_KIND[c.family],
        "tile": tile,
        "loop": loop,
        "pads": {"seqlen_q": c.pad_s, "seqlen_k": c.pad_sk, "hdim_q": c.pad_d, "hdim_v": c.pad_dv},
        "p_dtype": c.dtype.value,
        "hdim_q": c.hdim_q,
        "hdim_v": c.hdim_v,
    }


def check_preconditions(c: KernelConfig, role: StageRole | str, p: "Problem") -> None:
    """A real kernel launch's checks, by the dispatcher's rules (:mod:`ckfmha.rules`): a kernel of another family
    than the role's, or that computes something else than the problem asks (dtype, mode, mask, bias, LSE, ...),
    raises :class:`~ckfmha.backends.base.BackendError` -- a misuse, not a silently different result; an
    argument the kernel's host check refuses (head dims, unaligned lengths on a kernel without that padding,
    group mode without the seqlen pads, a query over a bwd kernel's max_seq_len_q) raises
    :class:`PreconditionError` naming the argument, its value and the rule."""
    m = misfit(p, StageRole.parse(role, "role"), c)
    if m is None:
        return
    raise (PreconditionError if m.launch_check else BackendError)(m.message(c.kernel_id))


class CpuBackend(Backend):
    """Vectorized NumPy emulation of CK's FMHA kernels (see docs/cpu_backend.md)."""

    name = "cpu"
    version = CPU_BACKEND_VERSION

    def device(self) -> str:
        import platform

        return f"cpu ({platform.machine() or 'unknown machine'})"

    def available(self) -> Availability:
        return Availability.yes()

    def supports(self, config: KernelConfig) -> str | None:
        c = config
        if c.dtype.is_fp8_family:
            return (
                f"dtype {c.dtype.value}: fp8 kernels quantize P and O with static/block scales whose exact "
                "rounding the emulation does not model (it emulates fp16, bf16 and fp32)"
            )
        if c.qscale is not QScale.NONE or c.fp8_static_quant:
            return f"qscale {c.qscale.value}: quantized (fp8/mx) kernels are not emulated"
        if c.pipeline is Pipeline.TRITON:
            return "pipeline triton: not a CK pipeline (the triton backend runs it)"
        names = tile_names(c)
        if names is None:
            return f"family {c.family.value} is not emulated"
        if len(c.tile) != len(names):
            older = ""
            if c.family is Family.BWD_CONVERT_DQ:
                older = f" or {len(CONVERT_DQ_TILE_NAMES_CK_2025_11)} ({', '.join(CONVERT_DQ_TILE_NAMES_CK_2025_11)})"
            return (
                f"tile {list(c.tile)} has {len(c.tile)} entries, {c.family.value} needs {len(names)} "
                f"({', '.join(names)}){older}"
            )
        loop_tiles = c.tile[:1] if c.family is Family.BWD_CONVERT_DQ else c.tile[:2]
        if any(x <= 0 for x in loop_tiles):
            return f"tile {list(c.tile)}: the loop tiles must be positive"
        if names == CONVERT_DQ_TILE_NAMES_CK_2025_11 and c.deterministic and c.tile[1] <= 0:
            return (
                f"tile {list(c.tile)}: a deterministic convert_dq divides seqlen_k by its kN0 = {c.tile[1]} "
                "(fmha_bwd_kernel.hpp), which must be positive"
            )
        return None

    def build(self, config: KernelConfig) -> BuiltKernel:
        self.check_supported(config)
        t0 = time.perf_counter()
        cache = BuildCache(self.name, CPU_BACKEND_VERSION)

        def do_build(tmp: Path) -> dict:
            plan = make_plan(config)
            (tmp / "artifact.json").write_text(json.dumps(plan, indent=1, sort_keys=True))
            return {"backend": self.name, "version": CPU_BACKEND_VERSION, "artifact": "artifact.json"}

        entry, meta, cached = cache.get_or_build(config.kernel_id, do_build)
        plan = json.loads((entry / "artifact.json").read_text())
        if plan.get("kernel_id") != config.kernel_id or plan.get("schema") != PLAN_SCHEMA:
            raise BackendError(f"cpu build cache entry {entry} does not hold {config.kernel_id}")
        return BuiltKernel(
            config,
            self.name,
            artifact=plan,
            build_seconds=float(meta.get("build_seconds", 0.0)),
            cached=cached,
            info={"entry": str(entry), "load_seconds": time.perf_counter() - t0},
        )

    def run_stage(
        self,
        kernel: BuiltKernel,
        stage,
        problem,
        inputs: Mapping[str, Any],
        *,
        timing: bool = False,
        context: RunContext | None = None,
    ) -> StageResult:
        """Run one stage under the stage contract (:mod:`ckfmha.backends.base`): the stage function works on a
        dict of its own -- the read-only inputs, every declared output allocated NaN-poisoned, and writable copies
        of the inputs a stage updates (append-KV's caches, rotated q) -- and the declared outputs are returned."""
        from ckfmha.backends.cpu.stages import STAGE_FUNCTIONS

        c = kernel.config
        if kernel.backend != self.name:
            raise BackendError(f"kernel {c.kernel_id} was built by backend {kernel.backend!r}, not {self.name!r}")
        if stage.kernel != c:
            raise BackendError(
                f"stage {stage.role.value} names {stage.kernel.kernel_id}, the built kernel is {c.kernel_id}"
            )
        self.check_supported(c)
        check_preconditions(c, stage.role, problem)
        plan = kernel.artifact if isinstance(kernel.artifact, dict) else make_plan(c)
        work = dict(inputs)
        for spec in (s for s in stage.outputs if s.required):  # optional ones (randval) the emulation never writes
            updated = inputs.get(spec.updates) if spec.updates else None
            work[spec.name] = np.array(updated, copy=True) if updated is not None else spec.allocate()
        with blas_threads():
            t0 = time.perf_counter()
            STAGE_FUNCTIONS[stage.role.value](plan, c, stage, problem, work)
            ms = (time.perf_counter() - t0) * 1e3
        names = [s.name for s in stage.outputs if s.required]
        return StageResult({n: work[n] for n in names}, ms if timing else None)
