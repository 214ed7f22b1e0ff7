"""Triton kernels for tests/test_triton_aot.py's injected faults (imported only where triton is installed).

``ptx_asm_kernel`` is valid Triton whose inline assembly is NVIDIA PTX: it compiles for CUDA, and the AMD
assembler rejects it -- a kernel source that cannot compile for AMD. ``add_one_kernel`` compiles for AMD and calls
the JIT helper ``_add_one`` (so ``backend_kernels`` of this module is the two kernels, not the helper).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _add_one(v):
    return v + 1


@triton.jit
def add_one_kernel(x_ptr):
    offs = tl.arange(0, 64)
    tl.store(x_ptr + offs, _add_one(tl.load(x_ptr + offs)))


@triton.jit
def ptx_asm_kernel(x_ptr):
    offs = tl.arange(0, 64)
    tid = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + tid)
