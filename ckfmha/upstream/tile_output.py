"""Parse what ``tile_example_fmha_fwd`` / ``tile_example_fmha_bwd`` print (and the ``-json=1`` file).

The result is one line (research/upstream_testing.md §4.5-4.6), fields separated by ``", "``::

    [<prec>|<mode>|<layout>] b:2, h:8/2, s:128/256(512), d:128/128, scale_s:0.0883883, bias:e, p_drop:0,
      lse:1, squant:0, mask:t(-1:0), v:r[, rotary_dim:16(inter)][, num_splits:2][, page_block_size:128]
      [, cache_batch_idx:1][, q_logical:[..], q_padded:[..], k_logical:[..], k_padded:[..] | q_eff:[..], kv_eff:[..]]
      [, <kernel name>]*[, <ms> ms, <tflops> TFlops, <gbps> GB/s][, valid:y|n | , not supported yet]

and for the backward ``..., scale:<f>, bias:<b>, dbias:<0|1>, p_drop:<p>, s_randval:<0|1>,
deterministic:<0|1>[, workspace:<N>MiB], mask:<m>, ...``.  Older generations print other subsets of
``key:value`` fields (``qscale:`` instead of ``squant:``, no ``p_drop:``); every ``key:value`` is kept in
:attr:`TileOutput.echo`.  An old backward generation breaks the line with ``\\nDeterministic mode ON: N MByte
memory workspace allocated``; continuation lines starting with ``", "`` are joined back.

What a real line always holds (:func:`format_problems` lists what a line lacks; the runner calls a line with any
such problem ``unparseable``).  Generations of the runners' print statements in ROCm/composable_kernel
``example/ck_tile/01_fmha`` (``fmha_fwd.cpp``, ``fmha_fwd_runner.hpp``, ``fmha_bwd.cpp``, ``fmha_bwd_runner.hpp``;
research/upstream_testing.md §4.5-4.6) differ in their optional fields, but every generation that accepts
``-kname`` prints:

* the head ``[<prec>|<mode>|<layout>]`` with ``<mode>`` ``batch``/``group`` and ``<layout>`` ``bhsd``/``bshd`` or
  ``<in>-<out>`` (:data:`MODES`, :data:`LAYOUTS`);
* the echo fields :data:`ECHO_FIELDS` -- fwd ``b h s d scale_s bias lse mask v``, bwd ``b h s d scale bias mask``
  (later bwd generations add ``dbias p_drop s_randval deterministic``, later fwd ones ``p_drop``, and
  ``squant`` became ``qscale``), each readable (``h:8/2``, ``s:128/256(512)``, ...);
* with ``-kname=1`` (always passed by the runner) one CK kernel name (``fmha_...``, :data:`KERNEL_NAME_PREFIX`) per
  launched kernel, printed before the timing and the verdict -- so a line with a ``valid:`` verdict or a timing
  but no kernel name is not real output.  ``..., not supported yet`` launched nothing and legitimately has no
  kernel name (an append-KV run may print the append kernel's name before it);
* no field outside the grammar above (every field is ``key:value``, a kernel name, ``<x> ms|TFlops|GB/s``,
  ``valid:y|n`` or ``not supported yet``).

Nothing here decides a verdict; :mod:`ckfmha.upstream.tile_runner` does, from this and the exit status.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HEAD = re.compile(r"^\[(?P<prec>[^|\]\s]+)\|(?P<mode>[^|\]\s]+)\|(?P<layout>[^\]\s]+)\]\s+(?P<rest>.*)$")
_KV = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*):(?P<val>.*)$")
_NUM_UNIT = re.compile(r"^(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan)\s+(?P<unit>ms|TFlops|GB/s)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DETERMINISTIC = re.compile(r"^Deterministic mode ON: (?P<mb>\d+) MByte")
_JSON_WRITTEN = re.compile(r"^Results written to (?P<path>.+?) successfully")


MODES = ("batch", "group")
LAYOUTS = ("bhsd", "bshd", "bhsd-bshd", "bshd-bhsd")
# echo fields every -kname-capable generation prints (see the module doc)
ECHO_FIELDS = {
    "fwd": ("b", "h", "s", "d", "scale_s", "bias", "lse", "mask", "v"),
    "bwd": ("b", "h", "s", "d", "scale", "bias", "mask"),
}
KERNEL_NAME_PREFIX = "fmha_"


class TileOutputError(ValueError):
    """A field of a result line that cannot be read."""


def split_fields(text: str) -> list[str]:
    """Split on ``", "`` outside square brackets (padding diagnostics hold ``[a,b]`` lists)."""
    out: list[str] = []
    cur: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        if depth == 0 and text.startswith(", ", i):
            out.append("".join(cur).strip())
            cur = []
            i += 2
            continue
        cur.append(c)
        i += 1
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


@dataclass
class TileOutput:
    """Everything read from one run's stdout (and its JSON file)."""

    result_line: str | None = None
    prec: str | None = None
    mode: str | None = None
    layout: str | None = None
    echo: dict[str, str] = field(default_factory=dict)  # every key:value of the problem echo, raw text
    kernels: list[str] = field(default_factory=list)
    ms: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    valid: bool | None = None
    not_supported: bool = False
    unparsed: list[str] = field(default_factory=list)  # fields of the result line nothing above understood
    other_lines: list[str] = field(default_factory=list)  # non-empty stdout lines outside the result line
    deterministic_workspace_mb: int | None = None
    json_path: str | None = None
    json_disabled: bool = False
    json_result: dict | None = None
    json_error: str | None = None

    @property
    def has_result_line(self) -> bool:
        return self.result_line is not None

    # ------------------------------------------------------------------ typed views of the echo
    def echo_values(self) -> dict[str, Any]:
        """The echo converted to Python values (``h`` -> (nhead, nhead_k), ``s`` -> (sq, sk, kpad|None),
        ``d`` -> (dq, dv), numbers as int/float, padding lists as lists); unknown keys stay text."""
        out: dict[str, Any] = {}
        for k, v in self.echo.items():
            try:
                out[k] = _convert(k, v)
            except (ValueError, IndexError):
                raise TileOutputError(f"result line field {k}:{v!r} cannot be read") from None
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "result_line": self.result_line,
            "prec": self.prec,
            "mode": self.mode,
            "layout": self.layout,
            "echo": dict(self.echo),
            "kernels": list(self.kernels),
            "ms": self.ms,
            "tflops": self.tflops,
            "gbps": self.gbps,
            "valid": self.valid,
            "not_supported": self.not_supported,
            "unparsed": list(self.unparsed),
            "deterministic_workspace_mb": self.deterministic_workspace_mb,
            "json_path": self.json_path,
            "json_disabled": self.json_disabled,
            "json_result": self.json_result,
            "json_error": self.json_error,
        }


def _pair(v: str, conv=int) -> tuple:
    a, b = v.split("/", 1)
    return conv(a), conv(b)


def _convert(key: str, v: str) -> Any:
    if key == "h" or key == "d":
        return _pair(v)
    if key == "s":
        m = re.match(r"^(-?\d+)/(-?\d+)(?:\((-?\d+)\))?$", v)
        if not m:
            raise ValueError(v)
        return int(m.group(1)), int(m.group(2)), (int(m.group(3)) if m.group(3) is not None else None)
    if v.startswith("[") and v.endswith("]"):
        inner = v[1:-1].strip()
        return [int(x) for x in re.split(r"\s*,\s*", inner)] if inner else []
    if key == "workspace":
        return int(v[:-3]) if v.endswith("MiB") else v
    if key == "rotary_dim":
        m = re.match(r"^(\d+)\((inter|half)\)$", v)
        if not m:
            raise ValueError(v)
        return int(m.group(1)), m.group(2)
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?inf|nan", v):
        return float(v)
    return v


def _parse_result(text: str, out: TileOutput) -> None:
    m = _HEAD.match(text)
    assert m is not None
    out.prec, out.mode, out.layout = m.group("prec"), m.group("mode"), m.group("layout")
    for tok in split_fields(m.group("rest")):
        if not tok:
            continue
        if tok == "not supported yet":
            out.not_supported = True
            continue
        nu = _NUM_UNIT.match(tok)
        if nu:
            setattr(out, {"ms": "ms", "TFlops": "tflops", "GB/s": "gbps"}[nu.group("unit")], float(nu.group("num")))
            continue
        kv = _KV.match(tok)
        if kv:
            key, val = kv.group("key"), kv.group("val").strip()
            if key == "valid":
                if val in ("y", "n"):
                    out.valid = val == "y"
                else:
                    out.unparsed.append(tok)
                continue
            out.echo[key] = val
            continue
        if _NAME.match(tok):
            out.kernels.append(tok)
            continue
        out.unparsed.append(tok)


def parse_stdout(stdout: str, json_file: str | Path | None = None) -> TileOutput:
    """Parse a run's stdout completely; read ``json_file`` when given and present."""
    out = TileOutput()
    lines = stdout.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if out.result_line is None and _HEAD.match(line):
            parts = [line]
            j = i + 1
            while j < len(lines):
                nxt = lines[j].rstrip()
                dm = _DETERMINISTIC.match(nxt)
                if dm:
                    out.deterministic_workspace_mb = int(dm.group("mb"))
                    j += 1
                    continue
                if nxt.startswith(", "):
                    parts.append(nxt)
                    j += 1
                    continue
                break
            out.result_line = "".join(parts)
            _parse_result(out.result_line, out)
            i = j
            continue
        if line.strip():
            dm = _DETERMINISTIC.match(line)
            jm = _JSON_WRITTEN.match(line)
            if dm:
                out.deterministic_workspace_mb = int(dm.group("mb"))
            elif jm:
                out.json_path = jm.group("path")
            elif line.startswith("JSON dump disabled"):
                out.json_disabled = True
            else:
                out.other_lines.append(line)
        i += 1
    if json_file is not None:
        p = Path(json_file)
        if p.is_file():
            try:
                data = json.loads(p.read_text())
                out.json_result = data if isinstance(data, dict) else {"value": data}
            except (OSError, ValueError) as e:
                out.json_error = f"{p}: {e}"
    return out


def format_problems(out: TileOutput, binary: str) -> list[str]:
    """What keeps ``out``'s result line from being a real ``tile_example_fmha_<binary>`` line printed with
    ``-kname=1`` (see the module doc); empty when it is one.  ``binary`` is ``fwd`` or ``bwd``.  Call only when
    there is a result line."""
    if binary not in ECHO_FIELDS:
        raise ValueError(f"binary: {binary!r} must be one of {', '.join(ECHO_FIELDS)}")
    if out.result_line is None:
        raise ValueError("format_problems: the output has no result line")
    problems: list[str] = []
    if out.mode not in MODES:
        problems.append(f"mode {out.mode!r} in the head is not one of {', '.join(MODES)}")
    if out.layout not in LAYOUTS:
        problems.append(f"layout {out.layout!r} in the head is not one of {', '.join(LAYOUTS)}")
    missing = [k for k in ECHO_FIELDS[binary] if k not in out.echo]
    if missing:
        problems.append(
            f"no problem echo field{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(tile_example_fmha_{binary} always prints {' '.join(ECHO_FIELDS[binary])})"
        )
    else:
        try:
            out.echo_values()
        except TileOutputError as e:
            problems.append(str(e))
    not_kernels = [k for k in out.kernels if not k.startswith(KERNEL_NAME_PREFIX)]
    if not_kernels:
        problems.append(
            f"field{'s' if len(not_kernels) > 1 else ''} {', '.join(map(repr, not_kernels))} "
            f"{'are' if len(not_kernels) > 1 else 'is'} neither key:value nor a CK kernel name "
            f"({KERNEL_NAME_PREFIX}...)"
        )
    claims_a_run = out.valid is not None or out.ms is not None
    if claims_a_run and not out.not_supported and not any(k.startswith(KERNEL_NAME_PREFIX) for k in out.kernels):
        problems.append(
            "no kernel name although -kname=1 was passed (a run that printed "
            + ("a valid: verdict" if out.valid is not None else "a timing")
            + " launched a kernel)"
        )
    if out.unparsed:
        problems.append(
            "field"
            + ("s" if len(out.unparsed) > 1 else "")
            + " "
            + ", ".join(map(repr, out.unparsed))
            + " not in the result line's grammar"
        )
    return problems


def json_verification(out: TileOutput) -> bool | None:
    """``verification`` of the JSON file as a bool (``pass`` / ``fail``), else None."""
    if not out.json_result:
        return None
    v = out.json_result.get("verification")
    if v == "pass":
        return True
    if v == "fail":
        return False
    return None
