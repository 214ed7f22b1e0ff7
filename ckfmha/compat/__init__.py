"""Front ends that let a CK *client's* own test suite run through ckfmha.

| module | what |
|---|---|
| :mod:`ckfmha.compat.fa_rules` | FlashAttention's CK-build host rules (``csrc/flash_attn_ck/*.cpp``) as pure functions: window sizes to CK's mask, the ``num_splits`` heuristic, the dropout counter offset, the decode q/head swap; no torch |
| :mod:`ckfmha.compat.calllog` | the per-process log of compat calls: which ckfmha kernels (ids, CK instance names) each stage of each call ran; written as JSON for ``ckfmha coverage`` |
| :mod:`ckfmha.compat.flash_attn` | a ``flash_attn_2_cuda``-compatible module (``fwd``, ``varlen_fwd``, ``bwd``, ``varlen_bwd``, ``fwd_kvcache``) on torch tensors; ``install()`` registers it under that name (opt-in) |

Nothing here is imported by the rest of ckfmha; torch is imported only by :mod:`ckfmha.compat.flash_attn`, and only
when one of its entry points runs (docs/flash_attn.md).
"""
