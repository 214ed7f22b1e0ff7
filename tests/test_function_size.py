"""House rule: no function over ~60 lines without a reason in its docstring.

Walks every ``.py`` file of ``ckfmha/`` and ``pytest_ckfmha/`` with :mod:`ast` and fails on any function (or
method, nested function, async function) longer than :data:`MAX_LINES` lines -- from its ``def`` line to its last
line; decorators not counted -- whose docstring does not say why with a sentence containing ``Long because``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ckfmha", "pytest_ckfmha")
MAX_LINES = 60
REASON = "Long because"


def long_functions_without_reason(source: str, filename: str) -> list[str]:
    """``file:line name (N lines)`` for each function of ``source`` over :data:`MAX_LINES` lines whose docstring
    lacks :data:`REASON`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_LINES and REASON not in (ast.get_docstring(node) or ""):
            found.append(f"{filename}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_long_function_without_a_reason() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            offenders += long_functions_without_reason(path.read_text(encoding="utf-8"), rel)
    assert not offenders, (
        f"functions over {MAX_LINES} lines without a '{REASON} ...' sentence in their docstring "
        "(split them, or say why they are long):\n  " + "\n  ".join(offenders)
    )


def _function(lines: int, docstring: str, name: str = "f", indent: str = "") -> str:
    """Source of a function of exactly ``lines`` lines (def line, docstring line, assignments)."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}():\n{indent}    {docstring!r}\n{body}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (_function(60, "Short enough."), []),
        (_function(61, "Does things."), ["m.py:1 f (61 lines)"]),
        (_function(61, "Does things. Long because the steps share their locals."), []),
        (_function(61, "Does things. long because: not the sentence."), ["m.py:1 f (61 lines)"]),
        # a method and a nested function are functions too
        ("class C:\n" + _function(70, "A method.", "meth", "    "), ["m.py:2 meth (70 lines)"]),
        (
            "def outer():\n" + _function(61, "Inner.", "inner", "    "),
            ["m.py:1 outer (62 lines)", "m.py:2 inner (61 lines)"],
        ),
        ("async " + _function(61, "Async."), ["m.py:1 f (61 lines)"]),
    ],
)
def test_checker_counts_lines_and_reads_the_reason(source: str, expected: list[str]) -> None:
    assert sorted(long_functions_without_reason(source, "m.py")) == expected
