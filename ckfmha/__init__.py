"""ckfmha: a test and parity harness for Composable Kernel's fused multi-head attention (FMHA) kernels.

The core (kernel model, enumeration, problems, references, dispatcher, cpu backend) needs only NumPy and
PyYAML; the GPU backend (torch + triton) is an optional extra and is imported only when used.

The Python API runs one problem end to end and checks it::

    from ckfmha import Problem, make_inputs, run, explain, reference, validate

    p = Problem.from_ck_args("-prec=fp16 -b=2 -h=8 -s=128 -d=64 -mask=t")   # CK's tile_example syntax
    print(explain(p))                        # every candidate kernel per stage and why it can or cannot serve
    inputs = make_inputs(p, seed=0)          # deterministic inputs (dict name -> NumPy array)
    result = run(p, inputs)                  # select a plan, build, run it (backend cpu by default)
    checks = validate(p, result.outputs, reference(p, inputs))   # CK's tolerance; name -> CheckResult

``reference`` is the :mod:`ckfmha.reference` package itself, callable (``reference.reference_forward`` and the
other per-family functions stay reachable).  Every public name -- these and the kernel model's enums -- is loaded
on first use (PEP 562): ``import ckfmha`` imports nothing beyond this file.
"""

__version__ = "0.1.0"

# The kernel model's names (ckfmha.kernel), loaded on first use too: `import ckfmha` (and so the pytest plugin's
# option definitions, which read ckfmha.categories) imports nothing but this file.
_KERNEL_NAMES = (
    "Api",
    "ArchTag",
    "Bias",
    "Dropout",
    "DType",
    "Family",
    "KernelAlgorithm",
    "KernelConfig",
    "KernelSignature",
    "KVLoad",
    "KVLookupTable",
    "KVMemoryLayout",
    "MaskImpl",
    "MaskMode",
    "Mode",
    "Pipeline",
    "QScale",
    "Rope",
    "VLayout",
)

# The Python API (see the module doc), loaded on first use (PEP 562) so `import ckfmha` and the CLI stay light.
# A name whose module is ckfmha.<name> is that module itself: `ckfmha.reference` is the callable package.
_LAZY = {
    "run": "ckfmha.runner",
    "explain": "ckfmha.runner",
    "RunResult": "ckfmha.runner",
    "Problem": "ckfmha.problem",
    "make_inputs": "ckfmha.inputs",
    "validate": "ckfmha.validator",
    "reference": "ckfmha.reference",
    **{n: "ckfmha.kernel" for n in _KERNEL_NAMES},
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        value = module if _LAZY[name] == f"{__name__}.{name}" else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ckfmha' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
