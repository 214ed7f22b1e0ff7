"""The backward launchers of the Triton backend: device buffers, kernel arguments and launches of ``bwd_dot_do_o``,
``bwd_dq_dk_dv`` and ``bwd_convert_dq`` (kernels in :mod:`ckfmha.backends.triton.kernels_bwd`; imports
:mod:`.device` and :mod:`.capability` below it; the stage module :mod:`.execute` calls :func:`stage_launcher`).

=====================  ========================================================================================
stage                  reads -> writes (the cpu stages' names and layouts: ckfmha/backends/cpu/stages.py)
=====================  ========================================================================================
dot_do_o               ``o``, ``do`` -> ``d`` (fp32, LSE shape); block = tile bm0
dq_dk_dv               ``q``, ``k``, ``v``, ``do``, ``lse``, ``d`` (+ ``bias`` / ``alibi_slopes``) -> ``dq_acc``,
                       ``dk_raw``, ``dv_raw`` (+ ``dbias_raw``; + ``dq`` for fp32 non-deterministic, where no
                       convert_dq follows); blocks = tile bm0 (queries) x bn0 (keys), warps = the first GEMM's
                       warps, ``num_stages`` (else 1) pipelines the query loop, fewer where shared memory is short
convert_dq             ``dq_acc`` -> ``dq`` (input layout and dtype); block = tile bm0
=====================  ========================================================================================

Workspace without host syncs (upstream CK PR #7331): ``dq_acc`` is allocated on the device from the upper bounds
:func:`ckfmha.workspace.bwd_workspace_upper_bound` uses (batch, nhead_q, max_seqlen_q, max_seqlen_k, hdim_q; in group
mode ``batch * max_seqlen_q`` packed rows) and cleared by the launch, as CK's launcher clears it; the grids come
from the same bounds and the kernels read seqstart_q / seqstart_k / seqlen_k on the device.  Nothing in
:func:`stage_launcher` reads a device tensor back to the host (no ``.item()``, ``.tolist()``, ``.cpu()``); only
the stage module copies the outputs to NumPy after the launch.  ``d`` (dot_do_o) and ``dq`` (convert_dq) are the
buffers the stage gives in ``t`` (poisoned from the stage's output specs) where it gives them, else allocated here.
The ``perturb("triton.<point>", value)`` calls are the fault catalogue's hook points (:mod:`ckfmha.faults`,
docs/faults.md): each returns its value unless a fault is active.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import triton

from ckfmha.backends.base import RunContext
from ckfmha.backends.triton import kernels_bwd
from ckfmha.backends.triton.capability import SMEM_BYTES, next_pow2
from ckfmha.backends.triton.device import (
    BIAS_KIND,
    ELEM,
    DeviceTensors,
    PreconditionError,
    check_preconditions,
    dropout_args,
    dummy_tensor,
    launch_fitting_stages,
    mask_args,
    out_torch_dtype,
    philox_words,
    required,
    seq_strides,
)
from ckfmha.faults import perturb  # the fault hooks (docs/faults.md): each returns its value unless a fault is active
from ckfmha.inputs import dbias_raw_shape, dk_raw_shape, dv_raw_shape, lse_shape, q_shape
from ckfmha.kernel import Bias, DType, Family, KernelConfig, MaskImpl, Mode
from ckfmha.plan import FAMILY_ROLE, needs_convert  # the one rule: is a convert_dq stage next
from ckfmha.problem import Layout, Problem
from ckfmha.rng import DROPOUT_ROUNDS
from ckfmha.workspace import dq_acc_splits

#: what the backward stages write: never read from a stage's inputs (:func:`backward_device_tensors`)
BWD_OUTPUTS = ("d", "dq_acc", "dk_raw", "dv_raw", "dbias_raw", "dq", "dk", "dv", "dbias")


def _warps(c: KernelConfig) -> int:
    return math.prod(c.algorithm.warps[0]) if c.algorithm.warps else 4


def bwd_stages(c: KernelConfig, p: Problem) -> int:
    """Pipelining depth of the query loop: the config's ``num_stages`` (CK configs: 1), fewer where the Q/dO tiles
    of the stages and the K/V tiles exceed Hopper's 227 KiB of shared memory."""
    bm0, bn0 = c.algorithm.tile[0], c.algorithm.tile[1]
    bdq, bdv = next_pow2(max(p.hdim_q, 16)), next_pow2(max(p.hdim_v, 16))
    eb = 4 if c.dtype is DType.FP32 else 2
    stages = max(1, c.algorithm.num_stages or 1)
    while stages > 1 and (stages * bm0 * (bdq + bdv) + bn0 * (bdq + bdv)) * eb > SMEM_BYTES:
        stages -= 1
    return stages


def workspace_rows(p: Problem) -> tuple[int, int]:
    """(batch axis, query rows) of ``dq_acc`` from the problem's upper bounds: (batch, seqlen_q), group mode
    (1, batch * max seqlen_q) -- the rows :func:`ckfmha.workspace.bwd_workspace_upper_bound` counts."""
    return (1, p.batch * p.seqlen_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)


def _check_problem(p: Problem) -> None:
    """Problems the kernels cannot address: group mode with padded query rows (``s_qpad`` beyond the logical
    lengths; the kernels take a sequence's query length from seqstart_q)."""
    if p.mode is Mode.GROUP and tuple(p.qpad_list) != tuple(p.seqlens_q_list):
        raise PreconditionError(
            f"s_qpad: {list(p.qpad_list)} differs from seqlens_q {list(p.seqlens_q_list)}; the triton backward "
            "takes query lengths from seqstart_q (rule: no query padding in group mode)"
        )


# ------------------------------------------------------------------------------------------ launchers
def dot_do_o_launcher(c: KernelConfig, p: Problem, t: dict[str, torch.Tensor]) -> Callable[[], None]:
    """Writes ``t['d']`` (the stage's buffer, else allocated here) from ``t['o']`` and ``t['do']``."""
    o, do = required(t, "o", "stage dot_do_o"), required(t, "do", "stage dot_do_o")
    d = t["d"] if "d" in t else t.setdefault("d", torch.empty(lse_shape(p), dtype=torch.float32, device=o.device))
    nb, rows = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    block_m = c.algorithm.tile[0]
    grid = (triton.cdiv(rows, block_m), nb * p.nhead_q)
    args = (o, do, d, *seq_strides(o, p.output_layout), *seq_strides(do, p.output_layout), *d.stride(), rows, p.nhead_q)
    meta = dict(HDIM_V=p.hdim_v, BLOCK_M=block_m, BLOCK_DV=next_pow2(max(p.hdim_v, 16)))

    def launch() -> None:
        kernels_bwd.bwd_dot_do_o_kernel[grid](*args, **meta, num_warps=4)

    return launch


def convert_dq_launcher(c: KernelConfig, p: Problem, t: dict[str, torch.Tensor]) -> Callable[[], None]:
    """Writes ``t['dq']`` (input layout and dtype: the stage's buffer, else allocated here) from ``t['dq_acc']``."""
    acc = required(t, "dq_acc", "stage convert_dq")
    dq = (
        t["dq"]
        if "dq" in t
        else t.setdefault("dq", torch.empty(q_shape(p), dtype=out_torch_dtype(p.dtype), device=acc.device))
    )
    nb, rows = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    block_m = c.algorithm.tile[0]
    grid = (triton.cdiv(rows, block_m), nb * p.nhead_q)
    slices = perturb("triton.convert.slices", acc.shape[0])
    args = (acc, dq, *acc.stride()[:4], *seq_strides(dq, p.input_layout), rows, p.nhead_q, slices)
    meta = dict(HDIM_Q=p.hdim_q, BLOCK_M=block_m, BLOCK_DQ=next_pow2(max(p.hdim_q, 16)))

    def launch() -> None:
        kernels_bwd.bwd_convert_dq_kernel[grid](*args, **meta, num_warps=4)

    return launch


def _bias_args(c: KernelConfig, t: dict[str, torch.Tensor], dummy: torch.Tensor) -> tuple[Any, ...]:
    """(bias, alibi, bias strides b/h/m/n, alibi batch stride): CK's broadcast bias dims through zero strides."""
    s = c.signature
    if s.bias is Bias.ELEMENTWISE:
        bias = required(t, "bias", "a kernel with elementwise bias")
        sb = bias.stride(0) if bias.shape[0] > 1 else 0
        sh = bias.stride(1) if bias.shape[1] > 1 else 0
        return bias, dummy, sb, sh, bias.stride(2), bias.stride(3), 0
    if s.bias is Bias.ALIBI:
        alibi = required(t, "alibi_slopes", "a kernel with alibi bias")
        return dummy, alibi, 0, 0, 0, 0, alibi.stride(0) if alibi.shape[0] > 1 else 0
    return dummy, dummy, 0, 0, 0, 0, 0


def _alloc_dq_dk_dv(c: KernelConfig, p: Problem, t: dict[str, torch.Tensor]) -> None:
    """The dq_dk_dv outputs on the device: ``dq_acc`` (upper-bound shape), ``dk_raw`` / ``dv_raw`` cleared (padded
    key rows stay 0), ``dbias_raw`` cleared (CK's host: dbias_buf.SetZero()), fp32 non-deterministic ``dq``."""
    dev = t["q"].device
    sdt = out_torch_dtype(p.dtype)
    nb, rows = workspace_rows(p)
    nsplits = dq_acc_splits(p.seqlen_k, c.algorithm.tile[1], p.deterministic)
    t["dq_acc"] = torch.zeros((nsplits, nb, p.nhead_q, rows, p.hdim_q), dtype=torch.float32, device=dev)
    t["dk_raw"] = torch.zeros(dk_raw_shape(p), dtype=sdt, device=dev)
    t["dv_raw"] = torch.zeros(dv_raw_shape(p), dtype=sdt, device=dev)
    if c.dbias:
        t["dbias_raw"] = torch.zeros(dbias_raw_shape(p), dtype=required(t, "bias", "dbias").dtype, device=dev)
    else:
        t.pop("dbias_raw", None)
    if not needs_convert(p):
        t["dq"] = torch.empty(q_shape(p), dtype=sdt, device=dev)


DESCRIPTOR_MAX_HDIM = 64
"""Head dims up to which the dq_dk_dv kernel reads Q/dO through TMA descriptors and adds dQ by the descriptor
reduce-add (by default).  Measured on an H100 (fp16, 32k tokens, seqlen 4k/16k): hdim 64, 64x64 tile
(benchmarks/results/bwd_variants_d64_h100.txt): both 306-363 TFLOPS, TMA loads alone 276-312, dQ add alone
279-327, plain loads and atomics 262-297; hdim 128, 64x128 tile (bwd_tune_h100.txt): both 278-314, TMA loads
alone 276-307, plain 334-384 -- that tile already holds 255 registers a thread and spills (ncu_bwd_ours_h100.txt)."""


def _bwd_descriptors(
    c: KernelConfig, p: Problem, t: dict[str, torch.Tensor], tma: bool | None, dq_tma_add: bool | None
) -> tuple[Any, Any, Any]:
    """(Q, dO, dq_acc[0]) tensor descriptors of the kernel's ``USE_TMA`` / ``DQ_TMA_ADD`` paths, None where unused.
    Defaults (None): TMA loads of Q/dO and the descriptor reduce-add of dQ up to :data:`DESCRIPTOR_MAX_HDIM`, where
    the kernel can address the tensors through descriptors -- batch mode, BHSD layouts, contiguous, head dims equal
    to their blocks, fp16/bf16 -- and, for dQ, non-deterministic kernels (the deterministic ones store each key
    block's own slice).  ``tma`` / ``dq_tma_add`` False turn a path off; True cannot turn it on where it does not
    fit.  Where Triton lacks the descriptors (no TensorDescriptor, no descriptor reduce), plain loads and atomics."""
    q, do, acc = t["q"], t["do"], t["dq_acc"]
    bdq, bdv = next_pow2(max(p.hdim_q, 16)), next_pow2(max(p.hdim_v, 16))
    fits = (
        max(p.hdim_q, p.hdim_v) <= DESCRIPTOR_MAX_HDIM
        and p.mode is Mode.BATCH
        and p.input_layout is Layout.BHSD
        and p.output_layout is Layout.BHSD
        and c.signature.dtype in (DType.FP16, DType.BF16)
        and p.hdim_q == bdq
        and p.hdim_v == bdv
        and p.seqlen_q > 0
        and q.is_contiguous()
        and do.is_contiguous()
    )
    loads, reduce = _descriptor_support()
    tma = fits and loads and (tma is None or tma)
    add = fits and reduce and not c.deterministic and (dq_tma_add is None or dq_tma_add)
    if not (tma or add):
        return None, None, None
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm0 = c.algorithm.tile[0]
    rows = p.seqlen_q
    q_desc = do_desc = dq_desc = None
    if tma:
        q_desc = TensorDescriptor.from_tensor(q.view(-1, rows, p.hdim_q), [1, bm0, bdq])
        do_desc = TensorDescriptor.from_tensor(do.view(-1, rows, p.hdim_v), [1, bm0, bdv])
    if add:
        dq_desc = TensorDescriptor.from_tensor(acc[0].view(-1, rows, p.hdim_q), [1, bm0, bdq])
    return q_desc, do_desc, dq_desc


def _descriptor_support() -> tuple[bool, bool]:
    """(descriptor loads, descriptor reduce-add) this Triton has: host tensor descriptors (Triton >= 3.3) and
    ``tensor_descriptor.atomic_add`` -- which Triton's interpreter (``TRITON_INTERPRET=1``) does not implement."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:  # pragma: no cover - Triton older than 3.3
        return False, False
    interpreted = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return True, hasattr(triton.language.tensor_descriptor, "atomic_add") and not interpreted


def dq_dk_dv_launcher(
    c: KernelConfig,
    p: Problem,
    t: dict[str, torch.Tensor],
    tma: bool | None = None,
    dq_tma_add: bool | None = None,
) -> Callable[[], None]:
    """Allocates the outputs (:func:`_alloc_dq_dk_dv`); the callable clears ``dq_acc`` and runs the kernel (and,
    for fp32 non-deterministic, copies ``dq_acc[0]`` into ``dq``).  ``tma`` / ``dq_tma_add`` override the
    descriptor paths' defaults (:func:`_bwd_descriptors`; benchmarks/bench_bwd.py --variants compares them).

    Long because it maps one config and problem to the one argument list of
    :func:`kernels_bwd.bwd_dq_dk_dv_kernel` (fifteen tensors, some fifty strides and scalars, sixteen constexpr
    meta-parameters) in the kernel's positional order, so it can be read against the kernel's signature."""
    s = c.signature
    _check_problem(p)
    q, k, v = t["q"], t["k"], t["v"]
    do = required(t, "do", "stage dq_dk_dv")
    lse, d = required(t, "lse", "stage dq_dk_dv"), perturb("triton.bwd.d", required(t, "d", "stage dq_dk_dv"))
    _alloc_dq_dk_dv(c, p, t)
    acc, dk, dv = t["dq_acc"], t["dk_raw"], t["dv_raw"]
    q_desc, do_desc, dq_desc = _bwd_descriptors(c, p, t, tma, dq_tma_add)
    dummy = dummy_tensor(q.device)
    dbias = t.get("dbias_raw", dummy)
    sdb = seq_strides(dbias, p.input_layout) if "dbias_raw" in t else (0, 0, 0)
    bias, alibi, sbb, sbh, sbm, sbn, salb = _bias_args(c, t, dummy)
    if alibi is not dummy:
        alibi = perturb("triton.alibi.slopes", alibi)
    group = p.mode is Mode.GROUP
    if group:
        seqstart_q, seqstart_k = perturb(
            "triton.group.seqstarts",
            (required(t, "seqstart_q", "group mode"), required(t, "seqstart_k", "group mode")),
            problem=p,
        )
        seqlens_k = required(t, "seqlen_k", "group mode")
    else:
        seqstart_q = seqstart_k = seqlens_k = dummy
    mask_kind, ml, mr, _, _, alibi_mode = perturb("triton.mask.window", mask_args(p))
    seed, off, p_undrop, rp_keep = dropout_args(p)
    block_m, block_n = c.algorithm.tile[0], c.algorithm.tile[1]
    grid = (triton.cdiv(p.seqlen_k, block_n), p.batch * p.nhead_q)
    lb, lh, lm = lse.stride()
    args = (
        q,
        k,
        v,
        do,
        lse,
        d,
        acc,
        dk,
        dv,
        bias,
        dbias,
        alibi,
        q_desc,
        do_desc,
        dq_desc,
        seqstart_q,
        seqstart_k,
        seqlens_k,
        *seq_strides(q, p.input_layout),
        *seq_strides(k, p.input_layout),
        *seq_strides(v, p.input_layout),
        *seq_strides(do, p.output_layout),
        lb,
        lh,
        lm,
        *acc.stride()[:4],
        *seq_strides(dk, p.input_layout),
        *seq_strides(dv, p.input_layout),
        sbb,
        sbh,
        sbm,
        sbn,
        *sdb,
        salb,
        p.seqlen_q,
        p.seqlen_k if group else perturb("triton.seqlen_k", p.seqlen_k, block_n=block_n),
        p.nhead_q,
        p.nhead_q // p.nhead_k,
        p.softmax_scale,
        mask_kind,
        ml,
        mr,
        alibi_mode,
        *philox_words(seed, off),
        p_undrop,
        rp_keep,
    )
    meta = dict(
        HDIM_Q=p.hdim_q,
        HDIM_V=p.hdim_v,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_DQ=next_pow2(max(p.hdim_q, 16)),
        BLOCK_DV=next_pow2(max(p.hdim_v, 16)),
        HAS_MASK=s.mask is not MaskImpl.NONE,
        BIAS_KIND=BIAS_KIND[s.bias],
        HAS_DBIAS=bool(c.dbias),
        HAS_DROPOUT=p.p_drop > 0,
        IS_GROUP=group,
        DETERMINISTIC=bool(c.deterministic),
        ELEM=ELEM[s.dtype],
        DOT_PREC="ieee" if s.dtype is DType.FP32 else "tf32",
        DROPOUT_ROUNDS=DROPOUT_ROUNDS,
        NUM_STAGES=bwd_stages(c, p),
        USE_TMA=q_desc is not None,
        DQ_TMA_ADD=dq_desc is not None,
    )
    fault = perturb("triton.kernel.fault", "", kernel="dq_dk_dv")
    if fault:  # an in-kernel fault's compile-time switch (kernels_bwd.py module doc); never set otherwise
        meta["FAULT"] = fault
    kern, warps = kernels_bwd.bwd_dq_dk_dv_kernel, _warps(c)
    dq = t.get("dq") if not needs_convert(p) else None
    nrows = p.total_q if group else p.seqlen_q

    def launch() -> None:
        acc.zero_()
        launch_fitting_stages(kern, grid, args, meta, warps)
        if dq is not None:  # fp32, non-deterministic: the accumulator is dQ
            src = acc[0, :, :, :nrows]
            dq.copy_(src if p.input_layout is Layout.BHSD else src.transpose(1, 2))

    return launch


#: the launcher factory of each backward stage's family (:func:`stage_launcher` looks it up here)
LAUNCHERS = {
    Family.BWD_DOT_DO_O: dot_do_o_launcher,
    Family.BWD_DQ_DK_DV: dq_dk_dv_launcher,
    Family.BWD_CONVERT_DQ: convert_dq_launcher,
}


def backward_device_tensors(inputs: Mapping[str, Any], context: RunContext | None = None) -> DeviceTensors:
    """The device tensors of a backward run over the NumPy ``inputs`` (:class:`~.device.DeviceTensors`: each input
    uploaded on first use, the stages' outputs :data:`BWD_OUTPUTS` never read from the inputs), for launching the
    stages by hand (:func:`stage_launcher`; tests and benchmarks): later stages read what earlier ones wrote.  Every
    input is uploaded here, so the launches copy nothing from the host."""
    return DeviceTensors(inputs, context or RunContext(), hidden=BWD_OUTPUTS).upload()


def stage_launcher(c: KernelConfig, p: Problem, t: dict[str, torch.Tensor], **variant: Any) -> Callable[[], None]:
    """The launch of one backward stage on the device tensors ``t`` (outputs allocated into ``t`` here; no read
    back to the host, here or in the callable).  ``variant``: the dq_dk_dv launcher's ``tma`` / ``dq_tma_add``
    overrides (benchmarks only)."""
    check_preconditions(c, p, FAMILY_ROLE[c.family])
    launcher = LAUNCHERS[c.family]
    return launcher(c, p, t, **variant) if variant and c.family is Family.BWD_DQ_DK_DV else launcher(c, p, t)


def warmup_inputs(c: KernelConfig, p: Problem) -> dict[str, np.ndarray]:
    """Fabricate what a backward stage reads from the stages before it, so one stage compiles alone
    (:func:`ckfmha.backends.triton.warmup.compile_config`): the forward's ``o`` / ``lse``, ``d`` and, for
    convert_dq, a one-slice ``dq_acc`` of the upper-bound rows (NumPy, as the runner gives them)."""
    from ckfmha.inputs import o_shape, storage_dtype

    out = {
        "o": np.zeros(o_shape(p), dtype=storage_dtype(p.dtype)),
        "lse": np.zeros(lse_shape(p), dtype=np.float32),
        "d": np.zeros(lse_shape(p), dtype=np.float32),
    }
    if c.family is Family.BWD_CONVERT_DQ:
        nb, rows = workspace_rows(p)
        out["dq_acc"] = np.zeros((1, nb, p.nhead_q, rows, p.hdim_q), dtype=np.float32)
    return out


__all__ = [
    "BWD_OUTPUTS",
    "LAUNCHERS",
    "backward_device_tensors",
    "stage_launcher",
    "warmup_inputs",
]
