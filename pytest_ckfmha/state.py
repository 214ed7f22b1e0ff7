"""Per-config state kept in ``config.stash``: settings, and (lazily) the kernel set, the specs and the runtime.

This module imports none of the item modules (items.py, parity_items.py, ck_smoke.py, isolation.py import it):
the specs are plain data (collect.py, smoke_lines.py), the node ids and report values of items that never
reported come from :class:`pytest_ckfmha.ids.NodeId` and reporting.py, and isolation.py keeps its executor in
:attr:`State.executor`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest

from pytest_ckfmha.ids import NodeId
from pytest_ckfmha.timeline import Timeline

STATE_KEY = pytest.StashKey["State"]()


class State:
    def __init__(self, config, settings) -> None:
        self.config = config
        self.settings = settings
        self._registry = None
        self._specs = None
        self._smoke_specs: list | None = None
        self._runtime = None
        # this process's ChildExecutor or InlineExecutor, made by isolation.executor_of (typed Any: isolation.py
        # imports this module, never the other way round)
        self.executor: Any = None
        self._by_nodeid: dict[NodeId, Callable[[], dict]] | None = None
        self._resumed: Sequence[dict] | None = None
        self.collect_seconds: float | None = None
        self.timeline = Timeline(_process_name(config))  # timeline.py
        self.timeline.mark("configured")

    def registry(self):
        if self._registry is None:
            from ckfmha.registry import Registry
            from pytest_ckfmha.collect import kernel_set

            self._registry = Registry(
                self.settings.arch, kernel_set(self.config, self.settings), source="pytest-ckfmha"
            )
        return self._registry

    def specs(self):
        if self._specs is None:
            import time

            from pytest_ckfmha.collect import build_specs

            t0 = time.perf_counter()
            self._specs = build_specs(self.config, self.settings, self.registry())
            self.collect_seconds = time.perf_counter() - t0
        return self._specs

    def parity_sides(self):
        """(upstream side, ckfmha side) for --ckfmha-parity, made once per session."""
        if getattr(self, "_parity", None) is None:
            from ckfmha.parity import make_pair
            from ckfmha.receipts import resolve_receipt

            s = self.settings
            self._parity = make_pair(
                s.parity,
                f"ckfmha:{s.backend}",
                bin_dir=s.upstream_bin,
                arch=s.arch,
                receipt=resolve_receipt(s.receipt, profile=s.profile),
                mask_mode=s.mask_mode,
            )
        return self._parity

    def resumed_rows(self) -> Sequence[dict]:
        """The rows of ``--ckfmha-resume``'s report ([] without the option): checked once, at the first call
        (ckfmha.runreport.load_report: the schema of the header and of every row, unique ids), then read from the
        file at each pass over them (a report in the line layout is never held in memory here; one that changed
        since is a ckfmha.runreport.ReportError)."""
        if self._resumed is None:
            self._resumed = []
            if self.settings.resume is not None:
                from ckfmha.runreport import load_report

                self._resumed = load_report(self.settings.resume).rows
        return self._resumed

    def close(self) -> None:
        """Stop this process's kernel child (if any), recording how long that took and its warm-up (timeline.py)."""
        if self.executor is not None:
            import time

            t0 = time.perf_counter()
            warm = self.executor.close()
            if self.executor.forks and self.executor.started:  # a child was forked and is stopped now
                self.timeline.close_child_s = round(time.perf_counter() - t0, 3)
                self.timeline.mark("child_closed")
            if warm is not None:
                self.timeline.warm_up = {"seconds": round(warm.seconds, 3), "phases": warm.phases}
                self.timeline.mark("child_warm", warm.ended_at)
            self.executor = None

    def smoke_specs(self) -> list:
        """The ``--ckfmha-ck-smoke`` lines (:func:`pytest_ckfmha.ck_smoke.smoke_specs`), read once."""
        if self._smoke_specs is None:
            from pytest_ckfmha.smoke_lines import smoke_specs

            self._smoke_specs = smoke_specs(self.settings)
        return self._smoke_specs

    def parity_problems(self) -> list:
        """``[(label, Problem)]`` of the parity collector's items: upstream's default set (not with
        ``--ckfmha-ck-smoke``, whose lines are the parity problems), then the category's shapes."""
        from ckfmha.parity import default_parity_set

        problems = []
        if self.settings.ck_smoke is None:
            problems = [(f"default-{i:02d}-{name}", p) for i, (name, p) in enumerate(default_parity_set(), 1)]
        if self.settings.category is not None:
            problems += [(spec.shape_id, spec.shape.problem) for spec in self.specs()]
        return problems

    def describe(self, nodeid: str) -> dict:
        """Report values of the item ``nodeid`` computed here (for items whose own values never arrived: a crashed
        xdist worker's item, an item that never ran)."""
        if self._by_nodeid is None:
            self._by_nodeid = self._describers()
        node = NodeId.parse(nodeid)
        found = self._by_nodeid.get(node) if node is not None else None
        if found is not None:
            return found()
        s = self.settings
        item_id = node.item_id if node is not None else nodeid
        return {"id": item_id, "backend": s.backend, "arch": s.arch, "seed": s.seed}

    def _describers(self) -> dict[NodeId, Callable[[], dict]]:
        """Every item's node id -> its report values before it runs (the items' own NodeId constructors)."""
        from pytest_ckfmha.reporting import base_props, parity_base_props
        from pytest_ckfmha.smoke_lines import SmokeSpec

        s = self.settings
        out: dict[NodeId, Callable[[], dict]] = {}
        if s.category is not None:
            for spec in self.specs():
                for node, k in NodeId.shape_items(spec.shape_id, spec.kernels):
                    out[node] = partial(base_props, node, spec, k, s)
        if s.parity is not None:
            for label, problem in self.parity_problems():
                node = NodeId.parity(s.parity, label)
                out[node] = partial(parity_base_props, node.item_id, problem, s)
        for line in self.smoke_specs() if s.ck_smoke is not None else ():
            if not isinstance(line, SmokeSpec):  # a line CK refuses has no report values to add
                continue
            node = NodeId.smoke_line(line.shape_id, parity=s.parity is not None)
            if s.parity is None:
                out[node] = partial(base_props, node, line, None, s)
            else:
                out[node] = partial(parity_base_props, node.item_id, line.shape.problem, s, line)
        return out

    def runtime(self):
        if self._runtime is None:
            from pytest_ckfmha.execute import Runtime

            self._runtime = Runtime(self.config, self.settings, self.registry())
        return self._runtime


def get_state(config) -> State:
    return config.stash[STATE_KEY]


def has_state(config) -> bool:
    return STATE_KEY in config.stash


def _process_name(config) -> str:
    """``gw<N>`` in an xdist worker, ``controller`` in an xdist controller, ``main`` in a run without workers."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return str(workerinput.get("workerid", "worker"))
    return "controller" if getattr(getattr(config, "option", None), "numprocesses", None) else "main"
