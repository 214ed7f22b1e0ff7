"""Access to the golden CK enumeration lists and a readable list diff for parity tests.

Every list lives in the clone: ``tests/data/golden/<mask mode>/<api>/<arch>/r<receipt>.txt.gz`` (provenance in
its README). ``CKFMHA_GOLDEN_DIR`` names another tree of the same layout, searched first. A missing list is a
test failure, never a skip: the enumeration parity must always run.
"""

from __future__ import annotations

import gzip
import os
from functools import cache
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LOCAL_GOLDEN = HERE / "data" / "golden"
EXTRA_GOLDEN = Path(os.environ["CKFMHA_GOLDEN_DIR"]) if os.environ.get("CKFMHA_GOLDEN_DIR") else None

APIS = ("fwd", "fwd_splitkv", "fwd_appendkv", "pagedkv_prefill", "batch_prefill", "bwd")
RECEIPTS = (0, 1, 2, 3, 4, 100, 200, 300, 400, 600, 700, 800, 801, 888)
MASK_MODES = ("simplified", "generic")
ALL_ARCHS = ("gfx942", "gfx950", "gfx90a", "gfx1100", "gfx1201")


def golden_path(mask_mode: str, api: str, arch: str, receipt: int) -> Path | None:
    for root in (EXTRA_GOLDEN, LOCAL_GOLDEN):
        if root is None:
            continue
        p = root / mask_mode / api / arch / f"r{receipt}.txt.gz"
        if p.is_file():
            return p
    return None


@cache
def load_golden(mask_mode: str, api: str, arch: str, receipt: int) -> tuple[str, ...]:
    p = golden_path(mask_mode, api, arch, receipt)
    if p is None:
        pytest.fail(
            f"no golden list for {mask_mode}/{api}/{arch}/r{receipt} (looked in "
            f"{EXTRA_GOLDEN or '$CKFMHA_GOLDEN_DIR unset'} and {LOCAL_GOLDEN})"
        )
    with gzip.open(p, "rt", encoding="utf-8") as fh:
        return tuple(line.strip() for line in fh if line.strip())


def diff_message(
    ours: list[str] | tuple[str, ...], golden: list[str] | tuple[str, ...], label: str, show: int = 8
) -> str:
    """'' when equal, else counts plus the first missing/extra names."""
    a, b = set(ours), set(golden)
    if a == b and len(ours) == len(golden):
        return ""
    missing = sorted(b - a)
    extra = sorted(a - b)
    lines = [
        f"{label}: ours {len(ours)} names ({len(a)} unique), golden {len(golden)}; "
        f"{len(missing)} missing, {len(extra)} extra"
    ]
    lines += [f"  missing: {n}" for n in missing[:show]]
    lines += [f"  extra:   {n}" for n in extra[:show]]
    return "\n".join(lines)
