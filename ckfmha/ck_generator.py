"""Where a CK checkout keeps its FMHA kernel generator, and how ckfmha runs it: the paths and the two helpers that
``ckfmha.cktree`` (checkout spaces), ``ckfmha.upstream.enum_parity`` (name parity) and ``codegen.emit`` (sources
for the hip backend) share.  Standard library only: every layer may import it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: the ck_tile FMHA example of a checkout, relative to its root
FMHA_EXAMPLE = Path("example") / "ck_tile" / "01_fmha"
#: its kernel generator (``generate.py -d API --targets ARCH ...``)
GENERATOR = FMHA_EXAMPLE / "generate.py"


def generator_env(generator: Path) -> dict[str, str]:
    """The environment a checkout's ``generate.py`` runs in: this process's, with the generator's folder first on
    ``PYTHONPATH`` (the generator imports its ``codegen`` package from there)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(generator.parent)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return env


def generator_tail(proc: subprocess.CompletedProcess) -> str:
    """The last four lines of a failed generator run's stderr (else its stdout), ``|``-joined for one message."""
    return " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-4:])
