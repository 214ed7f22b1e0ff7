"""The hip backend: CK's own FMHA kernels, built from a CK checkout and called through ckfmha's C ABI.

What it does (docs/hip_backend.md has the whole story and what has run where):

* **kernel space** -- the checkout's: ``supports(config)`` is true for the configs its generator lists for the
  target arch, receipt and mask mode (:func:`ckfmha.cktree.checkout_kernels`); the name it builds is the one the
  generator listed;
* **build** -- one shared object per kernel: :func:`codegen.emit.emit_library` (the checkout's generator emits
  the instance and the api file, ckfmha adds its wrapper and the exact commands), then the HIP compiler
  (:func:`codegen.flags.find_hip_compiler`) with CK's flags, in the build cache (:mod:`ckfmha.backends.cache`:
  keyed by kernel, arch, checkout hash, compiler version and flags; one builder per key across processes and
  xdist workers, the others wait and reuse it); logs kept and shown on failure (:mod:`.build`); ``build_many``
  builds in parallel and prints a line per finished kernel with its time and the slowest at the end;
* **run** -- ``run_stage`` puts the stage's arrays on the device (:class:`.memory.TorchMemory`: torch's ROCm
  build; outputs arrive there NaN-poisoned as the runner prepared them), fills one descriptor
  (:mod:`.descriptor`), calls ``ckfmha_run_<api>`` (:mod:`.library`) and copies the outputs back; a status other
  than OK raises with the wrapper's message, which becomes the item's failure reason. CK's api runs a split-KV
  plan's combine kernel inside the split stage's call and the backward's dot_do_o and convert_dq kernels inside
  the dq_dk_dv stage's call, so those stages have nothing left to do here (CK pairs them itself; the plan's
  choice for them is not what runs);
* **available()** -- true only with a ROCm GPU (torch's ROCm build), a HIP compiler and a usable checkout
  (``configure(ck_root=...)``, through :func:`ckfmha.backends.configure_backend`, else ``$CK_ROOT``); otherwise
  the reason lists everything missing.

Importing this package imports neither torch nor ctypes libraries; :mod:`.backend` loads them when used.
"""

from __future__ import annotations


def make_backend():
    from ckfmha.backends.hip.backend import HipBackend

    return HipBackend()
