"""ckfmha's xdist scheduler: ``-n N`` keeps each kernel's items on one worker and survives dying workers.

Registered through ``pytest_xdist_make_scheduler`` when a ckfmha run uses ``-n`` without an explicit ``--dist``.

| concern | rule |
|---|---|
| work units | kernel groups (:func:`kernel_groups`, the rule of :meth:`pytest_ckfmha.ids.NodeId.group_kernel` that the ``xdist_group`` marker follows too): a kernel item's group is its kernel (``kernel:<kernel id>``); a plan item joins the first kernel item of its shape in the collection (its best-ranked kernel, which its plan normally uses); other items are groups of one |
| order | larger groups first, then collection order; a worker is given its next group when it has fewer than two items pending (xdist runs an item only once it knows the next one) |
| a worker dies | the item it was running is reported failed (``crashed``, the worker's exit status -- see :func:`crash_description`) and is **not** re-run; the rest of its work goes back to the front of the queue; xdist replaces the worker (``--max-worker-restart``) and the run goes on |
| ``mark_test_pending`` | the item is queued again as a group of one (for rerun plugins) |

Grouping reads node ids only, never xdist's ``@group`` node-id suffix, so it works whatever pytest does with
``item._nodeid``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pytest_ckfmha.ids import NodeId


def kernel_groups(nodeids: Sequence[str]) -> dict[str, str]:
    """Node id -> group name (see the module doc)."""
    groups: dict[str, str] = {}
    first_of_shape: dict[str, str] = {}
    for nid in nodeids:
        node = NodeId.parse(nid)
        if node is not None and node.kernel_id is not None:
            first_of_shape.setdefault(node.scope, node.kernel_id)
        kernel = node.group_kernel(first_of_shape.get(node.scope)) if node is not None else None
        groups[nid] = nid if kernel is None else "kernel:" + kernel
    return groups


def worker_exit_status(node, wait_s: float = 5.0) -> int | None:
    """The exit status of an xdist worker's process (negative: the signal), None when it cannot be read.

    Reads execnet's popen gateway (``gateway._io.popen``): best effort, since that attribute is not public."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        return popen.wait(timeout=wait_s)
    except Exception:  # noqa: BLE001 - still running, or not a subprocess
        return None


def crash_description(node) -> str:
    from pytest_ckfmha.isolation import describe_exit

    wid = getattr(getattr(node, "gateway", None), "id", "?")
    return f"xdist worker {wid} {describe_exit(worker_exit_status(node))}"


class KernelGroupScheduling:
    """The xdist scheduling protocol (xdist.scheduler.protocol.Scheduling) over kernel groups."""

    def __init__(self, numnodes: int, log=None) -> None:
        self.numnodes = numnodes
        self.log = log.ckfmhasched if log is not None else (lambda *a: None)
        self.collection: list[str] | None = None
        self.registered: dict[Any, list[str]] = {}  # node -> its collection
        self.assigned: dict[Any, list[str]] = {}  # node -> node ids sent, in order
        self.done: set[str] = set()
        self.queue: "OrderedDict[str, list[str]]" = OrderedDict()  # group -> node ids not yet sent
        self.groups: dict[str, str] = {}

    @classmethod
    def from_config(cls, config, log=None) -> "KernelGroupScheduling":
        try:
            from xdist.workermanage import parse_tx_spec_config
        except ImportError:  # pytest-xdist < 3.7 names it parse_spec_config
            from xdist.workermanage import parse_spec_config as parse_tx_spec_config

        return cls(len(parse_tx_spec_config(config)), log)

    # ---------------------------------------------------------------- protocol properties
    @property
    def nodes(self) -> list:
        return list(self.assigned)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.registered) >= self.numnodes  # nodes stay registered after they leave

    def _pending(self, node) -> list[str]:
        return [n for n in self.assigned.get(node, ()) if n not in self.done]

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.queue:
            return False
        return all(len(self._pending(n)) < 2 for n in self.assigned)

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(self._pending(n) for n in self.assigned)

    # ---------------------------------------------------------------- nodes and collections
    def add_node(self, node) -> None:
        assert node not in self.assigned
        self.assigned[node] = []

    def add_node_collection(self, node, collection: Sequence[str]) -> None:
        assert node in self.assigned
        if self.collection is not None and list(collection) != self.collection:
            from xdist.report import report_collection_diff

            self.log(report_collection_diff(self.collection, list(collection), "scheduled", node.gateway.id))
            return
        self.registered[node] = list(collection)

    def remove_node(self, node) -> str | None:
        """Forget ``node``; when it still had work, return the item it was running (never re-run) and put the
        rest back at the front of the queue."""
        sent = self.assigned.pop(node, [])
        pending = [n for n in sent if n not in self.done]
        if not pending:
            return None
        crashed, rest = pending[0], pending[1:]
        self.done.add(crashed)
        if rest:
            back: "OrderedDict[str, list[str]]" = OrderedDict()
            for nid in rest:
                back.setdefault(self.groups.get(nid, nid), []).append(nid)
            for g, ids in self.queue.items():
                back.setdefault(g, []).extend(ids)
            self.queue = back
        for other in self.assigned:
            self._reschedule(other)
        return crashed

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        self.done.add(self.registered[node][item_index])
        self._reschedule(node)

    def mark_test_pending(self, item: str) -> None:
        self.done.discard(item)
        for sent in self.assigned.values():
            if item in sent:
                sent.remove(item)
        self.queue[item] = [item]
        self.queue.move_to_end(item, last=False)
        for node in self.assigned:
            self._reschedule(node)

    def remove_pending_tests_from_node(self, node, indices: Sequence[int]) -> None:
        raise NotImplementedError("work stealing is not part of ckfmha's scheduler")

    # ---------------------------------------------------------------- scheduling
    def _send_next(self, node) -> None:
        group, ids = self.queue.popitem(last=False)
        self.assigned[node].extend(ids)
        coll = self.registered[node]
        node.send_runtest_some([coll.index(n) for n in ids])

    def _reschedule(self, node) -> None:
        if node.shutting_down or node not in self.registered:
            return
        if not self.queue:
            node.shutdown()
            return
        if len(self._pending(node)) < 2:
            self._send_next(node)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # initial distribution done: a replacement worker joined
            for node in self.nodes:
                self._reschedule(node)
            return
        first = next(iter(self.registered.values()))
        if any(c != first for c in self.registered.values()):
            from xdist.report import report_collection_diff

            for node, c in self.registered.items():
                msg = report_collection_diff(first, c, "first", node.gateway.id)
                if msg:
                    self.log(msg)
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(first)
        if not self.collection:
            return
        self.groups = kernel_groups(self.collection)
        units: "OrderedDict[str, list[str]]" = OrderedDict()
        for nid in self.collection:
            units.setdefault(self.groups[nid], []).append(nid)
        for g, ids in sorted(units.items(), key=lambda kv: -len(kv[1])):  # stable: ties keep collection order
            self.queue[g] = ids
        for node in self.nodes:
            if self.queue:
                self._send_next(node)
        for node in self.nodes:
            self._reschedule(node)
