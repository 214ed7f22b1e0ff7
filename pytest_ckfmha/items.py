"""The collector tree: ``ckfmha`` (Session-level) -> one collector per shape -> one item per kernel + ``plan``.

Node ids: ``ckfmha::<shape id>::<kernel token>`` and ``ckfmha::<shape id>::plan`` (xdist's loadgroup appends
``@<group>``), rendered by :class:`pytest_ckfmha.ids.NodeId` alone: each item is made from its NodeId
(:func:`item_of`) and names its own group (``group``), problem, item id and words (``describe``).  Markers:
``ckfmha``, ``ckfmha_<family>``, ``ckfmha_kernel`` / ``ckfmha_plan``, ``gpu`` (with ``--ckfmha-backend
triton|hip``), ``xfail(reason="CK finding <id>: ...", strict=True)`` on a kernel item that exposes a CK finding
with ``--ckfmha-backend hip`` or ``auto`` (auto runs hip on an AMD machine; elsewhere the dispatcher's refusal
skips the item, which no xfail changes) (:func:`finding_xfail`; :attr:`pytest_ckfmha.collect.ShapeSpec.exposes`) and
``xdist_group(ck-<hash of the kernel token>)`` -- the plan item joins the group of its shape's
best-ranked kernel, which its plan normally uses, so each kernel is built by one worker.

| what pytest shows | a matrix item gives |
|---|---|
| the node id (``-v``, ``FAILED``, ``--collect-only -q``, failure headers) | one string: the location's domain is the node id itself, which holds no dot, so ``-v`` prints it unchanged |
| the location (skip lines, ``-vv``'s ``<-``) | the matrix file and the line of the entry's ``name:`` (:attr:`pytest_ckfmha.collect.ShapeSpec.location`) |
| ``-k`` words | :func:`pytest_ckfmha.ids.keywords` |
| failure text | the item id, the full kernel id and the matrix entry |

Node ids named on the command line (:func:`take_node_id_arguments`, from ``pytest_load_initial_conftests``):
pytest would read ``ckfmha::...`` as a path (``directory argument cannot contain :: selection parts`` where a
``ckfmha`` directory exists, ``file or directory not found`` elsewhere), so the plugin takes every positional
argument that :meth:`pytest_ckfmha.ids.NodeId.parse_argument` reads out of pytest's arguments before pytest
resolves them; the matrix collectors collect only the items they name, and :class:`NamedItems` keeps only the
ckfmha items they name (CK smoke and parity items too; other tests named as paths run as pytest would run them).  A named node id that names no item of the run is a usage error naming it; so is one given
without ``--ckfmha-category`` / ``--ckfmha-ck-smoke`` / ``--ckfmha-parity``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_ckfmha.ids import ROOT, NodeId, group_name, kernel_token, keywords

if TYPE_CHECKING:  # pragma: no cover
    from pytest_ckfmha.isolation import ItemResult


class MatrixCollector(pytest.Collector):
    """The matrix of the category (no file behind it)."""

    def collect(self):
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        named = named_node_ids(self.config)
        for spec in st.specs():
            if named and not any(n.root == ROOT and n.parts[0] == spec.shape_id for n in named):
                continue  # a node id named on the command line, of another shape (NamedItems)
            yield ShapeCollector.from_parent(self, name=spec.shape_id, spec=spec)

    def reportinfo(self):
        return self.path, None, ROOT


class ShapeCollector(pytest.Collector):
    def __init__(self, *, spec, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec

    def item_nodes(self) -> list[tuple[NodeId, object]]:
        """``(node id, pinned kernel or None)`` of the shape's items (:meth:`NodeId.shape_items`)."""
        return NodeId.shape_items(self.spec.shape_id, self.spec.kernels)

    def collect(self):
        named = named_node_ids(self.config)
        for node, k in self.item_nodes():
            if not named or any(n.covers(node) for n in named):
                yield CkfmhaItem.of(self, node, spec=self.spec, kernel=k)

    def reportinfo(self):
        return self.path, None, self.name


def finding_xfail(finding_id: str):
    """The ``xfail`` of an item that exposes the CK finding ``finding_id`` on the hip backend (the kernel computes
    what the finding says, not the exact reference); strict: an XPASS means CK fixed it -- retire the finding."""
    from ckfmha.ck_findings import load_findings

    title = next((f.title for f in load_findings() if f.id == finding_id), "")
    return pytest.mark.xfail(
        reason=f"CK finding {finding_id}: {title} (docs/ck_findings.md); an XPASS means CK fixed it", strict=True
    )


def item_of(cls, parent, node: NodeId, **kw):
    """An item of ``cls`` under ``parent`` whose pytest node id is ``node`` (rendered by :class:`NodeId` only)."""
    return cls.from_parent(parent, name=node.relative_to(parent.nodeid), nodeid=str(node), node_id=node, **kw)


class CkfmhaItem(pytest.Item):
    """A matrix kernel or plan item, or a CK smoke line's plan item (its :class:`NodeId` says which)."""

    def __init__(self, *, spec, kernel, node_id: NodeId, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.kernel = kernel
        self.node_id = node_id
        from pytest_ckfmha.state import get_state

        settings = get_state(self.config).settings
        fam = spec.shape.family
        self.add_marker(pytest.mark.ckfmha)
        self.add_marker(getattr(pytest.mark, f"ckfmha_{fam}"))
        self.add_marker(pytest.mark.ckfmha_plan if kernel is None else pytest.mark.ckfmha_kernel)
        if settings.gpu_marker:
            self.add_marker(pytest.mark.gpu)
        if self.group is not None:
            self.add_marker(pytest.mark.xdist_group(name=self.group))
        finding = spec.finding_of(kernel) if hasattr(spec, "finding_of") else None  # CK smoke specs have none
        if finding is not None and settings.backend in ("hip", "auto"):  # auto is hip on AMD (elsewhere: skipped)
            self.add_marker(finding_xfail(finding))
        self.extra_keyword_matches.update(keywords(spec.shape.problem, kernel, spec.shape.entry))

    @classmethod
    def of(cls, parent, node: NodeId, **kw) -> "CkfmhaItem":
        return item_of(cls, parent, node, **kw)

    @property
    def group(self) -> str | None:
        """The ``xdist_group`` of the item (:meth:`NodeId.group_kernel`: its kernel, or its shape's first)."""
        first = kernel_token(self.spec.kernels[0]) if self.spec.kernels else None
        kernel = self.node_id.group_kernel(first)
        return None if kernel is None else group_name(kernel)

    @property
    def item_id(self) -> str:
        return self.node_id.item_id

    @property
    def problem(self):
        return self.spec.shape.problem

    def settings(self):
        from pytest_ckfmha.state import get_state

        return get_state(self.config).settings

    def base_report_props(self) -> dict:
        from pytest_ckfmha.reporting import base_props

        return base_props(self.node_id, self.spec, self.kernel, self.settings())

    def work(self) -> "ItemResult":
        """The item's work (in the kernel child process, see isolation.py): run it, return plain results."""
        from pytest_ckfmha.state import get_state

        return matrix_item_work(get_state(self.config), self.spec, self.kernel, self.node_id)

    def work_order(self):
        """The item's work as plain data (a picklable callable of the process's State): what a kernel child forked
        before the collection runs, since it has no items of its own (isolation.py)."""
        from functools import partial

        return partial(matrix_item_work, spec=self.spec, kernel=self.kernel, node_id=self.node_id)

    def describe(self) -> str:
        """The item in words, for crash and timeout reasons: :meth:`NodeId.describe`, a kernel item naming its
        full kernel id (its node id holds the kernel token)."""
        if self.kernel is not None:
            return f"shape {self.node_id.scope}, kernel {self.kernel.kernel_id}"
        return self.node_id.describe()

    def details(self) -> str:
        return item_details(self.spec, self.kernel)

    def runtest(self) -> None:
        from pytest_ckfmha.isolation import run_contained

        run_contained(self)

    def reportinfo(self):
        """The matrix entry as the location (a CK smoke line: the rootdir), the node id as the domain (module
        doc)."""
        location = getattr(self.spec, "location", None)
        if location is not None:
            return location[0], location[1], str(self.node_id)
        return self.path, None, str(self.node_id)


NAMED_KEY = pytest.StashKey[tuple[NodeId, ...]]()
"""The ckfmha node ids named on the command line (:func:`take_node_id_arguments`)."""


def take_node_id_arguments(config, args: list[str]) -> tuple[NodeId, ...]:
    """Take the ckfmha node ids out of pytest's arguments ``args`` (in place) and out of its early namespace, and
    keep them in ``config.stash`` (module doc).  Only positional arguments are taken: a value equal to one that
    follows ``--deselect`` stays; when the count of positional ones cannot be matched, nothing is taken (pytest's
    own error then names the argument)."""
    namespace = getattr(config, "known_args_namespace", None)
    positional = list(getattr(namespace, "file_or_dir", None) or [])
    named: list[tuple[str, NodeId]] = []
    for a in positional:
        node = NodeId.parse_argument(a)
        if node is not None:
            named.append((a, node))
    if not named or namespace is None:
        return ()
    taken: list[int] = []
    for text, _ in named:
        for i, a in enumerate(args):
            if a == text and i not in taken and (i == 0 or args[i - 1] != "--deselect"):
                taken.append(i)
                break
        else:
            return ()
    for i in sorted(taken, reverse=True):
        del args[i]
    namespace.file_or_dir = [a for a in positional if NodeId.parse_argument(a) is None]
    nodes = tuple(n for _, n in named)
    config.stash[NAMED_KEY] = nodes
    return nodes


def named_node_ids(config) -> tuple[NodeId, ...]:
    return config.stash.get(NAMED_KEY, ())


def item_details(spec, kernel) -> str:
    """``kernel <full kernel id | the dispatcher's plan>; matrix <file>:<line> entry <name> (combination i)``
    (a CK smoke line: its script line instead of a matrix entry)."""
    name = kernel.kernel_id if kernel is not None else "the dispatcher's plan"
    where = getattr(spec, "where", None)
    return f"kernel {name}" + (f"; matrix {where}" if where else "")


def matrix_item_work(state, spec, kernel, node_id: NodeId) -> "ItemResult":
    """A matrix or CK smoke item's work, from its data (:meth:`CkfmhaItem.work`; in the kernel child, also as a
    work order): run it, return plain results."""
    from pytest_ckfmha.execute import ItemFailure, ItemSkip, run_item
    from pytest_ckfmha.isolation import ItemResult
    from pytest_ckfmha.reporting import base_props, result_props

    settings = state.settings
    props = base_props(node_id, spec, kernel, settings)
    item_id = node_id.item_id
    try:
        outcome = run_item(state.runtime(), spec.shape, kernel, props)
    except ItemSkip as e:
        props["reason"] = f"{spec.shape_id}: {e}"
        return ItemResult("skipped", "skipped", props["reason"], props)  # its location is the matrix entry
    except ItemFailure as e:
        props["reason"] = str(e)
        details = item_details(spec, kernel)
        return ItemResult("failed", "failed", f"{item_id}\n{e}\n  {details}", props, fresh_process_next=e.raised)
    except Exception as e:  # noqa: BLE001 - a bug outside the kernel's stages: an error with its traceback
        props["reason"] = f"{type(e).__name__}: {e}"
        return ItemResult.error(item_id, e, props)
    props.update(result_props(spec.shape.problem, outcome))
    failed = [c for c in outcome.checks.values() if not c.passed]
    if not failed:
        return ItemResult("passed", "passed", "", props)
    props["reason"] = "; ".join(f"{c.name}: {c.mismatch_count}/{c.total} mismatches" for c in failed)
    lines = [
        f"{item_id}: output differs from the reference ({props['backend']} backend, arch "
        f"{settings.arch}, seed {settings.seed})"
    ]
    lines += [f"  {c}" for c in outcome.checks.values()]
    lines.append(f"  plan: {' -> '.join(outcome.plan_kernels)}")
    lines.append(f"  {item_details(spec, kernel)}")
    return ItemResult("failed", "failed", "\n".join(lines), props)


class NamedItems:
    """Keeps only the ckfmha items the command line names (registered by the plugin when it names any)."""

    def __init__(self, named: tuple[NodeId, ...]) -> None:
        self.named = named

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:
        """Before ``-k`` / ``-m`` and the shards, as pytest keeps only the items of a named node id: the ckfmha
        items no named node id covers are dropped (not deselected); a named node id covering no item is a usage
        error naming it."""
        used: set[NodeId] = set()
        keep = []
        for item in items:
            node = NodeId.parse(item.nodeid)
            if node is None:
                keep.append(item)
                continue
            hits = [n for n in self.named if n.covers(node)]
            used.update(hits)
            if hits:
                keep.append(item)
        missing = [str(n) for n in self.named if n not in used]
        if missing:
            raise pytest.UsageError(
                f"ckfmha: node id {missing[0]!r} names no item of this run: run it with the options of the run "
                "that printed it (--ckfmha-category, --ckfmha-arch, --ckfmha-family, ...)"
            )
        items[:] = keep


def use_named(config, active: bool) -> None:
    """The ckfmha node ids named on the command line: kept by :class:`NamedItems` in a ckfmha run (``active``);
    without one, a usage error naming the first."""
    named = named_node_ids(config)
    if named and not active:
        raise pytest.UsageError(
            f"ckfmha: node id {str(named[0])!r} names a ckfmha item, but no ckfmha items are collected: give the "
            "options of the run that printed it (--ckfmha-category, --ckfmha-ck-smoke or --ckfmha-parity)"
        )
    if named:
        config.pluginmanager.register(NamedItems(named), "ckfmha-named")
