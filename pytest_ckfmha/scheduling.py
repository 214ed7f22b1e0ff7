"""ckfmha's xdist scheduler: ``-n N`` builds each kernel once, then spreads its items over every worker,
longest first; it survives dying workers.

Registered through ``pytest_xdist_make_scheduler`` when a ckfmha run uses ``-n`` without an explicit ``--dist``.

| concern | rule |
|---|---|
| kernel groups | :func:`kernel_groups` (the rule of :meth:`pytest_ckfmha.ids.NodeId.group_kernel` that the ``xdist_group`` marker follows too): a kernel item's group is its kernel (``kernel:<kernel id>``); a plan item joins the first kernel item of its shape in the collection (its best-ranked kernel, which its plan normally uses); other items are groups of one |
| builds once | a group's first item (its cheapest, so the build is done soonest) runs first, alone; its siblings are *held* until it completes -- only the worker running it may take them meanwhile (they run after it there) -- then *released*: any worker takes them, from the build cache (``ckfmha/backends/cache.py``; its file lock keeps a build that still races safe) |
| cost | :mod:`pytest_ckfmha.costs`: the problem's FLOPs, or the seconds measured in ``--ckfmha-durations PREV.json`` |
| shape affinity | a worker is given first a *released* item of a shape it holds -- those (:attr:`pytest_ckfmha.ids.NodeId.scope`) of the last :data:`SHAPES_KEPT` items sent to it, the latest first; costliest first within a shape -- when the memory rule admits one: its kernel process keeps those shapes' inputs and references (the memos of :mod:`pytest_ckfmha.execute` and :mod:`pytest_ckfmha.refcache`; on an H100 a nightly shape's first item spent up to 74 s making them, the next one 2.5 s). Other workers pass over the released items of shapes a worker holds while anything else is admitted, so a shape's items wait for the worker that has its data instead of being made again side by side. Never an unbuilt group's first item nor a held sibling (builds once); an item queued by ``mark_test_pending`` still goes first; items of no ckfmha node id, and refused CK smoke lines, have no shape |
| order | otherwise, the next item of a worker is the costlier of (the released item of highest cost, the first item of the unbuilt group of highest total cost): ties go to the build; ties of cost keep collection order. A worker is given items while it has fewer than two pending (xdist runs an item only once it knows the next one); with neither, it takes a held sibling of a build it runs, else it waits (never shut down while held items remain) |
| memory | ``--ckfmha-memory-budget`` (default 0.6 of MemTotal): a worker's footprint is the largest estimated peak (:func:`ckfmha.work.host_bytes`) of the items it holds (they run one after the other); an item is sent to a worker only while the summed footprints stay within the budget; an item that fits nowhere waits (the next that fits goes first), and when no worker could start anything the next item goes anyway (one item always runs, however large) |
| a worker dies | the item it was running is reported failed (``crashed``, the worker's exit status -- see :func:`crash_description`) and is **not** re-run; the rest of its work is queued again (a group whose build was on it is unbuilt again); xdist replaces the worker (``--max-worker-restart``) and the run goes on |
| ``mark_test_pending`` | the item is queued again ahead of everything (for rerun plugins) |

Grouping reads node ids only, never xdist's ``@group`` node-id suffix, so it works whatever pytest does with
``item._nodeid``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

from pytest_ckfmha.ids import NodeId
from pytest_ckfmha.refcache import SHAPES_KEPT  # the shapes a worker's kernel process keeps


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


class WorkPool:
    """The items not sent yet (module doc): unbuilt kernel groups, held siblings and released items."""

    def __init__(self, collection: Sequence[str], groups: dict[str, str], cost: dict[str, float]) -> None:
        self.index = {n: i for i, n in enumerate(collection)}
        self.groups = groups
        self.cost = cost
        self.unbuilt: dict[str, list[str]] = {}  # group -> its items, cheapest first; none sent
        self.held: dict[str, list[str]] = {}  # group -> the siblings waiting for its build
        self.builder: dict[str, str] = {}  # group -> its build item (sent, not completed)
        self._groups: list[tuple[float, int, str]] = []  # heap over unbuilt (stale entries skipped)
        self._ready: list[tuple[float, int, str]] = []  # heap of released items (stale entries skipped)
        self._released: dict[str, tuple[float, int, str]] = {}  # released item not taken -> its entry in _ready
        self.scopes = {n: shape_of(n) for n in collection}  # node id -> its shape (None: none)
        self._by_scope: dict[str, set[str]] = {}  # shape -> its released items (taken ones dropped lazily)

    def __len__(self) -> int:
        return len(self._released) + sum(map(len, self.unbuilt.values())) + sum(map(len, self.held.values()))

    def add_group(self, group: str, ids: Sequence[str]) -> None:
        """Queue a group's items: a kernel group of several is unbuilt, anything else released."""
        if len(ids) < 2 or not group.startswith("kernel:"):
            for nid in ids:
                self.release(nid)
            return
        self.unbuilt[group] = sorted(ids, key=lambda n: (self.cost.get(n, 1.0), self.index[n]))
        total = sum(self.cost.get(n, 1.0) for n in ids)
        heapq.heappush(self._groups, (-total, min(self.index[n] for n in ids), group))

    def release(self, nid: str, first: bool = False) -> None:
        """Any worker may take ``nid`` now (``first``: ahead of everything)."""
        entry = (-math.inf if first else -self.cost.get(nid, 1.0), self.index[nid], nid)
        self._released[nid] = entry  # an older entry of nid in _ready is stale now
        heapq.heappush(self._ready, entry)
        scope = self.scopes.get(nid)
        if scope is not None:
            self._by_scope.setdefault(scope, set()).add(nid)

    def _top_ready(self) -> tuple[float, int, str] | None:
        while self._ready and self._released.get(self._ready[0][2]) != self._ready[0]:
            heapq.heappop(self._ready)  # taken through shape affinity, or released again since
        return self._ready[0] if self._ready else None

    def _take_of_scope(self, scope: str, fits: Callable[[str], bool]) -> str | None:
        """The released item of shape ``scope`` that goes first (costliest) among those ``fits`` admits."""
        ids = self._by_scope.get(scope, set())
        ids.intersection_update(self._released)
        for _, _, nid in sorted(self._released[n] for n in ids):
            if fits(nid):
                ids.discard(nid)
                del self._released[nid]  # its entry in _ready is stale now
                return nid
        return None

    def _top_group(self) -> tuple[float, str] | None:
        while self._groups and self._groups[0][2] not in self.unbuilt:
            heapq.heappop(self._groups)
        return (-self._groups[0][0], self._groups[0][2]) if self._groups else None

    def take(
        self,
        fits: Callable[[str], bool] = lambda nid: True,
        prefer: Sequence[str] = (),
        avoid: Collection[str] = (),
    ) -> str | None:
        """The next item by the module doc's order among those that ``fits`` admits (None: none admitted, only
        held items, or nothing, are left); the items passed over keep their places.  Shape affinity: a released
        item of the shapes ``prefer`` (in that order) first; released items of the shapes ``avoid`` (another
        worker's) only when nothing else is admitted."""
        top = self._top_ready()
        if top is None or top[0] != -math.inf:  # mark_test_pending's go first
            for scope in prefer:
                nid = self._take_of_scope(scope, fits)
                if nid is not None:
                    return nid
        if avoid:
            nid = self._take_in_order(fits, lambda n: self.scopes.get(n) in avoid)
            if nid is not None:
                return nid
        return self._take_in_order(fits)

    def _take_in_order(
        self, fits: Callable[[str], bool], pass_over: Callable[[str], bool] = lambda nid: False
    ) -> str | None:
        """The module doc's order: the costlier of the top released item and the top unbuilt group's build;
        released items ``pass_over`` names are passed over (builds never are)."""
        passed_ready: list[tuple[float, int, str]] = []
        passed_groups: list[tuple[float, int, str]] = []
        try:
            while True:
                group = self._top_group()
                ready = self._top_ready()
                if ready is not None and (group is None or -ready[0] > group[0]):
                    entry = heapq.heappop(self._ready)
                    if fits(entry[2]) and not pass_over(entry[2]):
                        del self._released[entry[2]]
                        return entry[2]
                    passed_ready.append(entry)
                    continue
                if group is None:
                    return None
                entry = heapq.heappop(self._groups)
                g = entry[2]
                if not fits(self.unbuilt[g][0]):
                    passed_groups.append(entry)
                    continue
                first, *rest = self.unbuilt.pop(g)
                self.builder[g] = first
                self.held[g] = rest
                return first
        finally:
            for e in passed_ready:
                heapq.heappush(self._ready, e)
            for e in passed_groups:
                heapq.heappush(self._groups, e)

    def take_held(self, running: Sequence[str], fits: Callable[[str], bool] = lambda nid: True) -> str | None:
        """A held sibling of a build among ``running`` (a worker's pending items), costliest first, that ``fits``
        admits."""
        for nid in running:
            g = self.groups.get(nid, nid)
            if self.builder.get(g) == nid and self.held.get(g):
                for i in range(len(self.held[g]) - 1, -1, -1):
                    if fits(self.held[g][i]):
                        return self.held[g].pop(i)
        return None

    def built(self, nid: str) -> bool:
        """``nid`` completed; True when it was a build whose siblings are released now."""
        g = self.groups.get(nid, nid)
        if self.builder.get(g) != nid:
            return False
        del self.builder[g]
        siblings = self.held.pop(g, [])
        for s in siblings:
            self.release(s)
        return bool(siblings)

    def give_back(self, crashed: str, rest: Sequence[str]) -> None:
        """A worker died running ``crashed`` with ``rest`` pending: its unfinished builds' groups are unbuilt
        again (with their held siblings), every other item is released."""
        lost = {self.groups.get(n, n) for n in (crashed, *rest)}
        again: dict[str, list[str]] = {}
        for g in [g for g in lost if g in self.builder]:
            b = self.builder.pop(g)
            again[g] = ([] if b == crashed else [b]) + self.held.pop(g, [])
        for nid in rest:
            g = self.groups.get(nid, nid)
            if g in again:
                if nid not in again[g]:
                    again[g].append(nid)
            else:
                self.release(nid)
        for g, ids in again.items():
            self.add_group(g, ids)


def shape_of(nid: str) -> str | None:
    """The shape whose inputs and reference the item ``nid`` uses (shape affinity, module doc): its
    :attr:`NodeId.scope`; None for an item of no ckfmha node id or a refused CK smoke line (it runs nothing)."""
    node = NodeId.parse(nid)
    return None if node is None or node.kind == "refused" else node.scope


CostFunction = Callable[[Sequence[str]], dict[str, float]]


class BuildOnceScheduling:
    """The xdist scheduling protocol (xdist.scheduler.protocol.Scheduling): each kernel built once, then its
    items spread, longest first (module doc).  ``costs``: node ids -> their costs (default: all 1)."""

    def __init__(
        self,
        numnodes: int,
        log=None,
        costs: CostFunction | None = None,
        memory: CostFunction | None = None,
        budget: float | None = None,
    ) -> None:
        self.numnodes = numnodes
        self.log = log.ckfmhasched if log is not None else (lambda *a: None)
        self.costs = costs
        self.memory_of = memory  # node ids -> estimated peak bytes (the memory row of the module doc)
        self.budget = budget  # bytes the items held at once may take (None: no limit)
        self.memory: dict[str, float] = {}
        self.collection: list[str] | None = None
        self.registered: dict[Any, list[str]] = {}  # node -> its collection
        self.assigned: dict[Any, list[str]] = {}  # node -> node ids sent, in order
        self.done: set[str] = set()
        self._first: dict[Any, int] = {}  # node -> index of its first sent item not done
        self.pool = WorkPool([], {}, {})

    @classmethod
    def from_config(cls, config, log=None) -> "BuildOnceScheduling":
        try:
            from xdist.workermanage import parse_tx_spec_config
        except ImportError:  # pytest-xdist < 3.7 names it parse_spec_config
            from xdist.workermanage import parse_spec_config as parse_tx_spec_config
        from pytest_ckfmha.costs import nodeid_costs, nodeid_memory
        from pytest_ckfmha.state import get_state, has_state

        budget = None
        if has_state(config):
            budget = memory_budget_bytes(get_state(config).settings.memory_budget)
        return cls(
            len(parse_tx_spec_config(config)),
            log,
            lambda ids: nodeid_costs(config, ids),
            memory=lambda ids: nodeid_memory(config, ids),
            budget=budget,
        )

    # ---------------------------------------------------------------- protocol properties
    @property
    def nodes(self) -> list:
        return list(self.assigned)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.registered) >= self.numnodes  # nodes stay registered after they leave

    def _pending(self, node) -> list[str]:
        sent = self.assigned.get(node, [])
        i = self._first.get(node, 0)  # items before it are done (xdist completes a worker's items in order)
        while i < len(sent) and sent[i] in self.done:
            i += 1
        self._first[node] = i
        return [n for n in sent[i:] if n not in self.done]

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or len(self.pool):
            return False
        return all(len(self._pending(n)) < 2 for n in self.assigned)

    @property
    def has_pending(self) -> bool:
        return bool(len(self.pool)) or any(self._pending(n) for n in self.assigned)

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
        """Forget ``node``; when it still had work, return the item it was running (never re-run) and queue the
        rest again."""
        sent = self.assigned.pop(node, [])
        pending = [n for n in sent if n not in self.done]
        if not pending:
            return None
        crashed, rest = pending[0], pending[1:]
        self.done.add(crashed)
        self.pool.give_back(crashed, rest)
        self._reschedule_all()
        return crashed

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        nid = self.registered[node][item_index]
        self.done.add(nid)
        self.pool.built(nid)
        # every worker: released siblings may go anywhere, and a worker waiting with its last item must be shut
        # down once the pool runs dry (xdist runs that item only then)
        self._reschedule_all()

    def mark_test_pending(self, item: str) -> None:
        self.done.discard(item)
        for sent in self.assigned.values():
            if item in sent:
                sent.remove(item)
        self._first.clear()
        self.pool.release(item, first=True)
        self._reschedule_all()

    def remove_pending_tests_from_node(self, node, indices: Sequence[int]) -> None:
        raise NotImplementedError("work stealing is not part of ckfmha's scheduler")

    # ---------------------------------------------------------------- scheduling
    def _send(self, node, nid: str) -> None:
        self.assigned[node].append(nid)
        node.send_runtest_some([self.pool.index[nid]])  # every node's collection is self.collection

    def _shapes_held(self, node) -> list[str]:
        """The shapes whose inputs and reference ``node``'s kernel process keeps or is about to make: those of the
        last :data:`SHAPES_KEPT` items sent to it (pending, or run last), the latest first."""
        sent = self.assigned.get(node, [])
        shapes = [self.pool.scopes.get(n) for n in reversed(sent[-SHAPES_KEPT:])]
        return list(dict.fromkeys(sc for sc in shapes if sc is not None))

    def _footprint(self, node) -> float:
        """The memory ``node`` holds: its pending items run one after the other, so the largest of them."""
        return max((self.memory.get(n, 0.0) for n in self._pending(node)), default=0.0)

    def _fits(self, node) -> Callable[[str], bool]:
        """Whether an item sent to ``node`` now keeps the workers' summed footprints within the memory budget
        (module doc)."""
        if self.budget is None or not self.memory:
            return lambda nid: True
        others = sum(self._footprint(other) for other in self.assigned if other is not node)
        own = self._footprint(node)
        budget = self.budget
        return lambda nid: others + max(own, self.memory.get(nid, 0.0)) <= budget

    def _reschedule(self, node, fits: Callable[[str], bool] | None = None) -> None:
        if node.shutting_down or node not in self.registered:
            return
        if not len(self.pool):
            node.shutdown()
            return
        others = {sc for other in self.assigned if other is not node for sc in self._shapes_held(other)}
        while len(self._pending(node)) < 2:
            admit = fits or self._fits(node)
            held = self._shapes_held(node)
            nid = self.pool.take(admit, held, others.difference(held))  # shape affinity
            if nid is None:
                nid = self.pool.take_held(self._pending(node), admit)
            if nid is None:
                return  # only siblings of builds running elsewhere, or items over the budget: wait for one to complete
            self._send(node, nid)

    def _reschedule_all(self) -> None:
        for node in self.nodes:
            self._reschedule(node)
        if len(self.pool) and not any(len(self._pending(n)) >= 2 for n in self.nodes):
            # no worker can start an item (xdist runs one only with the next known): the next goes over the budget
            for node in self.nodes:
                if not node.shutting_down and node in self.registered:
                    before = len(self._pending(node))
                    self._reschedule(node, fits=lambda nid: True)
                    if len(self._pending(node)) > before:
                        break

    def _collections_agree(self) -> bool:
        first = next(iter(self.registered.values()))
        if all(c == first for c in self.registered.values()):
            return True
        from xdist.report import report_collection_diff

        for node, c in self.registered.items():
            msg = report_collection_diff(first, c, "first", node.gateway.id)
            if msg:
                self.log(msg)
        self.log("**Different tests collected, aborting run**")
        return False

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # initial distribution done: a replacement worker joined
            self._reschedule_all()
            return
        if not self._collections_agree():
            return
        self.collection = list(next(iter(self.registered.values())))
        if not self.collection:
            return
        groups = kernel_groups(self.collection)
        cost = self.costs(self.collection) if self.costs is not None else {}
        if self.budget is not None and self.memory_of is not None:
            self.memory = self.memory_of(self.collection)
        self.pool = WorkPool(self.collection, groups, cost)
        units: dict[str, list[str]] = {}
        for nid in self.collection:
            units.setdefault(groups[nid], []).append(nid)
        for g, ids in units.items():
            self.pool.add_group(g, ids)
        for node in self.nodes:  # one item each first, so the first builds go to different workers
            first = self.pool.take(self._fits(node))
            if first is not None:
                self._send(node, first)
        self._reschedule_all()


def memory_budget_bytes(setting: tuple[str, float] | None, total: float | None = None) -> float | None:
    """``--ckfmha-memory-budget``'s bytes: ("share", x) of ``total`` (default: this machine's MemTotal, None
    where /proc/meminfo cannot be read -- no limit then), ("bytes", n), or None (no limit)."""
    if setting is None:
        return None
    kind, value = setting
    if kind == "bytes":
        return value
    if total is None:
        total = machine_memory()
    return None if total is None else value * total


def machine_memory() -> float | None:
    """MemTotal of /proc/meminfo in bytes (None: not Linux, or unreadable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


KernelGroupScheduling = BuildOnceScheduling
"""The earlier name of :class:`BuildOnceScheduling`."""
