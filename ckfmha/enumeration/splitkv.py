"""Enumerator for the ``fwd_splitkv`` api: split-KV forward kernels and their combine kernels.

Reproduces ``generate.py -d fwd_splitkv`` (CK ``codegen/ops/fmha_fwd_splitkv.py``): the combine kernels
(family ``fwd_splitkv_combine``) are listed first, then the split-KV main kernels (family ``fwd_splitkv``).

Data section (``apis.fwd_splitkv`` of an arch file, or ``data/archs/_parts/<arch>/fwd_splitkv.yaml``) -- the
schema shared with pagedkv/appendkv, documented in :mod:`ckfmha.enumeration._fwdlike`, with two family
blocks::

    fwd_splitkv_combine:
      arch_tag: gfx9
      modes: [batch, group]
      constraints: ["c.mode == 'batch' or c.pad_s == 1"]        # group mode: padded seqlen_q only
      pipeline_sets:
        half:                                                   # fp16/bf16: s/dv pads x lse
          - {pipeline: splitkv_combine, set: {fp8_static_quant: false},
             product: {lse: [true, false]}, pads: [psdv, ps, pdv, npad]}
      dtypes:
        fp16: {pipelines: half, tiles: {32: {block: [32]}, 64: {block: [32]}, ...}}
    fwd_splitkv:
      arch_tag: gfx9
      modes: [batch, group]
      constraints:
        - "c.mode == 'batch' or (c.pad_s == 1 and c.pad_sk == 1)"  # group mode: padded seqlens only
        - "not c.logits_soft_cap or c.bias == 'none'"              # soft-cap only without bias
      pipeline_sets:
        half:
          - pipeline: qr
            set: {vlayout: row, lse: true, fp8_static_quant: false}
            product: {logits_soft_cap: [true, false], mask: masks, bias: [none, elementwise, alibi],
                      paged_kv: [true, false], sink: [true, false]}
            pads: [psk, ps, pssk, psskddv]
      dtypes:
        fp16:
          pipelines: half
          tiles:
            128: {block: [64, 128, 32, 128, 32, 128], warps: [[4, 1, 1], [4, 1, 1]],
                  warp_tiles: [[16, 16, 16], [16, 16, 16]]}

Upstream behaviours reproduced (golden README section 6): ``bf8`` is never generated (the generator iterates
``FWD_DTYPE_MAP``, which has no ``bf8`` key, so bf8 rows of CK's tables are simply absent from our data);
receipt 4's test ``dtype in ["fp16, bf16"]`` keeps no main kernel (see ``data/receipt_rules/fwd_splitkv.yaml``).
Combine tables come from CK's shared base factory, so an arch whose main table lacks fp8 (gfx11) still gets
fp8 combine kernels.
"""

from __future__ import annotations

from ckfmha.enumeration._fwdlike import enumerate_api_blocks, enumerate_api_names
from ckfmha.enumeration._pairs import Pair, configs
from ckfmha.kernel import Family, KernelConfig

FAMILIES = (Family.FWD_SPLITKV_COMBINE, Family.FWD_SPLITKV)


def enumerate_pairs(ctx) -> list[Pair]:
    return enumerate_api_blocks(ctx, FAMILIES)


def enumerate_api(ctx) -> list[KernelConfig]:
    return configs(enumerate_pairs(ctx))


def enumerate_names(ctx) -> list[str]:
    return enumerate_api_names(ctx, FAMILIES)
