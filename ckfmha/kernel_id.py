"""The canonical kernel id: one string per KernelConfig, complete and parseable.

Layout (``.``-separated)::

    {family}.{dtype}.{mode}.d{hdim_q}x{hdim_v}.{pipeline}.b{tile}.r{warps}.w{warp_tiles}.p{pads}.o{occupancy}.{arch_tag}[.flag ...]

* ``b``: tile entries joined by ``x``; ``r``/``w``: one ``MxNxK`` triple per GEMM stage, stages joined by ``-``
  (empty when the family has none); ``p``: the four pads (s, sk, d, dv) as digits 0/1/8.
* Flags follow in a fixed order and only when they differ from the default: boolean fields as their bare
  short name (``lse``), other fields as ``name=value`` (``mask=causal``). Defaults are omitted, so two
  configs that differ in any field always differ in their ids.

Example: ``fwd.fp16.batch.d128x128.qr_async.b128x128x32x128x32x128.r4x1x1-4x1x1.w32x32x16-32x32x16.p1011.o-1.gfx9.mask=any.lse``

The functions live in :mod:`ckfmha.kernel`, beside the :class:`~ckfmha.kernel.KernelConfig` whose
``kernel_id`` / ``from_id`` use them (so the dependency runs one way: this module imports the kernel model,
never the reverse); this module is their documented import path.
"""

from __future__ import annotations

from ckfmha.kernel import KernelIdError, parse_kernel_id, render_kernel_id

__all__ = ["KernelIdError", "parse_kernel_id", "render_kernel_id"]
