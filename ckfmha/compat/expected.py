"""Expected differences of a foreign suite run through ckfmha: a named list, each entry marking the tests it names
xfail with its reason -- never a tolerance change (docs/flash_attn.md, "Expected differences").

| function | what |
|---|---|
| :func:`load_expected` | the entries of a list file (default: ``ckfmha/data/flash_attn_expected.yaml``), schema ``suite_expected``; a :class:`~ckfmha.datafile.DataFileError` naming the file, the key, the value and the rule; a name written twice is one too |
| :func:`expected_for` | the entry whose ``tests`` patterns (``fnmatch`` over the node id) match a test, None when none does |
| :meth:`ExpectedDifference.marker_reason` | the xfail reason: the name, whose semantics, the reason and the first source |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from ckfmha.datafile import DataFileError, check_schema, load_yaml

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "flash_attn_expected.yaml"


@dataclass(frozen=True)
class ExpectedDifference:
    name: str
    tests: tuple[str, ...]
    whose: str
    reason: str
    sources: tuple[str, ...]
    strict: bool = True

    def matches(self, nodeid: str) -> bool:
        return any(fnmatchcase(nodeid, pattern) for pattern in self.tests)

    def marker_reason(self) -> str:
        return f"expected difference {self.name} ({self.whose}): {self.reason} [{self.sources[0]}]"


@lru_cache(maxsize=4)
def load_expected(path: str | None = None) -> tuple[ExpectedDifference, ...]:
    """The entries of ``path`` (module table)."""
    source = str(path or DEFAULT_PATH)
    doc = load_yaml(source)
    check_schema(doc, "suite_expected", source)
    entries = tuple(
        ExpectedDifference(
            e["name"], tuple(e["tests"]), e["whose"], e["reason"], tuple(e["sources"]), bool(e.get("strict", True))
        )
        for e in doc["expected"]
    )
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DataFileError(f"{source}: expected: name {dup[0]!r} appears more than once")
    return entries


def expected_for(nodeid: str, entries: Sequence[ExpectedDifference]) -> ExpectedDifference | None:
    """The first entry that names ``nodeid`` (module table)."""
    return next((e for e in entries if e.matches(nodeid)), None)
