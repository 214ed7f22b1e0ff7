"""``ckfmha.run(problem, inputs)``: select a plan, build its kernels, run its stages, return the outputs -- and
the one execution loop (:func:`execute`) that the pytest plugin's items run too.

1. The registry (``Registry.from_enumeration(arch, receipt, mask_mode)``, built once per process and
   arguments; ``arch`` defaults to the arch data's default, :func:`ckfmha.archs.default_arch`) and a
   :class:`~ckfmha.dispatcher.Dispatcher` bound to the backend select the plan; when no kernel serves a stage,
   the :class:`~ckfmha.dispatcher.NoKernelError` carries the dispatcher's explanation.
2. Every stage of the plan declares its outputs (``stage.outputs``: :class:`~ckfmha.plan.OutputSpec`, from the
   family records; :func:`plan_outputs`); a backend allocates each NaN-poisoned and returns it; inputs are never
   modified (stages read read-only views; append-KV returns its updated caches and rotated ``q`` as new arrays
   that replace those inputs for the later stages).
3. :func:`execute` runs the stages in order through ``backend.build`` (cached on disk, and per call in
   ``built``) and ``backend.run_stage`` on any :class:`~ckfmha.backends.base.Backend` object, recording per
   stage the cold build time, the wall time and the device time the backend reports (:class:`Execution`);
   with ``contain=True`` an exception of a build or a stage becomes a :class:`StageCrash` that names the build
   or stage, the exception and where it was raised. The backward's dq_dk_dv kernel writes CK's raw layouts
   (``dk_raw`` / ``dv_raw`` per q-head, ``dbias_raw`` per q-head and batch); then (``reduce=True``) the host
   step :func:`reduce_gradients` -- what CK's callers do after the kernel (FlashAttention's mha_bwd.cpp sums
   ``dk_expanded`` over each K/V head's q-heads) -- writes the user-facing ``dk`` / ``dv`` (K/V's shapes) and
   ``dbias`` (the bias's shape).  Both forms are returned.
4. No output element may be left unwritten (:func:`unwritten_census`, :mod:`ckfmha.poison`): a NaN left in a
   float output, while every float input is finite (so the reference is finite there), raises
   :class:`UnwrittenOutputError` naming the output and the count.

The backward needs the forward's ``o`` and ``lse``; when ``inputs`` lacks them they are computed with the NumPy
reference forward (as CK's tile_example_fmha_bwd does on the host), ``o`` rounded to the storage dtype.
Which outputs are compared with the reference is :func:`ckfmha.outputs.compared_outputs`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from ckfmha.backends import BackendError, get_backend
from ckfmha.backends.base import Backend, BuiltKernel, RunContext, StageResult
from ckfmha.dispatcher import Dispatcher, Explanation
from ckfmha.family_records import bind_to_inputs, reduced_outputs, stage_outputs
from ckfmha.inputs import fp8_format_of, storage_dtype
from ckfmha.kernel import Mode
from ckfmha.plan import OutputSpec, Plan, Stage, StageRole
from ckfmha.poison import Census, census, is_float
from ckfmha.problem import Layout, Problem
from ckfmha.registry import Registry


class UnwrittenOutputError(BackendError):
    """A stage left part of an output unwritten (still the NaN poison)."""


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    plan: Plan
    device_ms: float | None = None
    stage_ms: list[float | None] = field(default_factory=list)


@lru_cache(maxsize=8)
def enumerated_registry(arch: str, receipt: int | str, mask_mode: str) -> Registry:
    """The registry of ``arch``'s built-in enumeration under ``receipt`` and ``mask_mode``
    (:meth:`Registry.from_enumeration`), built once per process and arguments: what :func:`dispatcher_for` selects
    from when it is given no registry and the backend has no CK checkout of its own."""
    return Registry.from_enumeration(arch, receipt=receipt, mask_mode=mask_mode)


def dispatcher_for(
    backend: str = "cpu",
    arch: str | None = None,
    registry: Registry | None = None,
    receipt: int | str = 0,
    mask_mode: str = "simplified",
) -> Dispatcher:
    """A dispatcher over ``registry`` or the enumeration of ``arch`` (None: :func:`ckfmha.archs.default_arch`)
    under ``receipt`` and ``mask_mode``, bound to the backend called ``backend``.  The hip backend with a CK
    checkout plans over that checkout's own kernel space (:meth:`Registry.from_checkout`): it builds those kernels
    (:meth:`~ckfmha.backends.base.Backend.kernel_source`)."""
    be = get_backend(backend)
    if registry is None:
        from ckfmha.archs import default_arch

        arch = default_arch() if arch is None else arch
        ck_root = be.kernel_source()  # a configured hip backend's CK checkout; None: the built-in enumeration
        if ck_root is not None:
            registry = Registry.from_checkout(ck_root, arch, receipt=receipt, mask_mode=mask_mode)
        else:
            registry = enumerated_registry(arch, receipt, mask_mode)
    return Dispatcher(registry, be)


def explain(
    problem: Problem,
    *,
    backend: str = "cpu",
    arch: str | None = None,
    registry: Registry | None = None,
    receipt: int | str = 0,
    mask_mode: str = "simplified",
) -> Explanation:
    """Explain how the dispatcher would serve ``problem``, without building or running anything.

    Parameters: ``problem`` (a :class:`~ckfmha.problem.Problem`); ``backend`` (``cpu``, ``triton``, ``hip``: a
    candidate the backend cannot realize is rejected with its reason); ``arch`` (the kernel space, e.g.
    ``gfx942``; None: the arch data's default arch); ``registry`` (a :class:`~ckfmha.registry.Registry` to select
    from instead of the arch's enumeration under ``receipt`` -- a number or profile name -- and ``mask_mode``,
    ``simplified`` or ``generic``).

    Returns an :class:`~ckfmha.dispatcher.Explanation`: per stage of the plan structure (the first one whose
    every stage has a kernel, else the preferred one), every candidate kernel in rank order with the first
    selection rule it fails (``None`` for those that can serve it); ``str()`` gives a readable summary and
    ``stage.chosen`` the kernel that :func:`run` would use (``None`` when no kernel serves the stage).

    Raises ValueError subclasses for a bad arch, receipt or mask mode, and
    :class:`~ckfmha.backends.BackendError` for an unknown backend."""
    return dispatcher_for(backend, arch, registry, receipt, mask_mode).explain(problem)


def plan_outputs(plan: Plan) -> dict[str, OutputSpec]:
    """Name -> :class:`~ckfmha.plan.OutputSpec` of every output the plan's stages write (``stage.outputs``, from
    the family records) and of what the backward's host reduction writes
    (:func:`ckfmha.family_records.reduced_outputs`); a name two stages write keeps its last spec."""
    out: dict[str, OutputSpec] = {}
    for st in plan.stages:
        out.update((spec.name, spec) for spec in st.outputs)
    out.update((spec.name, spec) for spec in reduced_outputs(plan.problem))
    return out


def output_specs(problem: Problem, plan: Plan) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Name -> (shape, dtype) of every output the plan writes (:func:`plan_outputs`)."""
    return {n: (s.shape, np.dtype(s.dtype)) for n, s in plan_outputs(plan).items()}


def bind_plan(plan: Plan, inputs: Mapping[str, Any]) -> Plan:
    """``plan`` with every stage's outputs derived for ``inputs``: in their fp8 encoding (plain fp8 O is stored in
    the inputs' encoding, :func:`ckfmha.inputs.fp8_format_of`; the dispatcher derives the ``ocp`` form), and an
    output that updates an input shaped as that input (:func:`ckfmha.family_records.bind_to_inputs`); the plan
    itself when nothing changes."""
    fp8 = fp8_format_of(inputs)
    stages = tuple(
        replace(
            st,
            outputs=bind_to_inputs(stage_outputs(plan.problem, st.role, st.kernel, st.launch.num_splits, fp8), inputs),
        )
        for st in plan.stages
    )
    return plan if stages == plan.stages else replace(plan, stages=stages)


def reduce_gradients(problem: Problem, tensors: dict) -> list[str]:
    """The backward's host step after the kernels: reduce CK's raw ``dk_raw`` / ``dv_raw`` (/ ``dbias_raw``) in
    ``tensors`` to the user-facing ``dk`` / ``dv`` (K/V's shapes, summed over each K/V head's q-heads) and
    ``dbias`` (the bias's shape, summed over its broadcast axes) with
    :func:`ckfmha.reference.backward.reduce_raw_gradients`: sums in float32, rounded once to K/V's (the bias's)
    dtype, stored in ``tensors`` under those names (new arrays).  Returns the names written; a
    :class:`~ckfmha.reference.backward.RawLayoutError` when a raw buffer is missing or not in CK's raw shape."""
    from ckfmha.reference.backward import RAW_NAMES, RawLayoutError, reduce_raw_gradients

    p = problem
    wanted = ["dk_raw", "dv_raw"] + (["dbias_raw"] if p.dbias else [])
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise RawLayoutError(
            f"{', '.join(missing)}: no such output to reduce (the dq_dk_dv stage writes CK's raw "
            f"gradients; have: {', '.join(sorted(tensors))})"
        )
    dtypes = {"dk": np.asarray(tensors["k"]).dtype, "dv": np.asarray(tensors["v"]).dtype}
    if p.dbias:
        dtypes["dbias"] = np.asarray(tensors["bias"]).dtype
    bias = np.shape(tensors["bias"]) if p.dbias else None
    reduced = reduce_raw_gradients(p, {n: tensors[n] for n in wanted}, bias, dtypes)
    tensors.update(reduced)
    return [n for n in RAW_NAMES if n in reduced]


def forward_for_backward(problem: Problem, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """The forward's ``(o, lse)`` the backward reads, from the NumPy reference forward (as CK's
    tile_example_fmha_bwd computes them on the host): ``o`` in the storage dtype, ``lse`` float32."""
    from ckfmha.reference import reference_forward

    ref = reference_forward(problem, inputs, np.float32)
    return ref["o"].astype(storage_dtype(problem.dtype)), ref["lse"].astype(np.float32)


def prepare_tensors(
    problem: Problem, plan: Plan, inputs: dict, forward: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The tensors a plan runs on: a new dict of the inputs (never modified: stages read them and return new
    arrays) and the backward's forward outputs (``forward`` = (o, lse), stored in the input precision).
    Returns (tensors, the names the plan writes: :func:`plan_outputs`); :func:`execute` fills them in."""
    p = problem
    tensors: dict[str, Any] = dict(inputs)
    if forward is not None:
        tensors["o"] = np.asarray(forward[0]).astype(storage_dtype(p.dtype))
        tensors["lse"] = np.asarray(forward[1]).astype(np.float32)
    return tensors, list(plan_outputs(plan))


def written_elements(p: Problem, name: str) -> np.ndarray | None:
    """A broadcastable mask of the elements of output ``name`` the plan must write (None: every element).
    A skip_min_seqlen_q kernel never writes the rows of the sequences it skips, and no forward kernel writes the
    query rows past a sequence's logical length (group ``s_qpad`` padding, batch ``q_eff_lens``: CK's kernels
    iterate over the logical length; the reference marks those rows NaN) -- nor the backward's ``d`` / ``dq``
    (fmha_bwd_kernel.hpp: the dot_do_o, dq_dk_dv and convert_dq kernels take ``seqlen_q`` from ``seqlen_q_ptr``)."""
    padded = tuple(p.qpad_list) != tuple(p.seqlens_q_list)
    if name in ("o", "lse") and (p.min_seqlen_q or padded):
        return _written_rows(p, name)
    if name in ("d", "dq") and padded:
        return _written_rows(p, name)
    return None


def _written_rows(p: Problem, name: str) -> np.ndarray:
    """Broadcastable mask of the query rows a forward plan writes: group mode over the packed physical tokens
    (``(1, total_q)``), batch mode per batch (``(batch, seqlen_q)``)."""
    if p.mode is Mode.GROUP:
        rows = np.concatenate(
            [(np.arange(pad) < n) & (n > p.min_seqlen_q) for n, pad in zip(p.seqlens_q_list, p.qpad_list)]
        )[None, :]
    else:
        rows = np.arange(p.seqlen_q)[None, :] < np.asarray(p.seqlens_q_list)[:, None]
    if name in ("lse", "d"):  # (b, h, s) / (1, h, total_q)
        return rows[:, None, :]
    layout = p.input_layout if name == "dq" else p.output_layout
    if layout is Layout.BHSD:  # (b, h, s, d)
        return rows[:, None, :, None]
    return rows[:, :, None, None]  # (b, s, h, d)


# --------------------------------------------------------------------------------------------- the loop
class StageCrash(BackendError):
    """A build or a stage raised (:func:`execute` with ``contain=True``); the message names the build or stage,
    the exception and the line that raised it; ``error`` is the exception."""

    def __init__(self, what: str, error: BaseException) -> None:
        tb = traceback.extract_tb(error.__traceback__)
        where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        super().__init__(f"{what} crashed: {type(error).__name__}: {error}{where}")
        self.what = what
        self.error = error


@dataclass(frozen=True)
class StageRun:
    """One stage of an :class:`Execution`: ``cold`` -- its kernel was built from scratch in this call (neither the
    on-disk build cache nor ``built`` had it, or the stage compiled at its launch: ``StageResult.compile_seconds``),
    ``build_seconds`` that build's time (0.0 otherwise); ``wall_ms`` the wall time of ``run_stage`` less its
    compiling; ``device_ms`` the device time the backend reported (None: not reported)."""

    role: StageRole
    kernel_id: str
    cold: bool
    build_seconds: float
    wall_ms: float
    device_ms: float | None


@dataclass(frozen=True)
class Execution:
    """What :func:`execute` did: the stages in order and whether device time was asked for (``timing``)."""

    stages: tuple[StageRun, ...]
    timing: bool

    @property
    def stage_ms(self) -> list[float]:
        """Each stage's time: the device time the backend reported when ``timing``, else the wall time."""
        return [s.device_ms if self.timing and s.device_ms is not None else s.wall_ms for s in self.stages]

    @property
    def total_ms(self) -> float:
        return float(sum(self.stage_ms))

    @property
    def cold(self) -> bool:
        """Whether any kernel was built from scratch."""
        return any(s.cold for s in self.stages)

    @property
    def build_seconds(self) -> float:
        """The summed time of the cold builds."""
        return float(sum(s.build_seconds for s in self.stages))


def _call(what: str, contain: bool, passthrough: tuple[type[BaseException], ...], fn: Callable, *args, **kwargs):
    if not contain:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a crashing build or stage is reported, not propagated raw
        if isinstance(e, passthrough):
            raise
        raise StageCrash(what, e) from None


def _readonly(a: Any) -> Any:
    """A read-only view of a NumPy array (anything else as it is): what a stage may read but not write."""
    if not isinstance(a, np.ndarray):
        return a
    v = a.view()
    v.flags.writeable = False
    return v


def _merge(st: Stage, res: StageResult | None, specs: Mapping[str, OutputSpec], tensors: dict, views: dict) -> set:
    """Check a stage's result against the plan's output specs and store its arrays in ``tensors`` (and their
    read-only views in ``views``, what later stages read).  Returns the names it stored; a
    :class:`StageContractError` names the stage and what is wrong."""
    outputs = res.outputs if res is not None else {}
    problems = []
    for name, a in outputs.items():
        spec = specs.get(name)
        why = f"{name}: not an output of this plan" if spec is None else spec.mismatch(a)
        if why is not None:
            problems.append(why)
    if problems:
        raise StageContractError(f"stage {st.role.value} ({st.kernel.kernel_id}) returned: " + "; ".join(problems))
    for name, a in outputs.items():
        tensors[name] = a
        views[name] = _readonly(a)
    return set(outputs)


class StageContractError(BackendError):
    """A backend's stage broke the stage contract (:mod:`ckfmha.backends.base`): an output the plan does not
    declare, of another shape or dtype than its spec, or a required output no stage returned."""


def _check_complete(plan: Plan, returned: set) -> None:
    missing = [(st, spec.name) for st in plan.stages for spec in st.outputs if spec.required]
    missing = [(st, n) for st, n in missing if n not in returned]
    if missing:
        raise StageContractError(
            "no stage returned "
            + "; ".join(f"{n} (declared by stage {st.role.value}, {st.kernel.kernel_id})" for st, n in missing)
        )


def execute(
    backend: Backend,
    plan: Plan,
    tensors: dict[str, Any],
    *,
    timing: bool = False,
    reduce: bool = True,
    built: dict[str, BuiltKernel] | None = None,
    contain: bool = False,
    passthrough: tuple[type[BaseException], ...] = (),
) -> Execution:
    """Build and run ``plan``'s stages on ``backend`` (any :class:`~ckfmha.backends.base.Backend` object) over
    ``tensors`` (:func:`prepare_tensors`'s dict), then, for the backward with ``reduce``, the host reduction
    :func:`reduce_gradients`.  The stage contract (:mod:`ckfmha.backends.base`): each stage reads read-only views
    of ``tensors`` and returns its outputs; this loop alone stores them in ``tensors`` after checking each against
    its :class:`~ckfmha.plan.OutputSpec` (an output the plan does not declare, a wrong shape or dtype, or a
    required output no stage returned raises :class:`StageContractError`).  The stages' specs are first bound to
    the inputs' fp8 encoding (:func:`bind_plan`).  One :class:`~ckfmha.backends.base.RunContext` serves the
    stages of this call.

    ``timing``: ask the backend for device time. ``built``: kernel id -> built kernel, reused and filled (repeated
    runs of one plan build once). ``contain``: an exception of a build or a stage (or a broken contract) --
    anything but KeyboardInterrupt and the ``passthrough`` types -- becomes a :class:`StageCrash`; without it the
    exception propagates as raised. The reduction's errors (:class:`~ckfmha.reference.backward.RawLayoutError`)
    always propagate as raised."""
    plan = bind_plan(plan, tensors)
    problem = plan.problem
    built = {} if built is None else built
    specs = plan_outputs(plan)
    views = {n: _readonly(a) for n, a in tensors.items()}
    returned: set = set()
    runs = []
    context = RunContext(plan)
    try:
        for st in plan.stages:
            kid = st.kernel.kernel_id
            cold, build_s = False, 0.0
            if kid not in built:
                bk = built[kid] = _call(f"build of {kid}", contain, passthrough, backend.build, st.kernel)
                cold = not bk.cached
                build_s = float(bk.build_seconds or 0.0) if cold else 0.0
            what = f"stage {st.role.value} ({kid})"
            t0 = time.perf_counter()
            run_stage = backend.run_stage
            res = _call(what, contain, passthrough, run_stage, built[kid], st, problem, MappingProxyType(views),
                        timing=timing, context=context)  # fmt: skip
            wall = (time.perf_counter() - t0) * 1e3
            compile_s = res.compile_seconds if res is not None else 0.0
            if compile_s > 0:  # compiled at its launch (Triton): the build's time, not the run's
                cold, build_s, wall = True, build_s + compile_s, max(wall - compile_s * 1e3, 0.0)
            returned |= _call(what, contain, passthrough, _merge, st, res, specs, tensors, views)
            runs.append(StageRun(st.role, kid, cold, build_s, wall, res.device_ms if res is not None else None))
        _call("the plan", contain, passthrough, _check_complete, plan, returned)
    finally:
        context.close()
    if reduce and problem.is_backward:
        reduce_gradients(problem, tensors)
    return Execution(tuple(runs), timing)


def unwritten_census(
    problem: Problem, outputs: Mapping[str, Any], names: Iterable[str], ref: Mapping[str, Any] | None = None
) -> list[Census]:
    """:func:`ckfmha.poison.census` of each float output in ``names``, over the elements the plan must write
    (:func:`written_elements`); with ``ref``, only where the reference has a value (an output whose shape differs
    from the reference's is left to the validator)."""
    out = []
    for name in names:
        a = outputs[name]
        if not is_float(a):
            continue
        r = None
        if ref is not None:
            r = np.asarray(ref[name])
            if a.shape != r.shape:
                continue
        out.append(census(name, a, r, where=written_elements(problem, name)))
    return out


def run(
    problem: Problem,
    inputs: dict,
    *,
    backend: str = "cpu",
    arch: str | None = None,
    registry: Registry | None = None,
    receipt: int | str = 0,
    mask_mode: str = "simplified",
    timing: bool = False,
) -> RunResult:
    """Select, build and run the plan for ``problem`` on ``backend`` and return its outputs.

    Parameters: ``problem`` (a :class:`~ckfmha.problem.Problem`); ``inputs`` (the dict name -> NumPy array of
    :func:`ckfmha.inputs.make_inputs`, never modified; the backward may omit ``o`` / ``lse``, which are then
    computed with the reference forward); ``backend`` (``cpu``, ``triton`` or ``hip``); ``arch`` (None: the arch
    data's default arch), ``receipt`` (number or profile name) and ``mask_mode`` choose the kernel space, or
    ``registry`` gives it directly; ``timing`` measures each stage.

    Returns a :class:`RunResult`: ``outputs`` (name -> array: ``o`` and ``lse`` for the forward family, the
    split-KV partials ``o_acc`` / ``lse_acc``; for the backward the user-facing ``dq`` / ``dk`` / ``dv``
    (/ ``dbias``), CK's raw ``dk_raw`` / ``dv_raw`` (/ ``dbias_raw``) they were reduced from, and ``d`` /
    ``dq_acc``; the updated caches for append-KV), ``plan`` (the stages and kernels that ran),
    ``device_ms`` (with ``timing``: the stages' summed time, each the device time its backend reported, else
    its wall time) and ``stage_ms`` (each stage's reported device time).  Compare the outputs with
    :func:`ckfmha.reference.reference` through :func:`ckfmha.validator.validate`.

    Raises :class:`~ckfmha.dispatcher.NoKernelError` (its ``explanation`` says why) when no kernel serves a
    stage, :class:`~ckfmha.backends.BackendError` when the backend is unknown or cannot build or run a stage,
    :class:`UnwrittenOutputError` when a stage leaves output elements unwritten (NaN) although every float
    input is finite, and ValueError subclasses for a bad arch, receipt or mask mode."""
    disp = dispatcher_for(backend, arch, registry, receipt, mask_mode)
    plan = disp.select(problem)
    p = problem
    forward = None
    if p.is_backward and ("o" not in inputs or "lse" not in inputs):
        forward = forward_for_backward(p, inputs)
    tensors, written = prepare_tensors(p, plan, inputs, forward)
    backend_impl = cast(Backend, disp.backend)  # dispatcher_for always binds a backend
    ex = execute(backend_impl, plan, tensors, timing=timing)
    outputs = {n: tensors[n] for n in written if n in tensors}  # optional outputs (randval) may be absent
    inputs_finite = all(
        np.all(np.isfinite(a))  # ml_dtypes' types have their own isfinite: no float64 copy
        for a in inputs.values()
        if isinstance(a, np.ndarray) and is_float(a)
    )
    if inputs_finite:  # then the reference is finite wherever the plan must write
        msgs = [m for c in unwritten_census(p, outputs, outputs) for m in c.messages()]
        if msgs:
            raise UnwrittenOutputError("\n".join(msgs) + f"\n{plan}")
    return RunResult(outputs, plan, ex.total_ms if timing else None, [s.device_ms for s in ex.stages])
