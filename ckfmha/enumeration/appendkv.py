"""Enumerator for the ``fwd_appendkv`` api (family ``fwd_appendkv``): append new K/V (optionally with RoPE)
to a (paged) KV cache.

Reproduces ``generate.py -d fwd_appendkv`` (CK ``codegen/ops/fmha_fwd_appendkv.py``). These kernels have no
mode and no mask: the mask mode does not change the list, and every kernel is recorded as batch mode.

Data section (``apis.fwd_appendkv``, or ``data/archs/_parts/<arch>/fwd_appendkv.yaml``) -- the schema shared
with splitkv/pagedkv, documented in :mod:`ckfmha.enumeration._fwdlike`, with one family block whose tiles
have 4 entries (bs, bsk, bd, bdv) and no warp layout::

    fwd_appendkv:
      arch_tag: gfx9
      modes: [batch]
      pipeline_sets:
        half:                             # one entry per RoPE kind: its pad variants differ
          - {pipeline: appendkv, set: {vlayout: row, rope: none}, product: {paged_kv: [true, false]},
             pads: [psk, psskddv]}
          - {pipeline: appendkv, set: {vlayout: row, rope: interleaved}, product: {paged_kv: [true, false]},
             pads: [pskd, psskddv]}
      dtypes:
        fp16: {pipelines: half, tiles: {32: {block: [64, 64, 32, 32]}, 64: {block: [64, 64, 64, 64]}}}

``bf8`` is never generated (CK's ``FWD_DTYPE_MAP`` has no ``bf8`` key; golden README section 6).
"""

from __future__ import annotations

from ckfmha.enumeration._fwdlike import enumerate_api_blocks
from ckfmha.enumeration._pairs import Pair, configs
from ckfmha.kernel import Family, KernelConfig

FAMILIES = (Family.FWD_APPENDKV,)


def enumerate_pairs(ctx) -> list[Pair]:
    return enumerate_api_blocks(ctx, FAMILIES)


def enumerate_api(ctx) -> list[KernelConfig]:
    return configs(enumerate_pairs(ctx))
