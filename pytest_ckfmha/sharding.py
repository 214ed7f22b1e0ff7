"""Splitting one sweep over several machines (``--ckfmha-shard K/N``) and resuming an interrupted run
(``--ckfmha-resume PREV.json``): which collected items this run keeps.

| option | items kept | report |
|---|---|---|
| ``--ckfmha-shard K/N`` | the kernel groups (scheduling.kernel_groups: each kernel's items together) assigned to shard K; groups are assigned largest estimated cost first, each to the least-loaded shard (ties: the lower shard), cost = the items' FLOPs (ckfmha.work.flops of the problem), so every machine computes the same split | ``shard: {index: K, count: N}``; ``ckfmha merge`` joins the N reports |
| ``--ckfmha-resume PREV.json`` | the items PREV did not complete (its verdict ``not_run``, or absent) | PREV's rows of the completed items are carried into this report, which then covers the whole run (``resumed_from``) |

Both apply after ``-k`` / ``-m`` deselection and to every collected item (a non-ckfmha test is a group of its own,
cost 1).  A resumed run must be the same run: PREV's category, arch, seed, receipt, profile, kernels per shape,
backend option and shard must equal this run's (a usage error otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

#: run fields a report to resume from must share with this run
SAME_RUN_KEYS = ("category", "arch", "seed", "receipt", "profile", "max_kernels_per_shape", "backend_option")


def item_cost(item) -> float:
    """Estimated cost of an item: its problem's FLOPs (plus one, so empty problems count), 1 for other tests."""
    problem = getattr(item, "problem", None)  # ckfmha's items name their problem
    if problem is None:
        return 1.0
    from ckfmha.work import flops

    return float(flops(problem)) + 1.0


def assign_shards(nodeids: Sequence[str], costs: dict[str, float], count: int) -> dict[str, int]:
    """Group -> shard (1-based) for the kernel groups of ``nodeids`` (see the module doc)."""
    from pytest_ckfmha.scheduling import kernel_groups

    groups = kernel_groups(nodeids)
    cost: dict[str, float] = {}
    for nid, g in groups.items():
        cost[g] = cost.get(g, 0.0) + costs.get(nid, 1.0)
    loads = [0.0] * count
    shard_of: dict[str, int] = {}
    for g, c in sorted(cost.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(count), key=lambda i: (loads[i], i))
        loads[k] += c
        shard_of[g] = k + 1
    return {nid: shard_of[groups[nid]] for nid in nodeids}


def completed_nodeids(rows: list[dict[str, Any]]) -> set[str]:
    return {str(r.get("nodeid") or "") for r in rows if r.get("verdict") not in ("not_run", None, "")}


def check_same_run(settings, meta: dict[str, Any], path: str) -> None:
    from pytest_ckfmha.reporting import meta_for

    ours = meta_for(settings, [], None)
    for key in SAME_RUN_KEYS:
        if meta.get(key) != ours.get(key):
            raise pytest.UsageError(
                f"--ckfmha-resume: {path!r}: {key} is {meta.get(key)!r} there and "
                f"{ours.get(key)!r} here: resume the same run"
            )
    theirs = meta.get("shard")
    mine = {"index": settings.shard[0], "count": settings.shard[1]} if settings.shard else None
    if theirs != mine:
        raise pytest.UsageError(
            f"--ckfmha-resume: {path!r}: shard {theirs!r} there, {mine!r} here: resume the same shard"
        )


def select(config, items: list) -> None:
    """Deselect (pytest_deselected) what this run does not run: other shards, items PREV completed."""
    from pytest_ckfmha.state import get_state

    st = get_state(config)
    s = st.settings
    drop: list = []
    keep = list(items)
    if s.shard is not None:
        k, n = s.shard
        nodeids = [i.nodeid for i in keep]
        shard = assign_shards(nodeids, {i.nodeid: item_cost(i) for i in keep}, n)
        drop += [i for i in keep if shard[i.nodeid] != k]
        keep = [i for i in keep if shard[i.nodeid] == k]
    if s.resume is not None:
        done = completed_nodeids(st.resumed_rows())
        drop += [i for i in keep if i.nodeid in done]
        keep = [i for i in keep if i.nodeid not in done]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
