"""CK's integer limits, shared by the problem model and the masks (a leaf module: it imports nothing of ckfmha).

CK holds every size, count, stride and window size as ``ck_tile::index_t``, which is ``int32_t``
(include/ck_tile/core/numeric/integer.hpp), and the group-mode ``seqstart`` arrays as int32 (the
``fmha_fwd_args`` / ``fmha_bwd_args`` structs of example/ck_tile/01_fmha/fmha_fwd.hpp and fmha_bwd.hpp).
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

__all__ = ["INT32_MAX", "INT32_MIN"]
