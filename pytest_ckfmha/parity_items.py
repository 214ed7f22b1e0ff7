"""Parity items (``--ckfmha-parity tile_example|torch[:backend]``): one item per problem, comparing an upstream
with ckfmha's own dispatcher + backend through :mod:`ckfmha.parity`.

Node ids: ``ckfmha-parity::<upstream>::<name>``; the problems are upstream's 14 parity configurations
(``default-NN-...``) plus, with ``--ckfmha-category``, every shape of the category (named by its shape id). An item
passes only when both sides' verdicts agree and, where both produced outputs, the outputs agree; a side that
cannot run the problem (missing binary, no GPU, not expressible) makes the item skip with that side's words. The
report rows carry both sides' verdicts and words.
"""

from __future__ import annotations

import pytest

PARITY_ROOT = "ckfmha-parity"


class ParityCollector(pytest.Collector):
    def collect(self):
        from ckfmha.parity import default_parity_set
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        problems = [(f"default-{i:02d}-{name}", p) for i, (name, p) in enumerate(default_parity_set(), 1)]
        if st.settings.category is not None:
            problems += [(spec.shape_id, spec.shape.problem) for spec in st.specs()]
        for name, problem in problems:
            yield ParityItem.from_parent(self, name=f"{st.settings.parity}::{name}", problem=problem, label=name)

    def reportinfo(self):
        return self.path, None, PARITY_ROOT


class ParityItem(pytest.Item):
    def __init__(self, *, problem, label: str, **kw) -> None:
        super().__init__(**kw)
        self.problem = problem
        self.label = label
        self.add_marker(pytest.mark.ckfmha)
        self.add_marker(pytest.mark.ckfmha_parity)

    def runtest(self) -> None:
        from ckfmha.parity import compare_one
        from pytest_ckfmha.reporting import parity_props
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        upstream, ours = st.parity_sides()
        row = compare_one(self.problem, upstream, ours, seed=st.settings.seed, name=self.label)
        for k, v in parity_props(self, st.settings, row).items():
            self.user_properties.append((k, v))
        outcome, message = row.pytest_outcome()
        if outcome == "skipped":
            pytest.skip(message)
        if outcome == "failed":
            pytest.fail(f"parity {st.settings.parity} vs ckfmha:{st.settings.backend} on {self.label}: "
                        f"{row.status.value}\n{message}", pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{PARITY_ROOT}::{self.name}"
