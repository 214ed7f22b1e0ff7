"""ckfmha itself as a parity side: dispatcher + backend, validated against the NumPy reference.

``unsupported`` when no kernel serves the problem (:class:`~ckfmha.dispatcher.NoKernelError`) or the backend
cannot realize the selected kernel (:class:`~ckfmha.backends.UnsupportedConfig`); ``skipped`` when the backend
is not available here; otherwise the plan runs and its outputs are judged by both rules of
:mod:`ckfmha.upstream.judging` (CK's elementwise tolerance against the float32 reference, and the noise floor
against the float64 truth, with the error ratio); the elementwise rule decides the verdict (:data:`VERDICT_RULE`):
ckfmha's kernels are CK kernels, checked as CK checks them (``check_err`` in tile_example_fmha_fwd / _bwd).

``backend="auto"`` resolves exactly as a normal run does (:func:`ckfmha.backends.auto_backend_name`: hip on
ROCm with a HIP compiler and a CK checkout, else triton with a GPU, else cpu), lazily: constructing the side imports no backend; the first
use (``run``, or reading ``backend`` / ``name``) resolves it once, and from then on the side's name is the
resolved one (``ckfmha:cpu``), as are its results' ``side`` and ``fields["backend"]`` (``fields
["requested_backend"]`` keeps ``auto``).
"""

from __future__ import annotations

import traceback

from ckfmha.problem import Problem
from ckfmha.upstream.reference_cache import compared_names, inputs_and_reference
from ckfmha.upstream.result import SideResult, Verdict
from ckfmha.validator import Rule

AUTO_BACKEND = "auto"
#: the rule that decides this side's verdict (docs/parity.md)
VERDICT_RULE = Rule.ELEMENTWISE


class CkfmhaSide:
    def __init__(
        self,
        backend: str = "cpu",
        arch: str | None = None,
        receipt: int | str = 0,
        mask_mode: str = "simplified",
        registry=None,
        name: str | None = None,
    ) -> None:
        self.requested_backend = backend
        self._backend: str | None = None if backend == AUTO_BACKEND else backend
        if arch is None:
            from ckfmha.archs import default_arch

            arch = default_arch()
        self.arch = arch
        self.receipt = receipt
        self.mask_mode = mask_mode
        self.registry = registry
        self._name = name

    @property
    def backend(self) -> str:
        """The backend that runs: the requested one, or ``auto`` resolved on first use (see the module doc)."""
        if self._backend is None:
            from ckfmha.backends import auto_backend_name

            self._backend = auto_backend_name()
        return self._backend

    @property
    def name(self) -> str:
        return self._name or f"ckfmha:{self.backend}"

    def run(self, problem: Problem, seed: int = 0) -> SideResult:
        from ckfmha.backends import BackendError, UnsupportedConfig, get_backend
        from ckfmha.dispatcher import NoKernelError
        from ckfmha.runner import run
        from ckfmha.upstream.judging import judge

        try:
            avail = get_backend(self.backend).available()
        except BackendError as e:
            return SideResult(self.name, Verdict.SKIPPED, str(e))
        if not avail:
            return SideResult(self.name, Verdict.SKIPPED, f"backend {self.backend!r} unavailable: {avail.reason}")
        inputs, ref = inputs_and_reference(problem, seed)
        try:
            res = run(
                problem,
                inputs,
                backend=self.backend,
                arch=self.arch,
                registry=self.registry,
                receipt=self.receipt,
                mask_mode=self.mask_mode,
            )
        except NoKernelError as e:
            first = str(e).splitlines()[0]
            return SideResult(self.name, Verdict.UNSUPPORTED, first, raw=str(e))
        except UnsupportedConfig as e:
            return SideResult(self.name, Verdict.UNSUPPORTED, str(e))
        except Exception as e:  # a crash is an error, reported with its words
            return SideResult(self.name, Verdict.ERROR, f"{type(e).__name__}: {e}", raw=traceback.format_exc())
        kernels = _stage_kernel_names(res.plan)
        names = [n for n in compared_names(problem) if n in res.outputs and n in ref]
        missing = [n for n in compared_names(problem) if n not in res.outputs]
        fields = {
            "kernels": kernels,
            "plan": str(res.plan),
            "backend": self.backend,
            "requested_backend": self.requested_backend,
            "arch": self.arch,
        }
        if not names:
            return SideResult(
                self.name, Verdict.ERROR, f"the plan produced none of {compared_names(problem)}", fields=fields
            )
        j = judge(problem, seed, res.outputs, names, VERDICT_RULE)
        ok = j.valid and not missing
        words = j.words + (f"; missing outputs {missing}" if missing else "")
        return SideResult(
            self.name,
            Verdict.RAN_VALID if ok else Verdict.RAN_INVALID,
            words,
            outputs={n: res.outputs[n] for n in names},
            checks=j.checks,
            fields=fields,
            rule=VERDICT_RULE,
        )


def _stage_kernel_names(plan) -> list[str]:
    """The plan's kernels, stage by stage: CK instance names (without ``.cpp``), or kernel ids where a kernel has
    no CK name."""
    from ckfmha.naming import ck_instance_name

    kernels = []
    for st in plan.stages:
        try:
            kernels.append(ck_instance_name(st.kernel).removesuffix(".cpp"))
        except Exception:  # pragma: no cover - e.g. non-CK arch tags
            kernels.append(st.kernel.kernel_id)
    return kernels
