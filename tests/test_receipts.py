"""Receipts and profiles: numbers and names resolve; unknown ones are clear errors."""

from __future__ import annotations

import pytest

from ckfmha.receipts import ReceiptError, receipts, resolve_receipt

ISSUE_RECEIPTS = (0, 1, 2, 3, 4, 100, 200, 300, 400, 600, 700, 800, 801, 888)


def test_every_generator_receipt_has_a_profile() -> None:
    table = receipts()
    assert set(ISSUE_RECEIPTS) <= set(table)
    names = [r.name for r in table.values()]
    assert len(names) == len(set(names))
    for r in table.values():
        assert r.description


@pytest.mark.parametrize(
    "value, number",
    [
        (None, 0),
        (0, 0),
        ("888", 888),
        ("ck_default", 0),
        ("ck_extended", 1),
        ("flash", 2),
        ("pytorch", 4),
        ("aiter_batch", 100),
        ("aiter", 100),
        ("aiter_group", 200),
        ("fp32", 800),
        ("fp32_min", 801),
        ("fp8", 888),
        ("PyTorch", 4),
    ],
)
def test_resolve(value, number: int) -> None:
    assert resolve_receipt(value) == number


def test_profile_keyword() -> None:
    assert resolve_receipt(profile="fp8_test") == 888
    with pytest.raises(ReceiptError, match="give one of them"):
        resolve_receipt(4, profile="flash")


@pytest.mark.parametrize(
    "value, message",
    [
        (5, "receipt: unknown receipt 5; known: 0, 1, 2"),
        ("flashy", "profile: unknown profile 'flashy'; known profiles: ck_default \\(0\\)"),
        (True, "expected a number or profile name"),
    ],
)
def test_unknown(value, message: str) -> None:
    with pytest.raises(ReceiptError, match=message):
        resolve_receipt(value)
