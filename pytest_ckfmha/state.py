"""Per-config state kept in ``config.stash``: settings, and (lazily) the kernel set, the specs and the runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pytest_ckfmha.isolation import ChildExecutor, InlineExecutor

STATE_KEY = pytest.StashKey["State"]()


class State:
    def __init__(self, config, settings) -> None:
        self.config = config
        self.settings = settings
        self._registry = None
        self._specs = None
        self._smoke_specs: list | None = None
        self._runtime = None
        self._executor: ChildExecutor | InlineExecutor | None = None
        self._by_nodeid: dict | None = None
        self._resumed: list[dict] | None = None
        self.collect_seconds: float | None = None

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

    def resumed_rows(self) -> list[dict]:
        """The rows of ``--ckfmha-resume``'s report (loaded once; [] without the option)."""
        if self._resumed is None:
            self._resumed = []
            if self.settings.resume is not None:
                from ckfmha.runreport import load_report

                self._resumed = load_report(self.settings.resume).rows
        return self._resumed

    def executor(self, session: pytest.Session) -> ChildExecutor | InlineExecutor:
        """This process's executor of items' work (isolation.py), made on first use."""
        if self._executor is None:
            from pytest_ckfmha.isolation import ChildExecutor, InlineExecutor

            items: dict = {}

            def resolve(nodeid: str):
                if not items:  # built lazily: in the child, from the collection it inherited
                    items.update((i.nodeid, i) for i in session.items)
                return items[nodeid].work

            cls = InlineExecutor if self.settings.isolation == "inline" else ChildExecutor
            self._executor = cls(resolve)
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def smoke_specs(self) -> list:
        """The ``--ckfmha-ck-smoke`` lines (:func:`pytest_ckfmha.ck_smoke.smoke_specs`), read once."""
        if self._smoke_specs is None:
            from pytest_ckfmha.ck_smoke import smoke_specs

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
        from types import SimpleNamespace

        from pytest_ckfmha.ck_smoke import PARITY_NAME
        from pytest_ckfmha.ids import PLAN
        from pytest_ckfmha.reporting import base_props, parity_base_props

        if self._by_nodeid is None:
            self._by_nodeid = {}
            from pytest_ckfmha.items import ROOT_NAME
            from pytest_ckfmha.parity_items import PARITY_ROOT

            if self.settings.category is not None:
                for spec in self.specs():
                    for k in (*spec.kernels, None):
                        name = PLAN if k is None else k.kernel_id
                        self._by_nodeid[f"{ROOT_NAME}::{spec.shape_id}::{name}"] = (spec, k)
            if self.settings.parity is not None:
                for label, problem in self.parity_problems():
                    self._by_nodeid[f"{PARITY_ROOT}::{self.settings.parity}::{label}"] = (label, problem)
            if self.settings.ck_smoke is not None:
                self._describe_smoke_lines()
        found = self._by_nodeid.get(nodeid.split("@", 1)[0])
        s = self.settings
        if found is None:
            return {"id": nodeid.split("::", 1)[-1], "backend": s.backend, "arch": s.arch, "seed": s.seed}
        a, b = found
        if isinstance(a, str):  # a parity item: (label, problem)
            return parity_base_props(SimpleNamespace(item_id=f"{s.parity}::{a}", problem=b), s)
        if b == PARITY_NAME:  # a smoke line's parity item
            return parity_base_props(SimpleNamespace(item_id=f"{a.shape_id}::{b}", problem=a.shape.problem, spec=a), s)
        item = SimpleNamespace(spec=a, kernel=b, item_id=f"{a.shape_id}::{PLAN if b is None else b.kernel_id}")
        return base_props(item, s)

    def _describe_smoke_lines(self) -> None:
        """The smoke lines' node ids for :meth:`describe` (a line CK refuses has no report values to add)."""
        from pytest_ckfmha.ck_smoke import PARITY_NAME, SMOKE_ROOT, SmokeSpec
        from pytest_ckfmha.ids import PLAN

        assert self._by_nodeid is not None
        name = PLAN if self.settings.parity is None else PARITY_NAME
        for spec in self.smoke_specs():
            if isinstance(spec, SmokeSpec):
                self._by_nodeid[f"{SMOKE_ROOT}::{spec.shape_id}::{name}"] = (spec, None if name == PLAN else name)

    def runtime(self):
        if self._runtime is None:
            from pytest_ckfmha.execute import Runtime

            self._runtime = Runtime(self.config, self.settings, self.registry())
        return self._runtime


def get_state(config) -> State:
    return config.stash[STATE_KEY]


def has_state(config) -> bool:
    return STATE_KEY in config.stash
