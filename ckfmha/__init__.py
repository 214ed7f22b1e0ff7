"""ckfmha: a test and parity harness for Composable Kernel's fused multi-head attention (FMHA) kernels.

The core (kernel model, enumeration, problems, references, dispatcher, cpu backend) needs only NumPy and
PyYAML; the GPU backend (torch + triton) is an optional extra and is imported only when used.
"""

__version__ = "0.1.0"

from ckfmha.kernel import (  # noqa: F401  (public API)
    Api,
    ArchTag,
    Bias,
    DType,
    Dropout,
    Family,
    KernelAlgorithm,
    KernelConfig,
    KernelSignature,
    KVLoad,
    KVLookupTable,
    KVMemoryLayout,
    MaskImpl,
    MaskMode,
    Mode,
    Pipeline,
    QScale,
    Rope,
    VLayout,
)

# Running problems end to end (issue 4): select a plan, build, run on a backend; explain a selection.
from ckfmha.runner import RunResult, explain, run  # noqa: E402,F401
