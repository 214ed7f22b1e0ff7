"""Containment: the kernel work of every ckfmha item runs in a child process that can be killed.

| event in the child | the item's verdict | reason names |
|---|---|---|
| the item's work returns | its own (passed / failed / skipped / error) | -- |
| a signal kills it (SIGSEGV, SIGABRT, SIGKILL, ...) | ``crashed`` | the signal, the item (shape and kernel), the child's last output |
| it exits (``os._exit``, ``exit()`` in native code) | ``crashed`` | the exit status, the item, the last output |
| it runs past ``--ckfmha-timeout`` seconds | ``timeout`` | the limit, the item, the last output; the child's whole process group is killed |

Each pytest process (the only one, or each xdist worker) keeps one child, forked from itself: the child inherits
the settings, any backend a ``pytest_ckfmha_backend`` hook supplies (so every backend is contained the same way)
and, when forked after the collection, the collected items.  The parent sends each item as ``(node id, work
order)``: a child forked before the collection (pre-start) runs the order -- the item's work as picklable data,
bound to the child's state; an item without an order (or with one that cannot be pickled) goes to a child forked
after the collection, which finds the item by its node id (a child forked early is replaced by a fresh one then).  The child serves item after item (its caches, compiled kernels and GPU context stay warm)
until it crashes or is killed; the next item forks a fresh child.

At the session's end the parent closes the pipe of a child that finished its warm-up (the child exits at once;
one still warming up is killed) and waits at most ``END_WAIT_SECONDS``:
a GPU child's exit -- the driver tearing its CUDA context down -- can take seconds, during which the run has
nothing left to hear from it, so a thread reaps it and the process ends without waiting for it.

The child runs in its own session (so killing its process group also stops compilers or tools it started),
dies with its parent (``PR_SET_PDEATHSIG`` on Linux) and writes its stdout/stderr, and faulthandler's traceback
of a fatal signal, to a log whose tail goes into the failure reason (and, for items that finish, to the item's
captured output).  Warnings the child raises are re-issued in the parent.

Pre-start (:mod:`pytest_ckfmha.warmup`, whose table says when): the first child is forked before the process's
collection (or, for parity items only, right after it), and warms up -- loads the backend through the items' own
path, ``available()``, the device and, for a GPU backend, the CUDA context -- while the process collects and the
controller schedules, instead of inside the first item.

| pre-start | what happens |
|---|---|
| when | warmup.py's table: the process will run ckfmha items (not with ``--collect-only``, ``--setup-only`` / ``--setup-plan`` or ``--ckfmha-isolation inline``); a child forked before a collection that selects nothing (or fails) is stopped when it ends |
| the warm-up ends | the child says so (:class:`WarmUp`); the first item's row gets ``child_warmup_s`` (its seconds), its output follows the warm-up's in the log, and the warm-up's warnings are re-issued with it |
| the backend cannot be loaded, or is not available | the warm-up ends there; the runtime keeps the load failure, so every item skips with the reason it gets without a warm-up |
| the warm-up raises | forgotten (a line in the log, so in the first item's output); each item meets the failure in its own work and gets the verdict it gets without a warm-up |
| the child dies during its warm-up | the first item runs in a fresh child and is not blamed; its output starts with a note naming the exit |
| the first item comes while it still warms up | the item waits; its ``--ckfmha-timeout`` counts from its start (the warm-up did the loading it would have done itself); past it, the item's verdict is ``timeout`` |
| the session ends while it still warms up | the child is killed |
| a later child (after a crash, a timeout, a raising stage) | forked when the next item comes, without a warm-up (it loads the backend in that item, as before) |

GPU note: a forked child can use CUDA only when the parent never initialized it, so the parent process never
touches a GPU: the arch is detected in a subprocess (:func:`pytest_ckfmha.options.detect_arch`) and every
backend call happens in the child -- the warm-up too: the parent only passes the warm-up function to the fork.

``--ckfmha-isolation inline`` runs the work in the pytest process itself (for ``--pdb`` and profilers): nothing
is contained and no timeout is enforced.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

#: bytes of the child's log kept for a failure reason / the captured output
LOG_TAIL_BYTES = 64 * 1024
#: lines of the child's log quoted in a crash or timeout reason
REASON_TAIL_LINES = 20
#: seconds the parent waits for a killed child to be reaped
REAP_SECONDS = 15.0
#: at the session's end, seconds the parent waits for its child to exit before leaving it to finish exiting alone
#: (a GPU child's exit -- the driver tearing its CUDA context down -- takes seconds, and nothing is left to hear)
END_WAIT_SECONDS = 0.2


@dataclass
class ItemResult:
    """What running one item produced (plain data: it crosses the process boundary by pickle)."""

    outcome: str  # pytest outcome: passed | failed | skipped
    verdict: str  # report verdict: passed | failed | skipped | error | crashed | timeout
    message: str = ""
    props: dict[str, Any] = field(default_factory=dict)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # ("module:qualname" of the category, message)
    fresh_process_next: bool = False  # the work raised: the next item gets a new child (its device may be broken)

    @classmethod
    def error(cls, what: str, exc: BaseException, props: dict[str, Any] | None = None) -> "ItemResult":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(
            "failed", "error", f"{what}: {type(exc).__name__}: {exc}\n{tb}", dict(props or {}), fresh_process_next=True
        )


@dataclass
class WarmUp:
    """What a pre-started child's warm-up took (plain data: the child sends it when its warm-up ended)."""

    seconds: float
    warnings: list[tuple[str, str]] = field(default_factory=list)  # as ItemResult.warnings
    phases: dict[str, float] = field(default_factory=dict)  # the warm-up's steps' seconds (warmup.warm_up)
    ended_at: float = 0.0  # time.time() when it ended


def describe_exit(exitcode: int | None) -> str:
    """'killed by signal 11 (SIGSEGV)' / 'exited with status 3' / 'ended (exit status unknown)'."""
    if exitcode is None:
        return "ended (exit status unknown)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-exitcode} ({name})"
    return f"exited with status {exitcode}"


def tail_lines(text: str, n: int = REASON_TAIL_LINES) -> str:
    """The end of the child's output for a reason; a fatal-signal dump (faulthandler) is kept from its start,
    where the innermost frames are, after the last lines printed before it."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    fatal = next((i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error")), None)
    if fatal is None:
        return "\n".join(lines[-n:])
    before = lines[max(0, fatal - n // 2) : fatal]
    return "\n".join(before + lines[fatal : fatal + n - len(before)])


def _read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return (f"[... {size - limit} earlier bytes not shown]\n" + text) if size > limit else text


def _set_parent_death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (best effort elsewhere)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _plain_warnings(caught) -> list[tuple[str, str]]:
    """Recorded warnings as ``("module:qualname" of the category, message)`` (they cross the process boundary)."""
    return [(f"{type(w.message).__module__}:{type(w.message).__qualname__}", str(w.message)) for w in caught]


def _redirect_output(log_path: str, truncate: bool) -> None:
    """The child's stdout/stderr (and faulthandler's dump of a fatal signal) go to the log: a fresh one for an item,
    the warm-up's continued for the first item after it."""
    import faulthandler
    import sys

    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_APPEND)
    fd = os.open(log_path, flags, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)


def _child_warm_up(conn, warm_up: Callable[[], dict[str, float] | None], log_path: str) -> None:
    """A pre-started child's warm-up (module doc): what it raises is forgotten (a line in the log), then the parent
    is told it ended (:class:`WarmUp`); a parent that closed the pipe meanwhile ends the child."""
    import sys

    _redirect_output(log_path, truncate=True)
    t0 = time.perf_counter()
    phases: dict[str, float] | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        try:
            phases = warm_up()
        except BaseException as e:  # noqa: BLE001 - the items meet it in their own work
            print(f"ckfmha: the kernel process's warm-up raised {type(e).__name__}: {e} (ignored)", file=sys.stderr)
    steps = {str(k): round(float(v), 3) for k, v in phases.items()} if isinstance(phases, dict) else {}
    done = WarmUp(time.perf_counter() - t0, _plain_warnings(caught), steps, time.time())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.send(done)
    except OSError:  # the parent's session ended during the warm-up
        os._exit(0)


def _child_main(
    conn,
    parent_end,
    resolve: Resolve,
    log_path: str,
    warm_up: Callable[[], dict[str, float] | None] | None = None,
) -> None:
    """The child's loop: ``warm_up`` first (a pre-started child), then receive ``(node id, work order or None)``,
    run its work, send the ItemResult back. Never returns."""
    parent_end.close()  # the parent's end: closing it here lets the parent's close() reach us as EOF
    try:
        os.setsid()
    except OSError:  # pragma: no cover - already a session leader
        pass
    _set_parent_death_signal()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if warm_up is not None:
        _child_warm_up(conn, warm_up, log_path)
    keep_log = warm_up is not None  # the first item's output follows the warm-up's
    while True:
        try:
            nodeid, order = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            os._exit(0)
        _redirect_output(log_path, truncate=not keep_log)
        keep_log = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                result = resolve(nodeid, order)()
            except BaseException as e:  # noqa: BLE001 - everything becomes the item's result
                result = ItemResult.error("the item's work raised", e)
        result.warnings = _plain_warnings(caught)
        _send_result(conn, result)


def _send_result(conn, result: ItemResult) -> None:
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        conn.send(result)
    except Exception as e:  # noqa: BLE001 - e.g. an unpicklable value in props
        conn.send(ItemResult.error("the item's result could not be sent back", e))


def _message(nodeid: str, order: Any) -> tuple[bytes, bool]:
    """``(node id, order)`` pickled once, as the child's ``recv`` reads it, and whether the order is in it (one
    that cannot be pickled is left out: the child finds the item in its collection instead)."""
    import pickle

    if order is not None:
        try:
            return pickle.dumps((nodeid, order)), True
        except Exception:  # noqa: BLE001 - any failure: sent without the order
            pass
    return pickle.dumps((nodeid, None)), False


def _reap_in_background(proc: BaseProcess) -> None:
    """Let a child that is exiting (it read the closed pipe) finish alone: a daemon thread reaps it, and the
    interpreter's exit does not wait for it (multiprocessing joins every child it still lists at exit)."""
    import multiprocessing.process
    import threading

    children = getattr(multiprocessing.process, "_children", None)
    if isinstance(children, set):
        children.discard(proc)
    threading.Thread(target=proc.join, name="ckfmha-reap-child", daemon=True).start()


def _receive(proc: BaseProcess, conn: Connection, deadline: float | None) -> tuple[str, Any]:
    """The child's next message: ``("message", it)``, ``("dead", None)`` (it died or closed its end) or
    ``("timeout", None)`` (``deadline``, a ``time.monotonic()`` value, passed; None: no limit)."""
    while True:
        wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
        if conn.poll(wait):
            try:
                return "message", conn.recv()
            except (EOFError, OSError):
                return "dead", None
        if not proc.is_alive():
            return "dead", None
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout", None


#: finds an item's work: ``resolve(node id, work order or None)`` -> a callable giving the ItemResult (the order
#: bound to the process's state, else the item of that node id in the session's collection)
Resolve = Callable[[str, Any], Callable[[], ItemResult]]


class ChildExecutor:
    """Runs items' work in a forked child (see the module doc)."""

    forks = True  # it keeps a child process (the timeline records stopping it)

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None  # the parent's end of the pipe to the child
        self._dir = Path(tempfile.mkdtemp(prefix="ckfmha-child-"))
        self._log = self._dir / "child.log"
        self.started = 0  # children forked so far
        self.last_backend = ""
        self._warming = False  # the current child was pre-started and has not yet said its warm-up ended
        self._warm_up: WarmUp | None = None  # the ended warm-up, until the item it preceded takes it
        self._lost_warm_up = ""  # a note on a pre-started child that died warming up, for the next item's output
        self.first_warm_up: WarmUp | None = None  # the first pre-started child's ended warm-up (timeline.py)
        self._early = False  # the current child was forked before the collection: it runs work orders only

    # -- lifecycle
    def prestart(self, warm_up: Callable[[], dict[str, float] | None] | None = None, early: bool = False) -> None:
        """Fork the child now, before any item; ``warm_up`` runs in it first (module doc, pre-start); ``early``:
        before the collection (it gets work orders only).  Nothing when a child runs already."""
        if self._proc is None:
            self._start(warm_up)
            self._early = early

    @property
    def early(self) -> bool:
        """Whether the current child was forked before the collection (and so knows no item)."""
        return self._proc is not None and self._early

    def _start(self, warm_up: Callable[[], dict[str, float] | None] | None = None) -> tuple[BaseProcess, Connection]:
        """Fork a child; returns (the child, the parent's end of the pipe), also kept as the current child."""
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork() in a process with threads (xdist's execnet IO thread); the child
            # touches none of that thread's state.
            warnings.simplefilter("ignore", DeprecationWarning)
            proc = ctx.Process(
                target=_child_main,
                args=(child_conn, parent_conn, self._resolve, str(self._log), warm_up),
                name="ckfmha-kernel-child",
                daemon=False,
            )
            proc.start()
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
        self._warming = warm_up is not None
        self._early = False
        self.started += 1
        return proc, parent_conn

    def _kill(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        pid = proc.pid
        if pid is not None:  # always set: _start keeps only a started child
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
        proc.join(REAP_SECONDS)
        code = proc.exitcode
        self._forget()
        return code

    def _forget(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._proc = self._conn = None
        self._warming = False

    def close(self) -> WarmUp | None:
        """At the session's end: stop the child (if any) without waiting for its exit to finish (a thread reaps
        it) and remove the log directory; returns the first pre-started child's warm-up (None: nothing was
        pre-started, or its warm-up never ended)."""
        self.close_child(wait=END_WAIT_SECONDS)
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.first_warm_up

    def close_child(self, wait: float | None = None) -> None:
        """Stop the child (if any; one still warming up is killed at once); the next item forks a new one.
        ``wait``: seconds to wait for its exit before a thread takes over the waiting (None: wait up to 5 s, then
        kill it)."""
        proc, conn = self._proc, self._conn
        if proc is not None:
            if self._warming:
                self._kill()
                return
            if conn is not None:  # closing the pipe ends the child's loop
                try:
                    conn.close()
                except OSError:
                    pass
            proc.join(5.0 if wait is None else wait)
            if proc.is_alive():
                if wait is None:
                    self._kill()
                else:
                    _reap_in_background(proc)
            self._forget()

    def take_warm_up(self) -> WarmUp | None:
        """The warm-up that ended before the item just run (once: the first item of a pre-started child)."""
        done, self._warm_up = self._warm_up, None
        return done

    def _ready_child(self, deadline: float | None) -> tuple[BaseProcess, Connection] | None:
        """The child to send the next item to: the current one once its warm-up (if any) ended, a fresh one if it
        died (also while warming up: the item is not blamed) or there is none; None when ``deadline`` passed
        during the warm-up (the child is killed)."""
        proc, conn = self._proc, self._conn
        if proc is not None and conn is not None and self._warming:
            got, msg = _receive(proc, conn, deadline)
            if got == "timeout":
                self._kill()
                return None
            if isinstance(msg, WarmUp):
                self._warming, self._warm_up = False, msg
                if self.first_warm_up is None:
                    self.first_warm_up = msg
            else:  # it died (or said something else) before its warm-up ended
                if got == "dead":
                    proc.join(REAP_SECONDS)  # its own exit status, not the kill's
                tail = tail_lines(_read_tail(self._log), 5)
                self._lost_warm_up = (
                    f"ckfmha: the pre-started kernel process {describe_exit(self._kill())} during its warm-up; "
                    "this item ran in a fresh one" + (f"; the warm-up's last output:\n{tail}" if tail else "") + "\n"
                )
                proc = conn = None
        if proc is None or conn is None or not proc.is_alive():
            self._forget()
            proc, conn = self._start()
        return proc, conn

    # -- one item
    def run(self, nodeid: str, timeout_s: float | None, order: Any = None) -> tuple[str, ItemResult | int | None, str]:
        """Run the work of ``nodeid`` (``order``: its work order, plain data; None: the child finds the item in
        its collection): ``("done", ItemResult, output)``, ``("crashed", exitcode, output)`` or ``("timeout",
        None, output)``."""
        deadline = None if not timeout_s else time.monotonic() + timeout_s
        message, has_order = _message(nodeid, order)
        if not has_order and self.early:  # a child forked before the collection knows no item: a fresh one
            self.close_child()
        try:
            ready = self._ready_child(deadline)
            if ready is None:
                return "timeout", None, _read_tail(self._log)
            proc, conn = ready
            note, self._lost_warm_up = self._lost_warm_up, ""
            try:
                conn.send_bytes(message)
            except (BrokenPipeError, OSError):  # died between items
                code = self._kill()
                return "crashed", code, _read_tail(self._log)
            got, result = _receive(proc, conn, deadline)
            if got == "timeout":
                self._kill()
                return "timeout", None, _read_tail(self._log)
            if got == "dead":
                proc.join(REAP_SECONDS)
                code = proc.exitcode
                self._forget()
                return "crashed", code, _read_tail(self._log)
            output = note + _read_tail(self._log)
            if getattr(result, "fresh_process_next", False):
                self.close_child()  # e.g. a CUDA error: the context is unusable for later items
            return "done", result, output
        except BaseException:
            self._kill()  # KeyboardInterrupt / SIGTERM in the parent: never leave the child running
            raise


class InlineExecutor:
    """``--ckfmha-isolation inline``: the work runs in this process (no containment, no timeout)."""

    early = False  # nothing is forked
    forks = False

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self.started = 0
        self.last_backend = ""

    def run(self, nodeid: str, timeout_s: float | None, order: Any = None) -> tuple[str, ItemResult, str]:
        try:
            return "done", self._resolve(nodeid, None)(), ""
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001
            return "done", ItemResult.error("the item's work raised", e), ""

    def take_warm_up(self) -> WarmUp | None:
        return None  # nothing is pre-started inline

    def close(self) -> WarmUp | None:
        return None  # nothing is pre-started inline


def _warning_class(name: str) -> type[Warning]:
    import builtins
    import importlib

    module, _, qual = name.rpartition(":")
    try:
        obj: Any = importlib.import_module(module) if module else builtins
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return UserWarning
    return obj if isinstance(obj, type) and issubclass(obj, Warning) else UserWarning


def result_of(item, status: str, value, output: str, last_backend: str = "") -> ItemResult:
    """The ItemResult of a run: the child's own, or one made here for a crashed or timed-out child."""
    if status == "done":
        return value
    tail = tail_lines(output)
    last = f"\nlast output of the kernel process:\n{tail}" if tail else "\n(the kernel process printed nothing)"
    settings = item.settings()
    if status == "crashed":
        reason = f"{item.item_id}: crashed: the kernel process {describe_exit(value)} while running {item.describe()}"
        verdict = "crashed"
    else:
        reason = (
            f"{item.item_id}: timeout: still running after {settings.timeout:g} s (--ckfmha-timeout) on "
            f"{item.describe()}; the kernel process and its process group were killed"
        )
        verdict = "timeout"
    props = item.base_report_props()
    props["reason"] = reason
    if last_backend:
        props["backend"] = last_backend
    return ItemResult("failed", verdict, reason + last, props)


def executor_of(state, session) -> ChildExecutor | InlineExecutor:
    """This process's executor of items' work (kept in :attr:`pytest_ckfmha.state.State.executor`), made on first
    use: ``--ckfmha-isolation`` picks the class; it finds an item's work from its work order (bound to the
    process's state) or by node id in the session's items."""
    if state.executor is None:
        items: dict = {}

        def resolve(nodeid: str, order: Any = None):
            if order is not None:
                return partial(order, state)
            if not items:  # built lazily: in the child, from the collection it inherited
                items.update((i.nodeid, i) for i in session.items)
            return items[nodeid].work

        cls = InlineExecutor if state.settings.isolation == "inline" else ChildExecutor
        state.executor = cls(resolve)
    return state.executor


def run_contained(item) -> None:
    """``runtest`` of every ckfmha item: run ``item.work`` through the process's executor, record the result's
    report values on the item and turn it into the pytest outcome."""
    import sys

    import pytest

    from pytest_ckfmha.reporting import plain
    from pytest_ckfmha.state import get_state

    st = get_state(item.config)
    executor = executor_of(st, item.session)
    make_order = getattr(item, "work_order", None)  # a child forked before the collection runs orders only
    order = make_order() if make_order is not None and executor.early else None
    status, value, output = executor.run(item.nodeid, st.settings.timeout or None, order)
    warmed = executor.take_warm_up()  # the first item of a pre-started child (module doc)
    result = result_of(item, status, value, output, executor.last_backend)
    if status == "done" and result.props.get("backend"):
        executor.last_backend = str(result.props["backend"])  # what "auto" resolved to, for crash rows
    props = dict(result.props)
    props["verdict"] = result.verdict
    if warmed is not None:
        props["child_warmup_s"] = round(warmed.seconds, 6)
    for k, v in props.items():
        item.user_properties.append((k, plain(v)))
    for cls_name, message in (warmed.warnings if warmed is not None else []) + result.warnings:
        warnings.warn(message, _warning_class(cls_name), stacklevel=1)
    if status == "done" and output.strip():
        sys.stdout.write(output)  # the child's output becomes the item's captured output
    if result.outcome == "skipped":  # at the item's location where it has a line (a matrix item: its entry)
        raise pytest.skip.Exception(result.message, _use_item_location=item.reportinfo()[1] is not None)
    if result.outcome == "failed":
        pytest.fail(result.message, pytrace=False)
