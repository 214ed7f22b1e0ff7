"""The Triton backend: forward-family kernel configs as real GPU kernels (NVIDIA through Triton; AMD too).

Families: fwd (batch and group/varlen), fwd_splitkv + fwd_splitkv_combine, fwd_pagedkv.
Importing this package imports neither torch nor triton; :mod:`.backend` does that lazily.

How a KernelConfig decides the kernel
-------------------------------------
=========================  ============================================================================================
config field               Triton kernel
=========================  ============================================================================================
tile bm0 / bn0             BLOCK_M / BLOCK_N (must be powers of two, >= 16)
hdim_q / hdim_v            BLOCK_DQ / BLOCK_DV = next power of two; loads and stores masked past the head dim
pad_d / pad_dv             a problem head dim smaller than the kernel's needs the pad (host precondition)
pad_s / pad_sk             0: the kernel assumes full query/key blocks (EVEN_M / EVEN_N, no bounds masks) and the
                           host rejects unaligned lengths like CK's host check; 1: bounds-masked loads
warps (stage 0)            num_warps = m*n*k of the first GEMM stage's warps per block
pipeline / num_stages      software-pipelining depth of the key loop: ``num_stages`` when set, else qr -> 1,
                           qr_async/qr_nwarp_sshuffle/qr_pagedkv/triton -> 2, qr_async_trload(_v3) -> 3; fewer stages
                           when two K/V stages exceed the 227 KiB of shared memory, or when the compiled kernel does
                           not fit (Triton's OutOfResources: one stage fewer, remembered; launch_fitting_stages)
pipeline (load strategy)   triton and qr_async_trload(_v3): K/V tiles through bulk tensor (TMA) descriptors where the
                           problem allows (batch mode, bhsd, contiguous, power-of-two head dims, fp16/bf16; under a mask
                           only the unmasked middle blocks); otherwise, and for the other pipelines, masked pointer loads
GQA decode                 q-heads of a group packed into one query block when seqlen_q * 2 <= bm0 (K/V read once per
                           kv-head); not with bias, ALiBi or dropout
dtype                      fp16/bf16 dots in that type; fp32 dots in IEEE fp32; fp8bf16/fp8fp32: e4m3 inputs widened to
                           bf16 in registers (exact), P in bf16, output bf16/fp32
mask                       none: no mask code; any/causal/generic: CK's (y, x) window per row, masked blocks only at
                           the diagonal edges (full blocks run unmasked); up to 32 key blocks the trailing masked
                           blocks run inside the pipelined loop behind a uniform branch (launch.FUSE_TAIL_MAX_KEY_BLOCKS)
bias                       elementwise (CK broadcast shapes through zero strides) or ALiBi (CK slopes, the mask decides
                           vertical / top-left / bottom-right positions)
lse, logits_soft_cap, sink  LSE output, ``cap * tanh(s / cap)``, sink logit seeding the running max/sum
dropout                    ckfmha's Philox4x32-7 mapping (ckfmha/rng.py), bit-exact with the reference
qscale                     none / pertensor (scalar descales) / blockscale (per 128 rows of Q, K, V)
paged_kv                   vLLM 2-D block table gather of K/V pages
=========================  ============================================================================================

``skip_min_seqlen_q`` kernels return before a group-mode sequence with seqlen_q <= min_seqlen_q (its rows keep the
poison). ``supports(config)`` returns the reason for anything else (col-major V, mx/kv_blockscale,
non-power-of-two tiles, other families).
"""

from __future__ import annotations


def make_backend():
    from ckfmha.backends.triton.backend import TritonBackend

    return TritonBackend()
