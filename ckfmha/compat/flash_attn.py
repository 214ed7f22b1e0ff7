"""A ``flash_attn_2_cuda``-compatible module backed by ckfmha: FlashAttention's Python layer
(``flash_attn/flash_attn_interface.py``) and its tests run unchanged, every call becomes a ckfmha
:class:`~ckfmha.problem.Problem` that the dispatcher plans and a ckfmha backend runs (docs/flash_attn.md).

Opt in with :func:`install` (or pytest's ``--ckfmha-flash-attn-compat``) *before* ``flash_attn`` is imported:
``flash_attn_interface`` does ``import flash_attn_2_cuda as flash_attn_gpu`` at import time.

| entry point | FA source (signature and semantics) | ckfmha problem | CK api FA calls |
|---|---|---|---|
| :func:`fwd` | csrc/flash_attn_ck/mha_fwd.cpp:169-372 | ``fwd``, batch mode, bshd | ``fmha_fwd`` |
| :func:`varlen_fwd` | mha_varlen_fwd.cpp:324-611 | ``fwd``, group mode; with ``block_table`` ``fwd_pagedkv`` group mode | ``fmha_fwd``; paged: ``fmha_fwd_splitkv`` (heuristic splits) |
| :func:`bwd` | mha_bwd.cpp:203-441 | ``bwd`` (dot_do_o, dq_dk_dv, convert_dq), batch mode | ``fmha_bwd`` |
| :func:`varlen_bwd` | mha_varlen_bwd.cpp:211-470 | ``bwd``, group mode | ``fmha_bwd`` |
| :func:`fwd_kvcache` | mha_fwd_kvcache.cpp:275-584 | ``fwd_appendkv`` with new keys or RoPE, else ``fwd_splitkv`` (``num_splits > 1`` or ``cache_batch_idx``), ``fwd_pagedkv`` (paged) or ``fwd`` with per-batch ``kv_eff_lens`` | ``fmha_fwd_appendkv`` then ``fmha_fwd_splitkv`` (always split-KV, even with one split: mha_fwd_kvcache.cpp:524) |

Semantics (the host rules are :mod:`ckfmha.compat.fa_rules`, with their FA lines):

| what | rule |
|---|---|
| masks | FA's windows become CK's bottom-right ``b:<left>,<right>`` (causal ``b:<left>,0``, none ``0``) exactly as FA's C++ decodes them (:func:`~ckfmha.compat.fa_rules.fa_mask`) |
| ALiBi | ``alibi_slopes`` (nheads,) or (batch, nheads) fp32: bias ``alibi`` of rank 0 / 1 (mha_fwd.cpp:87-94); CK's ALiBi origin follows the mask (:meth:`ckfmha.masking.MaskSpec.alibi_mode`) |
| dropout | ``(seed, offset)`` from torch's generator as FA takes it (:func:`philox_seed_offset`): ``rng_state`` = ``[seed, offset]`` int64 (mha_fwd.cpp:283-295); the backward reuses a given ``rng_state``, else draws (mha_bwd.cpp:383-393) |
| ``S_dmask`` | with ``return_softmax`` (which needs ``p_dropout > 0``, mha_fwd.cpp:276): uint8 (b, h, sq, sk) / varlen (h, total_q, max_seqlen_k), the random values of ckfmha's model of CK's Philox stream (:func:`ckfmha.rng.dropout_randval`), which the kernels keep where ``randval <= floor(255 (1 - p))``; elements outside a sequence are 0 |
| ``softmax_lse`` | always computed (``has_lse = true``, mha_fwd.cpp:267); (b, h, sq), varlen (h, total_q); ``seqlen_k == 0``: ``out`` 0, ``lse`` +inf (mha_fwd.cpp:360-364) |
| backward outputs | ``dq``/``dk``/``dv`` written in place into the given tensors (else new ones); GQA's per-q-head dK/dV summed over each K/V head's group (mha_bwd.cpp:435-438, ckfmha's host reduction); ``softmax_d`` (b, h, sq) float32, varlen written with the LSE's strides (h, total_q) into a (b, h, max_seqlen_q) buffer (mha_varlen_bwd.cpp:101-102) |
| ``deterministic`` | the problem's ``deterministic`` (CK's deterministic dq_dk_dv + convert_dq kernels) |
| KV cache | caches updated in place (append at ``cache_seqlens[b]``), RoPE ``interleaved`` / ``half_rotated`` (mha_fwd_kvcache.cpp:15-17) on the new keys and on ``q`` (written back into ``q``, as CK's append kernel rotates Q in place); ``cache_batch_idx`` picks cache rows; paged caches through ``block_table``; a head size not a multiple of 8 zero-padded (mha_fwd_kvcache.cpp:379-388) |
| ``num_splits`` | the KV-cache call keeps ``num_splits >= 1`` and asks FA's heuristic for 0 (which always answers 1); the varlen forward always asks the heuristic; the plan is split-KV with exactly that many splits, as FA launches it |

Backends: CPU tensors run on ckfmha's ``cpu`` backend; CUDA tensors on the configured one (:func:`configure`,
``auto``: hip, then triton).  Tensors go to NumPy and back (the backends take NumPy inputs), so the same code runs
on every backend.  Every call appends a :class:`~ckfmha.compat.calllog.CallRecord` to this process's log
(:mod:`ckfmha.compat.calllog`: kernels per stage with their CK instance names).

Differences from FA's CK build that this module keeps on purpose: ``softcap``, ``leftpad_k`` and ``seqused_k`` are
ignored (FA's CK build ignores them too: mha_fwd.cpp:180, mha_varlen_fwd.cpp:331-332, mha_fwd_kvcache.cpp:282);
``gen_`` is ignored (FA's Python passes None); ``softmax_scale == 0`` means ``1/sqrt(d)`` (a ckfmha Problem's
``scale = 0``), not a zero scale.
"""

from __future__ import annotations

import functools
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckfmha.compat import calllog
from ckfmha.compat import fa_rules as rules
from ckfmha.compat.fa_rules import FlashAttnArgError

MODULE_NAME = "flash_attn_2_cuda"
ENTRY_POINTS = ("fwd", "varlen_fwd", "bwd", "varlen_bwd", "fwd_kvcache")


@dataclass
class CompatConfig:
    """What :func:`configure` sets: ``backend`` for CUDA tensors (``auto``: :func:`ckfmha.backends.auto_backend_name`;
    CPU tensors always run on ``cpu``), the kernel space (``arch``: None = ckfmha's default arch; ``receipt``,
    ``mask_mode``) and ``num_cus`` (the units FA's split heuristic sizes for; None = the arch data's)."""

    backend: str = "auto"
    arch: str | None = None
    receipt: int | str = 0
    mask_mode: str = "simplified"
    num_cus: int | None = None


CONFIG = CompatConfig()


def configure(**settings: Any) -> CompatConfig:
    """Set fields of :data:`CONFIG` (a TypeError names an unknown one); returns it."""
    for k, v in settings.items():
        if not hasattr(CONFIG, k):
            raise TypeError(f"configure: unknown setting {k!r}; known: backend, arch, receipt, mask_mode, num_cus")
        if v is not None or k in ("arch", "num_cus"):
            setattr(CONFIG, k, v)
    return CONFIG


def install(backend: str | None = None, arch: str | None = None, name: str = MODULE_NAME) -> types.ModuleType:
    """Register this module as ``sys.modules[name]`` (``flash_attn_2_cuda``) -- the opt-in -- after
    :func:`configure` (``backend``, ``arch`` when given).  Import ``flash_attn`` afterwards."""
    configure(**{k: v for k, v in (("backend", backend), ("arch", arch)) if v is not None})
    module = sys.modules[__name__]
    sys.modules[name] = module
    return module


def uninstall(name: str = MODULE_NAME) -> None:
    """Remove the registration if it is this module."""
    if sys.modules.get(name) is sys.modules[__name__]:
        del sys.modules[name]


# ----------------------------------------------------------------------------------------------- torch <-> numpy
def _torch():
    import torch

    return torch


def _dtype_token(t) -> str:
    torch = _torch()
    if t.dtype == torch.float16:
        return "fp16"
    if t.dtype == torch.bfloat16:
        return "bf16"
    raise FlashAttnArgError(f"q.dtype: {t.dtype} is not supported (FlashAttention only supports fp16 and bf16)")


def to_numpy(t) -> np.ndarray:
    """A torch tensor as a NumPy array of the same bits (bf16 as ``ml_dtypes.bfloat16``), on the host."""
    torch = _torch()
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(a: np.ndarray, like):
    """A NumPy array as a torch tensor of ``like``'s dtype on ``like``'s device (the same bits for bf16)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if like.dtype == torch.bfloat16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a).to(like.dtype)
    return t.to(like.device)


def _check_same_dtype(ref, **tensors) -> None:
    for name, t in tensors.items():
        if t is not None and t.dtype != ref.dtype:
            raise FlashAttnArgError(f"{name}.dtype: {t.dtype} differs from q's {ref.dtype} (must have the same dtype)")


def _check_shape(name: str, t, shape: tuple[int, ...]) -> None:
    if tuple(t.shape) != tuple(shape):
        raise FlashAttnArgError(f"{name}: shape {tuple(t.shape)} must be {tuple(shape)}")


# ----------------------------------------------------------------------------------------------- rng
_CPU_OFFSETS: dict[int, int] = {}


def philox_seed_offset(device, increment: int) -> tuple[int, int]:
    """``(seed, offset)`` for a dropout call on ``device`` and advance the generator as FA does
    (``gen->philox_cuda_state(counter_offset)``, mha_fwd.cpp:288-294): CUDA/ROCm tensors use the device's default
    generator (``initial_seed()``, ``get_offset()``, offset advanced by :func:`~ckfmha.compat.fa_rules.
    philox_increment`); CPU tensors, whose generator is no Philox generator, use ``torch.initial_seed()`` and a
    per-seed offset counter that advances the same way (reset by a new ``torch.manual_seed`` value)."""
    torch = _torch()
    step = rules.philox_increment(increment)
    if getattr(device, "type", "cpu") != "cpu":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        gen = torch.cuda.default_generators[idx]
        seed, offset = int(gen.initial_seed()), int(gen.get_offset())
        gen.set_offset(offset + step)
        return seed, offset
    seed = int(torch.initial_seed())
    offset = _CPU_OFFSETS.get(seed, 0)
    _CPU_OFFSETS.clear()
    _CPU_OFFSETS[seed] = offset + step
    return seed, offset


def _u64_to_i64(x: int) -> int:
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def _rng_state(device, seed: int, offset: int):
    torch = _torch()
    return torch.tensor([_u64_to_i64(seed), _u64_to_i64(offset)], dtype=torch.int64, device=device)


def _seed_offset_of(rng_state) -> tuple[int, int]:
    s, o = (int(x) for x in rng_state.detach().cpu().tolist()[:2])
    return s & ((1 << 64) - 1), o & ((1 << 64) - 1)


# ----------------------------------------------------------------------------------------------- planning + running
def _backend_for(t) -> str:
    if t.device.type == "cpu":
        return "cpu"
    if CONFIG.backend != "auto":
        return CONFIG.backend
    from ckfmha.backends import auto_backend_name

    return auto_backend_name()


def _arch() -> str:
    if CONFIG.arch is not None:
        return CONFIG.arch
    from ckfmha.archs import default_arch

    return default_arch()


def _num_cus() -> int:
    if CONFIG.num_cus is not None:
        return CONFIG.num_cus
    from ckfmha.archs import load_arch_spec

    return int(load_arch_spec(_arch()).num_cus or 1)


_BUILT: dict[str, dict] = {}  # backend -> kernel id -> built kernel: a process builds each kernel once


@functools.lru_cache(maxsize=8)
def _dispatcher(backend: str, arch: str, receipt: int | str, mask_mode: str):
    """One dispatcher per backend and kernel space (its candidate buckets are reused across calls)."""
    from ckfmha.runner import dispatcher_for

    return dispatcher_for(backend, arch, receipt=receipt, mask_mode=mask_mode)


def _split_plan(disp, problem, num_splits: int, with_append: bool):
    """FA's split-KV launch: ``[appendkv] -> splitkv -> combine`` with exactly ``num_splits`` splits, each stage
    the dispatcher's best candidate (``Dispatcher.ranked_candidates``); None when a stage has none."""
    from ckfmha.family_records import PAIRED_ROLE, stage_outputs
    from ckfmha.plan import Launch, Plan, Stage, StageRole

    roles = ([StageRole.APPENDKV] if with_append else []) + [StageRole.SPLITKV, StageRole.COMBINE]
    chosen: dict = {}
    stages = []
    for role in roles:
        paired_role = PAIRED_ROLE.get(role)
        cands = disp.ranked_candidates(problem, role, paired=chosen.get(paired_role) if paired_role else None)
        if not cands:
            return None
        c = chosen[role] = cands[0]
        n = num_splits if role in (StageRole.SPLITKV, StageRole.COMBINE) else None
        stages.append(Stage(role, c, Launch(num_splits=n), stage_outputs(problem, role, c, n)))
    return Plan(problem, tuple(stages))


def _inputs(problem, given: dict[str, np.ndarray], free: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The problem's inputs (the names and layouts of :func:`ckfmha.inputs.make_inputs`): ``given``'s arrays plus
    group mode's ``seqstart_q`` / ``seqstart_k`` / ``seqlen_k`` (int32, derived from the problem as make_inputs
    does).  ``q`` / ``do`` and contiguous ``k`` / ``v`` must have ckfmha's shapes (:func:`ckfmha.inputs.q_shape`,
    :func:`ckfmha.inputs.kv_shapes`) unless named in ``free`` (cache rows picked by ``cache_batch_idx``); a
    mismatch is an error naming the input.  No random tensor is drawn: the call's own tensors are the inputs."""
    from ckfmha.inputs import kv_shapes, q_shape

    p = problem
    out = {n: np.ascontiguousarray(a) for n, a in given.items()}
    if p.mode.value == "group":
        out["seqstart_q"] = np.array(p.seqstart_q, dtype=np.int32)
        out["seqstart_k"] = np.array(p.seqstart_k, dtype=np.int32)
        out["seqlen_k"] = np.array(p.seqlens_k, dtype=np.int32)
    expected = {"q": q_shape(p), "do": q_shape(p)}
    if not p.page_block_size:
        expected["k"], expected["v"] = kv_shapes(p)
    for name, shape in expected.items():
        if name in out and name not in free and tuple(out[name].shape) != tuple(shape):
            raise FlashAttnArgError(f"{name}: shape {tuple(out[name].shape)}, the ckfmha problem expects {shape}")
    return out


def _run(entry: str, problem, inputs: dict, backend: str, *, features: dict, fa_path: str, split: int | None = None,
         with_append: bool = False) -> dict[str, np.ndarray]:  # fmt: skip
    """Plan (FA's split-KV launch when ``split`` is given, else the dispatcher's plan), run, log; the outputs."""
    from ckfmha.naming import ck_instance_name
    from ckfmha.runner import execute, prepare_tensors

    arch = _arch()
    disp = _dispatcher(backend, arch, CONFIG.receipt, CONFIG.mask_mode)
    plan, note = None, ""
    if split is not None:
        plan = _split_plan(disp, problem, split, with_append)
        note = f"FA's split-KV launch with num_splits={split}"
        if plan is None:
            note = f"no split-KV kernel for FA's num_splits={split}: the dispatcher's plan"
    if plan is None:
        plan = disp.select(problem)
    tensors, written = prepare_tensors(problem, plan, inputs)
    backend_impl = disp.backend
    assert backend_impl is not None  # dispatcher_for always binds a backend
    execute(backend_impl, plan, tensors, built=_BUILT.setdefault(backend, {}))
    stages = []
    for st in plan.stages:
        try:
            ck = ck_instance_name(st.kernel)
        except Exception as e:  # noqa: BLE001 - a kernel CK's naming has no name for (a Triton-only tile) is logged
            ck = f"(no CK name: {type(e).__name__})"
        stages.append(
            {"role": st.role.value, "kernel_id": st.kernel.kernel_id, "ck_name": ck, "num_splits": st.launch.num_splits}
        )
    calllog.record(
        calllog.CallRecord(entry, backend, arch, str(problem), problem.family.value, features, fa_path, stages, note)
    )
    return {n: tensors[n] for n in written if n in tensors}


def _features(problem, **extra: Any) -> dict[str, Any]:
    p = problem
    padded = (p.mode.value == "group" and len(set(p.seqlens_q_list) | set(p.seqlens_k_list)) > 1) or (
        p.kv_eff_lens is not None and any(n != p.seqlen_k for n in p.kv_eff_lens)
    )
    return {
        "mode": p.mode.value,
        "mask": p.mask.to_ck(),
        "alibi": p.bias.value == "alibi",
        "dropout": p.p_drop > 0,
        "paged_kv": bool(p.page_block_size),
        "padding": bool(padded),
        "gqa": p.nhead_q != p.nhead_k,
        "deterministic": p.deterministic,
        "hdim": p.hdim_q,
        "dtype": p.dtype.value,
        **extra,
    }


def _problem(**fields: Any):
    from ckfmha.problem import Problem, ProblemError

    try:
        return Problem(**fields)
    except ProblemError as e:
        raise FlashAttnArgError(f"the call is no ckfmha problem: {e}") from None


def _alibi(alibi, b: int, h: int) -> tuple[dict, dict]:
    """(Problem fields, inputs) of FA's ``alibi_slopes`` (mha_fwd.cpp:87-94)."""
    if alibi is None:
        return {}, {}
    if alibi.stride(-1) != 1:
        raise FlashAttnArgError("alibi_slopes: must have a contiguous last dimension")
    if tuple(alibi.shape) not in ((h,), (b, h)):
        raise FlashAttnArgError(f"alibi_slopes: shape {tuple(alibi.shape)} must be ({h},) or ({b}, {h})")
    a = to_numpy(alibi.float()).astype(np.float32)
    rank = 1 if a.ndim == 2 else 0
    return {"bias": "alibi", "bias_rank": rank}, {"alibi_slopes": a.reshape(b if rank else 1, h)}


def _dropout_fields(p_dropout: float, seed: int, offset: int) -> dict:
    if p_dropout <= 0:
        return {}
    return {"p_drop": float(p_dropout), "drop_seed": seed, "drop_offset": offset}


def _randval(seed: int, offset: int, nhead: int, rows_cols: list[tuple[int, int, int]], shape, like):
    """S_dmask: per batch ``b`` with (row offset, rows, cols), the uint8 random values of ckfmha's Philox model."""
    from ckfmha.rng import dropout_randval

    out = np.zeros(shape, dtype=np.uint8)
    heads = np.arange(nhead)
    for b, (r0, sq, sk) in enumerate(rows_cols):
        if sq and sk:
            rv = dropout_randval(seed, offset, b, heads, nhead, np.arange(sq), np.arange(sk))
            if len(shape) == 4:
                out[b, :, :sq, :sk] = rv
            else:
                out[:, r0 : r0 + sq, :sk] = rv
    torch = _torch()
    return torch.from_numpy(out).to(like.device)


def _scale(softmax_scale: float) -> float:
    return float(softmax_scale) if softmax_scale > 0 else 0.0


def _out_tensor(q, out_, shape: tuple[int, ...]):
    """The given ``out_`` (checked: dtype, shape) or a new one like ``q`` (mha_fwd.cpp:249-261)."""
    if out_ is None:
        return _torch().empty_like(q)
    _check_same_dtype(q, out=out_)
    if out_.stride(-1) != 1:
        raise FlashAttnArgError("out: must have a contiguous last dimension")
    _check_shape("out", out_, shape)
    return out_


def _dropout_state(q, p_dropout: float, b: int, h: int, return_softmax: bool):
    """``(seed, offset, rng_state)`` of a forward call (mha_fwd.cpp:274-295): drawn from the generator only with
    dropout; ``return_softmax`` without dropout is refused (:276)."""
    torch = _torch()
    if return_softmax and not p_dropout > 0:
        raise FlashAttnArgError("return_dropout_randval: True requires p_dropout > 0")
    if not p_dropout > 0:
        return 0, 0, torch.empty(2, dtype=torch.int64, device=q.device)
    seed, offset = philox_seed_offset(q.device, rules.counter_offset(b, h, rules.warp_size(_arch())))
    return seed, offset, _rng_state(q.device, seed, offset)


# ----------------------------------------------------------------------------------------------- entry points
def fwd(q, k, v, out_, alibi_slopes_, p_dropout, softmax_scale, is_causal, window_size_left, window_size_right,
        softcap, return_softmax, gen_):  # fmt: skip
    """``mha_fwd`` (FA:csrc/flash_attn_ck/mha_fwd.cpp:169-372): returns ``[out, softmax_lse, S_dmask, rng_state]``."""
    torch = _torch()
    dt = _dtype_token(q)
    _check_same_dtype(q, key=k, value=v)
    b, sq0, h0, d = (int(x) for x in q.shape)
    sk, hk = int(k.shape[1]), int(k.shape[2])
    rules.check_sizes(b, d, h0, hk)
    mask = rules.fa_mask(is_causal, window_size_left, window_size_right, sq0, sk, has_alibi=alibi_slopes_ is not None)
    swapped = rules.ngroups_swapped(
        sq0, h0, hk, mask.left, mask.right, d, has_alibi=alibi_slopes_ is not None, p_dropout=p_dropout
    )
    sq, h, qq = sq0, h0, q
    if swapped:  # mha_fwd.cpp:236-242
        sq, h = h0 // hk, hk
        qq = q.reshape(b, hk, sq, d).transpose(1, 2)
    _check_shape("k", k, (b, sk, hk, d))
    _check_shape("v", v, (b, sk, hk, d))
    out = _out_tensor(q, out_, (b, sq0, h0, d))
    out_view = out.reshape(b, hk, sq, d).transpose(1, 2) if swapped else out
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    seed, offset, rng_state = _dropout_state(q, p_dropout, b, h, return_softmax)
    p = torch.empty(0, dtype=q.dtype, device=q.device)
    if sk > 0:
        bias, extra = _alibi(alibi_slopes_, b, h)
        problem = _problem(
            family="fwd", dtype=dt, batch=b, nhead_q=h, nhead_k=hk, seqlen_q=sq, seqlen_k=sk, hdim_q=d,
            input_layout="bshd", output_layout="bshd", scale=_scale(softmax_scale), mask=mask.spec, lse=True,
            **bias, **_dropout_fields(p_dropout, seed, offset),
        )  # fmt: skip
        inputs = _inputs(problem, {"q": to_numpy(qq), "k": to_numpy(k), "v": to_numpy(v), **extra})
        res = _run("fwd", problem, inputs, _backend_for(q), features=_features(problem, ngroups_swapped=swapped),
                   fa_path="fmha_fwd")  # fmt: skip
        out_view.copy_(from_numpy(res["o"], q))
        lse.copy_(from_numpy(res["lse"], lse))
    else:  # mha_fwd.cpp:360-364
        out.zero_()
        lse.fill_(float("inf"))
    if return_softmax:
        p = _randval(seed, offset, h, [(0, sq, sk)] * b, (b, h, sq, sk), q)
    if swapped:
        lse = lse.reshape(b, hk * sq, 1)
    return [out, lse, p, rng_state]


def _lengths(cu) -> tuple[int, ...]:
    a = [int(x) for x in cu.detach().cpu().tolist()]
    return tuple(a[i + 1] - a[i] for i in range(len(a) - 1))


def _check_cu(name: str, cu, batch: int | None = None) -> None:
    torch = _torch()
    if cu.dtype != torch.int32:
        raise FlashAttnArgError(f"{name}.dtype: {cu.dtype} must be torch.int32")
    if batch is not None:
        _check_shape(name, cu, (batch + 1,))


def varlen_fwd(q, k, v, out_, cu_seqlens_q, cu_seqlens_k, seqused_k, leftpad_k_, block_table_, alibi_slopes_,
               max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
               window_size_right, softcap, return_softmax, gen_, num_splits):  # fmt: skip
    """``mha_varlen_fwd`` (FA:mha_varlen_fwd.cpp:324-611): ``[out, softmax_lse, S_dmask, rng_state]``;
    ``seqused_k``, ``leftpad_k_``, ``softcap``, ``gen_`` and ``num_splits`` are ignored as there (:331-332, 343,
    346, 477)."""
    torch = _torch()
    _dtype_token(q)
    _check_same_dtype(q, key=k, value=v)
    _check_cu("cu_seqlens_q", cu_seqlens_q)
    _check_cu("cu_seqlens_k", cu_seqlens_k)
    paged = block_table_ is not None
    b = int(cu_seqlens_q.numel()) - 1
    total_q, h, d = (int(x) for x in q.shape)
    hk = int(k.shape[2] if paged else k.shape[1])
    if paged:
        if block_table_.dtype != torch.int32:
            raise FlashAttnArgError(f"block_table.dtype: {block_table_.dtype} must be torch.int32")
        rules.check_paged(int(k.shape[1]), p_dropout=p_dropout)
    rules.check_sizes(b, d, h, hk)
    _check_cu("cu_seqlens_k", cu_seqlens_k, b)
    mask = rules.fa_mask(is_causal, window_size_left, window_size_right, int(max_seqlen_q), int(max_seqlen_k),
                         has_alibi=alibi_slopes_ is not None)  # fmt: skip
    out = _out_tensor(q, out_, (total_q, h, d))
    lse = torch.empty((h, total_q), dtype=torch.float32, device=q.device)
    if zero_tensors:  # mha_varlen_fwd.cpp:470-475
        out.zero_()
        lse.fill_(float("-inf"))
    splits = rules.check_num_splits(rules.override_num_splits(b, h, int(max_seqlen_q), d, 0.0, 0, _num_cus()))
    seed, offset, rng_state = _dropout_state(q, p_dropout, b, h, return_softmax)
    sqs, sks = _lengths(cu_seqlens_q), _lengths(cu_seqlens_k)
    if int(max_seqlen_k) > 0 and sum(sqs) > 0:
        fields = dict(mask=mask.spec, scale=_scale(softmax_scale), **_dropout_fields(p_dropout, seed, offset))
        o, lse_rows = _varlen_attention(q, k, v, block_table_, alibi_slopes_, sqs, sks, splits, fields)
        out[: sum(sqs)].copy_(from_numpy(o, q))
        lse[:, : sum(sqs)].copy_(from_numpy(lse_rows, lse))
    else:  # mha_varlen_fwd.cpp:604-608
        out.zero_()
        lse.fill_(float("inf"))
    p = torch.empty(0, dtype=q.dtype, device=q.device)
    if return_softmax:
        starts = np.concatenate([[0], np.cumsum(sqs)]).astype(int)
        p = _randval(seed, offset, h, [(int(starts[i]), sqs[i], sks[i]) for i in range(b)],
                     (h, total_q, int(max_seqlen_k)), q)  # fmt: skip
    return [out, lse, p, rng_state]


def _varlen_attention(q, k, v, block_table, alibi, sqs, sks, splits: int, fields: dict):
    """The varlen forward's ckfmha run: group-mode ``fwd`` (FA's ``fmha_fwd``), or with a block table group-mode
    ``fwd_pagedkv`` planned as FA's ``fmha_fwd_splitkv`` launch with ``splits`` splits (mha_varlen_fwd.cpp:507-543).
    Returns (o (total_q, h, d), lse (h, total_q)) as NumPy arrays."""
    b, h, hk, d = len(sqs), int(q.shape[1]), int(k.shape[-2]), int(q.shape[2])
    bias, extra = _alibi(alibi, b, h)
    common = dict(
        dtype=_dtype_token(q), mode="group", batch=b, nhead_q=h, nhead_k=hk, seqlens_q=sqs, seqlens_k=sks, hdim_q=d,
        input_layout="bshd", output_layout="bshd", lse=True, **bias, **fields,
    )  # fmt: skip
    given = {"q": to_numpy(q)[None, : sum(sqs)], **extra}
    free: tuple[str, ...] = ()
    if block_table is not None:
        problem = _problem(family="fwd_pagedkv", page_block_size=int(k.shape[1]), **common)
        given.update(k_cache=to_numpy(k), v_cache=to_numpy(v), block_table=to_numpy(block_table),
                     cache_seqlens=np.asarray(sks, dtype=np.int32))  # fmt: skip
        free, split, path = ("k_cache", "v_cache", "block_table"), splits, "fmha_fwd_splitkv"
    else:
        problem = _problem(family="fwd", **common)
        given.update(k=to_numpy(k)[None, : sum(sks)], v=to_numpy(v)[None, : sum(sks)])
        split, path = None, "fmha_fwd"
    inputs = _inputs(problem, given, free)
    feats = _features(problem, num_splits=splits if split else 1)
    res = _run("varlen_fwd", problem, inputs, _backend_for(q), features=feats, fa_path=path, split=split)
    return res["o"][0], res["lse"][0]


def _grads(q, k, v, dq_, dk_, dv_, shapes):
    torch = _torch()
    outs = []
    for name, given, like, shape in (("dq", dq_, q, shapes[0]), ("dk", dk_, k, shapes[1]), ("dv", dv_, v, shapes[2])):
        if given is not None:
            _check_same_dtype(q, **{name: given})
            if given.stride(-1) != 1:
                raise FlashAttnArgError(f"{name}: must have a contiguous last dimension")
            _check_shape(name, given, shape)
            outs.append(given)
        else:
            outs.append(torch.empty_like(like))
    return outs


def _bwd_seed(q, p_dropout, rng_state, b, h):
    if rng_state is not None:
        return _seed_offset_of(rng_state)
    if p_dropout > 0:  # mha_bwd.cpp:385-393
        return philox_seed_offset(q.device, rules.counter_offset(b, h, rules.warp_size(_arch())))
    return 0, 0


def bwd(dout, q, k, v, out, softmax_lse, dq_, dk_, dv_, alibi_slopes_, p_dropout, softmax_scale, is_causal,
        window_size_left, window_size_right, softcap, deterministic, gen_, rng_state):  # fmt: skip
    """``mha_bwd`` (FA:mha_bwd.cpp:203-441): ``[dq, dk, dv, softmax_d]``, dq/dk/dv written in place when given."""
    torch = _torch()
    dt = _dtype_token(q)
    _check_same_dtype(q, key=k, value=v, out=out, dout=dout)
    b, sq, h, d = (int(x) for x in q.shape)
    sk, hk = int(k.shape[1]), int(k.shape[2])
    rules.check_sizes(b, d, h, hk)
    mask = rules.fa_mask(is_causal, window_size_left, window_size_right, sq, sk,
                         has_alibi=alibi_slopes_ is not None, forward=False)  # fmt: skip
    for name, t, shape in (("k", k, (b, sk, hk, d)), ("v", v, (b, sk, hk, d)), ("out", out, (b, sq, h, d)),
                           ("dout", dout, (b, sq, h, d))):  # fmt: skip
        _check_shape(name, t, shape)
    dq, dk, dv = _grads(q, k, v, dq_, dk_, dv_, ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d)))
    softmax_d = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    seed, offset = _bwd_seed(q, p_dropout, rng_state, b, h)
    if sq > 0:
        bias, extra = _alibi(alibi_slopes_, b, h)
        problem = _problem(
            family="bwd", dtype=dt, batch=b, nhead_q=h, nhead_k=hk, seqlen_q=sq, seqlen_k=sk, hdim_q=d,
            input_layout="bshd", output_layout="bshd", scale=_scale(softmax_scale), mask=mask.spec,
            deterministic=bool(deterministic), **bias, **_dropout_fields(p_dropout, seed, offset),
        )  # fmt: skip
        given = {"q": to_numpy(q), "k": to_numpy(k), "v": to_numpy(v), "do": to_numpy(dout), **extra}
        inputs = _inputs(problem, given)
        inputs["o"] = to_numpy(out)
        inputs["lse"] = to_numpy(softmax_lse.float()).astype(np.float32).reshape(b, h, sq)
        res = _run("bwd", problem, inputs, _backend_for(q), features=_features(problem), fa_path="fmha_bwd")
        dq.copy_(from_numpy(res["dq"], q))
        dk.copy_(from_numpy(res["dk"], k))
        dv.copy_(from_numpy(res["dv"], v))
        softmax_d.copy_(from_numpy(res["d"], softmax_d))
    else:  # mha_bwd.cpp:427-432
        dk.zero_()
        dv.zero_()
        softmax_d.zero_()
    return [dq, dk, dv, softmax_d]


def varlen_bwd(dout, q, k, v, out, softmax_lse, dq_, dk_, dv_, cu_seqlens_q, cu_seqlens_k, alibi_slopes_,
               max_seqlen_q, max_seqlen_k, p_dropout, softmax_scale, zero_tensors, is_causal, window_size_left,
               window_size_right, softcap, deterministic, gen_, rng_state):  # fmt: skip
    """``mha_varlen_bwd`` (FA:mha_varlen_bwd.cpp:211-470): ``[dq, dk, dv, softmax_d]``; ``softmax_d`` is
    (b, h, max_seqlen_q) whose first ``h * total_q`` elements hold D with the LSE's strides (:101-102)."""
    torch = _torch()
    dt = _dtype_token(q)
    _check_same_dtype(q, key=k, value=v, out=out, dout=dout)
    _check_cu("cu_seqlens_q", cu_seqlens_q)
    _check_cu("cu_seqlens_k", cu_seqlens_k)
    b = int(cu_seqlens_q.numel()) - 1
    total_q, h, d = (int(x) for x in q.shape)
    total_k, hk = int(k.shape[0]), int(k.shape[1])
    rules.check_sizes(b, d, h, hk)
    mask = rules.fa_mask(is_causal, window_size_left, window_size_right, int(max_seqlen_q), int(max_seqlen_k),
                         has_alibi=alibi_slopes_ is not None, forward=False)  # fmt: skip
    dq, dk, dv = _grads(q, k, v, dq_, dk_, dv_, ((total_q, h, d), (total_k, hk, d), (total_k, hk, d)))
    softmax_d = torch.empty((b, h, int(max_seqlen_q)), dtype=torch.float32, device=q.device)
    if zero_tensors:  # mha_varlen_bwd.cpp:394-399
        dq.zero_()
        dk.zero_()
        dv.zero_()
        softmax_d.zero_()
    seed, offset = _bwd_seed(q, p_dropout, rng_state, b, h)
    sqs, sks = _lengths(cu_seqlens_q), _lengths(cu_seqlens_k)
    if int(max_seqlen_q) > 0 and sum(sqs) > 0:
        bias, extra = _alibi(alibi_slopes_, b, h)
        problem = _problem(
            family="bwd", dtype=dt, mode="group", batch=b, nhead_q=h, nhead_k=hk, seqlens_q=sqs, seqlens_k=sks,
            hdim_q=d, input_layout="bshd", output_layout="bshd", scale=_scale(softmax_scale), mask=mask.spec,
            deterministic=bool(deterministic), **bias, **_dropout_fields(p_dropout, seed, offset),
        )  # fmt: skip
        nq, nk = sum(sqs), sum(sks)
        given = {"q": to_numpy(q)[None, :nq], "k": to_numpy(k)[None, :nk], "v": to_numpy(v)[None, :nk],
                 "do": to_numpy(dout)[None, :nq], **extra}  # fmt: skip
        inputs = _inputs(problem, given)
        inputs["o"] = to_numpy(out)[None, :nq]
        inputs["lse"] = to_numpy(softmax_lse.float()).astype(np.float32)[None, :, :nq]
        res = _run("varlen_bwd", problem, inputs, _backend_for(q), features=_features(problem), fa_path="fmha_bwd")
        dq[:nq].copy_(from_numpy(res["dq"][0], q))
        dk[:nk].copy_(from_numpy(res["dk"][0], k))
        dv[:nk].copy_(from_numpy(res["dv"][0], v))
        flat = softmax_d.view(-1)
        flat[: h * nq].copy_(from_numpy(res["d"][0], softmax_d).reshape(-1))
    else:
        dk.zero_()
        dv.zero_()
        softmax_d.zero_()
    return [dq, dk, dv, softmax_d]


def _pad_last(t, d8: int):
    """Zero-pad the head dim to ``d8`` (mha_fwd_kvcache.cpp:380-388)."""
    if t is None or int(t.shape[-1]) == d8:
        return t
    torch = _torch()
    return torch.nn.functional.pad(t, (0, d8 - int(t.shape[-1])))


@dataclass(frozen=True)
class _CacheCall:
    """The sizes of a KV-cache call after FA's checks (mha_fwd_kvcache.cpp:318-467)."""

    batch: int
    seqlen_q: int
    nheads: int
    head_size: int
    nheads_k: int
    page: int  # 0: contiguous caches
    seqlen_k: int  # the cache capacity (paged: max_num_blocks_per_seq * page_block_size)
    knew: int
    rotary_dim: int


def _cache_call(q, kcache, k_, v_, seqlens_k_, rotary_cos_, rotary_sin_, cache_batch_idx_, block_table_) -> _CacheCall:
    """FA's argument checks of ``mha_fwd_kvcache`` (mha_fwd_kvcache.cpp:308-467), in its order."""
    torch = _torch()
    paged = block_table_ is not None
    if paged:
        if cache_batch_idx_ is not None:
            raise FlashAttnArgError("cache_batch_idx: given with a block_table (Paged KVcache does not support it)")
        if block_table_.dtype != torch.int32:
            raise FlashAttnArgError(f"block_table.dtype: {block_table_.dtype} must be torch.int32")
    b, sq, h, d = (int(x) for x in q.shape)
    hk = int(kcache.shape[2])
    page = int(kcache.shape[1]) if paged else 0
    if paged:
        rules.check_paged(page)
    seqlen_k = int(block_table_.shape[1]) * page if paged else int(kcache.shape[1])
    if b < 1:
        raise FlashAttnArgError(f"batch_size: {b} must be positive")
    rules.check_head_size(d, multiple_of_8=False)
    rules.check_heads(h, hk)
    knew = int(k_.shape[1]) if k_ is not None else 0
    if k_ is not None:
        if v_ is None or seqlens_k_ is None:
            raise FlashAttnArgError("k: given without v or seqlens_k (a new key needs both)")
        _check_shape("k", k_, (b, knew, hk, d))
        _check_shape("v", v_, (b, knew, hk, d))
    if seqlens_k_ is not None:
        if seqlens_k_.dtype != torch.int32:
            raise FlashAttnArgError(f"seqlens_k.dtype: {seqlens_k_.dtype} must be torch.int32")
        _check_shape("seqlens_k", seqlens_k_, (b,))
    rotary_dim = 0
    if rotary_cos_ is not None:
        if k_ is None:
            raise FlashAttnArgError("rotary_cos: given without new keys (k) to append")
        rotary_dim = int(rotary_cos_.shape[1]) * 2
        if rotary_dim > d or rotary_dim % 16:
            raise FlashAttnArgError(f"rotary_dim: {rotary_dim} must be <= headdim {d} and divisible by 16")
        if int(rotary_cos_.shape[0]) < seqlen_k:
            raise FlashAttnArgError(f"rotary_cos: {int(rotary_cos_.shape[0])} rows < the KV cache's seqlen {seqlen_k}")
        if rotary_sin_ is None:
            raise FlashAttnArgError("rotary_sin: missing (rotary_cos is given)")
    return _CacheCall(b, sq, h, d, hk, page, seqlen_k, knew, rotary_dim)


def _cache_problem(c: _CacheCall, sq: int, h: int, d8: int, fields: dict, total: tuple, splits: int, batch_idx: bool,
                   rope: str):  # fmt: skip
    """The ckfmha problem of a KV-cache call (module table): ``fwd_appendkv`` with new keys or RoPE, else
    ``fwd_splitkv`` (``num_splits > 1`` or ``cache_batch_idx``), ``fwd_pagedkv`` (paged) or ``fwd``."""
    common = dict(
        dtype=fields.pop("dtype"), batch=c.batch, nhead_q=h, nhead_k=c.nheads_k, seqlen_q=sq, seqlen_k=c.seqlen_k,
        hdim_q=d8, input_layout="bshd", output_layout="bshd", lse=True, kv_eff_lens=total, page_block_size=c.page,
        cache_batch_idx=batch_idx, **fields,
    )  # fmt: skip
    if c.knew or c.rotary_dim:
        return _problem(family="fwd_appendkv", seqlen_knew=c.knew, rotary_dim=c.rotary_dim, rope=rope,
                        num_splits=splits, **common)  # fmt: skip
    if splits > 1 or batch_idx:
        return _problem(family="fwd_splitkv", num_splits=splits, **common)
    if c.page:
        return _problem(family="fwd_pagedkv", **common)
    common.pop("page_block_size")
    common.pop("cache_batch_idx")
    return _problem(family="fwd", **common)


def fwd_kvcache(q, kcache, vcache, k_, v_, seqlens_k_, rotary_cos_, rotary_sin_, cache_batch_idx_, leftpad_k_,
                block_table_, alibi_slopes_, out_, softmax_scale, is_causal, window_size_left, window_size_right,
                softcap, is_rotary_interleaved, num_splits):  # fmt: skip
    """``mha_fwd_kvcache`` (FA:mha_fwd_kvcache.cpp:275-584): ``[out, softmax_lse]``; the caches (and, with
    RoPE, ``q``) are updated in place."""
    torch = _torch()
    _check_same_dtype(q, kcache=kcache, vcache=vcache, k=k_, v=v_)
    fields: dict[str, Any] = {"dtype": _dtype_token(q), "scale": _scale(softmax_scale)}
    c = _cache_call(q, kcache, k_, v_, seqlens_k_, rotary_cos_, rotary_sin_, cache_batch_idx_, block_table_)
    has_alibi = alibi_slopes_ is not None
    mask = rules.fa_mask(is_causal, window_size_left, window_size_right, c.seqlen_q, c.seqlen_k, has_alibi=has_alibi,
                         clamp_first=False)  # fmt: skip
    raw_right = 0 if mask.causal else int(window_size_right)
    swapped = rules.ngroups_swapped(c.seqlen_q, c.nheads, c.nheads_k, int(window_size_left), raw_right,
                                    c.head_size, has_alibi=has_alibi)  # fmt: skip
    sq, h, qq = c.seqlen_q, c.nheads, q
    if swapped:  # mha_fwd_kvcache.cpp:358-364
        sq, h = c.nheads // c.nheads_k, c.nheads_k
        qq = q.reshape(c.batch, c.nheads_k, sq, c.head_size).transpose(1, 2)
    if c.knew and sq > c.seqlen_k:
        raise FlashAttnArgError(f"seqlen_q: {sq} exceeds the KV cache's seqlen {c.seqlen_k} (a new key is given)")
    out = _out_tensor(q, out_, (c.batch, c.seqlen_q, c.nheads, c.head_size))
    d8 = rules.round_multiple(c.head_size, 8)
    splits = rules.check_num_splits(rules.override_num_splits(c.batch, h, sq, d8, 0.0, int(num_splits), _num_cus()))
    cache = [int(x) for x in seqlens_k_.detach().cpu().tolist()] if seqlens_k_ is not None else [0] * c.batch
    total = tuple(n + c.knew for n in cache)  # mha_fwd_kvcache.cpp:517-522
    bias, extra = _alibi(alibi_slopes_, c.batch, h)
    rope = "none" if not c.rotary_dim else ("interleaved" if is_rotary_interleaved else "half_rotated")
    fields.update(mask=mask.spec, **bias)
    problem = _cache_problem(c, sq, h, d8, fields, total, splits, cache_batch_idx_ is not None, rope)
    append = bool(c.knew or c.rotary_dim)
    names = ("k_cache", "v_cache") if c.page else ("k", "v")
    given: dict[str, Any] = {"q": _pad_last(qq, d8), names[0]: _pad_last(kcache, d8), names[1]: _pad_last(vcache, d8),
                             "block_table": block_table_, "cache_batch_idx": cache_batch_idx_, "knew": _pad_last(k_, d8),
                             "vnew": _pad_last(v_, d8), "rotary_cos": rotary_cos_, "rotary_sin": rotary_sin_}  # fmt: skip
    given = {n: to_numpy(t) for n, t in given.items() if t is not None} | extra
    if c.page or append:  # the lengths before the append (paged without one: the lengths attended)
        given["cache_seqlens"] = np.asarray(cache if append else total, dtype=np.int32)
    inputs = _inputs(problem, given, names + ("block_table", "rotary_cos", "rotary_sin"))
    feats = _features(problem, num_splits=splits, appendkv=c.knew > 0, rope=rope,
                      cache_batch_idx=cache_batch_idx_ is not None, ngroups_swapped=swapped)  # fmt: skip
    feats["padding"] = True  # the per-batch seqlen_k device array (seqlen_k_ptr) is always passed
    path = ("fmha_fwd_appendkv+" if append else "") + "fmha_fwd_splitkv"
    res = _run("fwd_kvcache", problem, inputs, _backend_for(q), features=feats, fa_path=path, split=splits,
               with_append=append)  # fmt: skip
    out_view = out.reshape(c.batch, c.nheads_k, sq, c.head_size).transpose(1, 2) if swapped else out
    out_view.copy_(from_numpy(res["o"][..., : c.head_size], q))
    lse = from_numpy(res["lse"], torch.empty(0, dtype=torch.float32, device=q.device))
    if append:  # the caches were updated in place (and q rotated, mha_fwd_kvcache.cpp:488-515)
        kcache.copy_(from_numpy(res[names[0]][..., : c.head_size], kcache))
        vcache.copy_(from_numpy(res[names[1]][..., : c.head_size], vcache))
        if c.rotary_dim and "q" in res:
            qq.copy_(from_numpy(res["q"][..., : c.head_size], q))
    if swapped:
        lse = lse.reshape(c.batch, c.nheads_k * sq, 1)
    return [out, lse]


__all__ = [
    "CONFIG",
    "CompatConfig",
    "ENTRY_POINTS",
    "FlashAttnArgError",
    "MODULE_NAME",
    "bwd",
    "configure",
    "from_numpy",
    "fwd",
    "fwd_kvcache",
    "install",
    "philox_seed_offset",
    "to_numpy",
    "uninstall",
    "varlen_bwd",
    "varlen_fwd",
]
