"""Running one item: skip checks -> plan -> inputs (seed) -> reference (cached) -> NaN-poisoned outputs -> build
and run every stage (backward plan items: then the host reduction of the raw gradients) -> unwritten-element check
-> validator.

What is compared is :func:`ckfmha.outputs.compared_outputs` (:func:`output_names` here): a kernel item judges its
kernel's own output -- for the backward CK's raw layouts ``dk_raw`` / ``dv_raw`` (per q-head) and ``dbias_raw``
(per q-head and batch) against the reference's raw ones; a plan item judges the plan's user-facing result --
``dk`` / ``dv`` / ``dbias`` after :func:`ckfmha.runner.reduce_gradients` -- against the reference's reduced ones.

The stage contract and the execution loop are :mod:`ckfmha.runner`'s (``prepare_tensors``: the inputs, and for
the backward the cached reference forward's ``o``/``lse``; ``execute``: builds and stages -- each stage returns
its declared outputs, NaN-poisoned where it writes nothing, append-KV its updated caches as new arrays --, per-stage
cold build time, the host reduction; ``unwritten_census``); a kernel item pins its kernel in the plan's main stage through
:class:`ckfmha.dispatcher.PinnedRegistry`, and any Backend object (a test backend from the
``pytest_ckfmha_backend`` hook) can run it. The fp8 encoding of the inputs is the arch data's ``fp8_format``.

Where it ran and what judged it (report values): ``worker`` -- the xdist worker id (``PYTEST_XDIST_WORKER``, which
the kernel child process inherits) or ``main``; ``gpu`` -- ``<index>:<uuid>`` of torch's current CUDA/ROCm device
where a GPU backend (triton, hip) runs with torch seeing one, else empty; ``reference`` -- what computed the
reference (:func:`reference_choice` of ``--ckfmha-reference``): ``numpy``, ``torch:cuda`` or ``torch:cpu`` -- and
what compared the outputs with it: the validator's elementwise rule runs with the same array library on the same
device (:mod:`ckfmha.array_ops`: the same float64 figures; on a GPU the host does not spend ~100 ns an element).

Crash isolation: every exception of a build or a stage (anything but KeyboardInterrupt and pytest's own
outcomes) becomes the item's failure with the crash reason (:class:`ckfmha.runner.StageCrash`).  A crash that
kills the process (a GPU fault, a segfault in a compiled extension) or a hang is contained one level up: this
runs in the kernel child process (isolation.py), whose death or timeout fails the item alone.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ckfmha.archs import fp8_format  # noqa: F401  (public here too: ckfmha.cli imports it from this module)


class ItemSkip(Exception):
    """Skip the item with this reason."""


class ItemFailure(Exception):
    """Fail the item with this (readable) message.  ``raised``: a build or stage raised (the process's device
    state may be broken, e.g. by a CUDA error, so the kernel child process is replaced after this item)."""

    def __init__(self, message: str, raised: bool = False) -> None:
        super().__init__(message)
        self.raised = raised


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
            from pytest_ckfmha.collect import Views, heuristics_of

            self._views = Views(self.registry, heuristics_of(self.settings))
        return self._views

    def backend(self):
        if self._backend is None and self._backend_error is None:
            name = self.settings.backend
            try:
                be = self.config.hook.pytest_ckfmha_backend(config=self.config, name=name)
                if be is None:
                    from ckfmha.backends import auto_backend_name, get_backend

                    if name in ("hip", "auto"):
                        configure_hip_backend(self.settings)  # auto asks hip first: it must see --ckfmha-ck-root
                    be = get_backend(auto_backend_name() if name == "auto" else name)
                self._backend = be
            except Exception as e:  # noqa: BLE001 - reported as the skip reason
                self._backend_error = f"backend {name!r} cannot be loaded: {type(e).__name__}: {e}"
        if self._backend is None:
            raise ItemSkip(self._backend_error)
        return self._backend

    def release_memory(self) -> None:
        """After an item: the loaded backend hands its cached device memory back (``Backend.release_memory``; a
        hook's backend without the method has none to give), so the workers sharing a GPU see what the others no
        longer use -- the cached blocks of 16 workers filled an H100 and failed nightly items with CUDA
        out-of-memory (docs/results/2026-11-27-h100-nightly-scale.md)."""
        release = getattr(self._backend, "release_memory", None)
        if release is not None:
            release()


def configure_hip_backend(settings) -> None:
    """The hip backend builds from the session's CK checkout (``--ckfmha-ck-root``, else ``$CK_ROOT``) for its
    arch, receipt and mask mode (the kernel space the session collected), set through the backend interface."""
    from ckfmha.backends import configure_backend
    from ckfmha.receipts import resolve_receipt

    configure_backend(
        "hip",
        ck_root=settings.ck_root,
        arch=settings.arch,
        receipt=resolve_receipt(settings.receipt, profile=settings.profile),
        mask_mode=settings.mask_mode,
    )


@dataclass
class Outcome:
    plan_kernels: list[str] = field(default_factory=list)
    kernel_id: str = ""
    checks: dict = field(default_factory=dict)
    unwritten: int = 0
    time_ms: float | None = None
    time_min_ms: float | None = None
    time_max_ms: float | None = None
    repeats: int = 0
    timed: bool = False
    clocks: str = ""
    build_s: float = 0.0
    build_cached: bool = True
    ref_cached: bool = False
    backend: str = ""


def output_names(problem, plan=None, kernel_item: bool = False) -> list[str]:
    """The outputs an item is judged on: :func:`ckfmha.outputs.compared_outputs` (``plan`` is not needed; the
    parameter stays for callers that pass it)."""
    from ckfmha.outputs import compared_outputs

    return list(compared_outputs(problem, kernel_item=kernel_item))


def make_plan(rt: Runtime, problem, kernel, backend):
    """The dispatcher's plan (kernel None) or the plan with ``kernel`` pinned in the main stage (a pinned kernel
    that a CK finding affects for this problem runs with rule 9b waived on the hip backend and is skipped on the
    others: the finding's exposing item, docs/ck_findings.md)."""
    from ckfmha.ck_findings import finding_misfit
    from ckfmha.dispatcher import Dispatcher, NoKernelError, PinnedRegistry

    view = rt.views.for_dtype(problem.dtype)
    reg = view if kernel is None else PinnedRegistry(view, kernel)
    finding = None if kernel is None else finding_misfit(problem, kernel)
    if finding is not None and backend.name != "hip":
        raise ItemSkip(
            f"{finding}; this item exposes the finding on the hip backend only (CK's own kernel): the "
            f"{backend.name} backend refuses an affected kernel for such a problem and computes exact positions"
        )
    waive = finding is not None
    # Dispatcher is annotated with Registry but reads only .arch and .candidates(), which the views provide
    try:
        return Dispatcher(reg, backend, heuristics=rt.views.heuristics, waive_findings=waive).select(problem)  # type: ignore[arg-type]
    except NoKernelError as e:
        try:
            Dispatcher(reg, heuristics=rt.views.heuristics, waive_findings=waive).select(problem)  # type: ignore[arg-type]
        except NoKernelError:
            raise ItemSkip(
                f"no kernel of arch {rt.settings.arch} (after receipt/filters) serves this shape: "
                f"{short_explanation(e, problem)}"
            ) from None
        raise ItemSkip(
            f"backend {backend.name} cannot realize the kernels that serve this shape: {short_explanation(e, problem)}"
        ) from None


def short_explanation(e, problem) -> str:
    """The two commonest reasons per unserved stage; a stage without a single kernel of the problem's dtype (the
    items' registry views are per dtype) says so, naming the family and the dtype."""
    from ckfmha.dispatcher import ROLE_FAMILY

    parts = []
    for st in e.explanation.stages:
        if st.chosen is None:
            bad = [v for v in st.verdicts if not v.ok]
            reasons: dict[str, int] = {}
            for v in bad:
                reasons[v.reason] = reasons.get(v.reason, 0) + 1
            top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
            why = "; ".join(f"{n} x {r}" for r, n in top) or (
                f"the kernel space has no {ROLE_FAMILY[st.role].value} kernel of dtype {problem.dtype.value}"
            )
            parts.append(f"stage {st.role.value}: {why}")
    return " | ".join(parts)


def prepare_tensors(problem, plan, inputs: dict, ref: dict) -> tuple[dict, list[str]]:
    """ckfmha.runner's tensor set-up; the backward reads the forward outputs of the cached reference."""
    from ckfmha.runner import prepare_tensors as _prepare

    forward = (ref["o"], ref["lse"]) if problem.is_backward else None
    return _prepare(problem, plan, inputs, forward)


def execute_plan(backend, plan, tensors: dict, timing: bool, reduce: bool, built: dict):
    """:func:`ckfmha.runner.execute` with crashes of builds and stages as the item's failure (``raised``: the
    process's device state may be broken) and a failed host reduction as a plain failure."""
    from _pytest.outcomes import OutcomeException

    from ckfmha.reference.backward import RawLayoutError
    from ckfmha.runner import StageCrash, execute

    try:
        return execute(
            backend,
            plan,
            tensors,
            timing=timing,
            reduce=reduce,
            built=built,
            contain=True,
            passthrough=(ItemSkip, OutcomeException),
        )
    except StageCrash as e:
        raise ItemFailure(str(e), raised=True) from None
    except RawLayoutError as e:
        raise ItemFailure(f"the host reduction of the raw gradients failed: {e}") from None


def _start(rt: Runtime, p, kernel, props: dict):
    """The backend (or the skip: unavailable, shape too large for the cpu, kernel not realizable) and the plan."""
    from ckfmha.plan import main_role
    from ckfmha.work import flops

    s = rt.settings
    backend = rt.backend()
    props["backend"] = getattr(backend, "name", "?")
    avail = backend.available()
    if not avail:
        raise ItemSkip(f"backend {backend.name} is not available: {getattr(avail, 'reason', '') or 'no GPU'}")
    props["device"] = backend.device()
    if backend.name == "cpu" and flops(p) > s.cpu_max_flops:
        raise ItemSkip(
            f"shape has {flops(p):.3g} FLOPs, over the cpu backend's limit {s.cpu_max_flops:.3g} "
            "(--ckfmha-cpu-max-flops)"
        )
    declined = backend.declines(p)
    if declined is not None:
        raise ItemSkip(f"backend {backend.name} cannot run this problem with any kernel: {declined}")
    if kernel is not None:
        why = backend.supports(kernel)
        if why is not None:
            raise ItemSkip(f"backend {backend.name} cannot realize this kernel: {why}")
    plan = make_plan(rt, p, kernel, backend)
    role = main_role(p)
    kernel_id = (
        kernel.kernel_id
        if kernel is not None
        else next((st.kernel.kernel_id for st in plan.stages if st.role is role), plan.stages[0].kernel.kernel_id)
    )
    props["kernel_id"] = kernel_id
    props["plan_kernels"] = ";".join(st.kernel.kernel_id for st in plan.stages)
    return backend, plan, kernel_id


#: backends whose kernels run on a GPU (the reference may follow them there: ``--ckfmha-reference``)
GPU_BACKENDS = ("triton", "hip")


def worker_id() -> str:
    """The xdist worker running this item, ``main`` without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER") or "main"


@lru_cache(maxsize=1)
def torch_gpu() -> str:
    """``<index>:<uuid>`` of torch's current GPU, empty when torch is missing or sees none.  Called only for a
    GPU backend (whose process uses the device anyway): it initializes CUDA."""
    from ckfmha.reference.torch_twin import import_torch  # torch's one door for the plugin (import contracts)

    try:
        torch = import_torch()
    except ImportError:
        return ""
    if not torch.cuda.is_available():
        return ""
    i = torch.cuda.current_device()
    return f"{i}:{torch.cuda.get_device_properties(i).uuid}"


def reference_choice(setting: str, backend_name: str) -> str:
    """What computes the reference for ``--ckfmha-reference setting`` (numpy, torch, auto) and the backend:
    ``numpy``, ``torch:cuda`` (torch sees a GPU and the backend runs on it) or ``torch:cpu``; auto is torch on
    the GPU for a GPU backend, else numpy."""
    on_gpu = backend_name in GPU_BACKENDS and bool(torch_gpu())
    if setting == "numpy" or (setting == "auto" and not on_gpu):
        return "numpy"
    return "torch:cuda" if on_gpu else "torch:cpu"


def run_item(rt: Runtime, shape, kernel, props: dict) -> Outcome:
    """Run one item; raises ItemSkip / ItemFailure; fills ``props`` (report values) as it goes.  With
    ``--ckfmha-fault`` the cpu backend computes with that fault for the item's work only (docs/faults.md)."""
    from ckfmha.faults import injected

    try:
        with injected(getattr(rt.settings, "fault", None)):
            return run_item_work(rt, shape, kernel, props)
    finally:
        rt.release_memory()


_INPUTS_MEMO: "OrderedDict[tuple, dict]" = OrderedDict()


def shape_inputs(problem, seed: int, fmt: str) -> dict:
    """:func:`ckfmha.inputs.make_inputs` of the item's shape, kept for the next items of the same shape in this
    process (the scheduler's shape affinity sends a shape's released items to the worker that holds it: a nightly
    shape's Q/K/V take tens of seconds to draw on one core).  The shapes used last are kept, within the limits of
    :func:`pytest_ckfmha.refcache.keep_within` (applied before a new shape's inputs are made, so they never add to
    a larger older one).  The arrays are read-only: a stage that wrote into an input would change the next item's
    (every backend returns its outputs as new arrays, :mod:`ckfmha.runner`)."""
    from ckfmha.inputs import make_inputs
    from pytest_ckfmha.refcache import keep_within

    key = (repr(problem), seed, fmt)
    inputs = _INPUTS_MEMO.get(key)
    if inputs is not None:
        _INPUTS_MEMO.move_to_end(key)
        return inputs
    keep_within(_INPUTS_MEMO, newcomer=True)
    inputs = make_inputs(problem, seed, fp8_format=fmt)
    for a in inputs.values():
        a.flags.writeable = False
    _INPUTS_MEMO[key] = inputs
    return inputs


def forget_shape_inputs() -> None:
    """Drop the kept shapes' inputs (:func:`shape_inputs`)."""
    _INPUTS_MEMO.clear()


def run_item_work(rt: Runtime, shape, kernel, props: dict) -> Outcome:
    """:func:`run_item`'s work."""
    from ckfmha.runner import unwritten_census
    from ckfmha.validator import validate
    from pytest_ckfmha.refcache import array_backend_of, get_reference

    s = rt.settings
    p = shape.problem
    out = Outcome(kernel_id=kernel.kernel_id if kernel is not None else "")
    props["worker"] = worker_id()
    backend, plan, out.kernel_id = _start(rt, p, kernel, props)
    out.backend = props["backend"]
    props["gpu"] = torch_gpu() if out.backend in GPU_BACKENDS else ""
    props["reference"] = which = reference_choice(s.reference, out.backend)
    out.plan_kernels = [st.kernel.kernel_id for st in plan.stages]
    fmt = fp8_format(s.arch)
    inputs = shape_inputs(p, s.seed, fmt)
    ref, out.ref_cached = get_reference(p, inputs, s.seed, s.cache_dir, fmt, which)
    tensors, written = prepare_tensors(p, plan, inputs, ref)
    built: dict = {}
    plan_item = kernel is None  # a plan item: the host reduction of CK's raw gradients is part of it
    ex = execute_plan(backend, plan, tensors, s.bench, plan_item, built)
    out.build_s, out.build_cached = ex.build_seconds, not ex.cold
    out.time_ms, out.timed = ex.total_ms, False
    wanted = output_names(p, plan, kernel_item=not plan_item)
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise ItemFailure(f"the plan wrote no {', '.join(missing)} (outputs: {', '.join(written)})")
    names = [n for n in wanted if n in ref]
    counts = unwritten_census(p, tensors, names, ref)
    out.unwritten = props["unwritten"] = sum(c.unwritten for c in counts)
    nan_msgs = [m for c in counts for m in c.messages()]
    if nan_msgs:
        raise ItemFailure("NaN in the outputs where the reference has values:\n  " + "\n  ".join(nan_msgs))
    compared = {n: tensors[n] for n in names}  # where the reference ran, the comparison runs too (same figures)
    out.checks = validate(p, compared, ref, names=names, fp8_format=fmt, **array_backend_of(which))
    if s.bench:
        bench(backend, plan, lambda: prepare_tensors(p, plan, inputs, ref)[0], built, s.bench_repeat, out)
    return out


def bench(backend, plan, fresh_tensors, built: dict, repeats: int, out: Outcome) -> None:
    """--ckfmha-bench: a warm-up, then ``repeats`` timed runs of the plan's stages (built kernels reused, no host
    reduction), each after ``backend.flush_cache()`` (the L2 cache on GPUs) on fresh tensors; the median, the
    fastest and the slowest go to the report, with the clocks the backend reads."""
    execute_plan(backend, plan, fresh_tensors(), True, False, built)
    times = []
    for _ in range(repeats):
        tensors = fresh_tensors()
        backend.flush_cache()
        times.append(execute_plan(backend, plan, tensors, True, False, built).total_ms)
    out.time_ms, out.timed = float(np.median(times)), True
    out.time_min_ms, out.time_max_ms, out.repeats = float(min(times)), float(max(times)), len(times)
    out.clocks = backend.clocks()
