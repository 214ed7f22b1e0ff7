"""Exact parity of ``ck_instance_names`` with CK's own generator: every api x arch x receipt x mask mode.

Every list is in the clone (``tests/data/golden``, provenance in its README): gfx942/gfx950 from the project's
reference set of upstream generator runs, gfx90a/gfx1100/gfx1201 produced by running the same generator after
checking that it reproduces every gfx942/gfx950 list. A failing case prints the counts and the first
missing / extra names.
"""

from __future__ import annotations

import pytest

from ckfmha.enumeration import ck_instance_names
from tests.golden import ALL_ARCHS, APIS, LOCAL_GOLDEN, MASK_MODES, RECEIPTS, diff_message, golden_path, load_golden

CASES = [
    pytest.param(api, arch, r, m, id=f"{api}-{arch}-r{r}-{m}")
    for api in APIS
    for arch in ALL_ARCHS
    for r in RECEIPTS
    for m in MASK_MODES
]


@pytest.mark.parametrize("api,arch,receipt,mask_mode", CASES)
def test_parity_with_ck_generator(api: str, arch: str, receipt: int, mask_mode: str) -> None:
    golden = load_golden(mask_mode, api, arch, receipt)  # a missing list fails (with the path)
    ours = ck_instance_names(api, arch, receipt, mask_mode)
    assert diff_message(ours, golden, f"{api}/{arch}/r{receipt}/{mask_mode}") == ""


def test_every_reference_list_is_in_the_clone() -> None:
    # every arch is really checked from the clone alone, never skipped for a folder outside it
    missing = [
        f"{m}/{api}/{a}/r{r}"
        for api in APIS
        for a in ALL_ARCHS
        for r in RECEIPTS
        for m in MASK_MODES
        if not (LOCAL_GOLDEN / m / api / a / f"r{r}.txt.gz").is_file()
    ]
    assert missing == []


@pytest.mark.parametrize(
    "api, arch, mask_mode, count",
    [
        ("fwd", "gfx942", "simplified", 7208),
        ("fwd", "gfx950", "simplified", 7760),
        ("fwd", "gfx942", "generic", 10812),
        ("fwd", "gfx950", "generic", 11624),
        ("bwd", "gfx942", "simplified", 6900),
        ("bwd", "gfx950", "simplified", 8436),
        ("batch_prefill", "gfx942", "simplified", 6504),
        ("batch_prefill", "gfx942", "generic", 10840),
        ("fwd_splitkv", "gfx942", "simplified", 2106),
        ("fwd_appendkv", "gfx950", "generic", 99),
    ],
)
def test_receipt0_orientation_counts(api: str, arch: str, mask_mode: str, count: int) -> None:
    # the shared README's orientation figures, independent of the golden files being present
    assert len(ck_instance_names(api, arch, 0, mask_mode)) == count


def test_golden_path_resolution() -> None:
    assert golden_path("simplified", "fwd", "gfx90a", 0) == LOCAL_GOLDEN / "simplified" / "fwd" / "gfx90a" / "r0.txt.gz"
