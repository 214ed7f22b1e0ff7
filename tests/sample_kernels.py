"""The hand-made gfx9 forward kernel that unit tests of filters, sweeps and the registry start from (one place:
each test file names only what it changes)."""

from __future__ import annotations

from ckfmha.kernel import KernelConfig

#: a gfx9 fp16 batch forward kernel, d128, qr_async, CK's 128x128 tile
FWD_FIELDS = dict(
    family="fwd",
    dtype="fp16",
    mode="batch",
    hdim_q=128,
    hdim_v=128,
    arch_tag="gfx9",
    pipeline="qr_async",
    tile=(128, 128, 32, 128, 32, 128),
)
#: CK's warp layout and warp tiles of that tile (the sweep and registry tests' kernels carry them)
FWD_WARPS = dict(warps=((4, 1, 1), (4, 1, 1)), warp_tiles=((32, 32, 16), (32, 32, 16)))


def fwd_config(**changes) -> KernelConfig:
    """:data:`FWD_FIELDS` with ``changes`` applied."""
    return KernelConfig.make(**{**FWD_FIELDS, **changes})
