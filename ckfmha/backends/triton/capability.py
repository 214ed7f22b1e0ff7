"""What the Triton backend realizes, torch-free: the bottom of the package (imports neither torch nor triton at
import time; :func:`interpreting` imports triton when called).

========================  ==========================================================================================
name                      what it is
========================  ==========================================================================================
``FAMILIES`` ...          the kernel families the backend realizes (forward, backward, KV-cache), the dtypes, the
                          families with fp8 O and with column-major V
``RANDVAL_MAX_ELEMENTS``  the forward stores dropout's random values for checking up to this many elements
``SMEM_BYTES``            Hopper's shared memory per block (the launchers' pipelining-depth estimates)
:func:`interpreting`      whether Triton interprets the kernels (``TRITON_INTERPRET=1``: torch CPU tensors)
:func:`unhonoured_lengths`  the problem lengths the forward kernel would not honour (a PreconditionError's words)
:func:`unaddressed_problem`  a problem no Triton kernel addresses, whatever kernel is chosen (the backend declines it)
:func:`is_pow2`,          power-of-two predicates of tiles and blocks
:func:`next_pow2`
========================  ==========================================================================================
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckfmha.kernel import DType, Family, Mode

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem

SMEM_BYTES = 227 * 1024  # Hopper: 227 KiB of shared memory per block
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
    batch runs ``seqlen_q`` query rows (no per-batch query length: ``q_eff_lens`` refused); the per-batch key
    counts come from a ``cache_seqlens`` tensor (paged caches and append-KV) or, for ``kv_eff_lens`` without one,
    from the launcher's device copy of them (CK's ``seqlen_k_ptr``).  Group mode: a sequence's query
    length is ``seqstart_q[b + 1] - seqstart_q[b]``, the padded length (``s_qpad`` other than ``seqlens_q``
    refused; ``s_kpad`` is honoured: the keys come from ``seqlen_k``).  Torch-free: device.check_preconditions
    raises it as a PreconditionError."""
    if family not in FORWARD_ATTENTION_FAMILIES:
        return None
    if p.q_eff_lens is not None:
        return (
            f"q_eff_lens: {p.q_eff_lens}: the triton forward runs seqlen_q={p.seqlen_q} query rows in every batch "
            "(its batch mode reads no per-batch query length)"
        )
    if p.mode is Mode.GROUP and tuple(p.qpad_list) != tuple(p.seqlens_q_list):
        return (
            f"s_qpad: {p.s_qpad}: the triton forward takes a sequence's query length from seqstart_q (the padded "
            f"lengths {p.s_qpad}, not seqlens_q {p.seqlens_q})"
        )
    return None


def unaddressed_problem(p: "Problem") -> str | None:
    """Why no Triton kernel can run ``p``, whatever kernel the dispatcher picks, in words naming the field, its
    value and the rule; None when some kernel can.  Group mode with padded query rows (``s_qpad`` other than
    ``seqlens_q``) in the forward and backward families: their kernels take a sequence's query length from
    ``seqstart_q`` (the padded length), so the padding rows would be computed as queries (launch_bwd's and
    :func:`unhonoured_lengths`' refusals, decided before a launch); the forward families' per-batch lengths as
    :func:`unhonoured_lengths` words them.  The backend's :meth:`declines` (a skip naming this reason)."""
    if p.family not in FORWARD_ATTENTION_FAMILIES and p.family is not Family.BWD_DQ_DK_DV:
        return None
    if p.mode is Mode.GROUP and tuple(p.qpad_list) != tuple(p.seqlens_q_list):
        return (
            f"s_qpad: {p.s_qpad}: the triton kernels take a sequence's query length from seqstart_q (the padded "
            f"lengths), not seqlens_q {p.seqlens_q} (rule: no query padding in group mode)"
        )
    return unhonoured_lengths(p.family, p) if p.family in FORWARD_ATTENTION_FAMILIES else None


def is_pow2(n: int) -> bool:
    """Whether ``n`` is a power of two (>= 1)."""
    return n >= 1 and n & (n - 1) == 0


def next_pow2(n: int) -> int:
    """The least power of two >= ``n`` (1 for ``n <= 1``)."""
    return 1 << max(0, (n - 1).bit_length())
