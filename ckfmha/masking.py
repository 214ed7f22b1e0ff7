"""Attention masks: the spec, CK's ``-mask`` syntax, and CK's exact window semantics.

CK describes every mask by two generic coordinates ``(y, x)`` on the (seqlen_q x seqlen_k) score matrix, origin
top-left (block_masking.hpp).  Query row ``i`` may attend to key columns ``j`` with::

    max(0, i + 1 - y) <= j < min(i + x, seqlen_k)

FlashAttention-style windows ``(left, right)`` convert to ``(y, x)`` per origin
(``make_generic_attention_mask_coordinates_from_lr_window``); a negative size means "unbounded on that side":

* top-left origin:     ``left < 0 -> seqlen_q - 1``, ``right < 0 -> seqlen_k - 1``; ``y = 1 + left``,
  ``x = 1 + right``.
* bottom-right origin: ``left < 0 -> seqlen_k - 1``, ``right < 0 -> seqlen_q - 1``;
  ``y = 1 + left + (seqlen_q - seqlen_k)``, ``x = 1 + right + (seqlen_k - seqlen_q)`` -- i.e. the last query
  row is aligned with the last key.

So causal top-left is ``(left, right) = (-1, 0)`` (key ``j <= i``) and causal bottom-right is ``(-1, 0)`` from
the bottom-right corner (``j <= i + seqlen_k - seqlen_q``).  A row whose range is empty is *fully masked*.

``-mask`` strings (both tile_example binaries): ``0`` none; ``1``/``t`` causal top-left; ``2``/``b`` causal
bottom-right; ``t:l,r`` / ``b:l,r`` windows (``t:l,r,sink`` / ``b:l,r,sink``: a third number, the sink-token
count of newer CK, is accepted only as 0 -- ckfmha does not model sink tokens); ``xt:w`` / ``xb:w`` xformers
windows (``w <= 0`` causal, else ``left = w // 2``, ``right = w - 1 - left``); ``g:y,x`` the generic mask (below).

The generic mask ``g:y,x``, as CK's *kernels* build it
-----------------------------------------------------
CK's ``mask_info::decode`` (example/ck_tile/01_fmha/mask.hpp) stores ``type = window_generic``, ``y = v0``,
``x = v1`` *and* ``left = v0``, ``right = v1``; the host passes ``window_size_left = left``,
``window_size_right = right`` and ``mask_type = 3`` to the kernel, and every kernel (fmha_fwd_kernel.hpp,
fmha_fwd_splitkv_kernel.hpp, fmha_bwd_kernel.hpp, ...) builds its mask with
``make_generic_attention_mask_from_lr_window(left, right, seqlen_q, seqlen_k,
mask_type == MASK_FROM_TOP_LEFT)`` -- for ``g`` that is ``false``.  So ``g:y,x`` is a **bottom-right window with
left = y and right = x** (negative = unbounded): coordinates ``(1 + y + sq - sk, 1 + x + sk - sq)``.  ckfmha
follows the kernels (:meth:`MaskSpec.coordinates`).  Example: ``g:2,1`` with sq = sk = 4 lets row 0 see keys
{0, 1} and row 2 keys {0, 1, 2, 3}.

CK disagrees with itself here: the host reference of the tile_example runners (fmha_fwd_runner.hpp,
fmha_bwd_runner.hpp) masks ``window_generic`` with ``make_generic_attention_mask_from_lr_window(mask.left,
mask.right, seqlen_q, seqlen_k)`` whose ``is_top_left`` defaults to ``true`` -- a *top-left* window
``(1 + y, 1 + x)`` -- and ``mask_info::get_unmaskarea`` (the FLOP count the binaries print) uses ``(y, x)`` as
raw coordinates.  All three agree when ``seqlen_q == seqlen_k`` except the FLOP count; with ``seqlen_q !=
seqlen_k`` CK's own validation of a ``g`` mask compares the kernel with a different mask.

The one mask vocabulary of ckfmha (:meth:`MaskSpec.parse`, used by :class:`ckfmha.problem.Problem`, the matrix
files and ``from_ck_args``) is CK's ``-mask`` syntax above plus the words of :data:`MASK_WORDS`: ``none`` /
``no_mask`` / ``n`` (no mask), ``causal`` / ``top_left`` (causal top-left) and ``bottom_right`` (causal
bottom-right).  :meth:`MaskSpec.to_ck` always renders CK's syntax.

Every number (window sizes, ``xt``/``xb`` widths, generic coordinates) must lie in int32
(``INT32_MIN..INT32_MAX``): CK holds them as ``ck_tile::index_t`` (``window_size_left``/``window_size_right`` of
example/ck_tile/01_fmha/fmha_fwd.hpp); anything outside is a :class:`MaskError` naming the value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ckfmha.kernel import TokenEnum
from ckfmha.limits import INT32_MAX, INT32_MIN


class MaskKind(TokenEnum):
    NONE = "none"
    TOP_LEFT = "top_left"
    BOTTOM_RIGHT = "bottom_right"
    GENERIC = "generic"


class MaskError(ValueError):
    """An invalid mask string or mask parameters."""


MASK_WORDS: dict[str, str] = {
    "none": "0",
    "no_mask": "0",
    "n": "0",
    "causal": "t",
    "top_left": "t",
    "bottom_right": "b",
}
"""Word forms accepted besides CK's ``-mask`` syntax, with the CK token each one means."""

_INT32_RULE = f"is outside int32 ({INT32_MIN}..{INT32_MAX}; CK holds mask numbers as ck_tile::index_t)"


def _check_bounded(what: str, left: int, right: int) -> None:
    if left < 0 and right < 0:
        raise MaskError(
            f"mask: {what} is unbounded on both sides "
            "(use no mask instead; CK would build a mask kernel that masks nothing)"
        )


def _check_sink(sink: int, whole: str) -> None:
    """The third number of ``t:l,r,sink`` / ``b:l,r,sink``: newer CK's mask.hpp reads it as ``mask_info.sink``, the
    number of leading key tokens every query also attends to (StreamingLLM sink tokens; passed as ``sink_size``
    and selecting a ``has_sink`` kernel when > 0); CK 2025-11's mask.hpp ignored it. ckfmha does not model sink
    tokens: only 0 (no sink token, the two-number window) is accepted."""
    if sink < 0:
        raise MaskError(
            f"mask: invalid mask value {whole!r} (sink component {sink}: the number of sink tokens must be >= 0)"
        )
    if sink:
        raise MaskError(
            f"mask: {whole!r} has sink component {sink} (StreamingLLM sink tokens, CK's "
            "mask_info.sink / sink_size), which ckfmha does not model; only sink 0 is accepted"
        )


def _int(text: str, whole: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise MaskError(f"mask: invalid mask value {whole!r} ({text!r} is not an integer)") from None
    if not INT32_MIN <= v <= INT32_MAX:
        raise MaskError(f"mask: invalid mask value {whole!r} ({v} {_INT32_RULE})")
    return v


@dataclass(frozen=True, slots=True)
class MaskSpec:
    """A mask.  ``top_left`` / ``bottom_right`` carry a FlashAttention window ``(left, right)``; negative sizes
    are normalised to -1 (unbounded); causal is ``(-1, 0)``.  ``generic`` carries the two numbers of
    ``g:y,x`` as written (``y``, ``x``); CK's kernels read them as a bottom-right window ``left = y``,
    ``right = x`` (see the module doc)."""

    kind: MaskKind = MaskKind.NONE
    left: int = -1
    right: int = 0
    y: int = 0
    x: int = 0

    def __post_init__(self) -> None:
        kind = self.kind
        if not isinstance(kind, MaskKind):
            try:
                kind = MaskKind(kind)
            except ValueError:
                raise MaskError(
                    f"mask.kind: unknown value {kind!r}; allowed: {', '.join(k.value for k in MaskKind)}"
                ) from None
            object.__setattr__(self, "kind", kind)
        for name in ("left", "right", "y", "x"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise MaskError(f"mask.{name}: expected an int, found {v!r}")
            if not INT32_MIN <= v <= INT32_MAX:
                raise MaskError(f"mask.{name}: {int(v)} {_INT32_RULE}")
            object.__setattr__(self, name, int(v))
        if kind in (MaskKind.TOP_LEFT, MaskKind.BOTTOM_RIGHT):
            object.__setattr__(self, "left", max(self.left, -1))
            object.__setattr__(self, "right", max(self.right, -1))
            object.__setattr__(self, "y", 0)
            object.__setattr__(self, "x", 0)
            _check_bounded(f"window ({self.left},{self.right})", self.left, self.right)
        elif kind is MaskKind.GENERIC:
            object.__setattr__(self, "left", -1)
            object.__setattr__(self, "right", 0)
            # y and x are the kernel's window sizes (left, right): the same rule as a window
            _check_bounded(
                f"generic g:{self.y},{self.x} (a bottom-right window left={self.y}, right={self.x})", self.y, self.x
            )
        else:
            object.__setattr__(self, "left", -1)
            object.__setattr__(self, "right", 0)
            object.__setattr__(self, "y", 0)
            object.__setattr__(self, "x", 0)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def none(cls) -> "MaskSpec":
        return cls()

    @classmethod
    def causal(cls, bottom_right: bool = False) -> "MaskSpec":
        return cls(MaskKind.BOTTOM_RIGHT if bottom_right else MaskKind.TOP_LEFT, -1, 0)

    @classmethod
    def window(cls, left: int, right: int, bottom_right: bool = False) -> "MaskSpec":
        return cls(MaskKind.BOTTOM_RIGHT if bottom_right else MaskKind.TOP_LEFT, left, right)

    @classmethod
    def generic(cls, y: int, x: int) -> "MaskSpec":
        return cls(MaskKind.GENERIC, y=y, x=x)

    @classmethod
    def parse(cls, text: "str | MaskSpec | None") -> "MaskSpec":
        """Parse CK's ``-mask`` syntax or a word of :data:`MASK_WORDS` (see the module doc)."""
        if isinstance(text, MaskSpec):
            return text
        if text is None:
            return cls()
        s = str(text).strip()
        s = MASK_WORDS.get(s, s)
        if ":" in s:
            t, v = s.split(":", 1)
            if t in ("xt", "xb"):
                w = _int(v, s)
                left, right = (-1, 0) if w <= 0 else (w // 2, w - 1 - w // 2)
                return cls.window(left, right, bottom_right=(t == "xb"))
            if t in ("t", "b", "g"):
                if "," not in v:
                    raise MaskError(f"mask: invalid mask value {s!r} (expected {t}:a,b)")
                a_text, b_text = v.split(",", 1)
                if t != "g" and "," in b_text:  # t:l,r,sink / b:l,r,sink (see _check_sink)
                    b_text, sink = b_text.split(",", 1)
                    _check_sink(_int(sink, s), s)
                a, b = _int(a_text, s), _int(b_text, s)
                if t == "g":
                    return cls.generic(a, b)
                return cls.window(a, b, bottom_right=(t == "b"))
            raise MaskError(f"mask: invalid mask value {s!r} (unknown prefix {t!r}; use t, b, xt, xb or g)")
        if s in ("0", ""):
            return cls()
        if s in ("1", "t"):
            return cls.causal(False)
        if s in ("2", "b"):
            return cls.causal(True)
        raise MaskError(
            f"mask: invalid mask value {s!r}; allowed: 0, 1, 2, t, b, t:l,r, b:l,r, xt:w, xb:w, g:y,x "
            f"or {', '.join(MASK_WORDS)}"
        )

    # ----------------------------------------------------------------- rendering
    @property
    def is_causal(self) -> bool:
        return self.kind in (MaskKind.TOP_LEFT, MaskKind.BOTTOM_RIGHT) and self.left < 0 and self.right == 0

    def to_ck(self) -> str:
        """The canonical ``-mask`` value; ``MaskSpec.parse(m.to_ck()) == m``."""
        if self.kind is MaskKind.NONE:
            return "0"
        if self.kind is MaskKind.GENERIC:
            return f"g:{self.y},{self.x}"
        p = "t" if self.kind is MaskKind.TOP_LEFT else "b"
        if self.is_causal:
            return p
        return f"{p}:{self.left},{self.right}"

    def ck_printed(self) -> str:
        """How the tile_example binaries print it (``n``, ``t(-1:0)``, ``b(4:35)``, ``g(y:x)``)."""
        if self.kind is MaskKind.NONE:
            return "n"
        if self.kind is MaskKind.GENERIC:
            return f"g({self.y}:{self.x})"
        return f"{'t' if self.kind is MaskKind.TOP_LEFT else 'b'}({self.left}:{self.right})"

    def __str__(self) -> str:
        return self.to_ck()

    # ----------------------------------------------------------------- semantics
    def kernel_window(self) -> tuple[int, int, bool]:
        """``(window_size_left, window_size_right, is_top_left)`` as CK's kernels receive and use them
        (``make_generic_attention_mask_from_lr_window``): a ``g:y,x`` mask is ``(y, x, False)`` -- mask_info
        stores left = y, right = x and ``mask_type == MASK_FROM_TOP_LEFT`` is false for it."""
        if self.kind is MaskKind.NONE:
            raise MaskError("mask: no mask has no window")
        if self.kind is MaskKind.GENERIC:
            return self.y, self.x, False
        return self.left, self.right, self.kind is MaskKind.TOP_LEFT

    def coordinates(self, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
        """CK's generic ``(y, x)`` for one (seqlen_q, seqlen_k) pair (no mask: ``(seqlen_q, seqlen_k)``), as
        ``make_generic_attention_mask_coordinates_from_lr_window`` (block_masking.hpp) computes them from
        :meth:`kernel_window`."""
        if self.kind is MaskKind.NONE:
            return seqlen_q, seqlen_k
        w_left, w_right, top_left = self.kernel_window()
        left = w_left if w_left >= 0 else (seqlen_q - 1 if top_left else seqlen_k - 1)
        right = w_right if w_right >= 0 else (seqlen_k - 1 if top_left else seqlen_q - 1)
        if top_left:
            return 1 + left, 1 + right
        return 1 + left + seqlen_q - seqlen_k, 1 + right + seqlen_k - seqlen_q

    def key_range(self, seqlen_q: int, seqlen_k: int, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Per query row the allowed keys ``[start, end)`` (int64 arrays; ``end <= start`` means fully
        masked, and then ``start == end`` is returned)."""
        i = np.arange(seqlen_q, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        if self.kind is MaskKind.NONE:
            return np.zeros_like(i), np.full_like(i, seqlen_k)
        y, x = self.coordinates(seqlen_q, seqlen_k)
        start = np.clip(i + 1 - y, 0, seqlen_k)
        end = np.clip(i + x, 0, seqlen_k)
        end = np.maximum(end, start)
        return start, end

    def allowed(self, seqlen_q: int, seqlen_k: int) -> np.ndarray:
        """Boolean (seqlen_q, seqlen_k) matrix, True where attention is allowed."""
        start, end = self.key_range(seqlen_q, seqlen_k)
        j = np.arange(seqlen_k, dtype=np.int64)[None, :]
        return (j >= start[:, None]) & (j < end[:, None])

    def unmasked_area(self, seqlen_q: int, seqlen_k: int) -> int:
        """Exact count of allowed (query, key) pairs (Python int): CK's ``get_unmaskarea`` for every mask but
        ``g:y,x``, where it counts the area the kernel computes (CK's ``get_unmaskarea`` reads a ``g`` mask's
        numbers as raw coordinates; see the module doc)."""
        if self.kind is MaskKind.NONE:
            return int(seqlen_q) * int(seqlen_k)
        start, end = self.key_range(seqlen_q, seqlen_k)
        return int((end - start).sum(dtype=np.int64))

    def alibi_mode(self) -> str:
        """CK's AlibiMode for this mask: ``vertical`` for causal, else the origin (no mask: bottom_right)."""
        if self.kind is MaskKind.NONE:
            return "bottom_right"
        if self.is_causal:
            return "vertical"
        if self.kind is MaskKind.GENERIC:
            return "generic"  # CK casts mask_type 3 to an AlibiMode with no meaning; ckfmha rejects it
        return self.kind.value
