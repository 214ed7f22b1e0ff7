"""Which outputs of a problem are compared with the reference -- the one definition.

:func:`compared_outputs` is used by ``ckfmha run`` (the CLI), the pytest plugin's items
(:mod:`pytest_ckfmha.execute`) and, for its plan form, the parity sides:

* forward family: ``o``, plus ``lse`` when the problem asks for it; append-KV also the updated caches
  (``k_cache`` / ``v_cache`` when paged, else ``k`` / ``v``);
* backward, judging a plan (``kernel_item=False``, also what torch produces): ``dq`` and the user-facing ``dk`` /
  ``dv`` (K/V's shapes) and ``dbias`` (the bias's shape) of :func:`ckfmha.runner.reduce_gradients`;
* backward, judging one dq_dk_dv kernel (``kernel_item=True``): ``dq`` and what the kernel writes, CK's raw
  layouts ``dk_raw`` / ``dv_raw`` (per q-head) and ``dbias_raw`` (per q-head and batch), so a fault in one
  q-head's slice cannot hide behind another head's in the group sum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckfmha.kernel import Family

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.problem import Problem


def compared_outputs(problem: "Problem", *, kernel_item: bool = False) -> tuple[str, ...]:
    """The outputs ``problem`` is judged on (see the module doc); ``kernel_item``: one pinned dq_dk_dv kernel is
    judged (the backward's raw layouts) rather than a plan."""
    if problem.is_backward:
        if kernel_item:
            return ("dq", "dk_raw", "dv_raw") + (("dbias_raw",) if problem.dbias else ())
        return ("dq", "dk", "dv") + (("dbias",) if problem.dbias else ())
    names: tuple[str, ...] = ("o",) + (("lse",) if problem.lse else ())
    if problem.family is Family.FWD_APPENDKV:
        names += ("k_cache", "v_cache") if problem.page_block_size else ("k", "v")
    return names
