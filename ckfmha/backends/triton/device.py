"""Device handling of the Triton backend: the layer every launcher and the stage module import (it imports no other
module of the package but :mod:`.capability`).

==========================  ========================================================================================
name                        what it does
==========================  ========================================================================================
``DEVICE``                  where tensors live: ``cuda``, or ``cpu`` when Triton interprets the kernels
                            (``TRITON_INTERPRET=1``) or no GPU is there (ahead-of-time compiles: only dtypes and
                            strides matter); read at call time, so a compile-only run may set it
:func:`to_torch`,           NumPy (incl. ml_dtypes bf16 / fp8) <-> torch, same bits; an upload never aliases the
:func:`to_numpy`            caller's array (the stage contract's read-only inputs)
:class:`DeviceTensors`      one stage's device tensors: the inputs uploaded on first use and kept in the run's
                            :class:`~ckfmha.backends.base.RunContext` (``state("triton")``), keyed by name and the
                            NumPy array's identity -- a replaced input (append-KV's caches) is uploaded afresh, an
                            array a stage returned is found on the device (:meth:`DeviceTensors.keep`)
:func:`poisoned`,           device buffers filled with :mod:`ckfmha.poison`'s NaN, from a shape and torch dtype or an
:func:`poisoned_output`     :class:`~ckfmha.plan.OutputSpec` (fnuz fp8: a float32 buffer rounded on the host)
:func:`spec_output`         a device buffer as the NumPy array its spec declares
:func:`sync`, :func:`timed`  device synchronization and the launch's device milliseconds (CUDA events; wall time in
                            the interpreter)
:func:`compiled_since`      what Triton compiled in this process since a :func:`compile_mark` (count, seconds):
                            Triton's compilation listener, so a stage reports the compile its launches needed as build
                            time (``StageResult.compile_seconds``), not run time
``ELEM``, ``TORCH_OUT``     the kernels' element types and the O buffer's torch dtype per kernel dtype
:func:`seq_strides` ...     stride helpers, :func:`dummy_tensor`, :func:`required`, :func:`mask_args`,
                            :func:`check_preconditions` (:class:`~ckfmha.backends.base.PreconditionError`) and
                            :func:`launch_fitting_stages` (fewer pipeline stages where shared memory is short)
==========================  ========================================================================================
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from ckfmha.backends.base import PreconditionError, RunContext
from ckfmha.backends.triton.capability import interpreting, unhonoured_lengths
from ckfmha.kernel import Bias, DType, KernelConfig
from ckfmha.plan import FAMILY_ROLE, OutputSpec, StageRole
from ckfmha.problem import Layout, Problem
from ckfmha.rng import p_undrop_u8
from ckfmha.rules import misfit

# where tensors live: the GPU, or the CPU when Triton interprets the kernels (TRITON_INTERPRET=1) or there is none
DEVICE = "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"

ELEM = {
    DType.FP16: tl.float16,
    DType.BF16: tl.bfloat16,
    DType.FP32: tl.float32,
    DType.FP8: tl.float16,  # fp8 in, fp8 out: e4m3 (OCP or fnuz) exact in fp16, P in fp16; O rounded by the store
    DType.FP8BF16: tl.bfloat16,
    DType.FP8FP32: tl.bfloat16,
}
#: the kernels' ``BIAS_KIND`` constexpr of each bias (kernels.py and kernels_bwd.py read 1 and 2)
BIAS_KIND = {Bias.NONE: 0, Bias.ELEMENTWISE: 1, Bias.ALIBI: 2}
TORCH_OUT = {
    DType.FP16: torch.float16,
    DType.BF16: torch.bfloat16,
    DType.FP32: torch.float32,
    DType.FP8: torch.float8_e4m3fn,  # OCP; fnuz: a float32 buffer rounded on the host (out_torch_dtype)
    DType.FP8BF16: torch.bfloat16,
    DType.FP8FP32: torch.float32,
}
#: NumPy dtype name -> the torch dtype of a device buffer of that spec (fnuz fp8: float32, rounded on the host)
_SPEC_TORCH = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e4m3fnuz": torch.float32,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int32": torch.int32,
    "int64": torch.int64,
}
_POISON_VIEW = {
    torch.float64: ("float64", torch.int64),
    torch.float32: ("float32", torch.int32),
    torch.float16: ("float16", torch.int16),
    torch.bfloat16: ("bfloat16", torch.int16),
}


# ------------------------------------------------------------------------------------------ conversions
def to_torch(a: np.ndarray, device: str | None = None) -> torch.Tensor:
    """NumPy (incl. ml_dtypes bf16/fp8) -> torch on the device, same bits.  Never shares memory with ``a`` (a
    torch CPU tensor of the interpreter is a copy), so a kernel cannot write into the caller's array."""
    device = device or DEVICE
    name = a.dtype.name
    if name == "float8_e4m3fnuz":
        # AMD's fp8 (bias 8) has no NVIDIA type: widen to bf16 (exact), which the kernels load like fp8
        import ml_dtypes

        return to_torch(np.ascontiguousarray(a).astype(ml_dtypes.bfloat16), device)
    host = np.ascontiguousarray(a)
    view = {"bfloat16": (np.uint16, torch.bfloat16), "float8_e4m3fn": (np.uint8, torch.float8_e4m3fn)}.get(name)
    if str(device) == "cpu":
        host = host.copy()  # a CPU tensor would share the array's memory: the interpreter's kernels write a copy
    with warnings.catch_warnings():  # a read-only array (the runner's views): only read, then copied to the device
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        t = torch.from_numpy(host.view(view[0]) if view else host)
    t = t.to(device)
    return t.view(view[1]) if view else t


def to_numpy(t: torch.Tensor) -> np.ndarray:
    import ml_dtypes

    t = t.detach().cpu()
    if t.dtype is torch.bfloat16:
        return t.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype is torch.float8_e4m3fn:  # torch has no NumPy bridge for fp8: the same bits as ml_dtypes' type
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
    return t.numpy()


def _fnuz_output(dtype: DType, fp8_format: str) -> bool:
    """O is stored as AMD's fnuz fp8 (:func:`ckfmha.inputs.output_dtype`, which also rejects an unknown
    ``fp8_format`` for fp8 dtypes)."""
    from ckfmha.inputs import output_dtype

    return output_dtype(dtype, fp8_format).name == "float8_e4m3fnuz"


def out_torch_dtype(dtype: DType, fp8_format: str = "ocp") -> torch.dtype:
    """The torch dtype of the O buffer a kernel of ``dtype`` stores into.  Plain fp8 in AMD's fnuz encoding has
    no NVIDIA type: the kernel stores float32 and :func:`stored_output` rounds it on the host."""
    if _fnuz_output(dtype, fp8_format):
        return torch.float32
    return TORCH_OUT[dtype]


def stored_output(o: torch.Tensor, dtype: DType, fp8_format: str = "ocp") -> np.ndarray:
    """O as the problem stores it: :func:`to_numpy` of the buffer, and for plain fp8 in the fnuz encoding the
    float32 buffer rounded to ``ml_dtypes.float8_e4m3fnuz`` (NumPy's ``astype``: round to nearest even, exactly as
    the validator rounds the reference, validator.same_precision_reference)."""
    out = to_numpy(o)
    if _fnuz_output(dtype, fp8_format):
        import ml_dtypes

        return out.astype(ml_dtypes.float8_e4m3fnuz)
    return out


def check_fp8_output(dtype: DType, q: torch.Tensor, o: torch.Tensor) -> None:
    """A plain-fp8 kernel's O buffer must match the input encoding: OCP inputs (device ``float8_e4m3fn``) store
    ``float8_e4m3fn``; fnuz inputs (widened to bf16 by :func:`to_torch`) store float32 that :func:`stored_output`
    rounds to fnuz on the host.  An fp8 buffer for fnuz inputs would store the wrong encoding: a
    PreconditionError."""
    if dtype is DType.FP8 and o.dtype is torch.float8_e4m3fn and q.dtype is not torch.float8_e4m3fn:
        raise PreconditionError(
            f"o: dtype {o.dtype} for fp8 inputs widened from fnuz ({q.dtype}): an fnuz output needs a float32 "
            "buffer (out_torch_dtype(dtype, 'fnuz')) rounded on the host (stored_output)"
        )


# ------------------------------------------------------------------------------------------ buffers
def poisoned(shape: Iterable[int], dtype: torch.dtype) -> torch.Tensor:
    """A device tensor filled with ckfmha.poison's marked NaN (the plain NaN for the float8 types, zeros for
    integers)."""
    from ckfmha.poison import POISON_BITS

    shape = tuple(shape)
    if not dtype.is_floating_point:
        return torch.zeros(shape, dtype=dtype, device=DEVICE)
    view = _POISON_VIEW.get(dtype)
    if view is None:
        return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
    bits = POISON_BITS[view[0]][1]  # every pattern is below the sign bit, so it fits the signed int view
    return torch.full(shape, bits, dtype=view[1], device=DEVICE).view(dtype)


def poisoned_output(spec: OutputSpec) -> torch.Tensor:
    """The device buffer of output ``spec``: its shape, the torch dtype of its NumPy dtype, poisoned."""
    return poisoned(spec.shape, _SPEC_TORCH[np.dtype(spec.dtype).name])


def spec_output(t: torch.Tensor, spec: OutputSpec) -> np.ndarray:
    """Device buffer ``t`` as the NumPy array ``spec`` declares: cut to the spec's shape where the buffer is an
    upper bound (the backward's ``dq_acc``; never an updated input, whose shape must be the spec's), and a float32
    buffer of an fnuz fp8 spec rounded on the host."""
    bigger = all(have >= want for have, want in zip(t.shape, spec.shape))
    if tuple(t.shape) != tuple(spec.shape) and t.dim() == len(spec.shape) and bigger and spec.updates is None:
        t = t[tuple(slice(0, n) for n in spec.shape)]
    out = to_numpy(t)
    want = np.dtype(spec.dtype)
    if want.name == "float8_e4m3fnuz" and out.dtype != want:
        out = out.astype(want)
    return out


def dummy_tensor(device: Any) -> torch.Tensor:
    """A one-element float32 tensor for a kernel argument that the launch's constexprs leave unread."""
    return torch.empty(1, dtype=torch.float32, device=device)


class DeviceTensors(dict):
    """One stage's device tensors (a dict name -> torch tensor): what the stage sets, and -- on first use -- the
    device copy of the NumPy input of that name.  The copies live in ``context.state("triton")``, keyed by the
    name and the array's identity (its base array, data address, shape, strides and dtype), so the stages of one
    run upload an input once, and an input the runner replaced (a new array) afresh.  ``hidden``: names never read
    from the inputs (the stage's own outputs)."""

    def __init__(self, inputs: Mapping[str, Any], context: RunContext, hidden: Iterable[str] = ()) -> None:
        super().__init__()
        self.inputs = inputs
        self.hidden = frozenset(hidden)
        self.cache: dict[str, tuple[tuple, Any, torch.Tensor]] = context.state("triton").setdefault("device", {})

    def _input(self, name: str) -> np.ndarray | None:
        a = None if name in self.hidden else self.inputs.get(name)
        return a if isinstance(a, np.ndarray) else None

    def __missing__(self, name: str) -> torch.Tensor:
        a = self._input(name)
        if a is None:
            raise KeyError(name)
        key, root = _identity(a)
        hit = self.cache.get(name)
        if hit is None or hit[0] != key or hit[1] is not root:
            hit = self.cache[name] = (key, root, to_torch(a))
        self[name] = hit[2]
        return hit[2]

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or (isinstance(name, str) and self._input(name) is not None)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def upload(self) -> DeviceTensors:
        """Upload every input this stage may read now (hand launches that must not copy inside a check of host
        syncs); returns itself."""
        for name in self.inputs:
            if name in self:
                self[name]
        return self

    def keep(self, name: str, array: np.ndarray, tensor: torch.Tensor) -> None:
        """Remember ``tensor`` as the device copy of ``array``, which a stage returns as input ``name`` of the
        stages after it (the runner passes that array or a view of it: no round trip through the host)."""
        key, root = _identity(array)
        self.cache[name] = (key, root, tensor)


def _identity(a: np.ndarray) -> tuple[tuple, Any]:
    """(key, base array) of ``a``: the same memory seen the same way gives the same key (a read-only view the
    runner makes of an array included); the base array is held so its id stays its own."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return (id(root), a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str), root


# ------------------------------------------------------------------------------------------ compiles
#: fresh compiles Triton reported in this process: count and seconds (a disk-cache hit is a load, not counted)
_COMPILED: dict[str, float] = {"count": 0, "seconds": 0.0}


def _listen_to_compiles() -> bool:
    """Chain a counter onto ``triton.knobs.compilation.listener`` (Triton >= 3.4); False where Triton has none."""
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        return False
    before = compilation.listener

    def listener(*, src, metadata, metadata_group, times, cache_hit, **rest) -> None:
        if not cache_hit:
            _COMPILED["count"] += 1
            _COMPILED["seconds"] += float(getattr(times, "total", 0) or 0) / 1e6  # CompileTimes are microseconds
        if before is not None:
            before(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit, **rest)

    compilation.listener = listener
    return True


#: whether compiles are counted (Triton's listener exists); without it every stage reports 0 compile seconds
COMPILES_COUNTED = _listen_to_compiles()


def compile_mark() -> tuple[int, float]:
    return (int(_COMPILED["count"]), _COMPILED["seconds"])


def compiled_since(mark: tuple[int, float]) -> tuple[int, float]:
    """(fresh compiles, their seconds) since ``mark`` (:func:`compile_mark`) in this process."""
    return (int(_COMPILED["count"]) - mark[0], _COMPILED["seconds"] - mark[1])


# ------------------------------------------------------------------------------------------ launches
def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(launch: Callable[[], None], timing: bool) -> float | None:
    """Run ``launch``; with ``timing`` its device milliseconds (wall time where the interpreter runs it)."""
    if not timing:
        launch()
        return None
    if DEVICE == "cpu":  # the interpreter runs synchronously on the host
        t0 = time.perf_counter()
        launch()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


# NUM_STAGES that fit shared memory, by kernel and the rest of its compile-time arguments (launch_fitting_stages)
_FITTING_STAGES: dict[tuple, int] = {}


def launch_fitting_stages(kern, grid, args: tuple, meta: dict, num_warps: int) -> None:
    """Launch with ``meta["NUM_STAGES"]``, or fewer where the compiled kernel needs more shared memory than the
    device has (Triton's OutOfResources; the host estimates of the launchers see only the K/V tiles, not the
    bias tiles or the compiler's own buffers).  The stage count that fits is remembered per kernel and compile-time
    arguments, so the retry happens once per process.  One stage that does not fit re-raises Triton's error."""
    fixed = sorted((name, repr(value)) for name, value in meta.items() if name != "NUM_STAGES")
    key = (id(kern), num_warps, *fixed)
    stages = min(_FITTING_STAGES.get(key, meta["NUM_STAGES"]), meta["NUM_STAGES"])
    while True:
        try:
            kern[grid](*args, **{**meta, "NUM_STAGES": stages}, num_warps=num_warps, num_stages=1)
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
            continue
        _FITTING_STAGES[key] = stages
        return


# ------------------------------------------------------------------------------------------ arguments
def seq_strides(t: torch.Tensor, layout: Layout) -> tuple[int, int, int]:
    """(batch, head, seq) strides of a 4-D tensor stored in ``layout``; the last dim must be contiguous (an empty
    tensor -- no keys: CK's smoke tests run ``-s_k=0`` -- has no elements to address, whatever its strides)."""
    if t.numel() and t.stride(-1) != 1:
        raise PreconditionError("the head dim of every tensor must be contiguous")
    if layout is Layout.BHSD:
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), t.stride(2), t.stride(1)


def required(t: Mapping[str, torch.Tensor], name: str, reader: str) -> torch.Tensor:
    """``t[name]``, which ``reader`` reads: a stage's tensors without it are a bug of its inputs, not a skip."""
    tensor = t.get(name)
    if tensor is None:
        raise ValueError(f"tensors: {name!r} is missing; {reader} reads it")
    return tensor


def mask_args(p: Problem) -> tuple[int, int, int, int, int, int]:
    """(mask_kind, left, right, y, x, alibi_mode) runtime arguments.

    mask_kind 1 / 2 is a top-left / bottom-right window ``(left, right)`` the kernel turns into coordinates per
    sequence. A ``g:y,x`` mask is sent as what CK's kernels make of it (MaskSpec.kernel_window: a bottom-right
    window left = y, right = x), so the kernel's raw-coordinate kind 3 is never launched."""
    from ckfmha.masking import MaskKind

    m = p.mask
    # no mask: ALiBi bottom-right; generic masks never come with ALiBi (the problem rejects it): any value will do
    alibi = {"vertical": 0, "top_left": 1, "bottom_right": 2}.get(m.alibi_mode(), 0)
    if m.kind is MaskKind.NONE:
        return 0, m.left, m.right, 0, 0, alibi
    left, right, top_left = m.kernel_window()
    return (1 if top_left else 2), left, right, 0, 0, alibi


def dropout_args(p: Problem) -> tuple[int, int, int, float]:
    """The dropout words every launcher hands its kernel -- (seed, offset, keep threshold ``p_undrop_u8``,
    rescale 1/(1-p)) -- through the ``triton.dropout`` fault hook (docs/faults.md); ``p_undrop_u8`` is this
    module's own binding of ckfmha.rng's (benchmarks/parity_torch.py swaps it to inject its dropout fault)."""
    from ckfmha.faults import perturb

    return perturb(
        "triton.dropout",
        (
            p.drop_seed & ((1 << 64) - 1),
            p.drop_offset & ((1 << 64) - 1),
            p_undrop_u8(p.p_drop) if p.p_drop > 0 else 255,
            1.0 / (1.0 - p.p_drop),
        ),
    )


def philox_words(seed: int, offset: int) -> tuple[int, int, int, int]:
    """(seed_lo, seed_hi, offset_lo, offset_hi): the 64-bit Philox seed and offset of :func:`dropout_args` as the
    32-bit halves the kernels take."""
    return seed & 0xFFFFFFFF, seed >> 32, offset & 0xFFFFFFFF, offset >> 32


def check_preconditions(c: KernelConfig, p: Problem, role: StageRole | None = None) -> None:
    """The checks of a real kernel launch, by the dispatcher's rules (:func:`ckfmha.rules.misfit`: family, dtype,
    mode, head dims, features, sequence padding incl. group mode and pad 8): a :class:`PreconditionError` with the
    rule's words. ``role``: the stage the kernel runs in; a kernel's family plays exactly one role
    (:data:`ckfmha.plan.FAMILY_ROLE`), which is the one checked when no role is given.  Then the lengths the
    forward kernel would not honour (:func:`~ckfmha.backends.triton.capability.unhonoured_lengths`: ``q_eff_lens``,
    group-mode ``s_qpad``)."""
    m = misfit(p, FAMILY_ROLE[c.family] if role is None else role, c)
    if m is not None:
        raise PreconditionError(m.message(c.kernel_id))
    why = unhonoured_lengths(c.family, p)
    if why is not None:
        raise PreconditionError(f"{c.kernel_id}: {why}")
