"""The ckfmha pytest plugin entry module.

It is loaded by every pytest run in an environment where ckfmha is installed, so it imports nothing heavy at
load time (no numpy, no torch, not even ckfmha): hooks import what they need when they run, and the plugin only
does anything when ``--ckfmha-category`` is given (docs/plugin.md).

One module per concern: options.py (options, ini keys, validation), collect.py (shapes -> kernels), items.py
(collector tree), ids.py, execute.py (one item), refcache.py (shared reference cache), reporting.py (rows,
JSON/CSV, summary), xdist_support.py (grouping, GPU per worker), hookspecs.py (hooks for conftests), state.py.
"""

from __future__ import annotations

import os

import pytest

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


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    for m in MARKERS:
        config.addinivalue_line("markers", m)
    from pytest_ckfmha import options

    category = config.getoption("ckfmha_category", None)
    if category is None and not options.any_given(config):
        return
    worker = _is_worker(config)
    if worker and (category is not None or config.getoption("ckfmha_parity", None) is not None):
        from pytest_ckfmha.xdist_support import assign_gpu

        assign_gpu(os.environ, config.workerinput.get("workerid"))
    detected = None
    if worker:
        detected = config.workerinput.get("ckfmha_arch")
    elif category is not None and options._raw(config, "arch")[0] is None:
        detected = options.detect_arch()
    settings = options.parse(config, detected)
    if worker and detected is not None:
        import dataclasses

        settings = dataclasses.replace(settings, arch_source=config.workerinput.get("ckfmha_arch_source", "controller"))
    if detected is not None and not worker and settings.arch_source == "default" and not config.option.quiet:
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"ckfmha: detected GPU arch {detected!r} has no kernel space; testing the default arch "
            f"{settings.arch!r} (name one with --ckfmha-arch)"), stacklevel=2)
    if not settings.active:
        return
    from pytest_ckfmha.state import STATE_KEY, State

    config.stash[STATE_KEY] = State(config, settings)
    if config.getoption("ckfmha_cache_dir", None) or config.getini("ckfmha_cache_dir"):
        os.environ["CKFMHA_CACHE_DIR"] = str(settings.cache_dir)
    if config.args_source is not config.ArgsSource.ARGS:
        config.args = []  # `pytest --ckfmha-category X` runs the matrix only; name paths to add other tests
    if not worker:
        config.pluginmanager.register(_Recorder(config), "ckfmha-recorder")
    if worker:
        if config.workerinput.get("ckfmha_loadgroup"):
            config.option.loadgroup = True
    elif config.pluginmanager.hasplugin("xdist"):
        from pytest_ckfmha.xdist_support import XdistHooks, user_chose_dist

        if getattr(config.option, "numprocesses", None) and not user_chose_dist(config):
            config.option.dist = "loadgroup"
        config.pluginmanager.register(XdistHooks(settings), "ckfmha-xdist")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    rep = yield
    if isinstance(collector, pytest.Session) and rep.passed:
        from pytest_ckfmha.state import has_state

        if has_state(collector.config):
            from pytest_ckfmha.state import get_state

            settings = get_state(collector.config).settings
            if settings.category is not None:
                from pytest_ckfmha.items import ROOT_NAME, MatrixCollector

                rep.result.append(MatrixCollector.from_parent(collector, name=ROOT_NAME, nodeid=ROOT_NAME,
                                                              path=collector.config.rootpath))
            if settings.parity is not None:
                from pytest_ckfmha.parity_items import PARITY_ROOT, ParityCollector

                rep.result.append(ParityCollector.from_parent(collector, name=PARITY_ROOT, nodeid=PARITY_ROOT,
                                                              path=collector.config.rootpath))
    return rep


def pytest_report_header(config):
    from pytest_ckfmha.state import has_state

    if not has_state(config) or _is_worker(config):
        return None
    from pytest_ckfmha.state import get_state

    s = get_state(config).settings
    return (f"ckfmha: category {s.category}, arch {s.arch} ({s.arch_source}), backend {s.backend}, "
            f"max {s.max_kernels_per_shape or 'all'} kernel(s)/shape, seed {s.seed}")


class _Recorder:
    """Controller side (or the only process): rows from reports, files and summary at the end."""

    def __init__(self, config) -> None:
        self.config = config
        self.written = []

    def pytest_runtest_logreport(self, report) -> None:
        from pytest_ckfmha.reporting import row_from_report
        from pytest_ckfmha.state import get_state

        row = row_from_report(report)
        if row is not None:
            get_state(self.config).rows.append(row)

    def pytest_sessionfinish(self, session) -> None:
        from pytest_ckfmha.reporting import meta_for, write_reports
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        if st.settings.reports and not self.config.option.collectonly:
            self.written = write_reports(st.settings.reports, st.rows,
                                         meta_for(st.settings, st.rows, st.collect_seconds, self._command()))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        from pytest_ckfmha.reporting import meta_for, terminal_summary
        from pytest_ckfmha.state import get_state

        st = get_state(self.config)
        if st.rows:
            terminal_summary(terminalreporter, st.rows,
                             meta_for(st.settings, st.rows, st.collect_seconds, self._command()), self.written)

    def _command(self) -> list[str]:
        return ["pytest", *self.config.invocation_params.args]


def load() -> None:
    """Required by pluggy to load a plugin from an entry point (as Hypothesis does)."""
