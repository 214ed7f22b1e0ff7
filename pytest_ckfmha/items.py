"""The collector tree: ``ckfmha`` (Session-level) -> one collector per shape -> one item per kernel + ``plan``.

Node ids: ``ckfmha::<shape id>::<kernel id>`` and ``ckfmha::<shape id>::plan`` (xdist's loadgroup appends
``@<group>``), rendered by :class:`pytest_ckfmha.ids.NodeId` alone: each item is made from its NodeId
(:func:`item_of`) and names its own group (``group``), problem, item id and words (``describe``).  Markers: ``ckfmha``, ``ckfmha_<family>``, ``ckfmha_kernel`` / ``ckfmha_plan``, ``gpu`` (with
``--ckfmha-backend triton|hip``) and ``xdist_group(ck-<hash of the kernel id>)`` -- the plan item joins the group
of its shape's best-ranked kernel, which its plan normally uses, so each kernel is built by one worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_ckfmha.ids import ROOT, NodeId, group_name

if TYPE_CHECKING:  # pragma: no cover
    from pytest_ckfmha.isolation import ItemResult


class MatrixCollector(pytest.Collector):
    """The matrix of the category (no file behind it)."""

    def collect(self):
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        for spec in st.specs():
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
        for node, k in self.item_nodes():
            yield CkfmhaItem.of(self, node, spec=self.spec, kernel=k)

    def reportinfo(self):
        return self.path, None, self.name


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

    @classmethod
    def of(cls, parent, node: NodeId, **kw) -> "CkfmhaItem":
        return item_of(cls, parent, node, **kw)

    @property
    def group(self) -> str | None:
        """The ``xdist_group`` of the item (:meth:`NodeId.group_kernel`: its kernel, or its shape's first)."""
        first = self.spec.kernels[0].kernel_id if self.spec.kernels else None
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
        from pytest_ckfmha.execute import ItemFailure, ItemSkip, run_item
        from pytest_ckfmha.isolation import ItemResult
        from pytest_ckfmha.reporting import result_props
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        props = self.base_report_props()
        try:
            outcome = run_item(st.runtime(), self.spec.shape, self.kernel, props)
        except ItemSkip as e:
            props["reason"] = f"{self.spec.shape_id}: {e}"
            return ItemResult("skipped", "skipped", props["reason"], props)
        except ItemFailure as e:
            props["reason"] = str(e)
            return ItemResult("failed", "failed", f"{self.item_id}\n{e}", props, fresh_process_next=e.raised)
        except Exception as e:  # noqa: BLE001 - a bug outside the kernel's stages: an error with its traceback
            props["reason"] = f"{type(e).__name__}: {e}"
            return ItemResult.error(self.item_id, e, props)
        props.update(result_props(self.spec.shape.problem, outcome))
        failed = [c for c in outcome.checks.values() if not c.passed]
        if not failed:
            return ItemResult("passed", "passed", "", props)
        props["reason"] = "; ".join(f"{c.name}: {c.mismatch_count}/{c.total} mismatches" for c in failed)
        lines = [
            f"{self.item_id}: output differs from the reference ({props['backend']} backend, arch "
            f"{st.settings.arch}, seed {st.settings.seed})"
        ]
        lines += [f"  {c}" for c in outcome.checks.values()]
        lines.append(f"  plan: {' -> '.join(outcome.plan_kernels)}")
        return ItemResult("failed", "failed", "\n".join(lines), props)

    def describe(self) -> str:
        """The item in words, for crash and timeout reasons."""
        return self.node_id.describe()

    def runtest(self) -> None:
        from pytest_ckfmha.isolation import run_contained

        run_contained(self)

    def reportinfo(self):
        return self.path, None, self.item_id
