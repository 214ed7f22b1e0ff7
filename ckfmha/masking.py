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
bottom-right; ``t:l,r`` / ``b:l,r`` windows; ``xt:w`` / ``xb:w`` xformers windows (``w <= 0`` causal, else
``left = w // 2``, ``right = w - 1 - left``); ``g:y,x`` generic coordinates.

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


MASK_WORDS: dict[str, str] = {"none": "0", "no_mask": "0", "n": "0", "causal": "t", "top_left": "t",
                              "bottom_right": "b"}
"""Word forms accepted besides CK's ``-mask`` syntax, with the CK token each one means."""

_INT32_RULE = f"is outside int32 ({INT32_MIN}..{INT32_MAX}; CK holds mask numbers as ck_tile::index_t)"


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
    are normalised to -1 (unbounded); causal is ``(-1, 0)``.  ``generic`` carries CK's raw ``(y, x)``."""

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
                raise MaskError(f"mask.kind: unknown value {kind!r}; allowed: "
                                f"{', '.join(k.value for k in MaskKind)}") from None
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
            if self.left < 0 and self.right < 0:
                raise MaskError(f"mask: window ({self.left},{self.right}) is unbounded on both sides "
                                "(use no mask instead; CK would build a mask kernel that masks nothing)")
        elif kind is MaskKind.GENERIC:
            object.__setattr__(self, "left", -1)
            object.__setattr__(self, "right", 0)
            if self.x + self.y < 2:
                raise MaskError(f"mask: generic coordinates g:{self.y},{self.x} violate CK's rule x + y >= 2")
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
                a, b = v.split(",", 1)
                a, b = _int(a, s), _int(b, s)
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
        raise MaskError(f"mask: invalid mask value {s!r}; allowed: 0, 1, 2, t, b, t:l,r, b:l,r, xt:w, xb:w, g:y,x "
                        f"or {', '.join(MASK_WORDS)}")

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
    def coordinates(self, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
        """CK's generic ``(y, x)`` for one (seqlen_q, seqlen_k) pair (no mask: ``(seqlen_q, seqlen_k)``)."""
        if self.kind is MaskKind.NONE:
            return seqlen_q, seqlen_k
        if self.kind is MaskKind.GENERIC:
            return self.y, self.x
        top_left = self.kind is MaskKind.TOP_LEFT
        left = self.left if self.left >= 0 else (seqlen_q - 1 if top_left else seqlen_k - 1)
        right = self.right if self.right >= 0 else (seqlen_k - 1 if top_left else seqlen_q - 1)
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
        """Exact count of allowed (query, key) pairs, as CK's ``get_unmaskarea`` (Python int)."""
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
