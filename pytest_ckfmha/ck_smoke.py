"""``--ckfmha-ck-smoke fwd|bwd|all``: a CK checkout's own smoke scripts as items (docs/ck_smoke.md).

| step | what |
|---|---|
| record | :func:`ckfmha.ck_smoke.record_smoke_lines`: the checkout's ``smoke_test_fwd.sh -s -a`` / ``smoke_test_bwd.sh`` run with ``GPU_arch=<--ckfmha-arch>`` and fake executables (cached by the scripts' hash) |
| read | each line through :func:`ckfmha.ck_args.ck_run_from_args`: the effective problem CK runs (the normalizations CK announces stay on the spec: ``SmokeSpec.normalizations``) |
| item | ``ckfmha::ck-smoke::<line id>::plan`` -- ``<line id>`` = ``<binary>-<first 12 hex of sha256(the line)>``, stable while the line is; the item is the matrix categories' plan item (:class:`pytest_ckfmha.items.CkfmhaItem`: same isolation, report rows, JUnit, ``-k``, ``-n``, ``--lf``) run on the chosen backend against the reference; the report row's ``entry`` is the line, ``ck_normalizations`` / ``ck_unannounced`` what CK's runner changes in it (announced, silently) |
| parity mode | with ``--ckfmha-parity``: ``ckfmha::ck-smoke::<line id>::parity`` instead (:class:`SmokeParityItem`), the parity items' comparison (:mod:`pytest_ckfmha.parity_items`) of the upstream with ckfmha's plan on the effective problem; ``tile_example`` runs **the line itself** (:meth:`ckfmha.upstream.tile_runner.TileExampleSide.run_line`: the script's arguments + the runner options, no ``-seed``), whose echo must be the effective problem; upstream's 14 default parity problems are not added |
| known fails | a line the checkout's ``fmha_<binary>_known_fails_<arch>.txt`` lists (whole-line match, as the scripts' ``grep -Fxq``) is ``xfail`` with that file as the reason |
| refused | a line CK's runner itself refuses (it exits non-zero before running anything) is an item that skips with the runner's words |
| unreadable | a line ckfmha cannot read (``-mask=<garbage>``, a value no reader takes) is one item that **fails** naming the script, the line and why (:class:`UnreadableLineItem`); the other lines run (a script that cannot be recorded at all is a usage error) |
| trust | recording runs the checkout's smoke scripts (bash, as the pytest user): name only checkouts you trust, as with ``--ckfmha-filter-file`` |
| skipped | the dispatcher finds no kernel (its reason), the cpu backend's ``--ckfmha-cpu-max-flops`` limit (the FLOPs), an unavailable backend -- as for the matrix items |

The kernel space is :func:`pytest_ckfmha.collect.kernel_set`'s: with ``--ckfmha-ck-root`` the checkout's own
generator's kernels, so the lines are planned against the kernels that CK version has.
"""

from __future__ import annotations

import pytest

from pytest_ckfmha.ids import PARITY, SMOKE, SMOKE_ROOT, NodeId
from pytest_ckfmha.items import ShapeCollector, item_of
from pytest_ckfmha.parity_items import ParityItem
from pytest_ckfmha.smoke_lines import BINARIES, CATEGORY, RefusedLine, SmokeSpec, UnreadableLine, line_id, smoke_specs

__all__ = [
    "BINARIES",
    "CATEGORY",
    "PARITY_NAME",
    "SMOKE",
    "SMOKE_ROOT",
    "RefusedLine",
    "SmokeSpec",
    "UnreadableLine",
    "line_id",
    "smoke_specs",
]

PARITY_NAME = PARITY


class SmokeCollector(pytest.Collector):
    """The checkout's smoke lines (no file behind them)."""

    def collect(self):
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        settings = st.settings
        try:
            specs = st.smoke_specs()
        except ValueError as e:  # a script that cannot be recorded, a line ckfmha cannot read: named
            raise pytest.UsageError(f"ckfmha: --ckfmha-ck-smoke {settings.ck_smoke}: {e}") from None
        for spec in specs:
            if isinstance(spec, RefusedLine):
                yield item_of(RefusedLineItem, self, NodeId.smoke(spec.shape_id, None), spec=spec)
            elif isinstance(spec, UnreadableLine):
                yield item_of(UnreadableLineItem, self, NodeId.smoke(spec.shape_id, None), spec=spec)
            else:
                yield SmokeLineCollector.from_parent(self, name=spec.shape_id, spec=spec)

    def reportinfo(self):
        return self.path, None, SMOKE_ROOT


class SmokeLineCollector(ShapeCollector):
    """One line: the plan item (with ``--ckfmha-parity`` the parity item), ``xfail`` when the checkout's
    known-fails file lists the line."""

    def item_nodes(self) -> list[tuple[NodeId, object]]:
        return [(NodeId.smoke_line(self.spec.shape_id, parity=False), None)]

    def collect(self):
        from pytest_ckfmha.state import get_state

        parity = get_state(self.config).settings.parity is not None
        items = (
            [SmokeParityItem.of(self, NodeId.smoke_line(self.spec.shape_id, parity=True), spec=self.spec)]
            if parity
            else list(super().collect())
        )
        for item in items:
            if self.spec.known_fail is not None:
                item.add_marker(pytest.mark.xfail(reason=f"listed in {self.spec.known_fail}", strict=False))
            yield item


class LineSide:
    """A ``tile_example`` side that runs the smoke line itself (``run_line``) instead of the problem's own command
    line; the effective problem it is given is what the binary's echo must match."""

    def __init__(self, upstream, args: tuple[str, ...]) -> None:
        self.upstream = upstream
        self.args = args
        self.name = upstream.name

    def run(self, problem, seed: int = 0):
        return self.upstream.run_line(problem, self.args)


class SmokeParityItem(ParityItem):
    """A smoke line in parity mode (module doc): the upstream on the line (``tile_example``: the line as the
    script ran it; ``torch``: the effective problem) against ckfmha's plan on the effective problem."""

    def __init__(self, *, spec: SmokeSpec, **kw) -> None:
        super().__init__(problem=spec.shape.problem, **kw)
        self.spec = spec

    @property
    def label(self) -> str:
        return self.spec.shape_id

    def describe(self) -> str:
        return f"CK smoke line {self.spec.shape_id} ({self.spec.command})"

    def sides(self):
        from ckfmha.upstream.tile_runner import TileExampleSide

        upstream, ours = super().sides()
        if isinstance(upstream, TileExampleSide):
            upstream = LineSide(upstream, self.spec.args)
        return upstream, ours


class RefusedLineItem(pytest.Item):
    """A line CK's runner refuses: skipped with the runner's words (CK's script would count it as a failure)."""

    group: str | None = None  # a group of its own (NodeId.group_kernel)

    def __init__(self, *, spec: RefusedLine | UnreadableLine, node_id: NodeId, **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.node_id = node_id
        self.add_marker(pytest.mark.ckfmha)

    def runtest(self) -> None:
        pytest.skip(self.spec.reason)

    def reportinfo(self):
        return self.path, None, f"{self.spec.shape_id}: {self.spec.command}"


class UnreadableLineItem(RefusedLineItem):
    """A line ckfmha cannot read: fails naming the script, the line and why (the other lines run)."""

    def runtest(self) -> None:
        pytest.fail(self.spec.reason, pytrace=False)
