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


class TileOutputError(ValueError):
    """A field of a result line that cannot be read."""


def split_fields(text: str) -> list[str]:
    """Split on ``", "`` outside square brackets (padding diagnostics hold ``[a,b]`` lists)."""
    out, depth, cur, i = [], 0, [], 0
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
        return {"result_line": self.result_line, "prec": self.prec, "mode": self.mode, "layout": self.layout,
                "echo": dict(self.echo), "kernels": list(self.kernels), "ms": self.ms, "tflops": self.tflops,
                "gbps": self.gbps, "valid": self.valid, "not_supported": self.not_supported,
                "unparsed": list(self.unparsed), "deterministic_workspace_mb": self.deterministic_workspace_mb,
                "json_path": self.json_path, "json_disabled": self.json_disabled, "json_result": self.json_result,
                "json_error": self.json_error}


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
            val = float(nu.group("num"))
            setattr(out, {"ms": "ms", "TFlops": "tflops", "GB/s": "gbps"}[nu.group("unit")], val)
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
