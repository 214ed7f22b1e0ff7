"""The collector tree: ``ckfmha`` (Session-level) -> one collector per shape -> one item per kernel + ``plan``.

Node ids: ``ckfmha::<shape id>::<kernel id>`` and ``ckfmha::<shape id>::plan`` (xdist's loadgroup appends
``@<group>``).  Markers: ``ckfmha``, ``ckfmha_<family>``, ``ckfmha_kernel`` / ``ckfmha_plan``, ``gpu`` (with
``--ckfmha-backend triton|hip``) and ``xdist_group(ck-<hash of the kernel id>)`` -- the plan item joins the group
of its shape's best-ranked kernel, which its plan normally uses, so each kernel is built by one worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_ckfmha.ids import PLAN, group_name

if TYPE_CHECKING:  # pragma: no cover
    from pytest_ckfmha.isolation import ItemResult

ROOT_NAME = "ckfmha"


class MatrixCollector(pytest.Collector):
    """The matrix of the category (no file behind it)."""

    def collect(self):
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        for spec in st.specs():
            yield ShapeCollector.from_parent(self, name=spec.shape_id, spec=spec)

    def reportinfo(self):
        return self.path, None, ROOT_NAME


class ShapeCollector(pytest.Collector):
    def __init__(self, *, spec, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec

    def collect(self):
        for k in self.spec.kernels:
            yield CkfmhaItem.from_parent(self, name=k.kernel_id, spec=self.spec, kernel=k)
        yield CkfmhaItem.from_parent(self, name=PLAN, spec=self.spec, kernel=None)

    def reportinfo(self):
        return self.path, None, self.name


class CkfmhaItem(pytest.Item):
    def __init__(self, *, spec, kernel, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.kernel = kernel
        from pytest_ckfmha.state import get_state

        settings = get_state(self.config).settings
        fam = spec.shape.family
        self.add_marker(pytest.mark.ckfmha)
        self.add_marker(getattr(pytest.mark, f"ckfmha_{fam}"))
        self.add_marker(pytest.mark.ckfmha_plan if kernel is None else pytest.mark.ckfmha_kernel)
        if settings.gpu_marker:
            self.add_marker(pytest.mark.gpu)
        group_kernel = kernel if kernel is not None else (spec.kernels[0] if spec.kernels else None)
        if group_kernel is not None:
            self.add_marker(pytest.mark.xdist_group(name=group_name(group_kernel.kernel_id)))

    @property
    def item_id(self) -> str:
        return f"{self.spec.shape_id}::{self.name}"

    def settings(self):
        from pytest_ckfmha.state import get_state

        return get_state(self.config).settings

    def base_report_props(self) -> dict:
        from pytest_ckfmha.reporting import base_props

        return base_props(self, self.settings())

    def work(self) -> "ItemResult":
        """The item's work (in the kernel child process, see isolation.py): run it, return plain results."""
        from pytest_ckfmha.execute import ItemFailure, ItemSkip, run_item
        from pytest_ckfmha.isolation import ItemResult
        from pytest_ckfmha.reporting import base_props, result_props
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        props = base_props(self, st.settings)
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
        kernel = self.kernel.kernel_id if self.kernel is not None else "the dispatcher's plan"
        return f"shape {self.spec.shape_id}, kernel {kernel}"

    def runtest(self) -> None:
        from pytest_ckfmha.isolation import run_contained

        run_contained(self)

    def reportinfo(self):
        return self.path, None, self.item_id
