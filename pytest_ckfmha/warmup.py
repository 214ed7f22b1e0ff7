"""Pre-start: each pytest process (the only one, or each xdist worker) forks its kernel child process
(isolation.py) before its collection when it will run matrix or CK smoke items, so that the child's warm-up (the
backend's import -- torch, Triton -- and the CUDA context: seconds) overlaps the process's collection and the
controller's scheduling instead of delaying the worker's first item.

| the process | pre-started |
|---|---|
| runs a category or CK smoke lines (``--ckfmha-category``, ``--ckfmha-ck-smoke`` without ``--ckfmha-parity``), with no paths on the command line | the child, forked at the session's start (``pytest_sessionstart``, trylast: after the selection check of a run without workers), before the collection, with the kernel set built first (the child inherits it); it runs :func:`warm_up` first. It knows no item: each item sends it a work order (its work as plain data, :meth:`pytest_ckfmha.items.CkfmhaItem.work_order`); an item without one (a parity item) gets a fresh child forked then, which inherits the collection (isolation.py) |
| runs parity items only (``--ckfmha-parity``, also with ``--ckfmha-ck-smoke``: parity items have no work order); test paths given on the command line (their conftests, which may supply the backend or the kernels, load during the collection); the kernel set cannot be built at the start (the items or the selection check meet the error as before) | the child, forked from ``pytest_collection_finish`` (plugin.py; in an xdist worker after the worker sent its collection to the controller: the child inherits the final collection); it runs :func:`warm_up` first when matrix or CK smoke items are among them (parity items alone: no warm-up, the parity sides load their backends themselves) |
| the collection ends with no ckfmha item to run (``-k``, ``-m``, a shard without items, collection errors without ``--continue-on-collection-errors``) | a child forked early is stopped then (its warm-up may have begun); otherwise nothing |
| ``--collect-only``, ``--setup-only`` / ``--setup-plan``, an xdist controller (it collects nothing) | nothing: no item runs here |
| ``--ckfmha-isolation inline`` | nothing: inline runs never fork, and the warm-up is never run in the pytest process (it would initialize CUDA there) |

What the child does with the warm-up, and what a failing or dying warm-up does to the items (nothing: they get the
verdicts they get without one), is isolation.py's table.
"""

from __future__ import annotations

from functools import partial


def will_run_items(session) -> bool:
    """Whether this session runs its items' calls at all (not ``--collect-only``, ``--setup-only`` /
    ``--setup-plan``, nor stopped by collection errors)."""
    opt = session.config.option
    if opt.collectonly or getattr(opt, "setuponly", False) or getattr(opt, "setupplan", False):
        return False
    return not (session.testsfailed and not getattr(opt, "continue_on_collection_errors", False))


def prestart_child_early(session) -> bool:
    """Pre-start this process's kernel child before its collection (module doc); True when one was forked."""
    from pytest_ckfmha.state import get_state, has_state

    config = session.config
    if not has_state(config) or not will_run_items(session):
        return False
    state = get_state(config)
    if state.timeline.worker == "controller" or not forks_early(state.settings, config.args):
        return False
    try:
        state.registry()  # built once, here: the child inherits it, the collection uses it
    except Exception:  # noqa: BLE001 - the items (or the selection check) meet it as without an early child
        return False
    return _prestart(state, session, early=True)


def forks_early(settings, args) -> bool:
    """Whether a run forks its kernel child before the collection (module doc): it will run matrix or CK smoke
    items (parity items have no work order), its isolation forks, and no paths are given (``args``: their conftests,
    which may supply the backend or the kernels, load during the collection)."""
    s = settings
    matrix_items = s.category is not None or (s.ck_smoke is not None and s.parity is None)
    return s.isolation != "inline" and matrix_items and not args


def prestart_child(session) -> bool:
    """At the end of this process's collection (module doc): pre-start its kernel child, or stop the one forked
    early when no item will run; True when a child was forked now."""
    from pytest_ckfmha.isolation import executor_of
    from pytest_ckfmha.items import CkfmhaItem
    from pytest_ckfmha.parity_items import ParityItem
    from pytest_ckfmha.state import get_state, has_state

    if not has_state(session.config):
        return False
    state = get_state(session.config)
    contained = [i for i in session.items if isinstance(i, (CkfmhaItem, ParityItem))]
    if not will_run_items(session) or not contained:
        if state.executor is not None:
            state.executor.close_child()  # forked early for items that will not run
        return False
    if state.settings.isolation == "inline" or executor_of(state, session).early:
        return False
    return _prestart(state, session, early=False, matrix=any(isinstance(i, CkfmhaItem) for i in contained))


def _prestart(state, session, early: bool, matrix: bool = True) -> bool:
    from pytest_ckfmha.isolation import ChildExecutor, executor_of

    executor = executor_of(state, session)
    if not isinstance(executor, ChildExecutor):  # pragma: no cover - the isolation setting picks the class
        return False
    executor.prestart(partial(warm_up, state) if matrix else None, early=early)
    state.timeline.mark("child_forked")
    return True


def warm_up(state) -> dict[str, float]:
    """In the kernel child, before its first item: what every item's work does first -- the runtime's backend
    through the items' own path (:meth:`pytest_ckfmha.execute.Runtime.backend`: the ``pytest_ckfmha_backend`` hook,
    else ``ckfmha.backends``), its ``available()`` and ``device()``, and for a GPU backend torch's device
    (:func:`pytest_ckfmha.execute.torch_gpu`: it creates the CUDA context), the backend's own
    :meth:`~ckfmha.backends.base.Backend.warm_up` (Triton: its launchers and kernel definitions) -- and the modules
    the work imports.
    Everything it loads stays cached in the child for its items; a backend that cannot be loaded leaves its skip
    reason in the runtime (the items skip with it, as without a warm-up); an unavailable backend stops it.  Never
    called in the pytest process itself.

    Returns the seconds of each step it took (``runtime``, ``backend``, ``available``, ``device``,
    ``cuda_context``, ``backend_warm_up``, ``imports``): the report's timeline (timeline.py)."""
    from pytest_ckfmha.execute import GPU_BACKENDS, ItemSkip, torch_gpu

    steps: dict[str, float] = {}
    clock = _StepClock(steps)
    rt = clock.step("runtime", state.runtime)
    try:
        backend = clock.step("backend", rt.backend)
    except ItemSkip:
        return steps
    if not clock.step("available", backend.available):
        return steps
    clock.step("device", backend.device)
    if getattr(backend, "name", "") in GPU_BACKENDS:
        clock.step("cuda_context", torch_gpu)
    warm = getattr(backend, "warm_up", None)  # a hook's backend may not derive from ckfmha's Backend
    if warm is not None:
        clock.step("backend_warm_up", warm)
    clock.step("imports", _import_item_modules)
    return steps


class _StepClock:
    """Runs a warm-up step and keeps its seconds (also when it raises)."""

    def __init__(self, steps: dict[str, float]) -> None:
        self.steps = steps

    def step(self, name: str, fn):
        import time

        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.steps[name] = round(time.perf_counter() - t0, 3)


def _import_item_modules() -> None:
    """What an item's work imports on its first call."""
    import ckfmha.inputs  # noqa: F401
    import ckfmha.runner  # noqa: F401
    import ckfmha.validator  # noqa: F401
    import pytest_ckfmha.refcache  # noqa: F401
