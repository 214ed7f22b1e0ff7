"""One record per family: what a problem family is made of, in one place (the spirit of PyTorch's OpInfo).

Two kinds of record:

* :class:`RoleRecord` -- one per stage role (:class:`StageRole`): the kernel family that plays it, the earlier
  role whose chosen kernel it is paired with, and the outputs a stage of this role writes (:class:`OutputSpec`:
  name, shape, dtype, NaN-poisoned when allocated);
* :class:`FamilyRecord` -- one per problem family (``fwd``, ``fwd_splitkv``, ``fwd_pagedkv``, ``fwd_appendkv``,
  ``batch_prefill``, ``bwd``): its generator api, the role its kernel items pin, every role a plan for it may use,
  the outputs it is judged on, its NumPy reference, the CK binary whose argument dialect reads its lines, and its
  matrix file.

============================  ======================================================================================
derived here                  used by
============================  ======================================================================================
:data:`ROLE_FAMILY`,          :mod:`ckfmha.rules` (a kernel's family decides its one role), the dispatcher, the
:data:`FAMILY_ROLE`,          backends (re-exported by :mod:`ckfmha.plan`, the plan types' module)
:data:`PAIRED_ROLE`,
:data:`MAIN_ROLE`
:func:`stage_outputs`         the dispatcher (every :class:`ckfmha.plan.Stage` carries its outputs) and the runner
                              (re-bound to the inputs' fp8 encoding)
:func:`compared_outputs`      ``ckfmha run``, the pytest plugin's items, the parity sides (:mod:`ckfmha.outputs`)
:func:`reduced_outputs`       the runner's host step after the backward's kernels (:func:`ckfmha.runner.execute`)
:func:`needs_convert`         the dispatcher's backward plan and the backends' dq_dk_dv stages
``FamilyRecord.reference``    :func:`ckfmha.reference.reference` (the function of ``ckfmha.reference`` it names)
``FamilyRecord.roles``        :func:`ckfmha.families.plan_families`
============================  ======================================================================================

Adding a family: its :class:`FamilyRecord` (and a :class:`RoleRecord` per new role) here, its NumPy reference in
:mod:`ckfmha.reference`, one stage function per new role in each backend, and its matrix file in ``matrices/``.

This module imports the kernel model, the problem types, :mod:`ckfmha.inputs` (shapes and dtypes) and
:mod:`ckfmha.poison`; nothing above them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ckfmha.inputs import (
    bias_shape,
    dbias_raw_shape,
    dk_raw_shape,
    dv_raw_shape,
    kv_shapes,
    lse_shape,
    o_shape,
    output_dtype,
    paged_cache_shape,
    q_shape,
    storage_dtype,
)
from ckfmha.kernel import Api, DType, Family, KernelConfig, Mode, TokenEnum
from ckfmha.poison import poisoned
from ckfmha.workspace import dq_acc_shape

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem


class StageRole(TokenEnum):
    FWD = "fwd"
    SPLITKV = "splitkv"
    COMBINE = "combine"
    PAGEDKV = "pagedkv"
    APPENDKV = "appendkv"
    BATCH_PREFILL = "batch_prefill"
    DOT_DO_O = "dot_do_o"
    DQ_DK_DV = "dq_dk_dv"
    CONVERT_DQ = "convert_dq"


@dataclass(frozen=True)
class OutputSpec:
    """One output of a stage: ``name``, ``shape`` and ``dtype`` (a NumPy dtype name).  ``required``: the stage
    always writes it (an optional one, such as the forward's dropout ``randval``, may be absent from a result);
    ``updates``: the name of the input the stage updates (append-KV's caches and rotated ``q``): the returned
    array replaces that input for the later stages."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    required: bool = True
    updates: str | None = None

    def allocate(self) -> np.ndarray:
        """A new array of this spec filled with :mod:`ckfmha.poison`'s marked NaN (integers: zeros)."""
        return poisoned(self.shape, self.dtype)

    def mismatch(self, array: Any) -> str | None:
        """None when ``array`` is a NumPy array of this spec's shape and dtype, else what differs, in words."""
        if not isinstance(array, np.ndarray):
            return f"output {self.name}: a {type(array).__name__}, expected a NumPy array"
        if tuple(array.shape) != tuple(self.shape) or array.dtype != np.dtype(self.dtype):
            return (
                f"output {self.name}: shape {tuple(array.shape)} dtype {array.dtype}, the stage declares shape "
                f"{tuple(self.shape)} dtype {np.dtype(self.dtype)}"
            )
        return None


def _spec(name: str, shape: tuple[int, ...], dtype: Any, **kw: Any) -> OutputSpec:
    return OutputSpec(name, tuple(int(x) for x in shape), np.dtype(dtype).name, **kw)


# ------------------------------------------------------------------------------------ outputs of each role
# Each function: (problem, kernel, num_splits, fp8_format) -> the stage's outputs.  ``fp8_format``: the inputs'
# fp8 encoding (``ocp`` / ``fnuz``), which decides plain fp8 O's dtype.
OutputsFn = Callable[["Problem", KernelConfig, "int | None", str], tuple[OutputSpec, ...]]

F32 = np.float32


def _attention_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    """o (+ lse when the kernel writes it); with dropout the optional uint8 random values a GPU kernel may store."""
    out = [_spec("o", o_shape(p), output_dtype(p.dtype, fp8))]
    if c.lse:
        out.append(_spec("lse", lse_shape(p), F32))
    if p.p_drop > 0:
        out.append(_spec("randval", lse_shape(p) + (p.seqlen_k,), np.uint8, required=False))
    return tuple(out)


def _combine_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    out = [_spec("o", o_shape(p), output_dtype(p.dtype, fp8))]
    if c.lse:
        out.append(_spec("lse", lse_shape(p), F32))
    return tuple(out)


def split_partials_shape(p: "Problem", num_splits: int) -> tuple[int, ...]:
    """The split-KV partial O: ``(num_splits, batch, nhead_q, seqlen_q, hdim_v)`` (group mode: batch 1 over the
    packed ``total_q`` rows); the partial LSE drops the last axis."""
    nb, rows = (1, p.total_q) if p.mode is Mode.GROUP else (p.batch, p.seqlen_q)
    return (num_splits, nb, p.nhead_q, rows, p.hdim_v)


def _split_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    if num_splits is None or num_splits < 1:
        raise ValueError(f"num_splits: {num_splits!r}: a split-KV stage needs a positive number of splits")
    shape = split_partials_shape(p, num_splits)
    return (_spec("o_acc", shape, F32), _spec("lse_acc", shape[:-1], F32))


def _appendkv_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    """The updated caches (``k_cache`` / ``v_cache`` when paged, else ``k`` / ``v``) and q (rotated with RoPE):
    new arrays that replace those inputs for the attention stage after it.  A paged pool's page count is the
    inputs' (:func:`ckfmha.inputs.make_inputs` makes one page per ``page_block_size`` keys of each sequence plus
    one); an output that updates an input takes that input's shape and dtype (:func:`bind_to_inputs`)."""
    sdt = storage_dtype(p.dtype, fp8)
    k_shape, v_shape = kv_shapes(p)
    names = ("k_cache", "v_cache") if p.page_block_size else ("k", "v")
    if p.page_block_size:
        pages = sum(-(-sk // p.page_block_size) for sk in p.seqlens_k_list) + 1
        k_shape, v_shape = (paged_cache_shape(p, pages, d) for d in (p.hdim_q, p.hdim_v))
    out = [_spec(n, s, sdt, updates=n) for n, s in zip(names, (k_shape, v_shape))]
    return tuple(out) + (_spec("q", q_shape(p), sdt, updates="q"),)  # rotated with RoPE, else q as it was


def bind_to_inputs(specs: tuple[OutputSpec, ...], inputs: Any) -> tuple[OutputSpec, ...]:
    """``specs`` with every output that updates an input given that input's shape and dtype (a caller may pass
    a page pool of any size)."""
    out = []
    for spec in specs:
        a = inputs.get(spec.updates) if spec.updates else None
        if isinstance(a, np.ndarray):
            spec = OutputSpec(spec.name, tuple(a.shape), a.dtype.name, spec.required, spec.updates)
        out.append(spec)
    return tuple(out)


def _dot_do_o_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    return (_spec("d", lse_shape(p), F32),)


def _dq_dk_dv_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    """The fp32 dq accumulator, CK's raw per-q-head dK/dV (and dBias), and dq itself when no convert_dq stage
    follows (:func:`needs_convert`)."""
    sdt = storage_dtype(p.dtype, fp8)
    out = [
        _spec("dq_acc", dq_acc_shape(p, c.tile[1]), F32),
        _spec("dk_raw", dk_raw_shape(p), sdt),
        _spec("dv_raw", dv_raw_shape(p), sdt),
    ]
    if p.dbias:
        out.append(_spec("dbias_raw", dbias_raw_shape(p), sdt))
    if not needs_convert(p):
        out.append(_spec("dq", q_shape(p), sdt))
    return tuple(out)


def _convert_dq_outputs(p: "Problem", c: KernelConfig, num_splits: int | None, fp8: str) -> tuple[OutputSpec, ...]:
    return (_spec("dq", q_shape(p), storage_dtype(p.dtype, fp8)),)


@dataclass(frozen=True)
class RoleRecord:
    """A stage role: the kernel ``family`` that plays it, the earlier role it is ``paired_with`` (a combine kernel
    reuses its split kernel's pads, fmha_fwd_splitkv.py; a deterministic two-entry convert_dq tile's kN0 is its
    dq_dk_dv kernel's bn0, codegen/ops/fmha_bwd.py ``convert_dq_bn0``) and its ``outputs`` function."""

    role: StageRole
    family: Family
    outputs: OutputsFn
    paired_with: StageRole | None = None


ROLE_RECORDS: dict[StageRole, RoleRecord] = {
    r.role: r
    for r in (
        RoleRecord(StageRole.FWD, Family.FWD, _attention_outputs),
        RoleRecord(StageRole.SPLITKV, Family.FWD_SPLITKV, _split_outputs),
        RoleRecord(StageRole.COMBINE, Family.FWD_SPLITKV_COMBINE, _combine_outputs, StageRole.SPLITKV),
        RoleRecord(StageRole.PAGEDKV, Family.FWD_PAGEDKV, _attention_outputs),
        RoleRecord(StageRole.APPENDKV, Family.FWD_APPENDKV, _appendkv_outputs),
        RoleRecord(StageRole.BATCH_PREFILL, Family.BATCH_PREFILL, _attention_outputs),
        RoleRecord(StageRole.DOT_DO_O, Family.BWD_DOT_DO_O, _dot_do_o_outputs),
        RoleRecord(StageRole.DQ_DK_DV, Family.BWD_DQ_DK_DV, _dq_dk_dv_outputs),
        RoleRecord(StageRole.CONVERT_DQ, Family.BWD_CONVERT_DQ, _convert_dq_outputs, StageRole.DQ_DK_DV),
    )
}


# ------------------------------------------------------------------------------------ compared outputs
def _forward_compared(p: "Problem", kernel_item: bool) -> tuple[str, ...]:
    return ("o",) + (("lse",) if p.lse else ())


def _appendkv_compared(p: "Problem", kernel_item: bool) -> tuple[str, ...]:
    return _forward_compared(p, kernel_item) + (("k_cache", "v_cache") if p.page_block_size else ("k", "v"))


def _backward_compared(p: "Problem", kernel_item: bool) -> tuple[str, ...]:
    """A plan is judged on dq and the user-facing dk / dv (/ dbias) of the host reduction; one pinned dq_dk_dv
    kernel on what it writes, CK's raw per-q-head layouts, so a fault in one q-head's slice cannot hide behind
    another head's in the group sum."""
    if kernel_item:
        return ("dq", "dk_raw", "dv_raw") + (("dbias_raw",) if p.dbias else ())
    return ("dq", "dk", "dv") + (("dbias",) if p.dbias else ())


@dataclass(frozen=True)
class FamilyRecord:
    """A problem family (see the module doc): ``name`` (the problem family token), ``problem_family`` (the
    :class:`~ckfmha.kernel.Family` a :class:`~ckfmha.problem.Problem` stores), the generator ``api``, the
    ``main_role`` (the kernel the family is named after; a kernel item pins it), every role a plan may use
    (``roles``: the dispatcher's structures, fallbacks included), ``compared`` (problem, kernel_item) -> names,
    ``reference`` (the function of :mod:`ckfmha.reference` that computes it), ``ck_binary`` (the
    ``tile_example_fmha_*`` binary whose arguments describe it; None: no binary runs it) and ``matrix`` (its file
    in ``matrices/``)."""

    name: str
    problem_family: Family
    api: Api
    main_role: StageRole
    roles: tuple[StageRole, ...]
    compared: Callable[["Problem", bool], tuple[str, ...]]
    reference: str
    ck_binary: str | None
    matrix: str


_ATTENTION_AFTER_APPEND = (StageRole.FWD, StageRole.SPLITKV, StageRole.COMBINE, StageRole.PAGEDKV)

FAMILY_RECORDS: dict[str, FamilyRecord] = {
    r.name: r
    for r in (
        # split-KV serves a fwd problem where a CK finding refuses the fwd kernels (ckfmha.ck_findings)
        FamilyRecord(
            "fwd", Family.FWD, Api.FWD, StageRole.FWD, (StageRole.FWD, StageRole.SPLITKV, StageRole.COMBINE),
            _forward_compared, "reference_forward", "fwd", "fwd.yaml",
        ),
        FamilyRecord(
            "fwd_splitkv", Family.FWD_SPLITKV, Api.FWD_SPLITKV, StageRole.SPLITKV,
            (StageRole.SPLITKV, StageRole.COMBINE), _forward_compared, "reference_splitkv", "fwd", "splitkv.yaml",
        ),
        # fmha_fwd_runner.hpp run_fwd: "If there is no instance for these args, fallback to fmha_fwd_splitkv"
        FamilyRecord(
            "fwd_pagedkv", Family.FWD_PAGEDKV, Api.PAGEDKV_PREFILL, StageRole.PAGEDKV,
            (StageRole.PAGEDKV, StageRole.SPLITKV, StageRole.COMBINE), _forward_compared, "reference_pagedkv",
            "fwd", "pagedkv.yaml",
        ),
        # tile_example_fmha_fwd runs fmha_fwd_appendkv, then the attention over the updated cache
        FamilyRecord(
            "fwd_appendkv", Family.FWD_APPENDKV, Api.FWD_APPENDKV, StageRole.APPENDKV,
            (StageRole.APPENDKV,) + _ATTENTION_AFTER_APPEND, _appendkv_compared, "reference_appendkv", "fwd",
            "appendkv.yaml",
        ),
        FamilyRecord(
            "batch_prefill", Family.BATCH_PREFILL, Api.BATCH_PREFILL, StageRole.BATCH_PREFILL,
            (StageRole.BATCH_PREFILL,), _forward_compared, "reference_batch_prefill", None, "batch_prefill.yaml",
        ),
        FamilyRecord(
            "bwd", Family.BWD_DQ_DK_DV, Api.BWD, StageRole.DQ_DK_DV,
            (StageRole.DOT_DO_O, StageRole.DQ_DK_DV, StageRole.CONVERT_DQ), _backward_compared,
            "reference_backward", "bwd", "bwd.yaml",
        ),
    )
}  # fmt: skip

_BY_PROBLEM_FAMILY: dict[Family, FamilyRecord] = {r.problem_family: r for r in FAMILY_RECORDS.values()}

# ------------------------------------------------------------------------------------ derived tables
ROLE_FAMILY: dict[StageRole, Family] = {role: r.family for role, r in ROLE_RECORDS.items()}
#: the role a kernel of each family plays (ROLE_FAMILY is one-to-one)
FAMILY_ROLE: dict[Family, StageRole] = {family: role for role, family in ROLE_FAMILY.items()}
#: role -> the earlier role whose chosen kernel a kernel of this role must match (:class:`RoleRecord`)
PAIRED_ROLE: dict[StageRole, StageRole] = {
    role: r.paired_with for role, r in ROLE_RECORDS.items() if r.paired_with is not None
}
#: problem family -> the role of the kernel the family is named after
MAIN_ROLE: dict[Family, StageRole] = {f: r.main_role for f, r in _BY_PROBLEM_FAMILY.items()}


def family_record(problem_or_family: Any) -> FamilyRecord:
    """The record of a :class:`~ckfmha.problem.Problem`, a problem :class:`~ckfmha.kernel.Family` or a problem
    family token (``fwd`` ... ``bwd``); a KeyError naming the value and the families otherwise."""
    key = getattr(problem_or_family, "family", problem_or_family)
    rec = _BY_PROBLEM_FAMILY.get(key) if isinstance(key, Family) else FAMILY_RECORDS.get(str(key))
    if rec is None:
        raise KeyError(f"family: {key!r} is not a problem family; known: {', '.join(FAMILY_RECORDS)}")
    return rec


def main_role(problem: "Problem") -> StageRole:
    """The main stage's role of ``problem``'s plan (see :data:`MAIN_ROLE`)."""
    return MAIN_ROLE[problem.family]


def needs_convert(problem: "Problem") -> bool:
    """Whether a convert_dq stage follows dq_dk_dv: the fp32 dq accumulator is converted to the input dtype, and
    a deterministic run's per-key-tile slices summed -- so for every dtype but fp32, and for fp32 when
    deterministic.  fp32 non-deterministic: the dq_dk_dv kernel's accumulator is dQ, which the dq_dk_dv stage
    then returns as ``dq`` (:func:`stage_outputs`)."""
    return problem.dtype is not DType.FP32 or problem.deterministic


def stage_outputs(
    problem: "Problem", role: StageRole, kernel: KernelConfig, num_splits: int | None = None, fp8_format: str = "ocp"
) -> tuple[OutputSpec, ...]:
    """The outputs a stage of ``role`` run by ``kernel`` writes for ``problem`` (:class:`RoleRecord`)."""
    return ROLE_RECORDS[StageRole.parse(role, "role")].outputs(problem, kernel, num_splits, fp8_format)


def compared_outputs(problem: "Problem", *, kernel_item: bool = False) -> tuple[str, ...]:
    """The outputs ``problem`` is judged on; ``kernel_item``: one pinned kernel is judged (the backward's raw
    layouts) rather than a plan."""
    return family_record(problem).compared(problem, kernel_item)


def reduced_outputs(problem: "Problem") -> tuple[OutputSpec, ...]:
    """What the host step after the backward's kernels writes (:func:`ckfmha.runner.reduce_gradients`): the
    user-facing dk / dv (K/V's shapes) and dbias (the bias's shape) in the input precision; nothing for the
    forward family."""
    if not problem.is_backward:
        return ()
    sdt = storage_dtype(problem.dtype)
    k_shape, v_shape = kv_shapes(problem)
    out = [_spec("dk", k_shape, sdt), _spec("dv", v_shape, sdt)]
    if problem.dbias:
        out.append(_spec("dbias", bias_shape(problem), sdt))
    return tuple(out)


__all__ = [
    "FAMILY_RECORDS",
    "FAMILY_ROLE",
    "FamilyRecord",
    "MAIN_ROLE",
    "OutputSpec",
    "PAIRED_ROLE",
    "ROLE_FAMILY",
    "ROLE_RECORDS",
    "RoleRecord",
    "StageRole",
    "compared_outputs",
    "family_record",
    "main_role",
    "needs_convert",
    "reduced_outputs",
    "bind_to_inputs",
    "split_partials_shape",
    "stage_outputs",
]
