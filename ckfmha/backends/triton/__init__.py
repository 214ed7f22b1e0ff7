"""The Triton backend: forward-family kernel configs as real GPU kernels (NVIDIA through Triton; AMD too).

Families: fwd (batch and group/varlen), fwd_splitkv + fwd_splitkv_combine, fwd_pagedkv.
KV cache: fwd_appendkv (then the dispatcher's attention stage), batch_prefill (kernels_kvcache.py, launch_kvcache.py).
Backward: bwd_dot_do_o -> bwd_dq_dk_dv -> bwd_convert_dq (batch and group mode).
Importing this package imports neither torch nor triton; :mod:`.backend` does that lazily.

Layers (each module imports only the ones below it; no import circle, no private name imported across modules)
-------------------------------------------------------------------------------------------------------------
=========================  ============================================================================================
module                     role (imports)
=========================  ============================================================================================
``backend.py``             TritonBackend: available / supports / build (checks only: the first launch of each
                           specialization compiles, reported as the stage's compile_seconds) / run_stage /
                           compile_ahead (capability; execute and warmup when it runs or compiles ahead)
``warmup.py``              compile a config on a synthetic problem (execute, launch_bwd.warmup_inputs)
``execute.py``             the stage module: the stage contract by role -> the launchers; outputs from the stage's
                           specs (device, launch, launch_bwd, launch_kvcache)
``launch.py``              forward launchers: attention (fwd, split-KV, paged-KV, batch prefill) and combine
                           (device, kernels, launch_kvcache.prefill_pools)
``launch_bwd.py``          backward launchers: dot_do_o, dq_dk_dv, convert_dq (device, kernels_bwd)
``launch_kvcache.py``      append-KV launcher and its host checks, batch-prefill pools (device, kernels_kvcache,
                           ckfmha.backends.common.kv / rope: the K/V addressing and RoPE tables the cpu backend
                           shares)
``device.py``              DEVICE, NumPy <-> torch, device inputs kept per run (RunContext), poisoned buffers,
                           sync / timing, stride and mask helpers, check_preconditions (capability)
``kernels*.py``            the ``@triton.jit`` kernels (kernels_bwd reuses kernels' Philox and mask window); import
                           nothing of the launchers
``capability.py``          torch-free: the families, dtypes and limits the backend realizes, interpreting(),
                           unhonoured_lengths(), unaddressed_problem()
=========================  ============================================================================================

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
                           bf16 in registers (exact), P in bf16, output bf16/fp32; fp8 (fp8 O; fwd, split-KV +
                           combine, paged-KV): e4m3 widened to fp16 (exact), P in fp16, O descaled in float32 then
                           stored as ``float8_e4m3fn`` by the kernel (Triton's cast: round to nearest even, as NumPy
                           rounds the reference); AMD's fnuz e4m3 (no NVIDIA type): inputs widened to bf16 by the
                           host, O stored float32 and rounded to ``float8_e4m3fnuz`` on the host with ml_dtypes
                           after the timed launch
                           (the stage's output spec gives the encoding: device.poisoned_output / spec_output; for
                           hand launches device.out_torch_dtype / stored_output; an fp8 O buffer for fnuz inputs is
                           refused: device.check_fp8_output)
vlayout col                fwd: served by the row-major kernel -- ckfmha's inputs hold V in its logical (b, h, s, d) /
                           (b, s, h, d) form whatever the layout (ckfmha/inputs.py), so the result is the col
                           kernel's; CK's column-major memory layout and its access pattern are not reproduced (no
                           timing of a col kernel means anything here); other families: refused
mask                       none: no mask code; any/causal/generic: CK's (y, x) window per row, masked blocks only at
                           the diagonal edges (full blocks run unmasked); up to 32 key blocks the trailing masked
                           blocks run inside the pipelined loop behind a uniform branch (launch.FUSE_TAIL_MAX_KEY_BLOCKS)
launch variants            the plan stage's ``launch.variant`` (``qk_ahead`` / ``lpt_heads``), its one source the
                           dispatcher's table (data/heuristics.yaml ``launch_variants``: first matching rule; measured
                           with benchmarks/tune_fwd.py --only hopper; docs/hopper_forward.md): ``qk_ahead`` -- the
                           unmasked key loop issues Q.K one block ahead of the softmax (FlashAttention-3's
                           intra-warpgroup overlap; plain problems only: no paging, bias, soft-cap, dropout or
                           per-block scales); ``lpt_heads`` -- a one-dimensional grid, longest query blocks first
                           within groups of that many heads (batch mode, no packed GQA rows); today: masked hdim-256
                           fwd kernels take both
bias                       elementwise (CK broadcast shapes through zero strides) or ALiBi (CK slopes, the mask decides
                           vertical / top-left / bottom-right positions)
lse, logits_soft_cap, sink  LSE output, ``cap * tanh(s / cap)``, sink logit seeding the running max/sum
dropout                    ckfmha's Philox4x32-7 mapping (ckfmha/rng.py), bit-exact with the reference
qscale                     none / pertensor (scalar descales) / blockscale (per 128 rows of Q, K, V) / kv_blockscale
                           (batch prefill: scalar Q descale, K/V descales per (page, kv-head) read per key)
paged_kv                   vLLM 2-D block table gather of K/V pages
fwd_appendkv tile          bs / bsk = rows per program (at most 64) of the q rotation / the knew+vnew store
                           (``append_rows_kernel``); contiguous cache (``cache_batch_idx`` row) or paged (vLLM table),
                           every row / page checked on the host first; the stage returns the rotated q and the
                           updated caches as new arrays; the attention stage after it computes the post-append
                           ``cache_seqlens + seqlen_knew`` on the device
rope                       interleaved / half_rotated on q and knew in float32, ``rotary_dim <= hdim`` (rest copied);
                           q's table row ``cache + i`` with a mask, ``cache`` without (CK's appendkv kernel)
batch_prefill              the forward kernel in group mode over the pools, by the config's traits:
kv_lookup_table            vllm: ``block_table[b]``; sglang: ``kv_page_indices[kv_indptr[b]:]`` and the key count
                           ``(pages - 1) * page_size + kv_last_page_lens[b]`` derived in the kernel (as CK)
kv_memory_layout           linear ``(pages, page, hk, d)``; vectorized K ``(pages, hk, d/vec, page, vec)``, V
                           ``(pages, hk, page/vec, d, vec)`` (the kernel's KV_VEC address mode: keys and head-dim
                           runs addressed by the vector length with contiguity hints, vec-element loads; the host
                           checks the packed strides); page_size any >= 1
bwd_dot_do_o (tile bm0)    ``D = rowsum(dO * O)`` over BLOCK_M = bm0 rows (kernels_bwd.py; host side launch_bwd.py)
bwd_dq_dk_dv tile          bm0 = query block, bn0 = key block: one program per key block and q-head (K/V and dK/dV
                           held, query blocks looped over: FlashAttention-2's dK/dV loop); only the query blocks a
                           mask window lets see the keys are visited, and those whose rows all see the whole key
                           block run an unmasked loop (masked loops before and after); seqlens padded always (masked
                           loads, as CK's backward traits); ``num_stages`` pipelines the query loop (else 1); up to
                           hdim 64 (launch_bwd.DESCRIPTOR_MAX_HDIM, measured) Q/dO through TMA descriptors and dQ by
                           the descriptor reduce-add (batch mode, bhsd, fp16/bf16, non-deterministic for the dQ add)
bwd mask/bias/dropout      the forward's (y, x) window per row, CK's broadcast bias, ALiBi positions and Philox keep
                           mask (the forward's ``philox_randval``); dbias: dS stored per q-head and batch
bwd GQA                    dK/dV per q-head (CK's raw layout); the group sum is the runner's host step
deterministic              false: dQ by ``atomic_add`` into fp32 ``dq_acc[0]``; true: no atomics, each key block
                           stores its own ``dq_acc`` slice, bwd_convert_dq sums the slices in order (bitwise
                           reproducible); ``dq_acc`` sized from the problem's upper bounds, no host sync
bwd_convert_dq (tile bm0)  ``dQ = sum_i dq_acc[i]`` cast to the input type, BLOCK_M = bm0 rows
=========================  ============================================================================================

``skip_min_seqlen_q`` kernels return before a group-mode sequence with seqlen_q <= min_seqlen_q (its rows keep the
poison). ``supports(config)`` returns the reason for anything else (col-major V outside fwd, fp8 O outside the
forward-attention families, mx qscale, kv_blockscale outside batch prefill, non-power-of-two tiles, other
families).
"""

from __future__ import annotations


def make_backend():
    from ckfmha.backends.triton.backend import TritonBackend

    return TritonBackend()
