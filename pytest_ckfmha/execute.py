"""Running one item: skip checks -> plan -> inputs (seed) -> reference (cached) -> NaN-poisoned outputs -> build
and run every stage -> (backward plan items: the host reduction of the raw gradients) -> unwritten-element check
-> validator.

What is compared (:func:`output_names`): a kernel item judges its kernel's own output -- for the backward CK's
raw layouts ``dk_raw`` / ``dv_raw`` (per q-head) and ``dbias_raw`` (per q-head and batch) against the
reference's raw ones; a plan item judges the plan's user-facing result -- ``dk`` / ``dv`` / ``dbias`` after
:func:`ckfmha.runner.reduce_gradients` -- against the reference's reduced ones.

The tensor contract is :mod:`ckfmha.runner`'s (``output_specs``: every output of the plan allocated and poisoned
with NaN; append-KV works on copies of q/k/v/caches; the backward gets the reference forward's ``o``/``lse``), but
the loop is the plugin's own so that a kernel item can pin its kernel, any Backend object (a test backend from
the ``pytest_ckfmha_backend`` hook) can run it, and build time and crashes are recorded per stage.

Crash isolation: every exception of a build or a stage (anything but KeyboardInterrupt and pytest's own
outcomes) becomes the item's failure with the crash reason.  A crash that kills the process (a GPU fault, a
segfault in a compiled extension) or a hang is contained one level up: this runs in the kernel child process
(isolation.py), whose death or timeout fails the item alone.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field


import numpy as np


class ItemSkip(Exception):
    """Skip the item with this reason."""


class ItemFailure(Exception):
    """Fail the item with this (readable) message.  ``raised``: a build or stage raised (the process's device
    state may be broken, e.g. by a CUDA error, so the kernel child process is replaced after this item)."""

    def __init__(self, message: str, raised: bool = False) -> None:
        super().__init__(message)
        self.raised = raised


FP8_FNUZ_ARCHS = ("gfx90a", "gfx942")


def fp8_format(arch: str) -> str:
    return "fnuz" if arch in FP8_FNUZ_ARCHS else "ocp"


class Runtime:
    """Per-process state: settings, backend, registry and dispatcher views (built on first use)."""

    def __init__(self, config, settings, registry) -> None:
        self.config = config
        self.settings = settings
        self.registry = registry
        self._backend = None
        self._backend_error: str | None = None
        self._views = None

    @property
    def views(self):
        if self._views is None:
            from pytest_ckfmha.collect import Views

            self._views = Views(self.registry)
        return self._views

    def backend(self):
        if self._backend is None and self._backend_error is None:
            name = self.settings.backend
            try:
                be = self.config.hook.pytest_ckfmha_backend(config=self.config, name=name)
                if be is None:
                    from ckfmha.backends import auto_backend_name, get_backend

                    be = get_backend(auto_backend_name() if name == "auto" else name)
                self._backend = be
            except Exception as e:  # noqa: BLE001 - reported as the skip reason
                self._backend_error = f"backend {name!r} cannot be loaded: {type(e).__name__}: {e}"
        if self._backend is None:
            raise ItemSkip(self._backend_error)
        return self._backend


@dataclass
class Outcome:
    plan_kernels: list[str] = field(default_factory=list)
    kernel_id: str = ""
    checks: dict = field(default_factory=dict)
    unwritten: int = 0
    time_ms: float | None = None
    timed: bool = False
    build_s: float = 0.0
    build_cached: bool = True
    ref_cached: bool = False
    backend: str = ""


def output_names(problem, plan, kernel_item: bool = False) -> list[str]:
    """The outputs an item is judged on.  Backward: a kernel item (a pinned dq_dk_dv kernel) judges what the
    kernel writes, CK's raw layouts -- ``dk_raw`` / ``dv_raw`` per q-head and ``dbias_raw`` per q-head and
    batch -- so a fault in one q-head's slice cannot hide behind another head's in the group sum; a plan item
    (and torch parity) judges the user-facing ``dk`` / ``dv`` / ``dbias`` of the runner's host reduction.
    ``dq`` is the same in both."""
    from ckfmha.kernel import Family

    if problem.is_backward:
        if kernel_item:
            return ["dq", "dk_raw", "dv_raw"] + (["dbias_raw"] if problem.dbias else [])
        return ["dq", "dk", "dv"] + (["dbias"] if problem.dbias else [])
    names = ["o"] + (["lse"] if problem.lse else [])
    if problem.family is Family.FWD_APPENDKV:
        names += ["k_cache", "v_cache"] if problem.page_block_size else ["k", "v"]
    return names


def make_plan(rt: Runtime, problem, kernel, backend):
    """The dispatcher's plan (kernel None) or the plan with ``kernel`` pinned in the main stage."""
    from ckfmha.dispatcher import Dispatcher, NoKernelError
    from pytest_ckfmha.collect import PinnedView

    view = rt.views.for_dtype(problem.dtype)
    reg = view if kernel is None else PinnedView(view, kernel)
    try:
        return Dispatcher(reg, backend).select(problem)
    except NoKernelError as e:
        try:
            Dispatcher(reg).select(problem)
        except NoKernelError:
            raise ItemSkip(f"no kernel of arch {rt.settings.arch} (after receipt/filters) serves this shape: "
                           f"{_short_explanation(e)}") from None
        raise ItemSkip(f"backend {backend.name} cannot realize the kernels that serve this shape: "
                       f"{_short_explanation(e)}") from None


def _short_explanation(e) -> str:
    parts = []
    for st in e.explanation.stages:
        if st.chosen is None:
            bad = [v for v in st.verdicts if not v.ok]
            reasons: dict[str, int] = {}
            for v in bad:
                reasons[v.reason] = reasons.get(v.reason, 0) + 1
            top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
            why = "; ".join(f"{n} x {r}" for r, n in top) or "no candidates"
            parts.append(f"stage {st.role.value}: {why}")
    return " | ".join(parts)


def prepare_tensors(problem, plan, inputs: dict, ref: dict) -> tuple[dict, list[str]]:
    """ckfmha.runner's tensor set-up; the backward reads the forward outputs of the cached reference."""
    from ckfmha.runner import prepare_tensors as _prepare

    forward = (ref["o"], ref["lse"]) if problem.is_backward else None
    return _prepare(problem, plan, inputs, forward)


def _crash(what: str, e: BaseException) -> ItemFailure:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return ItemFailure(f"{what} crashed: {type(e).__name__}: {e}{where}", raised=True)


def run_plan(backend, plan, problem, tensors: dict, timing: bool, outcome: Outcome | None,
             built: dict | None = None) -> float:
    """Build and run every stage; returns the summed stage time in ms (device time when reported)."""
    built = {} if built is None else built
    total = 0.0
    for st in plan.stages:
        kid = st.kernel.kernel_id
        if kid not in built:
            try:
                bk = backend.build(st.kernel)
            except (KeyboardInterrupt, ItemSkip):
                raise
            except BaseException as e:  # noqa: BLE001 - a crashing build fails the item, not the run
                if _is_outcome(e):
                    raise
                raise _crash(f"build of {kid}", e) from None
            built[kid] = bk
            if outcome is not None and not getattr(bk, "cached", False):
                outcome.build_s += float(getattr(bk, "build_seconds", 0.0) or 0.0)
                outcome.build_cached = False
        t0 = time.perf_counter()
        try:
            res = backend.run_stage(built[kid], st, problem, tensors, timing=timing)
        except (KeyboardInterrupt, ItemSkip):
            raise
        except BaseException as e:  # noqa: BLE001
            if _is_outcome(e):
                raise
            raise _crash(f"stage {st.role.value} ({kid})", e) from None
        wall = (time.perf_counter() - t0) * 1e3
        if res is not None and getattr(res, "outputs", None):
            for n, a in res.outputs.items():
                if isinstance(a, np.ndarray) and tensors.get(n) is not a:
                    tensors[n] = a
        dev = getattr(res, "device_ms", None) if res is not None else None
        total += dev if (timing and dev is not None) else wall
    return total


def _is_outcome(e: BaseException) -> bool:
    from _pytest.outcomes import OutcomeException

    return isinstance(e, OutcomeException)


def run_item(rt: Runtime, shape, kernel, props: dict) -> Outcome:
    """Run one item; raises ItemSkip / ItemFailure; fills ``props`` (report values) as it goes."""
    from ckfmha.inputs import make_inputs
    from ckfmha.poison import census, is_float
    from ckfmha.validator import validate
    from ckfmha.work import flops
    from pytest_ckfmha.refcache import get_reference

    s = rt.settings
    p = shape.problem
    out = Outcome(kernel_id=kernel.kernel_id if kernel is not None else "")
    backend = rt.backend()
    out.backend = props["backend"] = getattr(backend, "name", "?")
    avail = backend.available()
    if not avail:
        raise ItemSkip(f"backend {backend.name} is not available: {getattr(avail, 'reason', '') or 'no GPU'}")
    props["device"] = backend.device()
    if backend.name == "cpu" and flops(p) > s.cpu_max_flops:
        raise ItemSkip(f"shape has {flops(p):.3g} FLOPs, over the cpu backend's limit {s.cpu_max_flops:.3g} "
                       "(--ckfmha-cpu-max-flops)")
    if kernel is not None:
        why = backend.supports(kernel)
        if why is not None:
            raise ItemSkip(f"backend {backend.name} cannot realize this kernel: {why}")
    plan = make_plan(rt, p, kernel, backend)
    out.plan_kernels = [st.kernel.kernel_id for st in plan.stages]
    if kernel is None:
        from pytest_ckfmha.collect import main_role

        role = main_role(p)
        out.kernel_id = next((st.kernel.kernel_id for st in plan.stages if st.role is role), out.plan_kernels[0])
    props["kernel_id"] = out.kernel_id
    props["plan_kernels"] = ";".join(out.plan_kernels)
    fmt = fp8_format(s.arch)
    inputs = make_inputs(p, s.seed, fp8_format=fmt)
    ref, out.ref_cached = get_reference(p, inputs, s.seed, s.cache_dir, fmt)
    tensors, written = prepare_tensors(p, plan, inputs, ref)
    built: dict = {}
    ms = run_plan(backend, plan, p, tensors, s.bench, out, built)
    out.time_ms, out.timed = ms, False
    wanted = output_names(p, plan, kernel_item=kernel is not None)
    if p.is_backward and kernel is None:  # a plan item: the host reduction of CK's raw gradients is part of it
        from ckfmha.runner import reduce_gradients

        try:
            reduce_gradients(p, tensors)
        except ValueError as e:
            raise ItemFailure(f"the host reduction of the raw gradients failed: {e}") from None
    names = [n for n in wanted if n in tensors and n in ref]
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise ItemFailure(f"the plan wrote no {', '.join(missing)} (outputs: {', '.join(written)})")
    nan_msgs = []
    for n in names:
        a, r = tensors[n], np.asarray(ref[n])
        if not is_float(a) or a.shape != r.shape:
            continue
        c = census(n, a, r)
        out.unwritten += c.unwritten
        nan_msgs += c.messages()
    props["unwritten"] = out.unwritten
    if nan_msgs:
        raise ItemFailure("NaN in the outputs where the reference has values:\n  " + "\n  ".join(nan_msgs))
    out.checks = validate(p, {n: tensors[n] for n in names}, ref, names=names, fp8_format=fmt)
    if s.bench:
        times = []
        run_plan(backend, plan, p, prepare_tensors(p, plan, inputs, ref)[0], True, None, built)  # warm-up
        for _ in range(5):
            times.append(run_plan(backend, plan, p, prepare_tensors(p, plan, inputs, ref)[0], True, None, built))
        out.time_ms, out.timed = float(np.median(times)), True
    return out
