"""Plan types: a stage (role + kernel + launch choices + outputs) and a plan; the stage roles and their tables,
which :mod:`ckfmha.family_records` defines, are re-exported here.

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
* :class:`OutputSpec` -- one output a stage writes (name, shape, dtype; allocated NaN-poisoned);
* :class:`LaunchVariant` and :class:`Launch` -- the backend-neutral launch choices the dispatcher makes for a stage
  (``num_splits`` of a split-KV pair, the backward's ``workspace_bytes``, the forward's launch variant);
* :class:`Stage` (role + kernel + launch + the outputs it writes), :class:`Plan`.

The stage contract (:meth:`ckfmha.backends.base.Backend.run_stage`): a backend reads the plan's tensors as a
read-only mapping and returns every :attr:`Stage.outputs` entry as a new array of the spec's shape and dtype; the
runner (:func:`ckfmha.runner.execute`) checks them against the specs and alone merges them into the plan's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckfmha.family_records import (  # the role vocabulary and its tables, re-exported: plans speak in them
    FAMILY_ROLE,
    MAIN_ROLE,
    PAIRED_ROLE,
    ROLE_FAMILY,
    OutputSpec,
    StageRole,
    main_role,
    needs_convert,
)
from ckfmha.kernel import KernelConfig

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem


@dataclass(frozen=True)
class LaunchVariant:
    """How a GPU backend launches a forward-attention kernel, not which kernel runs (:mod:`ckfmha.heuristics`
    chooses it per kernel from data): ``qk_ahead`` -- Q.K of the next key block issued before the softmax of the
    current one; ``lpt_heads`` -- longest-first grid over groups of that many heads (0: the plain grid)."""

    qk_ahead: bool = False
    lpt_heads: int = 0

    def as_stage_args(self) -> dict[str, Any]:
        """The variant as ``key: value`` entries (none for the default: no variant), the words plans print."""
        return {} if self == LaunchVariant() else {"qk_ahead": self.qk_ahead, "lpt_heads": self.lpt_heads}

    @classmethod
    def from_stage_args(cls, args: Any) -> "LaunchVariant":
        """The variant of a ``launch_variants`` entry of a heuristics file (the keys of :meth:`as_stage_args`);
        none there: the default."""
        return cls(bool(args.get("qk_ahead", False)), int(args.get("lpt_heads", 0)))


@dataclass(frozen=True)
class Launch:
    """The dispatcher's backend-neutral launch choices for one stage: ``num_splits`` (split-KV and its combine;
    None elsewhere), ``workspace_bytes`` (the backward dq_dk_dv stage's host-known workspace bound; None
    elsewhere) and ``variant`` (the forward launch variant)."""

    num_splits: int | None = None
    workspace_bytes: int | None = None
    variant: LaunchVariant = LaunchVariant()

    def as_args(self) -> dict[str, Any]:
        """The non-default choices as ``key: value`` entries, in the order plans print them."""
        out: dict[str, Any] = {}
        if self.num_splits is not None:
            out["num_splits"] = self.num_splits
        out.update(self.variant.as_stage_args())
        if self.workspace_bytes is not None:
            out["workspace_bytes"] = self.workspace_bytes
        return out


@dataclass(frozen=True)
class Stage:
    """One stage of a plan: the ``role``, the ``kernel`` that plays it, the dispatcher's ``launch`` choices and
    the ``outputs`` the stage writes (:class:`OutputSpec`, derived from the family records,
    :func:`ckfmha.family_records.stage_outputs`)."""

    role: StageRole
    kernel: KernelConfig
    launch: Launch = Launch()
    outputs: tuple[OutputSpec, ...] = ()

    def output(self, name: str) -> OutputSpec:
        """The output spec called ``name`` (a KeyError naming the stage's outputs otherwise)."""
        for spec in self.outputs:
            if spec.name == name:
                return spec
        raise KeyError(
            f"stage {self.role.value} declares no output {name!r}; it writes: "
            f"{', '.join(s.name for s in self.outputs) or 'nothing'}"
        )

    def __str__(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.launch.as_args().items())
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


__all__ = [
    "FAMILY_ROLE",
    "Launch",
    "LaunchVariant",
    "MAIN_ROLE",
    "OutputSpec",
    "PAIRED_ROLE",
    "Plan",
    "ROLE_FAMILY",
    "Stage",
    "StageRole",
    "main_role",
    "needs_convert",
]
