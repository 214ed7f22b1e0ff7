"""SIGTERM behaves like Ctrl-C in the controller (or the only process) of a run that writes something at its end.

| when | what |
|---|---|
| installed | by the registered plugin object of ckfmha's own runs (plugin.py's ``_Recorder``) or of ``--ckfmha-flash-attn-compat`` (flash_attn_compat.py), in the main thread, when SIGTERM's handler is the default or ignored (an ignored SIGTERM inherited from a launcher would otherwise do nothing until the SIGKILL after it); a handler somebody else installed is left alone |
| a SIGTERM during the items | recorded (:attr:`SigtermInterrupt.signal`) and raised as KeyboardInterrupt: pytest stops as after Ctrl-C, ``pytest_sessionfinish`` runs, the report or kernel log is written |
| a SIGTERM after ``pytest_sessionfinish`` began | recorded, not raised (raised there, it would leave xdist's wait for its workers and skip the final report) |
| a second SIGTERM | the default action: the process ends at once |
| ``pytest_unconfigure`` | the plugin calls :meth:`SigtermInterrupt.restore_sigterm`: the handler from before is back |
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest


class SigtermInterrupt:
    """SIGTERM behaves like Ctrl-C: pytest stops, sessionfinish runs, the report (or kernel log) is written.  One rule
    for ckfmha's own runs (plugin.py's ``_Recorder``) and ``--ckfmha-flash-attn-compat`` (flash_attn_compat.py): the plugin
    object of the controller (or the only process) derives from it, is registered and calls :meth:`install_sigterm`;
    :attr:`signal` then names the signal that stopped the run (``None``: none did)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.finishing = False  # pytest_sessionfinish has begun (a SIGTERM then stops nothing: see install_sigterm)
        # SIGTERM's handler before install_sigterm (as signal.getsignal gives it), restored by restore_sigterm
        self._previous_sigterm: Callable[[int, FrameType | None], Any] | int | None = None

    def install_sigterm(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return  # somebody else handles SIGTERM
        # SIG_IGN inherited from the launcher (a job runner's shell, a container's init) would make a CI time limit's
        # SIGTERM do nothing until the SIGKILL that follows it: the run stops and writes its report instead

        def on_sigterm(signum, frame):
            self.signal = "SIGTERM"
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
            if self.finishing:
                # the items are over; raised now, KeyboardInterrupt would leave the sessionfinish hook running (xdist's
                # wait for its workers, on an H100 box) and skip the final report: recorded, and the finish goes on
                return
            raise KeyboardInterrupt("SIGTERM")

        signal.signal(signal.SIGTERM, on_sigterm)
        self._previous_sigterm = previous

    def restore_sigterm(self) -> None:
        """Put back SIGTERM's handler from before :meth:`install_sigterm` (at ``pytest_unconfigure``)."""
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_begins(self, session, exitstatus):
        """Before every pytest_sessionfinish implementation: from here a SIGTERM is recorded, not raised."""
        self.finishing = True
        return (yield)
