"""Receipts (CK's ``generate.py -r N``) and their profile names, and the per-api receipt rules.

``data/receipts.yaml`` names each receipt; ``data/receipt_rules/<api>.yaml`` says, per api, which generated
configs a receipt keeps, as filter expressions (:mod:`ckfmha.filters`) over KernelConfig fields::

    schema: 1
    api: fwd
    default: "c.dtype != 'fp32'"        # receipts without a rule of their own
    rules:
      2: "c.dtype in ('fp16', 'bf16') and c.bias != 'elementwise'"
      801:                              # a rule may differ per mask mode (simplified / generic)
        simplified: "c.mask == 'none'"
        generic: "False"

A rule of ``True`` keeps everything.  Both files are read with :mod:`ckfmha.datafile`'s strict loader and checked
against their JSON Schemas (``data/schemas/receipts.schema.yaml``, ``receipt_rules.schema.yaml``) by
:func:`ckfmha.datafile.load_checked_yaml`, which caches checked content; an error names the file, the key path,
the value and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ckfmha.archs import data_dir
from ckfmha.datafile import DataFileError, load_checked_yaml
from ckfmha.filters import ConfigPredicate, FilterError, compile_filter
from ckfmha.kernel import Api, MaskMode


class ReceiptError(ValueError):
    pass


@dataclass(frozen=True)
class Receipt:
    number: int
    name: str
    aliases: tuple[str, ...]
    description: str


@cache
def receipts() -> dict[int, Receipt]:
    path = data_dir() / "receipts.yaml"
    try:
        doc = load_checked_yaml(path, "receipts")
    except DataFileError as e:
        raise ReceiptError(str(e)) from None
    return {
        int(num): Receipt(int(num), entry["name"], tuple(entry.get("aliases", ())), entry.get("description", ""))
        for num, entry in doc["receipts"].items()
    }


def resolve_receipt(value: int | str | None = None, *, profile: str | None = None) -> int:
    """A receipt number from a number, a numeric string or a profile name/alias."""
    table = receipts()
    if profile is not None:
        if value not in (None, 0):
            raise ReceiptError(f"receipt/profile: give one of them, not both (receipt={value!r}, profile={profile!r})")
        value = profile
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ReceiptError(f"receipt: expected a number or profile name, found {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        num = int(value)
        if num not in table:
            raise ReceiptError(f"receipt: unknown receipt {num}; known: {', '.join(str(n) for n in sorted(table))}")
        return num
    name = str(value).strip().lower()
    for r in table.values():
        if name == r.name or name in r.aliases:
            return r.number
    names = ", ".join(f"{r.name} ({r.number})" for r in table.values())
    raise ReceiptError(f"profile: unknown profile {value!r}; known profiles: {names}")


@cache
def _rules(api: Api) -> dict[str, Any]:
    path = data_dir() / "receipt_rules" / f"{api.value}.yaml"
    if not path.is_file():
        raise ReceiptError(f"{path}: no receipt rules for api {api.value!r}")
    try:
        doc = load_checked_yaml(path, "receipt_rules")
    except DataFileError as e:
        raise ReceiptError(str(e)) from None
    if doc["api"] != api.value:
        raise ReceiptError(f"{path}: api: {doc['api']!r} is not the api of this file ({api.value!r})")
    doc["rules"] = {int(k): v for k, v in (doc.get("rules") or {}).items()}
    doc["_path"] = path
    return doc


@cache
def receipt_predicate(api: Api, receipt: int, mask_mode: MaskMode) -> ConfigPredicate:
    """The predicate that receipt ``receipt`` applies to ``api``'s configs under ``mask_mode``."""
    doc = _rules(api)
    path = doc["_path"]
    rule = doc["rules"].get(receipt, doc.get("default", "True"))
    where = f"{path}: rules.{receipt}" if receipt in doc["rules"] else f"{path}: default"
    if isinstance(rule, dict):  # the schema guarantees exactly the keys simplified and generic
        rule = rule[mask_mode.value]
        where += f".{mask_mode.value}"
    if isinstance(rule, bool):
        rule = str(rule)
    try:
        pred = compile_filter(rule)
    except FilterError as e:
        raise ReceiptError(f"{where}: {e}") from None
    return pred.fast  # type: ignore[attr-defined]
