"""The error for an input tensor a real kernel would misread, shared by the backends that check their inputs.

:class:`KernelInputError` (a :class:`~ckfmha.backends.base.BackendError` and a ``ValueError``) is raised before a
stage reads or writes anything when an index tensor (``block_table``, ``kv_indptr``, ``kv_page_indices``,
``kv_last_page_lens``, ``cache_batch_idx``), a K/V tensor or pool, a rotary table or a bias/ALiBi tensor does not
describe the problem: CK's kernels do not check them and would read (or write) outside the tensor.  The message
names the tensor, the index, the value and the rule.  ``ckfmha.backends.cpu.errors`` re-exports it.
"""

from __future__ import annotations

from ckfmha.backends.base import BackendError


class KernelInputError(BackendError, ValueError):
    """An input tensor a real kernel launch would read out of its bounds or misread; the message names the tensor,
    the index, the value and the rule."""
