"""Output poisoning: every output is filled with a *marked* NaN before a kernel runs, so that an element the
kernel never wrote can be told apart from a NaN the kernel computed.

| output dtype | poison bits | unwritten vs computed NaN |
|---|---|---|
| float64 | ``0x7FF8_0000_DEAD_BEEF`` | distinguished |
| float32 | ``0x7FC0_DEAD`` | distinguished |
| float16 | ``0x7E5A`` | distinguished |
| bfloat16 | ``0x7FDA`` | distinguished |
| float8 types | the type's NaN (no payload bits) | not distinguished: reported as "NaN (unwritten or computed)" |
| integer | 0 | not checked |

The patterns are quiet NaNs with a payload that IEEE arithmetic does not produce (GPUs and CPUs return the
canonical NaN, payload 0, from invalid operations), so a kernel that *computes* NaN writes other bits, and a
copy (host <-> device, numpy <-> torch) keeps the bits.  :func:`census` counts both kinds where the reference has
a value; the runner and the pytest plugin report unwritten elements as "left unwritten" and computed NaNs as
"NaN".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# name of the numpy/ml_dtypes dtype -> (unsigned view dtype, poison bits)
POISON_BITS: dict[str, tuple[str, int]] = {
    "float64": ("uint64", 0x7FF8_0000_DEAD_BEEF),
    "float32": ("uint32", 0x7FC0_DEAD),
    "float16": ("uint16", 0x7E5A),
    "bfloat16": ("uint16", 0x7FDA),
}


def is_float(a: np.ndarray) -> bool:
    """Whether ``a`` holds floating-point values (numpy floats, bfloat16, the float8 types)."""
    name = a.dtype.name
    return a.dtype.kind == "f" or name == "bfloat16" or name.startswith("float8")


def distinguishes(dtype) -> bool:
    """Whether the poison of ``dtype`` differs from every NaN a kernel computes."""
    return np.dtype(dtype).name in POISON_BITS


def poisoned(shape, dtype) -> np.ndarray:
    """A new array of ``shape`` and ``dtype`` filled with the poison (integers: zeros)."""
    dtype = np.dtype(dtype)
    entry = POISON_BITS.get(dtype.name)
    if entry is not None:
        return np.full(shape, entry[1], dtype=entry[0]).view(dtype)
    if dtype.kind == "f" or dtype.name.startswith("float8"):
        return np.full(shape, np.nan, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


def is_poison(a: np.ndarray) -> np.ndarray:
    """Boolean mask of the elements still holding the poison (for float8: every NaN)."""
    entry = POISON_BITS.get(a.dtype.name)
    if entry is not None:
        return np.ascontiguousarray(a).view(entry[0]) == entry[1]
    if is_float(a):
        return np.isnan(a.astype(np.float32))
    return np.zeros(a.shape, dtype=bool)


@dataclass(frozen=True)
class Census:
    """Where an output is NaN while the reference has a value."""

    name: str
    size: int
    unwritten: int  # still the poison
    computed_nan: int  # NaN with other bits (a NaN the kernel produced)
    first_unwritten: tuple[int, ...] | None
    first_nan: tuple[int, ...] | None
    distinguished: bool  # False for float8: the two counts are merged into ``unwritten``

    @property
    def ok(self) -> bool:
        return not self.unwritten and not self.computed_nan

    def messages(self) -> list[str]:
        out = []
        if self.unwritten:
            what = (
                "left unwritten (still the poison NaN)"
                if self.distinguished
                else "NaN (unwritten or computed: this dtype has a single NaN encoding)"
            )
            out.append(
                f"output {self.name!r}: {self.unwritten} of {self.size} element(s) {what}, first at "
                f"{self.first_unwritten}"
            )
        if self.computed_nan:
            out.append(
                f"output {self.name!r}: {self.computed_nan} of {self.size} element(s) are NaN where the reference is "
                f"finite (a NaN the kernel computed), first at {self.first_nan}"
            )
        return out


def _first(mask: np.ndarray) -> tuple[int, ...] | None:
    idx = np.argwhere(mask)
    return tuple(int(i) for i in idx[0]) if len(idx) else None


def census(name: str, out: np.ndarray, ref: np.ndarray | None = None, where: np.ndarray | None = None) -> Census:
    """Count the unwritten and the computed-NaN elements of ``out`` where ``ref`` is not NaN (every element when
    ``ref`` is None) and ``where`` (a broadcastable mask of the elements the kernel must write) holds."""
    dist = distinguishes(out.dtype)
    nan = np.isnan(out) if is_float(out) else None  # ml_dtypes' types have their own isnan: no float64 copy
    if nan is None or not nan.any():  # the common case: one pass over the output
        return Census(name, int(out.size), 0, 0, None, None, dist)
    if ref is not None:
        r = np.asarray(ref)
        if is_float(r) and r.shape == out.shape:
            nan &= ~np.isnan(r)
    if where is not None:
        nan &= np.broadcast_to(where, nan.shape)
    poison = is_poison(out) & nan
    computed = nan & ~poison
    return Census(
        name,
        int(out.size),
        int(poison.sum()),
        int(computed.sum()) if dist else 0,
        _first(poison),
        _first(computed) if dist else None,
        dist,
    )
