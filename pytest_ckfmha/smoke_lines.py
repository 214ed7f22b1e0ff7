"""The lines of a CK checkout's smoke scripts (``--ckfmha-ck-smoke``), read into specs: plain data, no pytest
items (pytest_ckfmha/ck_smoke.py makes the items; its module doc says what each step does)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

CATEGORY = "ck_smoke"
BINARIES = {"fwd": ("fwd",), "bwd": ("bwd",), "all": ("fwd", "bwd")}


def line_id(binary: str, command: str) -> str:
    """The item id of a smoke line: the binary and a hash of the whole line (stable while the line is)."""
    return f"{binary}-{hashlib.sha256(command.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class SmokeSpec:
    """One runnable smoke line, shaped as :class:`pytest_ckfmha.collect.ShapeSpec` (no pinned kernels: the plan
    item only) plus what CK said about it."""

    shape: Any  # ckfmha.matrix.Shape (imported lazily: this module loads at every pytest start)
    shape_id: str
    kernels: tuple = ()
    command: str = ""
    normalizations: tuple[str, ...] = ()
    known_fail: str | None = None  # the known-fails file listing the line
    args: tuple[str, ...] = ()  # the line's arguments (without the program), as the script passed them
    unannounced: tuple[str, ...] = ()  # what CK's runner changes without a word (ckfmha's words)


@dataclass(frozen=True)
class RefusedLine:
    """A smoke line CK's runner refuses: nothing to run."""

    shape_id: str
    command: str
    reason: str


@dataclass(frozen=True)
class UnreadableLine:
    """A smoke line ckfmha cannot read (a value CK's runner would not take either, e.g. ``-mask=<garbage>``): one
    item that fails naming the line, while the other lines run."""

    shape_id: str
    command: str
    reason: str


def smoke_specs(settings) -> list[SmokeSpec | RefusedLine | UnreadableLine]:
    """Every recorded line of the selected scripts, read with CK's semantics (pytest_ckfmha/ck_smoke.py)."""
    from ckfmha.ck_args import CKRefusal, ck_run_from_args
    from ckfmha.ck_smoke import SMOKE_SCRIPTS, known_fails, known_fails_path, record_smoke_lines
    from ckfmha.matrix import Shape

    out: list[SmokeSpec | RefusedLine | UnreadableLine] = []
    for binary in BINARIES[settings.ck_smoke]:
        script = SMOKE_SCRIPTS[binary][0]
        fails = known_fails(settings.ck_root, binary, settings.arch)
        fails_file = str(known_fails_path(settings.ck_root, binary, settings.arch))
        for i, line in enumerate(record_smoke_lines(settings.ck_root, binary, settings.arch)):
            sid = line_id(binary, line.command)
            try:
                run = ck_run_from_args(line.args, binary)
            except CKRefusal as e:
                out.append(RefusedLine(sid, line.command, f"CK's runner refuses the line ({e}): nothing to run"))
                continue
            except ValueError as e:  # a line that cannot be read fails alone, naming the line
                out.append(
                    UnreadableLine(sid, line.command, f"{script}: the line {line.command!r} cannot be read: {e}")
                )
                continue
            shape = Shape(problem=run.problem, file=script, entry=line.command, category=CATEGORY, index=i)
            known = fails_file if line.command in fails else None
            out.append(
                SmokeSpec(shape, sid, (), line.command, run.normalizations, known, tuple(line.args), run.unannounced)
            )
    return out
