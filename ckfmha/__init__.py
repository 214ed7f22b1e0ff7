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

# Running problems end to end: select a plan, build, run on a backend; explain a selection. Loaded on first use
# (PEP 562), so `import ckfmha` and the CLI stay light.
_LAZY = {"run": "ckfmha.runner", "explain": "ckfmha.runner", "RunResult": "ckfmha.runner",
         "Problem": "ckfmha.problem"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ckfmha' has no attribute {name!r}")
