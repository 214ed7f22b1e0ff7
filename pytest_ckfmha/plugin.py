"""The ckfmha pytest plugin entry module.

It is loaded by every pytest run in an environment where ckfmha is installed, so it imports nothing heavy at
load time (no numpy, no torch, not even ckfmha): hooks import what they need when they run, and the plugin only
does anything when ``--ckfmha-category`` is given (docs/plugin.md).

One module per concern: options.py (options, ini keys, validation), collect.py (shapes -> kernels), items.py
(collector tree), parity_items.py and ck_smoke.py (the other item kinds), smoke_lines.py (a CK checkout's smoke
lines as specs), ids.py (shape ids and :class:`~pytest_ckfmha.ids.NodeId`, the node-id grammar), execute.py (one item), isolation.py (the kernel child process: crashes and timeouts),
warmup.py (the kernel child forked and warmed up: before the collection, or for parity items after it),
timeline.py (each process's marks in the report), kernel_set_cache.py (the kernel set on disk),
refcache.py (shared reference cache), reporting.py (rows, JSON/CSV, summary), scheduling.py (the xdist
scheduler), xdist_support.py (xdist hooks, GPU per worker), session_checks.py (runs that test nothing),
benchcompare.py (--ckfmha-bench's table, --ckfmha-compare / --ckfmha-compare-fail), sigterm.py (SIGTERM as
Ctrl-C), shard_spec.py (--ckfmha-shard's K/N), durations.py (measured seconds of a report), hookspecs.py (hooks for conftests), state.py.

The session, in order: options are validated (``pytest_configure``; the report paths and the cache directory
are checked before anything runs); the selection is checked (``pytest_sessionstart``: matrix files, kernel set,
shapes -- a selection that matches nothing is a usage error, exit 4); each process that will run matrix or CK smoke
items forks its kernel child process at its session start, before its collection, and the child warms up while the
process collects (``pytest_sessionstart``, warmup.py; parity items only: after the collection,
``pytest_collection_finish``); items run in that child; every process records its timeline (timeline.py);
the controller keeps one row per item, writes a ``running`` report once the collection is known, checkpoints it
from a timer thread while the run goes on and writes it at the end (also after Ctrl-C or SIGTERM), its ``state``
saying what happened (:func:`session_outcome`); a run whose every item was skipped, or a parity run in which one
side ran for no item, ends with an error (``session_checks.py``).

| refused at start (usage error, exit 4) | why |
|---|---|
| a ``--dist`` mode other than ``load`` / ``no`` (:func:`check_dist_mode`) | its scheduler does not survive a dying worker, or (``each``) runs an item on every worker |
| ``--ckfmha-resume`` of another run or selection (:func:`check_resumable`) | the carried rows would not be this run's items |
| ``--ckfmha-resume`` of a report of the old node-id format (:func:`check_resumable`, ids.py's table) | its rows name no item of this run |
| a ckfmha node id named as an argument that names no item, or without a ckfmha run (items.py) | pytest would read it as a path |
| ``--ckfmha-report`` in a run that writes neither a report nor kernel logs (no category, parity, CK smoke or ``--ckfmha-flash-attn-compat``) | the report would silently not be written |
| ``--ckfmha-compare PREV`` of another selection or seed, untimed or timed on an emulation (benchcompare.py) | its timings are not like for like with this run's |

"""

from __future__ import annotations

import os
import signal

import pytest

from pytest_ckfmha.sigterm import SigtermInterrupt

MARKERS = (
    "ckfmha: an item of the ckfmha testing matrix",
    "ckfmha_kernel: a ckfmha item running one pinned kernel",
    "ckfmha_plan: a ckfmha item running the dispatcher's own plan",
    "ckfmha_fwd: ckfmha forward item",
    "ckfmha_fwd_splitkv: ckfmha split-KV item",
    "ckfmha_fwd_pagedkv: ckfmha paged-KV item",
    "ckfmha_fwd_appendkv: ckfmha append-KV item",
    "ckfmha_batch_prefill: ckfmha batch-prefill item",
    "ckfmha_bwd: ckfmha backward item",
    "gpu: needs a GPU (ckfmha items with --ckfmha-backend triton or hip)",
    "ckfmha_parity: a ckfmha parity item (--ckfmha-parity)",
    "slow: a slow test (deselect with -m 'not slow')",
)


def pytest_addhooks(pluginmanager) -> None:
    from pytest_ckfmha import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser) -> None:
    from pytest_ckfmha.options import addoption

    addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """ckfmha node ids named as arguments are taken out before pytest reads them as paths (items.py)."""
    from pytest_ckfmha.items import take_node_id_arguments

    take_node_id_arguments(early_config, args)


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _warn_default_arch(config, detected: str, arch: str) -> None:
    config.issue_config_time_warning(
        pytest.PytestConfigWarning(
            f"ckfmha: detected GPU arch {detected!r} has no kernel space; testing the default arch "
            f"{arch!r} (name one with --ckfmha-arch)"
        ),
        stacklevel=3,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    from pytest_ckfmha import options
    from pytest_ckfmha.items import use_named

    category = config.getoption("ckfmha_category", None)
    if category is None and not options.any_given(config):
        use_named(config, active=False)
        return
    worker = _is_worker(config)
    if worker and (
        category is not None
        or config.getoption("ckfmha_parity", None) is not None
        or config.getoption("ckfmha_ck_smoke", None) is not None
    ):
        from pytest_ckfmha.xdist_support import assign_gpu

        assign_gpu(os.environ, config.workerinput.get("workerid"))
    detected = None
    if worker:
        detected = config.workerinput.get("ckfmha_arch")
    elif category is not None and options.raw_value(config, "arch")[0] is None:
        detected = options.detect_arch()
    settings = options.parse(config, detected)
    if worker and detected is not None:
        import dataclasses

        settings = dataclasses.replace(settings, arch_source=config.workerinput.get("ckfmha_arch_source", "controller"))
    if detected is not None and not worker and settings.arch_source == "default" and not config.option.quiet:
        _warn_default_arch(config, detected, settings.arch)
    use_named(config, settings.active)
    if not settings.active:
        _check_reports_written(config, settings)
        return
    from pytest_ckfmha.state import STATE_KEY, State

    config.stash[STATE_KEY] = State(config, settings)
    if config.getoption("ckfmha_cache_dir", None) or config.getini("ckfmha_cache_dir"):
        os.environ["CKFMHA_CACHE_DIR"] = str(settings.cache_dir)
    if config.args_source is not config.ArgsSource.ARGS:
        config.args = []  # `pytest --ckfmha-category X` runs the matrix only; name paths to add other tests
    if worker and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        try:  # a group-wide SIGTERM ends the workers too (the controller writes the report)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:  # not the main thread: execnet runs it elsewhere; the controller still stops
            pass
    if not worker:
        recorder = _Recorder(config)
        config.pluginmanager.register(recorder, "ckfmha-recorder")
        recorder.install_sigterm()
        if config.pluginmanager.hasplugin("xdist"):
            from pytest_ckfmha.xdist_support import XdistHooks, user_chose_dist

            chose = user_chose_dist(config)
            if chose:
                check_dist_mode(getattr(config.option, "dist", "no"))
            own = bool(getattr(config.option, "numprocesses", None)) and not chose
            config.pluginmanager.register(XdistHooks(settings, own), "ckfmha-xdist")


def _check_reports_written(config, settings) -> None:
    """A run that is not ckfmha's own (no category, parity or CK smoke) writes a ``--ckfmha-report`` only as kernel
    logs under ``--ckfmha-flash-attn-compat``; otherwise the option would be silently ignored: a usage error."""
    if settings.reports and not config.getoption("ckfmha_flash_attn_compat", None):
        raise pytest.UsageError(
            f"--ckfmha-report {' '.join(map(str, settings.reports))}: nothing would be written -- a report is "
            "written by ckfmha's own runs (--ckfmha-category, --ckfmha-parity, --ckfmha-ck-smoke) and kernel logs "
            "by --ckfmha-flash-attn-compat; this run has none of them"
        )


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_flash_attn_compat(config) -> None:
    """--ckfmha-flash-attn-compat (flash_attn_compat.py): register flash_attn_2_cuda before any test module is
    imported, after pytest_configure validated the options."""
    if config.getoption("ckfmha_flash_attn_compat", None):
        from pytest_ckfmha.flash_attn_compat import register

        register(config)


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_sample(config) -> None:
    """--ckfmha-sample (sampling.py): register its generation pruning (the parametrizations the sample leaves out
    are never created) after pytest_configure validated the options; ``-p no:ckfmha-sample`` turns it off."""
    if config.getoption("ckfmha_sample", None) is not None:
        from pytest_ckfmha.sampling import register_pruning

        register_pruning(config)


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    """The controller (or the only process) checks the selection before any item runs: the only process before
    the other session-start hooks; an xdist controller right after its workers were started (they start, import
    and collect while it checks), and a failed check stops them before its error is raised."""
    from pytest_ckfmha.state import has_state

    config = session.config
    if not has_state(config) or _is_worker(config):
        return (yield)
    from pytest_ckfmha.session_checks import check_selection
    from pytest_ckfmha.state import get_state

    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is None:
        check_selection(get_state(config))
        return (yield)
    result = yield
    try:
        check_selection(get_state(config))
    except BaseException:
        from pytest_ckfmha.xdist_support import stop_workers

        stop_workers(dsession)
        raise
    return result


@pytest.hookimpl(trylast=True, specname="pytest_sessionstart")
def pytest_sessionstart_prestart(session) -> None:
    """Before this process's collection: fork its kernel child, which warms up while the process collects
    (warmup.py)."""
    from pytest_ckfmha.state import has_state

    if has_state(session.config):
        from pytest_ckfmha.warmup import prestart_child_early

        prestart_child_early(session)


def pytest_sessionfinish(session) -> None:
    from pytest_ckfmha.state import has_state

    config = session.config
    if has_state(config):
        from pytest_ckfmha.state import get_state

        state = get_state(config)
        state.timeline.mark("finish_begins")
        state.close()  # stop this process's kernel child
        if _is_worker(config):  # xdist sends workeroutput to the controller after every sessionfinish hook
            from pytest_ckfmha.timeline import WORKEROUTPUT_KEY

            config.workeroutput[WORKEROUTPUT_KEY] = state.timeline.record()


def pytest_unconfigure(config) -> None:
    from pytest_ckfmha.state import has_state

    if has_state(config):
        from pytest_ckfmha.state import get_state

        get_state(config).close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    """--ckfmha-sample (sampling.py, any suite), then --ckfmha-shard / --ckfmha-resume: keep this run's items
    (sharding.py), after -k / -m."""
    from pytest_ckfmha.sampling import sample_items
    from pytest_ckfmha.state import has_state

    sample_items(config, items)
    if has_state(config):
        from pytest_ckfmha.state import get_state

        s = get_state(config).settings
        if s.shard is not None or s.resume is not None:
            from pytest_ckfmha.sharding import select

            select(config, items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    """This process's collection is final (in an xdist worker: trylast, after xdist's own hook sent it to the
    controller): a kernel child not forked yet (parity items only) is forked now and warms up while the items are
    scheduled; one forked early for a collection that leaves nothing to run is stopped (warmup.py)."""
    from pytest_ckfmha.state import has_state

    if has_state(session.config):
        from pytest_ckfmha.state import get_state
        from pytest_ckfmha.warmup import prestart_child

        get_state(session.config).timeline.mark("collected")
        prestart_child(session)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    rep = yield
    if isinstance(collector, pytest.Session) and rep.passed:
        from pytest_ckfmha.state import has_state

        if has_state(collector.config):
            rep.result.extend(_top_collectors(collector))
    return rep


def _top_collectors(session: pytest.Session) -> list[pytest.Collector]:
    """The session's ckfmha collectors (their node ids are :mod:`pytest_ckfmha.ids`' roots): the matrix with
    ``--ckfmha-category``, the CK smoke lines with ``--ckfmha-ck-smoke``, the parity items with ``--ckfmha-parity``
    -- with ``--ckfmha-ck-smoke`` the smoke lines are the parity items (ck_smoke.py), so the parity collector is
    added only for a category's shapes."""
    from pytest_ckfmha.ck_smoke import SmokeCollector
    from pytest_ckfmha.ids import PARITY_ROOT, ROOT, SMOKE, SMOKE_ROOT
    from pytest_ckfmha.items import MatrixCollector
    from pytest_ckfmha.parity_items import ParityCollector
    from pytest_ckfmha.state import get_state

    settings = get_state(session.config).settings
    wanted: list[tuple[bool, type[pytest.Collector], str, str]] = [
        (settings.category is not None, MatrixCollector, ROOT, ROOT),
        (settings.ck_smoke is not None, SmokeCollector, SMOKE, SMOKE_ROOT),
        (
            settings.parity is not None and (settings.ck_smoke is None or settings.category is not None),
            ParityCollector,
            PARITY_ROOT,
            PARITY_ROOT,
        ),
    ]
    return [
        cls.from_parent(session, name=name, nodeid=nodeid, path=session.config.rootpath)
        for on, cls, name, nodeid in wanted
        if on
    ]


def pytest_report_header(config):
    from pytest_ckfmha.state import has_state

    if not has_state(config) or _is_worker(config):
        return None
    from pytest_ckfmha.state import get_state

    s = get_state(config).settings
    return (
        f"ckfmha: category {s.category}, arch {s.arch} ({s.arch_source}), backend {s.backend}, "
        f"max {s.max_kernels_per_shape or 'all'} kernel(s)/shape, seed {s.seed}"
    )


class _Recorder(SigtermInterrupt):
    """Controller side (or the only process): one row per item, checkpoints, the final report and summary."""

    def __init__(self, config) -> None:
        from pytest_ckfmha.reporting import ReportWriter, RowBook
        from pytest_ckfmha.state import get_state

        super().__init__()
        self.config = config
        self.state = get_state(config)
        self.book = RowBook(self.state.describe)
        if self.state.settings.resume is not None:  # the completed items' rows come from the earlier report
            from pytest_ckfmha.sharding import completed_nodeids

            check_resumable(self.state.settings)
            done = completed_nodeids(self.state.resumed_rows())
            self.book.rows = {r["nodeid"]: r for r in self.state.resumed_rows() if r.get("nodeid") in done}
        self.writer = ReportWriter(self.state.settings.reports, self.state.settings.report_every)
        self.compare = None  # --ckfmha-compare PREV (benchcompare.py), checked now: a usage error at start
        if self.state.settings.compare is not None:
            from pytest_ckfmha.benchcompare import BenchCompare

            self.compare = BenchCompare.start(self.state.settings)
        self.book.on_collected = self._collected
        self.rows: list[dict] = []
        self.meta: dict = {}
        self.problems: list[str] = []
        self.running: set[str] = set()  # node ids of the items started and not finished
        self.worker_timelines: list[dict] = []  # the workers' timeline records (timeline.py), as they finish

    def pytest_unconfigure(self, config) -> None:
        self.writer.stop()
        self.restore_sigterm()

    # -- rows
    def pytest_collection_finish(self, session) -> None:
        self.book.set_collected([i.nodeid for i in session.items])

    def _collected(self) -> None:
        """The collection is known (here, or from the first xdist worker): a ``running`` report of this run now,
        then checkpoints every --ckfmha-report-every seconds from the writer's thread."""
        if self.config.option.collectonly or not self.state.settings.reports:
            return
        self.writer.checkpoint(self._snapshot)
        self.writer.start(self._snapshot)

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        with self.writer.lock:
            self.running.add(nodeid)

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        with self.writer.lock:
            self.running.discard(nodeid)

    def pytest_runtest_logreport(self, report) -> None:
        with self.writer.lock:
            self.book.add(report)

    def _snapshot(self) -> tuple[list[dict], dict]:
        rows = self.book.complete("not run yet (the session is running)")
        for r in rows:
            if r["verdict"] == "not_run" and r["nodeid"] in self.running:
                r["reason"] = "running when this checkpoint was written"
        return rows, self._meta(rows, {"state": "running"})

    def _meta(self, rows: list[dict], run: dict) -> dict:
        from pytest_ckfmha.reporting import meta_for
        from pytest_ckfmha.timeline import relative

        run = {
            "interrupted": False,
            "exit_status": None,
            "signal": self.signal,
            "collected": self.book.covered(),
            "completed": self.book.completed(),
            "processes": relative([self.state.timeline.record(), *self.worker_timelines], self.book.origin),
            **run,
        }
        return meta_for(self.state.settings, rows, self.state.collect_seconds, self._command(), run)

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        from pytest_ckfmha.session_checks import end_of_session_problems

        self.writer.stop()
        if self.config.option.collectonly:
            return
        self.state.timeline.mark("finish_begins")
        self.state.close()  # the only process: its kernel child stops before the report (timeline.py)
        with self.writer.lock:
            state, why = session_outcome(self.config, session, int(exitstatus), self.signal)
            self.rows = self.book.complete(why)
            if self.running and state == "interrupted":
                while_running = why.replace("before it ran", "while it was running")
                for r in self.rows:
                    if r["verdict"] == "not_run" and r["nodeid"] in self.running:
                        r["reason"] = while_running
        if state == "complete" and any(r["verdict"] == "not_run" for r in self.rows):
            state = "internal_error"  # items unrun, and no stop, signal or crash explains it
        if state not in ("interrupted", "internal_error"):
            self.problems, status = end_of_session_problems(self.state.settings, self.rows)
            if self.problems and int(session.exitstatus) == 0:
                session.exitstatus = status
        run = {"state": state, "interrupted": state == "interrupted", "reason": why if state != "complete" else ""}
        self.meta = self._meta(self.rows, {**run, "exit_status": int(session.exitstatus)})
        if self.compare is not None and state not in ("interrupted", "internal_error"):
            failed = self.compare.finish(self.rows, self.meta)  # a regression or a refusal fails the run (exit 1)
            self.problems += failed
            if failed and int(session.exitstatus) == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.meta["exit_status"] = int(session.exitstatus)
        if self.state.settings.reports:
            self.writer.final(self.rows, self.meta)
            if self.writer.error is not None:
                self.problems.append(self.writer.error)
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # docs/plugin.md: exit 3, whatever else failed

    def pytest_terminal_summary(self, terminalreporter) -> None:
        from pytest_ckfmha.reporting import terminal_summary

        if self.state.settings.bench and self.rows:
            from pytest_ckfmha.benchcompare import bench_section

            bench_section(terminalreporter, self.rows, self.compare)
        if self.rows or self.problems:
            terminal_summary(terminalreporter, self.rows, self.meta, self.writer.written, self.problems)

    def _command(self) -> list[str]:
        return ["pytest", *self.config.invocation_params.args]


#: the ``--dist`` modes a ckfmha run accepts besides its own scheduler (``-n`` without ``--dist``), and why others
#: are refused (docs/plugin.md, xdist)
ACCEPTED_DIST = ("no", "load")
REFUSED_DIST = {
    "each": "it runs every item on every worker, so an item would have one row per worker",
}
DIST_REASON = (
    "its xdist scheduler does not survive a dying worker (an INTERNALERROR such as KeyError: <WorkerController gw2>, "
    "the rest of the items never run)"
)


def check_dist_mode(mode: str) -> None:
    """A user-chosen ``--dist`` other than :data:`ACCEPTED_DIST` is a usage error naming the mode and why."""
    if mode in ACCEPTED_DIST:
        return
    why = REFUSED_DIST.get(mode, DIST_REASON)
    raise pytest.UsageError(
        f"--dist {mode}: not supported by ckfmha runs: {why}; leave --dist out (-n N uses ckfmha's kernel-group "
        "scheduler, which reports a dead worker's item and goes on) or use --dist load"
    )


def session_outcome(config, session, exitstatus: int, sig: str | None) -> tuple[str, str]:
    """(the report's ``state``, why its unrun items did not run) at the end of a session (reporting.py's module
    doc): a signal, xdist giving up on crashed workers, ``-x`` / ``--maxfail``, Ctrl-C, an internal error."""
    dsession = config.pluginmanager.get_plugin("dsession")  # xdist's controller, when it runs
    gave_up = getattr(dsession, "_summary_report", None)
    stop = getattr(session, "shouldfail", False) or getattr(dsession, "shouldstop", False) or ""
    maxfail = int(config.getoption("maxfail", 0) or 0)
    if sig is not None:
        return "interrupted", f"the session was interrupted ({sig}) before it ran"
    if gave_up and "crash" in str(gave_up):
        return "crashed_workers", f"never ran: xdist gave up after crashed workers ({gave_up})"
    if stop and "keyboard-interrupt" not in str(stop):  # -x / --maxfail (xdist: "stopping after N failures"), --sw
        how = f"with -x / --maxfail {maxfail} " if maxfail else ""
        return "stopped_early", f"never ran: the session stopped early {how}({stop})"
    if exitstatus == int(pytest.ExitCode.INTERRUPTED):
        return "interrupted", "the session was interrupted (KeyboardInterrupt) before it ran"
    if exitstatus == int(pytest.ExitCode.INTERNAL_ERROR):
        return "internal_error", "never ran: the session ended with an internal error (see pytest's output)"
    return "complete", "never ran (the session ended before it; see pytest's output)"


def check_resumable(settings) -> None:
    """``--ckfmha-resume PREV``: PREV is a report of this run (sharding.check_same_run) of the same selection
    (reporting.selection; a report without a fingerprint is checked by the run fields alone)."""
    from ckfmha.runreport import load_report
    from pytest_ckfmha.ids import ID_FORMAT, NodeId
    from pytest_ckfmha.reporting import selection, selection_difference
    from pytest_ckfmha.sharding import check_same_run

    path = settings.resume
    report = load_report(path)
    meta = report.meta
    for row in report.rows:
        node = NodeId.parse(str(row.get("nodeid") or ""))
        if node is not None and node.old_format:
            raise pytest.UsageError(
                f"--ckfmha-resume: {path!r}: row {row.get('nodeid')!r} has a node id of the old id format (the full "
                f"kernel id as its last part); this version names kernels by their kernel token (id format "
                f"{ID_FORMAT}, e.g. ckfmha::<shape id>::qr_async-b128x128x32-a4399a6e), so a report of the old id "
                "format cannot be resumed: rerun without --ckfmha-resume"
            )
    check_same_run(settings, meta, path)
    if "selection" in meta:
        diff = selection_difference(meta["selection"], selection(settings))
        if diff is not None:
            raise pytest.UsageError(f"--ckfmha-resume: {path!r}: {diff}: resume a report of the same selection")


def load() -> None:
    """Required by pluggy to load a plugin from an entry point (as Hypothesis does)."""
