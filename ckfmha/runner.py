"""``ckfmha.run(problem, inputs)``: select a plan, build its kernels, run its stages, return the outputs -- and
the one execution loop (:func:`execute`) that the pytest plugin's items run too.

1. The registry (``Registry.from_enumeration(arch, receipt, mask_mode)``, built once per process and
   arguments; ``arch`` defaults to the arch data's default, :func:`ckfmha.archs.default_arch`) and a
   :class:`~ckfmha.dispatcher.Dispatcher` bound to the backend select the plan; when no kernel serves a stage,
   the :class:`~ckfmha.dispatcher.NoKernelError` carries the dispatcher's explanation.
2. Every output of the plan is allocated and poisoned with NaN (:func:`output_specs`, :func:`prepare_tensors`);
   inputs are never modified (append-KV's in-place cache update and rotated ``q`` work on copies, returned as
   outputs).
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
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

import numpy as np

from ckfmha.backends import BackendError, get_backend
from ckfmha.backends.base import Backend, BuiltKernel
from ckfmha.dispatcher import Dispatcher, Explanation
from ckfmha.inputs import (
    bias_shape,
    dbias_raw_shape,
    dk_raw_shape,
    dv_raw_shape,
    kv_shapes,
    lse_shape,
    o_shape,
    output_dtype,
    q_shape,
    storage_dtype,
)
from ckfmha.kernel import Family, Mode
from ckfmha.plan import Plan, StageRole
from ckfmha.poison import Census, census, is_float, poisoned
from ckfmha.problem import Layout, Problem
from ckfmha.registry import Registry
from ckfmha.workspace import dq_acc_shape


class UnwrittenOutputError(BackendError):
    """A stage left part of an output unwritten (still the NaN poison)."""


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    plan: Plan
    device_ms: float | None = None
    stage_ms: list[float | None] = field(default_factory=list)


@lru_cache(maxsize=8)
def _registry(arch: str, receipt: int | str, mask_mode: str) -> Registry:
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
    checkout plans over that checkout's own kernel space (:meth:`Registry.from_checkout`): it builds those kernels."""
    be = get_backend(backend)
    if registry is None:
        from ckfmha.archs import default_arch
        from ckfmha.backends.hip import configure_hip

        arch = default_arch() if arch is None else arch
        ck_root = configure_hip().ck_root() if backend == "hip" else None
        if ck_root is not None:
            registry = Registry.from_checkout(ck_root, arch, receipt=receipt, mask_mode=mask_mode)
        else:
            registry = _registry(arch, receipt, mask_mode)
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


def output_specs(problem: Problem, plan: Plan) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Name -> (shape, dtype) of every output the plan's stages write (NaN-poisoned before the run)."""
    p = problem
    f32 = np.dtype(np.float32)
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    nb, ns = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    for st in plan.stages:
        c = st.kernel
        if st.role in (StageRole.FWD, StageRole.PAGEDKV, StageRole.BATCH_PREFILL, StageRole.COMBINE):
            out["o"] = (o_shape(p), output_dtype(p.dtype))
            if c.lse:
                out["lse"] = (lse_shape(p), f32)
        elif st.role is StageRole.SPLITKV:
            n = int(st.args["num_splits"])
            out["o_acc"] = ((n, nb, p.nhead_q, ns, p.hdim_v), f32)
            out["lse_acc"] = ((n, nb, p.nhead_q, ns), f32)
        elif st.role is StageRole.DOT_DO_O:
            out["d"] = (lse_shape(p), f32)
        elif st.role is StageRole.DQ_DK_DV:
            sdt = storage_dtype(p.dtype)
            k_shape, v_shape = kv_shapes(p)
            out["dq_acc"] = (dq_acc_shape(p, c.tile[1]), f32)
            out["dq"] = (q_shape(p), sdt)
            out["dk_raw"] = (dk_raw_shape(p), sdt)  # the kernel's, per q-head
            out["dv_raw"] = (dv_raw_shape(p), sdt)
            out["dk"] = (k_shape, sdt)  # the host reduction's (reduce_gradients)
            out["dv"] = (v_shape, sdt)
            if p.dbias:  # dtype: the bias's (prepare_tensors)
                out["dbias_raw"] = (dbias_raw_shape(p), sdt)
                out["dbias"] = (bias_shape(p), sdt)
    return out


def reduce_gradients(problem: Problem, tensors: dict) -> list[str]:
    """The backward's host step after the kernels: reduce CK's raw ``dk_raw`` / ``dv_raw`` (/ ``dbias_raw``) in
    ``tensors`` to the user-facing ``dk`` / ``dv`` (K/V's shapes, summed over each K/V head's q-heads) and
    ``dbias`` (the bias's shape, summed over its broadcast axes) with
    :func:`ckfmha.reference.backward.reduce_raw_gradients`: sums in float32, rounded once to K/V's (the bias's)
    dtype, written into the arrays ``tensors`` holds under those names when their shapes and dtypes fit.
    Returns the names written; a :class:`~ckfmha.reference.backward.RawLayoutError` when a raw buffer is missing
    or not in CK's raw shape."""
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
    for name, value in reduced.items():
        dst = tensors.get(name)
        if isinstance(dst, np.ndarray) and dst.shape == value.shape and dst.dtype == value.dtype:
            dst[...] = value
        else:
            tensors[name] = value
    return [n for n in RAW_NAMES if n in reduced]


def _forward_for_backward(problem: Problem, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    from ckfmha.reference import reference_forward

    ref = reference_forward(problem, inputs, np.float32)
    return ref["o"].astype(storage_dtype(problem.dtype)), ref["lse"].astype(np.float32)


def prepare_tensors(
    problem: Problem, plan: Plan, inputs: dict, forward: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The tensors a plan runs on: the inputs (copies of those a stage updates in place: append-KV's caches and
    rotated q), the backward's forward outputs (``forward`` = (o, lse), stored in the input precision) and every
    output allocated and poisoned with NaN. Returns (tensors, names the plan writes)."""
    p = problem
    tensors: dict[str, Any] = dict(inputs)
    if forward is not None:
        tensors["o"] = np.asarray(forward[0]).astype(storage_dtype(p.dtype))
        tensors["lse"] = np.asarray(forward[1]).astype(np.float32)
    in_place: list[str] = []
    if p.family is Family.FWD_APPENDKV:
        for name in ("q", "k", "v", "k_cache", "v_cache"):
            if name in tensors:
                tensors[name] = np.array(tensors[name], copy=True)
                in_place.append(name)
    specs = output_specs(p, plan)
    for name, (shape, dtype) in specs.items():
        if name in ("dbias", "dbias_raw"):
            dtype = tensors["bias"].dtype
        tensors[name] = poisoned(shape, dtype)
    return tensors, list(specs) + in_place


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
    on-disk build cache nor ``built`` had it), ``build_seconds`` that build's time (0.0 otherwise); ``wall_ms``
    the wall time of ``run_stage``; ``device_ms`` the device time the backend reported (None: not reported)."""

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
    ``tensors`` (:func:`prepare_tensors`'s dict: stages read their inputs and write their outputs there; arrays a
    stage returns instead of writing in place are stored there), then, for the backward with ``reduce``, the host
    reduction :func:`reduce_gradients`.

    ``timing``: ask the backend for device time. ``built``: kernel id -> built kernel, reused and filled (repeated
    runs of one plan build once). ``contain``: an exception of a build or a stage -- anything but
    KeyboardInterrupt and the ``passthrough`` types -- becomes a :class:`StageCrash`; without it the exception
    propagates as raised. The reduction's errors (:class:`~ckfmha.reference.backward.RawLayoutError`) always
    propagate as raised."""
    problem = plan.problem
    built = {} if built is None else built
    runs = []
    for st in plan.stages:
        kid = st.kernel.kernel_id
        cold, build_s = False, 0.0
        if kid not in built:
            bk = built[kid] = _call(f"build of {kid}", contain, passthrough, backend.build, st.kernel)
            cold = not bk.cached
            build_s = float(bk.build_seconds or 0.0) if cold else 0.0
        t0 = time.perf_counter()
        res = _call(
            f"stage {st.role.value} ({kid})",
            contain,
            passthrough,
            backend.run_stage,
            built[kid],
            st,
            problem,
            tensors,
            timing=timing,
        )
        wall = (time.perf_counter() - t0) * 1e3
        for name, a in (res.outputs if res is not None else {}).items():
            if isinstance(a, np.ndarray) and tensors.get(name) is not a:
                tensors[name] = a
        runs.append(StageRun(st.role, kid, cold, build_s, wall, res.device_ms if res is not None else None))
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
        forward = _forward_for_backward(p, inputs)
    tensors, written = prepare_tensors(p, plan, inputs, forward)
    specs = output_specs(p, plan)
    backend_impl = cast(Backend, disp.backend)  # dispatcher_for always binds a backend
    ex = execute(backend_impl, plan, tensors, timing=timing)
    outputs = {n: tensors[n] for n in written}
    inputs_finite = all(
        np.all(np.isfinite(np.asarray(a, dtype=np.float64)))
        for a in inputs.values()
        if isinstance(a, np.ndarray) and is_float(a)
    )
    if inputs_finite:  # then the reference is finite wherever the plan must write
        msgs = [m for c in unwritten_census(p, outputs, specs) for m in c.messages()]
        if msgs:
            raise UnwrittenOutputError("\n".join(msgs) + f"\n{plan}")
    return RunResult(outputs, plan, ex.total_ms if timing else None, [s.device_ms for s in ex.stages])
