"""``--ckfmha-flash-attn-compat``: FlashAttention's own tests on ckfmha (docs/flash_attn.md).

| step | when | what |
|---|---|---|
| register | ``pytest_configure`` (before any test module is imported) | :func:`ckfmha.compat.flash_attn.install` with ``--ckfmha-backend`` (for CUDA tensors; CPU tensors run on cpu) and ``--ckfmha-arch`` (the kernel space the dispatcher plans over) |
| expected differences | ``pytest_collection_modifyitems`` | each test an entry of :func:`ckfmha.compat.expected.load_expected` names is marked ``xfail`` (strict unless the entry says not) with the entry's name, whose semantics and reason; the terminal summary counts the tests each entry marked |
| kernel log | ``pytest_runtest_logfinish`` (in the process that ran the test, when the test made calls) and ``pytest_sessionfinish`` of every process, with ``--ckfmha-report PATH`` | the process's compat call log (:mod:`ckfmha.compat.calllog`) written atomically to :func:`log_path`: ``PATH``'s name with ``.flash_attn_calls.json`` (``.flash_attn_calls.<worker>.json`` in an xdist worker) beside it, so a process killed mid-run loses at most the calls of the test in flight; ``ckfmha coverage`` reads them |
| SIGTERM | the controller (or the only process), ``pytest_configure`` | as for ckfmha's own runs (:class:`pytest_ckfmha.sigterm.SigtermInterrupt`): pytest stops as after Ctrl-C, sessionfinish writes the logs, the terminal summary says so; an xdist worker ended by a group-wide SIGTERM has its finished tests' calls on disk already |
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_ckfmha.sigterm import SigtermInterrupt

LOG_SUFFIX = ".flash_attn_calls"


def log_path(report: Path, worker: str | None) -> Path:
    """Where a process writes its kernel log for the report ``report`` (module table)."""
    stem = report.name.rsplit(".", 1)[0] if "." in report.name else report.name
    tail = f".{worker}" if worker else ""
    return report.with_name(f"{stem}{LOG_SUFFIX}{tail}.json")


class FlashAttnCompat(SigtermInterrupt):
    """The plugin object registered with the option: writes the kernel logs after each test that made calls and at
    the session's end; in the controller (or the only process) it turns SIGTERM into a stop (``install_sigterm``)."""

    def __init__(
        self, reports: list[Path], meta: dict[str, Any], worker: str | None, expected: Sequence[Any] = ()
    ) -> None:
        super().__init__()
        self.reports = reports
        self.meta = meta
        self.worker = worker
        self.written: list[Path] = []
        self.expected = tuple(expected)  # ckfmha.compat.expected.ExpectedDifference entries
        self.marked: dict[str, int] = {e.name: 0 for e in self.expected}
        self.on_disk = 0  # how many calls the logs on disk hold (calllog.count() at the last write)
        self.errors: list[str] = []  # a write after a test that failed (the run goes on; the end's write tries again)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items) -> None:
        from ckfmha.compat.expected import expected_for

        for item in items:
            e = expected_for(item.nodeid, self.expected)
            if e is not None:
                item.add_marker(pytest.mark.xfail(reason=e.marker_reason(), strict=e.strict))
                self.marked[e.name] += 1

    def _write_logs(self) -> list[Path]:
        from ckfmha.compat import calllog

        n = calllog.count()
        paths = [
            calllog.write_log(log_path(report, self.worker), {**self.meta, "worker": self.worker or ""})
            for report in self.reports
        ]
        self.on_disk = n
        return paths

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        """After each test (in the process that ran it; an xdist controller logs no calls): the logs rewritten when
        the test made calls, so a kill loses at most the test in flight."""
        from ckfmha.compat import calllog

        if not self.reports or calllog.count() == self.on_disk:
            return
        try:
            self._write_logs()
        except OSError as e:
            if not self.errors:  # once: the next tests' writes would say the same
                self.errors.append(f"ckfmha: flash-attn compat kernel log not written after {nodeid}: {e}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        self.written.extend(self._write_logs())

    def pytest_unconfigure(self, config) -> None:
        self.restore_sigterm()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.signal is not None:
            terminalreporter.write_line(
                f"ckfmha: the run was interrupted by {self.signal}: it stopped as after Ctrl-C; the kernel logs hold "
                "the calls of the tests that finished"
            )
        for line in self.errors:
            terminalreporter.write_line(line)
        if self.expected:
            counts = ", ".join(f"{name} {n}" for name, n in self.marked.items())
            terminalreporter.write_line(f"ckfmha: expected differences (tests marked xfail): {counts}")
        for p in self.written:
            terminalreporter.write_line(f"ckfmha: flash-attn compat kernel log written to {p}")


def register(config: pytest.Config) -> None:
    """Install the compat module with the session's ``--ckfmha-backend`` (for CUDA tensors), ``--ckfmha-arch``,
    receipt / profile and mask mode (the options as :func:`pytest_ckfmha.options.parse` validates them; the hip
    backend is pointed at ``--ckfmha-ck-root`` as for ckfmha's own items) and register :class:`FlashAttnCompat` for
    ``--ckfmha-report``'s paths."""
    from ckfmha.compat import flash_attn
    from ckfmha.compat.expected import load_expected
    from ckfmha.receipts import resolve_receipt
    from pytest_ckfmha.options import parse

    settings = parse(config)
    if settings.backend == "hip":
        from pytest_ckfmha.execute import configure_hip_backend

        configure_hip_backend(settings)
    flash_attn.configure(
        receipt=resolve_receipt(settings.receipt, profile=settings.profile), mask_mode=settings.mask_mode
    )
    flash_attn.install(backend=settings.backend, arch=settings.arch)
    worker = config.workerinput.get("workerid") if hasattr(config, "workerinput") else None
    meta = {"arch": settings.arch, "backend_option": settings.backend}
    plugin = FlashAttnCompat(list(settings.reports), meta, worker, load_expected())
    config.pluginmanager.register(plugin, "ckfmha-flash-attn-compat")
    if worker is None:  # (a ckfmha run's _Recorder installed it first: then it is that one's, and this does nothing)
        plugin.install_sigterm()
