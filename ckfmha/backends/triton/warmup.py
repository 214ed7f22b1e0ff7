"""Compile a config's Triton kernel ahead of any real launch (ahead-of-time compiles, PTX dumps): one launch of
the config's stage on a small synthetic problem, through the stage module :mod:`.execute` (the layer below;
:meth:`.backend.TritonBackend.compile_ahead` calls :func:`compile_config`; ``build`` compiles nothing -- the
first launch of each specialization compiles).  The stage's outputs are the family records'
(:func:`ckfmha.family_records.stage_outputs`); what a later stage reads from the stages before it is fabricated
from their specs (combine: the split stage's partials) or by :func:`.launch_bwd.warmup_inputs` (backward)."""

from __future__ import annotations

import time
from typing import Any

from ckfmha.kernel import Bias, Family, KernelConfig, MaskImpl, Mode, QScale, Rope, VLayout


def synthetic_problem(c: KernelConfig):
    """A small problem the config serves (``ckfmha.rules.fits``), for compiling: aligned lengths, the config's
    features."""
    from ckfmha.problem import Problem

    s, a = c.signature, c.algorithm
    fam = {
        Family.FWD_SPLITKV_COMBINE: Family.FWD_SPLITKV,
        Family.BWD_DOT_DO_O: Family.BWD_DQ_DK_DV,  # the backward's stages compile on a backward problem
        Family.BWD_CONVERT_DQ: Family.BWD_DQ_DK_DV,
    }.get(s.family, s.family)
    bm0 = a.tile[0] if len(a.tile) >= 2 else 64
    bn0 = a.tile[1] if len(a.tile) >= 2 else 64
    kw: dict[str, Any] = dict(
        family=fam,
        dtype=s.dtype,
        mode=s.mode,
        batch=1,
        nhead_q=1,
        hdim_q=s.hdim_q,
        hdim_v=s.hdim_v,
        seqlen_q=bm0,
        seqlen_k=max(bn0, 128) if fam is not Family.FWD else bn0,
    )
    if s.mask is not MaskImpl.NONE:
        kw["mask"] = "t" if s.mask in (MaskImpl.ANY, MaskImpl.CAUSAL) else "t:4,4"
    if s.bias is not Bias.NONE:
        kw["bias"] = s.bias
    kw["lse"] = s.lse and fam in (Family.FWD, Family.FWD_PAGEDKV, Family.BATCH_PREFILL)
    kw["sink"] = s.sink
    if s.skip_min_seqlen_q:
        kw["min_seqlen_q"] = 1  # a skip kernel serves only problems that skip (ckfmha.rules)
    if s.logits_soft_cap:
        kw["logits_soft_cap"] = 30.0
    if s.dropout.value != "none":
        kw["p_drop"] = 0.2
    if s.dtype.is_fp8_family:  # CK's squant kernels without a qscale field serve per-tensor descales
        kw["qscale"] = QScale.PERTENSOR if s.fp8_static_quant and s.qscale is QScale.NONE else s.qscale
    if s.vlayout is not VLayout.ROW:  # column-major V (fwd only)
        kw["vlayout"] = s.vlayout
    if fam is Family.FWD_SPLITKV:
        kw["num_splits"] = 2
    if s.paged_kv or fam is Family.FWD_PAGEDKV:
        kw["page_block_size"] = 128
        kw["seqlen_k"] = 128
    if fam is Family.BWD_DQ_DK_DV:
        kw["dbias"] = s.dbias
        kw["deterministic"] = s.deterministic
    if fam is Family.FWD_APPENDKV:  # bsk appended rows (RoPE over the whole head dim) after the cached keys
        kw["seqlen_knew"] = bn0
        if s.rope is not Rope.NONE:
            kw["rope"], kw["rotary_dim"] = s.rope, s.hdim_q
    if fam is Family.BATCH_PREFILL:  # the config's table, pool layout and page size
        kw["kv_lookup"], kw["kv_layout"], kw["page_block_size"] = s.kv_lookup_table, s.kv_memory_layout, s.page_size
    if s.mode is Mode.GROUP:
        kw["seqlens_q"] = (bm0,)
        kw["seqlens_k"] = (kw["seqlen_k"],)
        kw.pop("seqlen_q")
        kw.pop("seqlen_k")
    return Problem(**kw)


def compile_config(c: KernelConfig) -> dict[str, Any]:
    """Launch the config once on a synthetic problem (compiles through Triton's JIT and cache)."""
    import numpy as np

    from ckfmha.backends.triton.execute import run_stage
    from ckfmha.backends.triton.launch_bwd import warmup_inputs
    from ckfmha.family_records import stage_outputs
    from ckfmha.inputs import make_inputs
    from ckfmha.plan import FAMILY_ROLE, Launch, Stage, StageRole

    p = synthetic_problem(c)
    inputs: dict[str, Any] = dict(make_inputs(p, seed=0))
    role = FAMILY_ROLE[c.signature.family]
    splits = 2 if role in (StageRole.SPLITKV, StageRole.COMBINE) else None
    if role in (StageRole.DOT_DO_O, StageRole.DQ_DK_DV, StageRole.CONVERT_DQ):
        inputs.update(warmup_inputs(c, p))  # what the earlier backward stages would have written
    if role is StageRole.COMBINE:  # the combine reads the split stage's partials: fabricated from their specs
        rng = np.random.default_rng(0)
        for spec in stage_outputs(p, StageRole.SPLITKV, c, splits):
            inputs[spec.name] = rng.standard_normal(spec.shape, dtype=np.float32)
    stage = Stage(role, c, Launch(num_splits=splits), stage_outputs(p, role, c, splits))
    t0 = time.perf_counter()
    run_stage(c, stage, p, inputs)
    return {"warmup_seconds": time.perf_counter() - t0, "device": _device_name()}


def _device_name() -> str:
    import torch

    from ckfmha.backends.triton.capability import interpreting

    if interpreting():
        return "Triton interpreter (CPU)"
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
