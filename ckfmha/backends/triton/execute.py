"""Run one plan stage on the GPU: NumPy inputs -> device tensors (poisoned outputs) -> launch -> NumPy outputs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ckfmha.backends.base import StageResult
from ckfmha.backends.triton.backend import BWD_FAMILIES
from ckfmha.backends.triton.launch import (
    PreconditionError,
    attention_launcher,
    check_preconditions,
    combine_launcher,
    input_fp8_format,
    out_torch_dtype,
    stored_output,
    to_numpy,
    to_torch,
)
from ckfmha.backends.triton.launch_kvcache import run_appendkv_stage
from ckfmha.heuristics import LaunchVariant
from ckfmha.inputs import lse_shape, o_shape
from ckfmha.kernel import Family, KernelConfig, Mode

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem

_INPUT_KEYS = (
    "q",
    "k",
    "v",
    "k_cache",
    "v_cache",
    "block_table",
    "cache_seqlens",
    "seqstart_q",
    "seqstart_k",
    "seqlen_k",
    "bias",
    "alibi_slopes",
    "sink",
    "q_descale",
    "k_descale",
    "v_descale",
    "cache_batch_idx",
    "kv_indptr",
    "kv_page_indices",
    "kv_last_page_lens",
)
RANDVAL_MAX_ELEMENTS = 1 << 26


def device_tensors(tensors: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The device copies of the inputs, made once per tensors dict."""
    dev = tensors.get("_device")
    if dev is None:
        dev = tensors["_device"] = {}
        for k in _INPUT_KEYS:
            if k in tensors and isinstance(tensors[k], np.ndarray):
                dev[k] = to_torch(tensors[k])
    return dev


_POISON_VIEW = {
    torch.float64: ("float64", torch.int64),
    torch.float32: ("float32", torch.int32),
    torch.float16: ("float16", torch.int16),
    torch.bfloat16: ("bfloat16", torch.int16),
}


def _poisoned(shape, dtype) -> torch.Tensor:
    """A device tensor filled with ckfmha.poison's marked NaN (the plain NaN for the float8 types)."""
    from ckfmha.backends.triton import launch
    from ckfmha.poison import POISON_BITS

    view = _POISON_VIEW.get(dtype)
    if view is None:
        return torch.full(shape, float("nan"), dtype=dtype, device=launch.DEVICE)
    bits = POISON_BITS[view[0]][1]  # every pattern is below the sign bit, so it fits the signed int view
    return torch.full(shape, bits, dtype=view[1], device=launch.DEVICE).view(dtype)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(launch, timing: bool) -> float | None:
    if not timing:
        launch()
        return None
    from ckfmha.backends.triton import launch as _launch

    if _launch.DEVICE == "cpu":  # the interpreter runs synchronously on the host
        t0 = time.perf_counter()
        launch()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def run_stage(
    c: KernelConfig, stage: "Stage", p: "Problem", tensors: dict[str, Any], *, timing: bool = False
) -> StageResult:
    fam = c.signature.family
    if fam in BWD_FAMILIES:
        from ckfmha.backends.triton.launch_bwd import run_bwd_stage

        return run_bwd_stage(c, stage, p, tensors, timing=timing)
    if fam is Family.FWD_APPENDKV:
        return run_appendkv_stage(c, stage, p, tensors, timing=timing)
    t = device_tensors(tensors)
    outputs: dict[str, Any] = {}
    fp8_format = input_fp8_format(tensors)  # plain fp8 O in the fnuz encoding: float32, rounded on the host
    if fam is Family.FWD_SPLITKV_COMBINE:
        n = int(stage.args["num_splits"])
        t["o"] = _poisoned(o_shape(p), out_torch_dtype(p.dtype, fp8_format))
        if p.lse:
            t["lse"] = _poisoned(lse_shape(p), torch.float32)
        ms = _timed(combine_launcher(c, p, t, n), timing)
        _sync()
        outputs["o"] = stored_output(t["o"], p.dtype, fp8_format)
        if p.lse:
            outputs["lse"] = to_numpy(t["lse"])
        tensors.update(outputs)
        return StageResult(outputs, ms)
    check_preconditions(c, p)
    variant = LaunchVariant.from_stage_args(stage.args)  # the plan's launch variants (ckfmha/heuristics.py)
    if fam is Family.FWD_SPLITKV:
        n = int(stage.args["num_splits"])
        nb, rows = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
        t["o_acc"] = _poisoned((n, nb, p.nhead_q, rows, p.hdim_v), torch.float32)
        t["lse_acc"] = _poisoned((n, nb, p.nhead_q, rows), torch.float32)
        ms = _timed(attention_launcher(c, p, t, split=True, num_splits=n, variant=variant), timing)
        _sync()
        outputs["o_acc"] = to_numpy(t["o_acc"])
        outputs["lse_acc"] = to_numpy(t["lse_acc"])
        tensors.update(outputs)
        return StageResult(outputs, ms)
    # fwd / pagedkv
    t["o"] = _poisoned(o_shape(p), out_torch_dtype(p.dtype, fp8_format))
    if c.signature.lse:
        t["lse"] = _poisoned(lse_shape(p), torch.float32)
    else:
        t.pop("lse", None)
    t.pop("randval", None)
    if p.p_drop > 0:
        shape = lse_shape(p) + (p.seqlen_k,)
        if int(np.prod(shape)) <= RANDVAL_MAX_ELEMENTS:
            from ckfmha.backends.triton import launch as _launch

            t["randval"] = torch.zeros(shape, dtype=torch.uint8, device=_launch.DEVICE)
    ms = _timed(attention_launcher(c, p, t, variant=variant), timing)
    _sync()
    outputs["o"] = stored_output(t["o"], p.dtype, fp8_format)
    if c.signature.lse:
        outputs["lse"] = to_numpy(t["lse"])
    if "randval" in t:
        outputs["randval"] = to_numpy(t["randval"])
    tensors.update(outputs)
    return StageResult(outputs, ms)


__all__ = ["run_stage", "PreconditionError"]
