"""Parity items (``--ckfmha-parity tile_example|torch[:backend]``): one item per problem, comparing an upstream
with ckfmha's own dispatcher + backend through :mod:`ckfmha.parity`.

Node ids: ``ckfmha-parity::<upstream>::<name>``; the problems are upstream's 14 parity configurations
(``default-NN-...``) plus, with ``--ckfmha-category``, every shape of the category (named by its shape id). An item
passes only when both sides' verdicts agree and, where both produced outputs, the outputs agree; a side that
cannot run the problem (missing binary, no GPU, not expressible) makes the item skip with that side's words. The
report rows carry both sides' verdicts and words.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_ckfmha.ids import PARITY_ROOT, NodeId
from pytest_ckfmha.items import item_of

__all__ = ["PARITY_ROOT", "ParityCollector", "ParityItem"]


class ParityCollector(pytest.Collector):
    def collect(self):
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        for label, problem in st.parity_problems():
            yield ParityItem.of(self, NodeId.parity(st.settings.parity, label), problem=problem)

    def reportinfo(self):
        return self.path, None, PARITY_ROOT


class ParityItem(pytest.Item):
    def __init__(self, *, problem, node_id: NodeId, **kw) -> None:
        super().__init__(**kw)
        self.problem = problem
        self.node_id = node_id
        self.add_marker(pytest.mark.ckfmha)
        self.add_marker(pytest.mark.ckfmha_parity)

    @classmethod
    def of(cls, parent, node: NodeId, **kw) -> "ParityItem":
        return item_of(cls, parent, node, **kw)

    spec: Any = None  # a CK smoke line's parity item has one (SmokeParityItem)
    group: str | None = None  # a group of its own (NodeId.group_kernel)

    @property
    def label(self) -> str:
        return self.node_id.name

    @property
    def item_id(self) -> str:
        return self.node_id.item_id

    def settings(self):
        from pytest_ckfmha.state import get_state

        return get_state(self.config).settings

    def base_report_props(self) -> dict:
        from pytest_ckfmha.reporting import parity_base_props

        return parity_base_props(self.item_id, self.problem, self.settings(), self.spec)

    def describe(self) -> str:
        return f"parity problem {self.label} ({self.problem})"

    def sides(self):
        """(upstream side, ckfmha side) this item compares: the session's pair."""
        from pytest_ckfmha.state import get_state

        return get_state(self.config).parity_sides()

    def work(self):
        """Both sides on the problem (in the kernel child process, see isolation.py)."""
        from ckfmha.parity import compare_one
        from pytest_ckfmha.isolation import ItemResult
        from pytest_ckfmha.reporting import parity_props
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        upstream, ours = self.sides()
        row = compare_one(self.problem, upstream, ours, seed=st.settings.seed, name=self.label)
        props = parity_props(self.item_id, self.problem, st.settings, row, self.spec)
        outcome, message = row.pytest_outcome()
        if outcome == "skipped":
            return ItemResult("skipped", "skipped", f"{self.label}: {message}", props)
        if outcome == "failed":
            return ItemResult(
                "failed",
                "failed",
                f"parity {st.settings.parity} vs {ours.name} on {self.label}: {row.status.value}\n{message}",
                props,
            )
        return ItemResult("passed", "passed", "", props)

    def runtest(self) -> None:
        from pytest_ckfmha.isolation import run_contained

        run_contained(self)

    def reportinfo(self):
        return self.path, None, str(self.node_id)
