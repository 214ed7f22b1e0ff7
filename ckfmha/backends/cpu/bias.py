"""ALiBi of the cpu backend, as CK's kernels compute it (not shared with :mod:`ckfmha.reference`).

CK's ``Alibi`` (include/ck_tile/ops/fmha/block/block_position_encoding.hpp), built by the kernels with
``make_alibi_from_lr_mask(slope, window_size_left, window_size_right, seqlen_q, seqlen_k, mask_type)`` when the
kernel has a mask and as ``Alibi{slope, seqlen_q, seqlen_k, FROM_BOTTOM_RIGHT}`` without one
(fmha_fwd_kernel.hpp, fmha_batch_prefill_kernel.hpp, fmha_bwd_kernel.hpp):

* mode (:func:`alibi_mode`): a causal window (``left < 0 and right == 0``) is ``VERTICAL``; any other window
  takes the mask's origin (``static_cast<AlibiMode>(mask_type)``: top-left 1, bottom-right 2); no mask is
  ``FROM_BOTTOM_RIGHT``.  A ``g:y,x`` mask (mask_type 3) has no AlibiMode: an error here (the problem model
  rejects ALiBi with it too);
* constructor: ``slope`` kept for ``VERTICAL``, negated otherwise; ``shift_left_up = max(sq - sk, 0)`` and
  ``shift_right_down = max(sk - sq, 0)`` for ``FROM_BOTTOM_RIGHT``, 0 for the other modes;
* ``update(pixel, row, col)`` (row-major form): ``zero = shift_right_down`` (``VERTICAL``) or
  ``row + shift_right_down``; ``pixel += slope * float(|zero - (col + shift_left_up)|)``.  The backward's
  column-major form gives the same values (the comment of ``Alibi`` says so; both reduce to ``col`` vertically and
  ``|row + sk - sq - col|`` / ``|row - col|`` otherwise).

The term is added in float32 (the kernels' ``SaccDataType``) after the scale and soft-cap, before the mask.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ckfmha.backends.cpu.errors import KernelInputError
from ckfmha.masking import MaskKind, MaskSpec

F32 = np.float32


class AlibiMode(enum.Enum):
    """CK's AlibiMode (block_position_encoding.hpp)."""

    VERTICAL = 0
    FROM_TOP_LEFT = 1
    FROM_BOTTOM_RIGHT = 2


def alibi_mode(mask: MaskSpec) -> AlibiMode:
    """The AlibiMode a kernel builds for ``mask`` (``make_alibi_from_lr_mask``; no mask: FROM_BOTTOM_RIGHT)."""
    if mask.kind is MaskKind.NONE:
        return AlibiMode.FROM_BOTTOM_RIGHT
    if mask.kind is MaskKind.GENERIC:
        raise KernelInputError(
            f"mask: {mask.to_ck()} with ALiBi: CK's make_alibi_from_lr_mask casts mask_type 3 "
            "to an AlibiMode that has no meaning (block_position_encoding.hpp); not emulated"
        )
    left, right, top_left = mask.kernel_window()
    if left < 0 and right == 0:
        return AlibiMode.VERTICAL
    return AlibiMode.FROM_TOP_LEFT if top_left else AlibiMode.FROM_BOTTOM_RIGHT


@dataclass(frozen=True)
class Alibi:
    """CK's ``Alibi`` for one sequence and every q-head: ``slopes`` (hq,) float32, ``seqlen_q`` x ``seqlen_k``."""

    slopes: np.ndarray
    mode: AlibiMode
    seqlen_q: int
    seqlen_k: int

    @property
    def signed_slopes(self) -> np.ndarray:
        s = np.asarray(self.slopes, dtype=F32)
        return s if self.mode is AlibiMode.VERTICAL else -s

    @property
    def shifts(self) -> tuple[int, int]:
        """``(shift_left_up, shift_right_down)`` of the row-major form."""
        if self.mode is not AlibiMode.FROM_BOTTOM_RIGHT:
            return 0, 0
        return max(self.seqlen_q - self.seqlen_k, 0), max(self.seqlen_k - self.seqlen_q, 0)

    def tile(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The (hq, len(rows), len(cols)) float32 term of the score tile at sequence rows ``rows`` and key
        columns ``cols`` (``update`` of every pixel)."""
        left_up, right_down = self.shifts
        r = np.asarray(rows, dtype=np.int64)[:, None]
        c = np.asarray(cols, dtype=np.int64)[None, :]
        zero = np.full_like(r, right_down) if self.mode is AlibiMode.VERTICAL else r + right_down
        position = np.abs(zero - (c + left_up)).astype(F32)
        return self.signed_slopes[:, None, None] * position[None]
