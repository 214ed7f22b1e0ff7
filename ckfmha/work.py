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
"""

from __future__ import annotations

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
