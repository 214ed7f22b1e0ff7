"""The stage module of the Triton backend: one plan stage by the stage contract (:mod:`ckfmha.backends.base`) --
read-only NumPy inputs -> device tensors -> the role's launcher -> a new NumPy array per output spec.

==================  ===============================================================================================
role                what :func:`run_stage` does
==================  ===============================================================================================
fwd, pagedkv,       :func:`.launch.attention_launcher` with the plan's launch variant (``stage.launch.variant``);
batch_prefill       ``o`` / ``lse`` / (dropout, up to ``RANDVAL_MAX_ELEMENTS``) ``randval`` buffers from the specs
splitkv             the same kernel with ``split`` and ``stage.launch.num_splits``: ``o_acc`` / ``lse_acc``
combine             :func:`.launch.combine_launcher` over the split stage's partials (found on the device)
appendkv            host checks (:func:`.launch_kvcache.check_append_inputs`), then
                    :func:`.launch_kvcache.appendkv_launcher` on device copies of ``q`` and the caches: returns the
                    rotated ``q`` and the updated caches as new arrays (the specs' ``updates``)
dot_do_o,           :func:`.launch_bwd.stage_launcher` (``d`` and ``dq`` buffers poisoned from the specs; ``dq_acc``
dq_dk_dv,           returned cut from its upper-bound device buffer to its spec's shape)
convert_dq
==================  ===============================================================================================

A launch that compiles (the first of each Triton specialization in a process: the backend's ``build`` compiles
nothing) reports the compile's seconds as ``StageResult.compile_seconds`` (the runner counts them as the build) and
no device time for that launch.

Shapes and dtypes of every output come from ``stage.outputs`` (none derived here); elements a kernel does not
write hold the poison.  Device copies of inputs live in the run's :class:`~ckfmha.backends.base.RunContext`
(:class:`.device.DeviceTensors`); an output a stage returns is remembered on the device for the stages after it.
The attention stage of an append-KV problem reads the post-append key counts ``cache_seqlens + seqlen_knew``
(computed on the device from the problem's ``cache_seqlens``).

Layers: the top of the launchers (:mod:`.launch`, :mod:`.launch_bwd`, :mod:`.launch_kvcache`, :mod:`.device`);
:mod:`.warmup` and :mod:`.backend` call it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ckfmha.backends.base import RunContext, StageResult
from ckfmha.backends.triton.capability import RANDVAL_MAX_ELEMENTS
from ckfmha.backends.triton.device import (
    DeviceTensors,
    check_preconditions,
    compile_mark,
    compiled_since,
    poisoned_output,
    spec_output,
    sync,
    timed,
)
from ckfmha.backends.triton.launch import attention_launcher, combine_launcher
from ckfmha.backends.triton.launch_bwd import stage_launcher
from ckfmha.backends.triton.launch_kvcache import appendkv_launcher, check_append_inputs
from ckfmha.kernel import Family, KernelConfig
from ckfmha.plan import OutputSpec, StageRole

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem

#: role -> the names the role's kernel writes: never read from the inputs, whatever the specs list
ROLE_WRITES: dict[StageRole, tuple[str, ...]] = {
    StageRole.FWD: ("o", "lse", "randval"),
    StageRole.PAGEDKV: ("o", "lse", "randval"),
    StageRole.BATCH_PREFILL: ("o", "lse", "randval"),
    StageRole.SPLITKV: ("o_acc", "lse_acc", "o", "lse", "randval"),
    StageRole.COMBINE: ("o", "lse"),
    StageRole.APPENDKV: (),
    StageRole.DOT_DO_O: ("d",),
    StageRole.DQ_DK_DV: ("dq_acc", "dk_raw", "dv_raw", "dbias_raw", "dq", "dk", "dv", "dbias"),
    StageRole.CONVERT_DQ: ("dq",),
}

#: what a role's preparation gives: the launch, and name -> the device tensor of each output it produced
Prepared = tuple[Callable[[], None], dict[str, torch.Tensor]]


def _specs(stage: "Stage", *names: str) -> dict[str, torch.Tensor]:
    """Poisoned device buffers of the stage's output specs among ``names`` (those it declares)."""
    return {s.name: poisoned_output(s) for s in stage.outputs if s.name in names}


def _forward(c: KernelConfig, stage: "Stage", p: "Problem", t: DeviceTensors) -> Prepared:
    check_preconditions(c, p, stage.role)
    if p.family is Family.FWD_APPENDKV and "cache_seqlens" in t:
        t["cache_seqlens"] = t["cache_seqlens"] + p.seqlen_knew  # the post-append key counts, on the device
    variant = stage.launch.variant
    if stage.role is StageRole.SPLITKV:
        out = _specs(stage, "o_acc", "lse_acc")
        t.update(out)
        n = int(stage.launch.num_splits or 1)
        return attention_launcher(c, p, t, split=True, num_splits=n, variant=variant), out
    out = _specs(stage, "o", "lse")
    randval = next((s for s in stage.outputs if s.name == "randval"), None)
    if randval is not None and p.p_drop > 0 and int(np.prod(randval.shape)) <= RANDVAL_MAX_ELEMENTS:
        out["randval"] = poisoned_output(randval)
    t.update(out)
    return attention_launcher(c, p, t, variant=variant), out


def _combine(c: KernelConfig, stage: "Stage", p: "Problem", t: DeviceTensors) -> Prepared:
    out = _specs(stage, "o", "lse")
    t.update(out)
    return combine_launcher(c, p, t, int(stage.launch.num_splits or 1)), out


def _appendkv(c: KernelConfig, stage: "Stage", p: "Problem", t: DeviceTensors) -> Prepared:
    check_preconditions(c, p, stage.role)
    check_append_inputs(c, p, t.inputs)  # every cache row / page and the rotary tables, before any write
    for name in ("k_cache", "v_cache") if p.page_block_size else ("k", "v"):
        if name in t:
            t[name] = t[name].clone()  # the kernel writes the copy: inputs and their device copies stay as given
    launch, after = appendkv_launcher(c, p, t)
    after.pop("cache_seqlens", None)  # the attention stage adds seqlen_knew itself (_forward)
    return launch, after


def _backward(c: KernelConfig, stage: "Stage", p: "Problem", t: DeviceTensors) -> Prepared:
    t.update(_specs(stage, "d", "dq") if stage.role is not StageRole.DQ_DK_DV else {})
    launch = stage_launcher(c, p, t)
    return launch, {s.name: t[s.name] for s in stage.outputs if dict.__contains__(t, s.name)}


#: role -> the stage function that prepares its launch (the one registration per role, as the cpu backend's STAGE_FUNCTIONS)
STAGE_FUNCTIONS: dict[StageRole, Callable[[KernelConfig, "Stage", "Problem", DeviceTensors], Prepared]] = {
    StageRole.FWD: _forward,
    StageRole.PAGEDKV: _forward,
    StageRole.BATCH_PREFILL: _forward,
    StageRole.SPLITKV: _forward,
    StageRole.COMBINE: _combine,
    StageRole.APPENDKV: _appendkv,
    StageRole.DOT_DO_O: _backward,
    StageRole.DQ_DK_DV: _backward,
    StageRole.CONVERT_DQ: _backward,
}


def _collect(stage: "Stage", t: DeviceTensors, produced: dict[str, torch.Tensor]) -> dict[str, Any]:
    """A new NumPy array per output spec: the produced device buffer (an append's by the input it updates), else
    -- a required spec the launch did not write -- the spec's poison.  Each returned array is remembered with its
    device tensor for the stages after this one."""
    outputs: dict[str, Any] = {}
    for spec in stage.outputs:
        key = spec.updates or spec.name
        dev = produced.get(key)
        if dev is None:
            if spec.required:
                outputs[spec.name] = _unwritten(spec, t.inputs)
            continue
        arr = outputs[spec.name] = spec_output(dev, spec)
        if tuple(dev.shape) == arr.shape:  # an upper-bound buffer (dq_acc) is cut: the next stage uploads the cut
            t.keep(key, arr, dev)
    return outputs


def _unwritten(spec: OutputSpec, inputs: Mapping[str, Any]) -> np.ndarray:
    """A required output no launch produced: an input it updates, unchanged (a new array), else the poison."""
    source = inputs.get(spec.updates) if spec.updates else None
    if isinstance(source, np.ndarray) and spec.mismatch(source) is None:
        return np.array(source, copy=True)
    return spec.allocate()


def run_stage(
    c: KernelConfig,
    stage: "Stage",
    p: "Problem",
    inputs: Mapping[str, Any],
    *,
    timing: bool = False,
    context: RunContext | None = None,
) -> StageResult:
    """Run one plan stage (module table): ``inputs`` are only read; every spec of ``stage.outputs`` comes back as a
    new NumPy array.  ``context``: the run's (device copies shared across its stages); None: a private one."""
    own = context is None
    ctx = RunContext() if context is None else context
    try:
        t = DeviceTensors(inputs, ctx, hidden=_hidden(stage))
        launch, produced = STAGE_FUNCTIONS[stage.role](c, stage, p, t)
        mark = compile_mark()
        ms = timed(launch, timing)
        sync()
        compiles, seconds = compiled_since(mark)
        if compiles:  # the kernel compiled at this launch: build time, and the events timed the compile too
            ms = None
        return StageResult(_collect(stage, t, produced), ms, compile_seconds=seconds)
    finally:
        if own:
            ctx.close()


def _hidden(stage: "Stage") -> set[str]:
    """The names a stage's device tensors never take from its inputs: what the stage writes (not what it
    updates: append-KV reads the caches it returns)."""
    return {s.name for s in stage.outputs if s.updates is None} | set(ROLE_WRITES[stage.role])


__all__ = ["ROLE_WRITES", "run_stage"]
