"""What an item costs, for ordering the xdist queue (scheduling.py) and balancing shards (sharding.py).

| source | an item's cost |
|---|---|
| the model (default) | its problem's FLOPs (:func:`ckfmha.work.flops`) plus one, so empty problems count; 1 for a test that names no problem |
| ``--ckfmha-durations PREV.json`` | its measured seconds in PREV (docs/report_schema.md): the row's ``duration_s`` (pytest's call duration), else ``time_ms`` / 1000 + ``build_s``; a row is found by its node id (an xdist ``@group`` suffix dropped), else by its ``id`` |
| ``--ckfmha-durations``, an item PREV has no time for | the mean of the measured items (pytest-split's rule); the model when PREV measured none of this run's items |

The controller of an xdist run has node ids only: :func:`nodeid_costs` finds each item's problem through the
session's state (the matrix shapes, the CK smoke lines, the parity problems); the shard selection has the items
(:func:`item_costs`).  Costs are plain floats; only their order and sums matter.  :func:`nodeid_memory` gives the
scheduler each item's peak host memory (:func:`ckfmha.work.host_bytes`) for ``--ckfmha-memory-budget``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_ckfmha.durations import (  # noqa: F401 - measured seconds, re-exported where costs are used
    durations_of,
    load_durations,
    row_seconds,
)
from pytest_ckfmha.ids import NodeId


def model_cost(problem) -> float:
    """The model's cost of a problem (None: a test without one)."""
    if problem is None:
        return 1.0
    from ckfmha.work import flops

    return float(flops(problem)) + 1.0


def measured(nodeid: str, durations: Mapping[str, float]) -> float | None:
    base = nodeid.split("@", 1)[0]
    if base in durations:
        return durations[base]
    node = NodeId.parse(base)
    return durations.get("id:" + node.item_id) if node is not None else None


def costs(
    nodeids: Sequence[str], model: Callable[[str], float], durations: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Node id -> cost (module doc): the measured seconds where ``durations`` has them, else ``model``."""
    if durations:
        found = {n: measured(n, durations) for n in nodeids}
        known = [s for s in found.values() if s is not None]
        if known:
            mean = sum(known) / len(known)
            return {n: (s if s is not None else mean) for n, s in found.items()}
    return {n: model(n) for n in nodeids}


def item_costs(items: Sequence[Any], durations: Mapping[str, float] | None = None) -> dict[str, float]:
    """Costs of collected items (their ``problem`` attribute feeds the model)."""
    by_id = {i.nodeid: getattr(i, "problem", None) for i in items}
    return costs(list(by_id), lambda n: model_cost(by_id[n]), durations)


def problems_by_key(state) -> dict[str, Any]:
    """The session's problems by the part of the node id that names them: the shape id (matrix), the line id
    (CK smoke), the label (parity)."""
    s = state.settings
    out: dict[str, Any] = {}
    if s.category is not None:
        out.update({spec.shape_id: spec.shape.problem for spec in state.specs()})
    if s.ck_smoke is not None:
        out.update({sp.shape_id: sp.shape.problem for sp in state.smoke_specs() if hasattr(sp, "shape")})
    if s.parity is not None:
        out.update(dict(state.parity_problems()))
    return out


def _problem_lookup(config) -> Callable[[str], Any] | None:
    """Node id -> its problem (None: a test without one), through the session's state; None without a state."""
    from pytest_ckfmha.state import get_state, has_state

    if not has_state(config):
        return None
    try:
        problems = problems_by_key(get_state(config))
    except Exception:  # noqa: BLE001 - costs only order the queue: a selection error is pytest's to report
        problems = {}

    def problem(nid: str) -> Any:
        node = NodeId.parse(nid)
        if node is None:
            return None
        return problems.get(node.name if node.kind == "parity" else node.scope)

    return problem


def nodeid_costs(config, nodeids: Sequence[str]) -> dict[str, float]:
    """The costs of the collected ``nodeids`` (the xdist controller's view, module doc)."""
    from pytest_ckfmha.state import get_state

    problem = _problem_lookup(config)
    if problem is None:
        return {n: 1.0 for n in nodeids}
    settings = get_state(config).settings
    durations = load_durations(settings.durations) if settings.durations else None
    return costs(nodeids, lambda nid: model_cost(problem(nid)), durations)


def nodeid_memory(config, nodeids: Sequence[str]) -> dict[str, float]:
    """Node id -> the bytes its item holds at its peak (:func:`ckfmha.work.host_bytes`; 0 without a problem)."""
    from ckfmha.work import host_bytes

    problem = _problem_lookup(config)
    if problem is None:
        return {n: 0.0 for n in nodeids}
    out = {}
    for nid in nodeids:
        p = problem(nid)
        out[nid] = float(host_bytes(p)) if p is not None else 0.0
    return out
