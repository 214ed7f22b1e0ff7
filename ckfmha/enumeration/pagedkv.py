"""Enumerator for the ``pagedkv_prefill`` api (family ``fwd_pagedkv``).

Reproduces ``generate.py -d pagedkv_prefill`` (CK ``codegen/ops/fmha_pagedkv_prefill.py``).

Data section (``apis.pagedkv_prefill``, or ``data/archs/_parts/<arch>/pagedkv_prefill.yaml``) -- the schema
shared with splitkv/appendkv, documented in :mod:`ckfmha.enumeration._fwdlike`, with one family block::

    fwd_pagedkv:
      arch_tag: gfx9
      modes: [batch, group]
      constraints:
        - "c.mode == 'batch' or (c.pad_s == 1 and c.pad_sk == 1)"  # group mode: padded seqlens only
        - "c.hdim_q != 192 or c.tile[3] != 128 or (c.bias == 'none' and not c.lse)"  # deepseek d192/dv128
        - "not c.logits_soft_cap or c.bias == 'none'"              # soft-cap only without bias
      pipeline_sets:
        half:
          - pipeline: qr_pagedkv
            set: {vlayout: row, lse: false, paged_kv: true, skip_min_seqlen_q: false, fp8_static_quant: false}
            product: {logits_soft_cap: [true, false], mask: masks, bias: [none, elementwise, alibi],
                      sink: [true, false]}
            pads: [ps, pssk]
      dtypes:
        fp16:
          pipelines: half
          tiles:
            128: {block: [128, 128, 32, 128, 32, 128], warps: [[4, 1, 1], [4, 1, 1]],
                  warp_tiles: [[32, 32, 16], [32, 32, 16]]}

``bf8`` is never generated (CK's ``FWD_DTYPE_MAP`` has no ``bf8`` key; golden README section 6).
"""

from __future__ import annotations

from ckfmha.enumeration._fwdlike import enumerate_api_blocks
from ckfmha.enumeration._pairs import Pair, configs
from ckfmha.kernel import Family, KernelConfig

FAMILIES = (Family.FWD_PAGEDKV,)


def enumerate_pairs(ctx) -> list[Pair]:
    return enumerate_api_blocks(ctx, FAMILIES)


def enumerate_api(ctx) -> list[KernelConfig]:
    return configs(enumerate_pairs(ctx))
