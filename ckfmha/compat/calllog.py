"""The per-process log of compat calls: one :class:`CallRecord` per entry-point call, saying which ckfmha kernels
(ids and CK instance names, per stage) ran it.  The pytest plugin writes it with ``--ckfmha-flash-attn-compat``
and ``--ckfmha-report`` (:func:`write_log`, after each test that made calls and at the session's end; a record is final
once recorded); ``ckfmha coverage`` reads it (:data:`LOG_SCHEMA`).

| field of a call | what |
|---|---|
| ``entry`` | the entry point (``fwd``, ``varlen_fwd``, ``bwd``, ``varlen_bwd``, ``fwd_kvcache``) |
| ``nodeid`` | the pytest item that made the call (``PYTEST_CURRENT_TEST``), else ``""`` |
| ``backend`` / ``arch`` | the backend that ran it and the kernel space it planned over |
| ``problem`` | the ckfmha problem in CK's tile_example syntax (``str(Problem)``) |
| ``family`` | the ckfmha problem family |
| ``features`` | what the call exercised: ``mode``, ``mask``, ``alibi``, ``dropout``, ``paged_kv``, ``padding`` (batch-mode effective lengths or group-mode ragged lengths), ``gqa``, ``deterministic``, ``num_splits``, ``appendkv``, ``rope``, ``cache_batch_idx``, ``ngroups_swapped`` |
| ``fa_path`` | the CK api FA's C++ calls for it (``fmha_fwd``, ``fmha_fwd_splitkv``, ``fmha_fwd_appendkv+fmha_fwd_splitkv``, ``fmha_bwd``) |
| ``stages`` | ``[{role, kernel_id, ck_name, num_splits}]`` in plan order; empty when FA calls no kernel (``seqlen_k == 0``) |
| ``note`` | how the plan was made when it is not the dispatcher's own (e.g. FA's split-KV with one split) |
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LOG_SCHEMA = "ckfmha.flash_attn_calls"
LOG_VERSION = 1

_LOCK = threading.Lock()
_CALLS: list["CallRecord"] = []
# _CALLS[i] as one line of JSON, made once by write_log (a recorded call is final): the plugin rewrites the whole log
# after every test that made calls, so each rewrite costs the log's size in bytes, not a re-serialization
_ENCODED: list[str] = []


@dataclass
class CallRecord:
    entry: str
    backend: str
    arch: str
    problem: str
    family: str
    features: dict[str, Any]
    fa_path: str
    stages: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    nodeid: str = ""


def current_nodeid() -> str:
    """The running pytest item's node id (``PYTEST_CURRENT_TEST`` without its `` (call)`` phase), else ``""``."""
    v = os.environ.get("PYTEST_CURRENT_TEST", "")
    return v.rsplit(" (", 1)[0] if v else ""


def record(rec: CallRecord) -> None:
    if not rec.nodeid:
        rec.nodeid = current_nodeid()
    with _LOCK:
        _CALLS.append(rec)


def calls() -> list[CallRecord]:
    """A copy of this process's log."""
    with _LOCK:
        return list(_CALLS)


def count() -> int:
    """How many calls this process's log holds (cheap: the plugin asks after every test)."""
    with _LOCK:
        return len(_CALLS)


def clear() -> None:
    with _LOCK:
        _CALLS.clear()
        _ENCODED.clear()


def _encoded() -> list[str]:
    """Each call of the log as one line of JSON, the calls recorded since the last time serialized now."""
    with _LOCK:
        _ENCODED.extend(json.dumps(asdict(c)) for c in _CALLS[len(_ENCODED) :])
        return list(_ENCODED)


def log_doc(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The log as the JSON document :func:`write_log` writes."""
    return {"schema": LOG_SCHEMA, "version": LOG_VERSION, **(extra or {}), "calls": [asdict(c) for c in calls()]}


def write_log(path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write the log (:func:`log_doc`'s document, one call a line) to ``path`` atomically: a temporary file beside it
    (``<name>.tmp<pid>``) renamed into place, so a reader or a kill mid-write sees the previous log or this one, never
    a partial file; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = {"schema": LOG_SCHEMA, "version": LOG_VERSION, **(extra or {})}
    head.pop("calls", None)
    lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items())]
    encoded = _encoded()
    if encoded:
        lines += [' "calls": [', ",\n".join(f"  {c}" for c in encoded), " ]", "}"]
    else:
        lines += [' "calls": []', "}"]
    tmp = p.with_name(p.name + f".tmp{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p
