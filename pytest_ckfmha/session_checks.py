"""Runs that test nothing are errors, not green runs.

| when | what | result |
|---|---|---|
| session start (controller) | a matrix file is malformed | usage error (exit 4) naming the file, entry and key |
| session start | the kernel selection (arch, receipt/profile, mask mode, sweep, filters) matches no kernel | usage error naming the selection |
| session start | the category and families select no shape | usage error |
| session start | no kernel of the selection serves any selected shape | usage error |
| session end | every ckfmha item was skipped | exit 4, the most common skip reasons |
| session end (parity) | the upstream side, or ckfmha's side, ran for no item | exit 1, that side's most common words |

``--ckfmha-allow-empty`` (ini ``ckfmha_allow_empty``) turns the kernel-selection, no-kernel-serves-a-shape and
every-item-skipped rules off; malformed files stay errors.  The end-of-session rules never replace a non-zero
exit status (failures stay failures).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pytest_ckfmha.options import Settings
    from pytest_ckfmha.state import State


def describe_selection(s: "Settings") -> str:
    parts = [f"arch {s.arch}", f"backend {s.backend}"]
    if s.category is not None:
        parts.insert(0, f"category {s.category}")
    if s.families:
        parts.append("families " + ", ".join(s.families))
    if s.profile is not None:
        parts.append(f"profile {s.profile}")
    else:
        parts.append(f"receipt {s.receipt if s.receipt is not None else 0}")
    parts.append(f"mask mode {s.mask_mode}")
    if s.sweep:
        parts.append(f"sweep {s.sweep}")
    if s.filter:
        parts.append(f"filter {s.filter!r}")
    if s.filter_file:
        parts.append(f"filter file {s.filter_file}")
    if s.matrices:
        parts.append("matrices " + ", ".join(s.matrices))
    return ", ".join(parts)


def _most_common(values, n: int = 3) -> str:
    counts = Counter(v for v in values if v)
    return "; ".join(f"{k} x {v}" for v, k in counts.most_common(n)) or "(no reason given)"


def check_selection(st: "State") -> None:
    """Raise ``pytest.UsageError`` when the selection is malformed or tests nothing (see the module doc)."""
    from ckfmha.matrix import MatrixError
    from ckfmha.selection import EmptySelectionError

    s = st.settings
    try:
        if s.parity is not None:
            st.parity_problems()
        if s.category is None:
            return
        kernels = list(st.registry())
        if not kernels and not s.allow_empty:
            raise pytest.UsageError(
                f"ckfmha: the kernel selection matches no kernel ({describe_selection(s)}); "
                "pass --ckfmha-allow-empty to run anyway"
            )
        specs = st.specs()
    except MatrixError as e:
        raise pytest.UsageError(f"ckfmha: malformed matrix file: {e}") from None
    except EmptySelectionError as e:
        raise pytest.UsageError(
            f"ckfmha: {e}\n(selection: {describe_selection(s)}; pass --ckfmha-allow-empty to run anyway)"
        ) from None
    except ValueError as e:  # filters, sweeps, enumeration: their messages name the field and the rule
        raise pytest.UsageError(f"ckfmha: {e}") from None
    if not specs:
        raise pytest.UsageError(f"ckfmha: the selection holds no shape of the matrices ({describe_selection(s)})")
    if not s.allow_empty and not any(spec.kernels for spec in specs):
        raise pytest.UsageError(
            f"ckfmha: no kernel of the selection serves any of its {len(specs)} shapes "
            f"({describe_selection(s)}); pass --ckfmha-allow-empty to run anyway"
        )


def end_of_session_problems(s: "Settings", rows: list[dict]) -> tuple[list[str], int]:
    """(problems in words, the exit status they call for) -- see the module doc."""
    problems: list[str] = []
    status = int(pytest.ExitCode.OK)
    parity = [r for r in rows if r.get("kind") == "parity"]
    if parity:
        from ckfmha.upstream.result import Verdict

        def answered(v) -> bool:  # the side ran: ran_valid, ran_invalid or unsupported (ckfmha.upstream.result)
            try:
                return Verdict.parse(v, "verdict").answered
            except ValueError:
                return False

        for side, vkey, wkey in (
            ("the upstream side", "upstream_verdict", "upstream_words"),
            ("ckfmha's side", "ckfmha_verdict", "ckfmha_words"),
        ):
            if not any(answered(r.get(vkey)) for r in parity):
                problems.append(
                    f"{side} ran for none of the {len(parity)} parity items ({s.parity}); nothing was "
                    f"compared: {_most_common(r.get(wkey) or r.get('reason') for r in parity)}"
                )
                status = int(pytest.ExitCode.TESTS_FAILED)
    if rows and not s.allow_empty and all(r.get("verdict") == "skipped" for r in rows):
        problems.append(
            f"every one of the {len(rows)} ckfmha items was skipped, so this run tested nothing "
            f"({describe_selection(s)}): {_most_common(_why(r) for r in rows)}; pass "
            "--ckfmha-allow-empty to accept such a run"
        )
        if status == int(pytest.ExitCode.OK):
            status = int(pytest.ExitCode.USAGE_ERROR)
    return problems, status


def _why(row: dict) -> str:
    """A skip reason without its shape id prefix, so equal reasons are counted together."""
    from pytest_ckfmha.ids import NodeId

    reason = str(row.get("reason") or "")
    node = NodeId.parse(str(row.get("nodeid") or ""))
    sid = node.scope if node is not None else ""
    return reason[len(sid) + 2 :] if sid and reason.startswith(sid + ": ") else reason
