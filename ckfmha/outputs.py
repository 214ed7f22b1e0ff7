"""Which outputs of a problem are compared with the reference: :func:`compared_outputs`, read from the family
records (:mod:`ckfmha.family_records`, ``FamilyRecord.compared``) -- the one definition.

It is used by ``ckfmha run`` (the CLI), the pytest plugin's items and, for its plan form, the parity sides:

* forward family: ``o``, plus ``lse`` when the problem asks for it; append-KV also the updated caches
  (``k_cache`` / ``v_cache`` when paged, else ``k`` / ``v``);
* backward, judging a plan (``kernel_item=False``, also what torch produces): ``dq`` and the user-facing ``dk`` /
  ``dv`` (K/V's shapes) and ``dbias`` (the bias's shape) of :func:`ckfmha.runner.reduce_gradients`;
* backward, judging one dq_dk_dv kernel (``kernel_item=True``): ``dq`` and what the kernel writes, CK's raw
  layouts ``dk_raw`` / ``dv_raw`` (per q-head) and ``dbias_raw`` (per q-head and batch), so a fault in one
  q-head's slice cannot hide behind another head's in the group sum.
"""

from __future__ import annotations

from ckfmha.family_records import compared_outputs

__all__ = ["compared_outputs"]
