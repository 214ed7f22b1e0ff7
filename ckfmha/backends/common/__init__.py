"""What the cpu and triton backends share, written from CK's kernels and independent of :mod:`ckfmha.reference`
(the oracle keeps its own): neither backend package, nor the references, are imported here.

=====================  ================================================================================================
module                 what it holds
=====================  ================================================================================================
:mod:`.errors`         :class:`~ckfmha.backends.common.errors.KernelInputError`: an input tensor a real kernel launch
                       would read out of bounds or misread (the cpu backend re-exports it from ``cpu/errors.py``)
:mod:`.kv`             K/V addressing: contiguous rows, ``cache_batch_idx``, vLLM / SGLang page tables, pool layouts,
                       and the host checks of every row and page before a stage reads or writes anything
:mod:`.rope`           RoPE as CK's append-KV kernel computes it, its table rows and the rotary tables' checks
=====================  ================================================================================================

Users: the cpu backend's stages (``cpu/stages.py``, ``cpu/sequences.py``) and the triton backend's append-KV
launcher (``triton/launch_kvcache.py``: the host checks before the device writes).
"""
