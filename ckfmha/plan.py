"""Plan types: the stage roles, which kernel family serves each, a stage (role + kernel + arguments) and a plan.

These types are shared by the dispatcher (which makes plans), the rules (:mod:`ckfmha.rules`, which say whether
a kernel fits a role), the backends (which run stages) and the runner (which runs plans); they live here so none
of those modules has to import another for them (``ckfmha.dispatcher`` re-exports them for older imports).

* :class:`StageRole` -- the part a kernel plays in a plan (``fwd``, ``splitkv`` -> ``combine``, ``pagedkv``,
  ``appendkv``, ``batch_prefill``, ``dot_do_o`` -> ``dq_dk_dv`` -> ``convert_dq``);
* :data:`ROLE_FAMILY` -- the kernel family that serves each role, and :data:`FAMILY_ROLE` its inverse (a kernel's
  family determines the one role it can play);
* :func:`main_role` -- the role whose kernel a problem family is named after (a kernel item of the pytest plugin
  pins a kernel in this role; the other stages are chosen around it);
* :data:`PAIRED_ROLE` -- the earlier role of the same plan whose chosen kernel a role's kernel is paired with
  (combine after its split kernel, convert_dq after its dq_dk_dv kernel; :mod:`ckfmha.rules` says what pairing
  requires, the dispatcher passes the chosen kernel);
* :func:`needs_convert` -- whether a backward plan ends with a convert_dq stage (the one place of that rule: the
  dispatcher's plan structure and the backends' dq_dk_dv stages read it);
* :class:`Stage`, :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckfmha.kernel import DType, Family, KernelConfig, TokenEnum

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


ROLE_FAMILY: dict[StageRole, Family] = {
    StageRole.FWD: Family.FWD,
    StageRole.SPLITKV: Family.FWD_SPLITKV,
    StageRole.COMBINE: Family.FWD_SPLITKV_COMBINE,
    StageRole.PAGEDKV: Family.FWD_PAGEDKV,
    StageRole.APPENDKV: Family.FWD_APPENDKV,
    StageRole.BATCH_PREFILL: Family.BATCH_PREFILL,
    StageRole.DOT_DO_O: Family.BWD_DOT_DO_O,
    StageRole.DQ_DK_DV: Family.BWD_DQ_DK_DV,
    StageRole.CONVERT_DQ: Family.BWD_CONVERT_DQ,
}

#: the role a kernel of each family plays (ROLE_FAMILY is one-to-one)
FAMILY_ROLE: dict[Family, StageRole] = {family: role for role, family in ROLE_FAMILY.items()}

#: role -> the earlier role whose chosen kernel a kernel of this role must match (ckfmha.rules: a combine kernel
#: reuses its split kernel's pads, fmha_fwd_splitkv.py; a deterministic two-entry convert_dq tile's kN0 is its
#: dq_dk_dv kernel's bn0, codegen/ops/fmha_bwd.py ``convert_dq_bn0``)
PAIRED_ROLE: dict[StageRole, StageRole] = {
    StageRole.COMBINE: StageRole.SPLITKV,
    StageRole.CONVERT_DQ: StageRole.DQ_DK_DV,
}

#: problem family -> the role of the kernel the family is named after
MAIN_ROLE: dict[Family, StageRole] = {
    Family.FWD: StageRole.FWD,
    Family.FWD_SPLITKV: StageRole.SPLITKV,
    Family.FWD_PAGEDKV: StageRole.PAGEDKV,
    Family.FWD_APPENDKV: StageRole.APPENDKV,
    Family.BATCH_PREFILL: StageRole.BATCH_PREFILL,
    Family.BWD_DQ_DK_DV: StageRole.DQ_DK_DV,
}


def main_role(problem: "Problem") -> StageRole:
    """The main stage's role of ``problem``'s plan (see :data:`MAIN_ROLE`)."""
    return MAIN_ROLE[problem.family]


def needs_convert(problem: "Problem") -> bool:
    """Whether a convert_dq stage follows dq_dk_dv: the fp32 dq accumulator is converted to the input dtype, and
    a deterministic run's per-key-tile slices summed -- so for every dtype but fp32, and for fp32 when
    deterministic.  fp32 non-deterministic: the dq_dk_dv kernel's accumulator is dQ, which the backends' dq_dk_dv
    stages then write directly (cpu stages.run_dq_dk_dv, triton launch_bwd)."""
    return problem.dtype is not DType.FP32 or problem.deterministic


@dataclass(frozen=True)
class Stage:
    role: StageRole
    kernel: KernelConfig
    args: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.args.items())
        return f"{self.role.value}: {self.kernel.kernel_id}{extra}"


@dataclass(frozen=True)
class Plan:
    problem: "Problem"
    stages: tuple[Stage, ...]

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.stages)

    @property
    def kernels(self) -> tuple[KernelConfig, ...]:
        return tuple(s.kernel for s in self.stages)
