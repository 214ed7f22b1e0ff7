"""The cpu backend's error for an input tensor a real kernel would misread.

:class:`KernelInputError` (a :class:`~ckfmha.backends.base.BackendError` and a ``ValueError``) is raised before a
stage reads or writes anything when an index tensor (``block_table``, ``kv_indptr``, ``kv_page_indices``,
``kv_last_page_lens``, ``cache_batch_idx``), a K/V tensor or pool, a rotary table or a bias/ALiBi tensor does not
describe the problem: CK's kernels do not check them and would read (or write) outside the tensor.  The message
names the tensor, the index, the value and the rule.  The cpu backend checks these itself, from the kernels' view
(:mod:`ckfmha.backends.common.kv`, :mod:`ckfmha.backends.common.rope`, :mod:`ckfmha.backends.cpu.sequences`); it
shares no check with the references.  The class lives in :mod:`ckfmha.backends.common.errors` (the KV-cache checks
the triton backend shares raise it too); this module re-exports it.
"""

from __future__ import annotations

from ckfmha.backends.common.errors import KernelInputError

__all__ = ["KernelInputError"]
