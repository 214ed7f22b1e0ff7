"""Work (FLOPs) and traffic (bytes) of a problem, exactly as CK's tile_example binaries count them.

Forward (``fwd``, split-KV, paged-KV, append-KV, batch prefill), summed over the sequences ``b``::

    flops = sum_b nhead_q * (2 * A_b * hdim_q + 2 * A_b * hdim_v)
    bytes = sum_b [nhead_q * (|Q| * sq_b * hdim_q + |O| * sq_b * hdim_v)
                   + nhead_k * (|K| * sk_b * hdim_q + |V| * sk_b * hdim_v)]

with ``A_b`` the exact unmasked area of the mask for ``(sq_b, sk_b)`` (``sq_b * sk_b`` without a mask; causal and
sliding windows counted row by row, as CK's ``mask_info::get_unmaskarea``).  Bias, LSE and random values are not
counted.  Backward (no mask discount; K/V counted with nhead_q, as CK does)::

    flops = sum_b nhead_q * (3 * 2 * sq_b * sk_b * hdim_q + 2 * 2 * sq_b * sk_b * hdim_v)
    bytes = sum_b nhead_q * (|Q| sq dq + |K| sk dq + |V| sk dv + |O| sq dv + |dO| sq dv
                             + |dQ| sq dq + |dK| sk dq + |dV| sk dv + 4 * sq)

``TFLOPS = flops / 1e9 / ms`` and ``GB/s = bytes / 1e6 / ms``.  All counts are Python ints (no overflow).

:func:`host_bytes` is ckfmha's own estimate (not CK's) of the memory a harness item of the problem holds at its
peak, for admitting items to a run's workers (``--ckfmha-memory-budget``)::

    host_bytes = 8 * (elements of the inputs) + 32 * (elements of the outputs)

inputs: Q, K, V (+ O and dO for the backward; an elementwise bias); outputs: O (+ dQ, and dK / dV per query head
for the backward): each input in its storage type and once more as a device-bound copy, each output as the
kernel's result, the float64 reference and the validator's float64 temporaries.
"""

from __future__ import annotations

from ckfmha.kernel import Bias
from ckfmha.problem import Problem, output_itemsize, storage_itemsize


def flops(problem: Problem) -> int:
    p = problem
    total = 0
    if p.is_backward:
        for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list):
            total += p.nhead_q * (3 * 2 * sq * sk * p.hdim_q + 2 * 2 * sq * sk * p.hdim_v)
        return total
    for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list):
        area = p.mask.unmasked_area(sq, sk)
        total += p.nhead_q * (2 * area * p.hdim_q + 2 * area * p.hdim_v)
    return total


def bytes_moved(problem: Problem) -> int:
    p = problem
    e_in = storage_itemsize(p.dtype)
    e_out = output_itemsize(p.dtype)
    total = 0
    for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list):
        if p.is_backward:
            per_head = (
                e_in * (sq * p.hdim_q + sk * p.hdim_q + sk * p.hdim_v)  # Q K V
                + e_in * (sq * p.hdim_v + sq * p.hdim_v)  # O dO
                + e_in * (sq * p.hdim_q + sk * p.hdim_q + sk * p.hdim_v)  # dQ dK dV
                + 4 * sq
            )  # LSE
            total += p.nhead_q * per_head
        else:
            total += p.nhead_q * (e_in * sq * p.hdim_q + e_out * sq * p.hdim_v)
            total += p.nhead_k * (e_in * sk * p.hdim_q + e_in * sk * p.hdim_v)
    return total


def host_bytes(problem: Problem) -> int:
    """The estimate of the module doc: bytes an item of ``problem`` holds at its peak."""
    p = problem
    inputs = outputs = 0
    for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list):
        inputs += p.nhead_q * sq * p.hdim_q + p.nhead_k * sk * (p.hdim_q + p.hdim_v)
        outputs += p.nhead_q * sq * p.hdim_v
        if p.is_backward:
            inputs += 2 * p.nhead_q * sq * p.hdim_v  # O, dO
            outputs += p.nhead_q * (sq * p.hdim_q + sk * (p.hdim_q + p.hdim_v))  # dQ, raw dK / dV per query head
        if p.bias is Bias.ELEMENTWISE:
            inputs += (p.nhead_q if p.bias_rank else 1) * sq * sk
    return 8 * inputs + 32 * outputs


def tflops(problem: Problem, ms: float) -> float:
    """TFLOPS for a time in milliseconds (CK: flop / 1e9 / ms)."""
    if ms <= 0:
        raise ValueError(f"ms: {ms!r} must be > 0")
    return flops(problem) / 1e9 / ms


def gbps(problem: Problem, ms: float) -> float:
    """GB/s for a time in milliseconds (CK: bytes / 1e6 / ms)."""
    if ms <= 0:
        raise ValueError(f"ms: {ms!r} must be > 0")
    return bytes_moved(problem) / 1e6 / ms
