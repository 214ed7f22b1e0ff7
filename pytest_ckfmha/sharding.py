"""Splitting one sweep over several machines (``--ckfmha-shard K/N``) and resuming an interrupted run
(``--ckfmha-resume PREV.json``): which collected items this run keeps.

| option | items kept | report |
|---|---|---|
| ``--ckfmha-shard K/N`` | the kernel groups (scheduling.kernel_groups: each kernel's items together, so each kernel is built on one machine) assigned to shard K; groups are assigned largest cost first, each to the least-loaded shard (ties: the lower shard; greedy longest-processing-time), a group's cost = its items' costs (:mod:`pytest_ckfmha.costs`: FLOPs, or the seconds measured in ``--ckfmha-durations PREV.json``), so every machine computes the same split | ``shard: {index: K, count: N}``; ``ckfmha merge`` joins the N reports |
| ``--ckfmha-shard auto`` | K/N from the CI's variables (:func:`pytest_ckfmha.shard_spec.shard_from_env`): GitLab's ``CI_NODE_INDEX`` (1-based) / ``CI_NODE_TOTAL``, else a Kubernetes Indexed Job's ``JOB_COMPLETION_INDEX`` (0-based) with N from ``--ckfmha-shard-total``; none set: a usage error naming them | as K/N |
| ``--ckfmha-resume PREV.json`` | the items PREV did not complete (its verdict ``not_run``, or absent) | PREV's rows of the completed items are carried into this report, which then covers the whole run (``resumed_from``) |

Both apply after ``-k`` / ``-m`` deselection and to every collected item (a non-ckfmha test is a group of its own,
cost 1).  N is at most :data:`MAX_SHARDS` (a usage error naming the rule otherwise; a number of any size is read
exactly, never overflowing).  A resumed run must be the same run: PREV's category, arch, seed, receipt, profile,
kernels per shape, backend option and shard must equal this run's (a usage error otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from pytest_ckfmha.shard_spec import (  # noqa: F401 - the shard spec's names, re-exported where sharding is used
    GITLAB_VARS,
    K8S_INDEX_VAR,
    MAX_SHARDS,
    check_count,
    parse_shard,
    shard_from_env,
)

#: run fields a report to resume from must share with this run
SAME_RUN_KEYS = ("category", "arch", "seed", "receipt", "profile", "max_kernels_per_shape", "backend_option")


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


def completed_nodeids(rows: Iterable[dict[str, Any]]) -> set[str]:
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
    from pytest_ckfmha.costs import item_costs
    from pytest_ckfmha.durations import load_durations
    from pytest_ckfmha.state import get_state

    st = get_state(config)
    s = st.settings
    drop: list = []
    keep = list(items)
    if s.shard is not None:
        k, n = s.shard
        nodeids = [i.nodeid for i in keep]
        shard = assign_shards(nodeids, item_costs(keep, load_durations(s.durations) if s.durations else None), n)
        drop += [i for i in keep if shard[i.nodeid] != k]
        keep = [i for i in keep if shard[i.nodeid] == k]
    if s.resume is not None:
        done = completed_nodeids(st.resumed_rows())
        drop += [i for i in keep if i.nodeid in done]
        keep = [i for i in keep if i.nodeid not in done]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
