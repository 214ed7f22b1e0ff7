"""PyTorch as an upstream: ``scaled_dot_product_attention`` with an explicit backend, or FlexAttention.

``TorchSide(backend).run(problem, seed) -> SideResult``.  What each backend can express, and how, is decided by
:func:`ckfmha.upstream.torch_express.express` (pure logic, documented there); this module only carries it out.
torch is imported lazily (CI has no torch): without torch, or without a GPU (unless ``device='cpu'`` is asked
for explicitly), the result is ``skipped`` with the reason.  Inputs are ckfmha's (``make_inputs(problem,
seed)``); outputs are judged by both rules of :mod:`ckfmha.upstream.judging` (CK's elementwise tolerance against
ckfmha's float32 reference, and the noise floor against the float64 truth, with the error ratio).  The noise floor
decides the verdict (:data:`VERDICT_RULE`): torch's kernels are not CK kernels and are not bound by CK's
elementwise tolerance -- measured on an H100, flash and cuDNN's correct bf16 GQA gradients miss it on a few
elements -- while the noise floor asks what FlashAttention's own tests ask (error against an exact reference at
most k times that of a same-precision reference).  The backward is autograd through the same call with CK's
``dO``.
"""

from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ckfmha.kernel import Bias, Mode
from ckfmha.problem import Problem
from ckfmha.upstream.reference_cache import inputs_and_reference
from ckfmha.upstream.result import SideResult, Verdict
from ckfmha.upstream.torch_express import Expression, express, parse_backend
from ckfmha.validator import Rule

#: the rule that decides this side's verdict (docs/parity.md)
VERDICT_RULE = Rule.NOISE_FLOOR


class TorchUnavailable(RuntimeError):
    """torch refused to run the call (e.g. "No available kernel"); the message holds torch's words."""


def gpu_status() -> tuple[bool, str]:
    """(True, device name) when torch sees a GPU, else (False, reason)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no GPU"
    return True, torch.cuda.get_device_name(0)


# ------------------------------------------------------------------------------------------ conversions
def to_torch(a: np.ndarray, device):
    import ml_dtypes
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(a.copy()).to(device)


def to_numpy(t, like: DTypeLike) -> np.ndarray:
    import ml_dtypes
    import torch

    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).astype(like)
    return t.numpy().astype(like)


def _torch_dtype(p: Problem):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[p.dtype.value]


# ------------------------------------------------------------------------------------------ units
def _units(p: Problem):
    """Yield ``(index, q_sel, k_sel)``: batch mode is one unit (all sequences share sq/sk), group mode one unit
    per sequence.  Selections index the (B, h, S, d) views."""
    if p.mode is Mode.GROUP:
        for b in range(p.batch):
            sq, sk = p.seqlens_q_list[b], p.seqlens_k_list[b]
            yield (
                b,
                (slice(0, 1), slice(p.seqstart_q[b], p.seqstart_q[b] + sq)),
                (slice(0, 1), slice(p.seqstart_k[b], p.seqstart_k[b] + sk)),
                sq,
                sk,
            )
    else:
        yield None, (slice(None), slice(0, p.seqlen_q)), (slice(None), slice(0, p.seqlen_k)), p.seqlen_q, p.seqlen_k


def _sel(x_hsd: np.ndarray, s) -> np.ndarray:
    return np.ascontiguousarray(x_hsd[s[0], :, s[1]])


def _additive(p: Problem, inputs: dict, b, sq: int, sk: int, sk_ext: int) -> np.ndarray | None:
    """float32 (Ba, Ha, sq, sk_ext): ALiBi term and the sink column (elementwise bias is added separately)."""
    from ckfmha.reference.core import alibi_bias

    parts: np.ndarray | None = None
    if p.bias is Bias.ALIBI:
        sl = np.asarray(inputs["alibi_slopes"], dtype=np.float32)
        rows = np.arange(sq)
        if b is not None:  # group: this sequence's slopes
            sl = sl[b if sl.shape[0] > 1 else 0][None]
        terms = np.stack([alibi_bias(s, p.mask.alibi_mode(), rows, sq, sk, np.float32) for s in sl])
        parts = np.zeros(terms.shape[:2] + (sq, sk_ext), np.float32)
        parts[..., :sk] = terms
    if p.sink:
        sink = np.asarray(inputs["sink"], dtype=np.float32).reshape(-1)
        if parts is None:
            parts = np.zeros((1, p.nhead_q, sq, sk_ext), np.float32)
        parts[..., sk] = sink[None, :, None]
    return parts


def _bias_unit(p: Problem, inputs: dict, b, q_sel, sq: int, sk: int) -> np.ndarray | None:
    if p.bias is not Bias.ELEMENTWISE:
        return None
    bias = inputs["bias"]
    if b is not None:
        return np.ascontiguousarray(bias[0:1, :, q_sel[1], :sk])
    return np.ascontiguousarray(bias[:, :, :sq, :sk])


# ------------------------------------------------------------------------------------------ one call
def _call(expr: Expression, p: Problem, q, k, v, bias_t, add_np, allowed: np.ndarray, sk: int, device, flex_fn):
    """One attention call on (B, h, s, d) tensors; returns (out, lse or None)."""
    import torch
    import torch.nn.functional as F

    dt = q.dtype
    scale = p.softmax_scale
    sk_ext = sk + (1 if expr.virtual_sink_key else 0)
    if expr.virtual_sink_key:
        z = lambda t: torch.zeros(t.shape[:2] + (1, t.shape[3]), dtype=t.dtype, device=t.device)  # noqa: E731
        k = torch.cat([k, z(k)], dim=2)
        v = torch.cat([v, z(v)], dim=2)
    g = p.nhead_q // p.nhead_k
    if expr.backend == "flex":
        return _flex_call(expr, p, q, k, v, bias_t, add_np, allowed, sk, sk_ext, device, flex_fn)
    if expr.gqa == "repeat_interleave":
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kw: dict = {"scale": scale}
    if expr.gqa == "enable_gqa":
        kw["enable_gqa"] = True
    if expr.mask == "is_causal":
        kw["is_causal"] = True
    elif expr.mask == "causal_lower_right":
        from torch.nn.attention.bias import causal_lower_right

        kw["attn_mask"] = causal_lower_right(q.shape[2], sk)
    elif expr.mask == "dense":
        if add_np is None and bias_t is None:
            am = np.ones((q.shape[2], sk_ext), bool)
            am[:, :sk] = allowed
            kw["attn_mask"] = torch.from_numpy(am).to(device)
        else:
            base = np.zeros((1, 1, q.shape[2], sk_ext), np.float32)
            base[..., :sk] = np.where(allowed, 0.0, -np.inf)
            m = base if add_np is None else base + add_np
            mt = torch.from_numpy(m).to(device=device, dtype=dt)
            if bias_t is not None:
                mt = mt + F.pad(bias_t, (0, sk_ext - sk))
            kw["attn_mask"] = mt
    backend = {
        "math": SDPBackend.MATH,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[expr.backend]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q, k, v, **kw)
        except RuntimeError as e:
            if "No available kernel" in str(e) or "No viable backend" in str(e):
                why = " | ".join(str(w.message).strip() for w in caught) or str(e)
                raise TorchUnavailable(f"torch:{expr.backend} declined: {why}") from None
            raise
    return out, None


def _flex_call(expr, p, q, k, v, bias_t, add_np, allowed, sk, sk_ext, device, flex_fn):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    sq = q.shape[2]
    cap = p.logits_soft_cap
    bias_f = None
    if bias_t is not None:
        bias_f = torch.nn.functional.pad(bias_t.float(), (0, sk_ext - sk))
        bsel, hsel = int(bias_f.shape[0] > 1), int(bias_f.shape[1] > 1)
    add_t = None
    if add_np is not None:
        add_t = torch.from_numpy(np.ascontiguousarray(add_np)).to(device)
        asel, ahsel = int(add_t.shape[0] > 1), int(add_t.shape[1] > 1)
    score_mod = None
    if cap > 0 or bias_f is not None or add_t is not None:

        def score_mod(score, b, h, qi, ki):
            s = score
            if cap > 0:
                s = cap * torch.tanh(s / cap)
            if bias_f is not None:
                s = s + bias_f[b * bsel, h * hsel, qi, ki]
            if add_t is not None:
                s = s + add_t[b * asel, h * ahsel, qi, ki]
            return s

    block_mask = None
    if expr.mask == "mask_mod":
        start, end = p.mask.key_range(sq, sk)
        st = torch.from_numpy(start).to(device)
        en = torch.from_numpy(end).to(device)
        sink_col = sk if expr.virtual_sink_key else -1

        def mask_mod(b, h, qi, ki):
            return ((ki >= st[qi]) & (ki < en[qi])) | (ki == sink_col)

        block_mask = create_block_mask(mask_mod, None, None, sq, sk_ext, device=device)
    out, lse = flex_fn(
        q,
        k,
        v,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=p.softmax_scale,
        enable_gqa=expr.gqa == "enable_gqa",
        return_lse=True,
    )
    return out, lse


# ------------------------------------------------------------------------------------------ the side
@dataclass
class _Backward:
    """A backward problem's ``dO`` and the gradients the units write into, in (B, h, S, d) views (``dbias`` in
    the bias's own shape, only when compared)."""

    do_hsd: np.ndarray
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dbias: np.ndarray | None


def torch_outputs(problem: Problem, inputs: dict, expr: Expression, device, flex_fn=None) -> dict[str, np.ndarray]:
    """Run the problem through torch as ``expr`` says; outputs in CK's shapes and dtypes."""

    from ckfmha.inputs import lse_shape, output_dtype, storage_dtype
    from ckfmha.reference.core import to_hsd

    p = problem
    dt = _torch_dtype(p)
    sdt = storage_dtype(p.dtype)
    q_hsd = to_hsd(inputs["q"], p.input_layout)
    k_hsd = to_hsd(inputs["k"], p.input_layout)
    v_hsd = to_hsd(inputs["v"], p.input_layout)
    bwd = p.is_backward
    o = np.zeros(q_hsd.shape[:3] + (p.hdim_v,), output_dtype(p.dtype))
    lse = np.full(lse_shape(p), -np.inf, np.float32)
    grads = None
    if bwd:
        grads = _Backward(
            do_hsd=to_hsd(inputs["do"], p.output_layout),
            dq=np.zeros(q_hsd.shape, sdt),
            dk=np.zeros(k_hsd.shape, sdt),
            dv=np.zeros(v_hsd.shape, sdt),
            dbias=np.zeros(inputs["bias"].shape, np.float32) if "dbias" in expr.compare else None,
        )
    want_dbias = grads is not None and grads.dbias is not None
    for b, q_sel, k_sel, sq, sk in _units(p):
        if sq == 0:
            continue
        if sk == 0 and not expr.virtual_sink_key:
            continue  # no key: O = 0, LSE = -inf, gradients 0 (CK's definition); nothing to run
        q = to_torch(_sel(q_hsd, q_sel), device).requires_grad_(bwd)
        k = to_torch(_sel(k_hsd, k_sel), device).requires_grad_(bwd)
        v = to_torch(_sel(v_hsd, k_sel), device).requires_grad_(bwd)
        bias_np = _bias_unit(p, inputs, b, q_sel, sq, sk)
        bias_t = None if bias_np is None else to_torch(bias_np, device).requires_grad_(want_dbias)
        sk_ext = sk + (1 if expr.virtual_sink_key else 0)
        add_np = _additive(p, inputs, b, sq, sk, sk_ext)
        allowed = p.mask.allowed(sq, sk)
        out, lse_u = _call(expr, p, q, k, v, bias_t, add_np, allowed, sk, device, flex_fn)
        o[q_sel[0], :, q_sel[1]] = to_numpy(out, o.dtype)
        if lse_u is not None:
            lse[q_sel[0] if b is None else slice(0, 1), :, q_sel[1]] = to_numpy(lse_u, np.float32)
        if grads is not None:
            out.backward(to_torch(_sel(grads.do_hsd, q_sel), device).to(dt))
            _store_unit_grads(grads, p, (q, k, v, bias_t), b, q_sel, k_sel, sk, sdt)
    return _outputs(p, expr, o, lse, grads)


def _store_unit_grads(grads: _Backward, p: Problem, tensors: tuple, b, q_sel, k_sel, sk: int, sdt) -> None:
    """Copy one unit's autograd gradients (of ``tensors`` = q, k, v, bias or None) into ``grads``; a group-mode
    unit's dBias rows add into the shared bias's."""
    q, k, v, bias_t = tensors
    grads.dq[q_sel[0], :, q_sel[1]] = to_numpy(q.grad, sdt)
    grads.dk[k_sel[0], :, k_sel[1]] = to_numpy(k.grad, sdt)
    grads.dv[k_sel[0], :, k_sel[1]] = to_numpy(v.grad, sdt)
    if grads.dbias is not None:
        if bias_t is None:  # express() compares dbias only for an elementwise bias
            raise ValueError(f"dbias: compared, but the problem's bias is {p.bias.value}, not elementwise")
        g = to_numpy(bias_t.grad, np.float32)
        if b is None:
            grads.dbias[...] = g
        else:
            grads.dbias[0:1, :, q_sel[1], :sk] += g


def _outputs(
    p: Problem, expr: Expression, o: np.ndarray, lse: np.ndarray, grads: _Backward | None
) -> dict[str, np.ndarray]:
    """The compared outputs in CK's layouts: dQ/dK/dV (and dBias) for a backward, else O (and LSE)."""
    from ckfmha.reference.core import from_hsd

    if grads is not None:
        outs = {
            "dq": from_hsd(grads.dq, p.input_layout),
            "dk": from_hsd(grads.dk, p.input_layout),
            "dv": from_hsd(grads.dv, p.input_layout),
        }
        if grads.dbias is not None:
            outs["dbias"] = grads.dbias
        return outs
    outs = {"o": from_hsd(o, p.output_layout)}
    if "lse" in expr.compare:
        outs["lse"] = lse
    return outs


class TorchSide:
    """``torch[:backend]`` as a parity side.  ``device`` defaults to the GPU (``cuda``; ROCm builds use the same
    name); without a GPU the side skips with "no GPU" unless ``device='cpu'`` is given explicitly (math and
    flex run on the CPU too -- slowly -- which is useful for checking this module itself).  ``flex_compile``
    (default: on a GPU) runs FlexAttention through ``torch.compile`` (the real fused kernel); eager flex is
    torch's unfused reference path."""

    def __init__(
        self,
        backend: str = "math",
        device: str | None = None,
        flex_compile: bool | None = None,
        name: str | None = None,
    ) -> None:
        self.backend = parse_backend(backend)
        self.device = device
        self.flex_compile = flex_compile
        self.name = name or f"torch:{self.backend}"
        self._flex: Any = None  # flex_attention, compiled or not, once asked for

    def _flex_fn(self, device: str):
        if self._flex is None:
            import torch
            from torch.nn.attention.flex_attention import flex_attention

            compile_it = self.flex_compile if self.flex_compile is not None else device != "cpu"
            self._flex = torch.compile(flex_attention, dynamic=False) if compile_it else flex_attention
        return self._flex

    def expression(self, problem: Problem) -> Expression:
        return express(problem, self.backend)

    def _device(self) -> tuple[str | None, str]:
        """``(device, "")`` to run on -- the GPU (``cuda``) unless a device was given -- or ``(None, why not)``:
        no GPU, or torch not installed."""
        if self.device is None:
            ok, why = gpu_status()
            if not ok:
                return None, why
            return "cuda", ""
        try:
            import torch  # noqa: F401
        except ImportError:
            return None, "torch is not installed"
        return self.device, ""

    def _crash(self, e: Exception, fields: dict, expr: Expression) -> SideResult:
        """The result of a call that raised ``e`` (call it while ``e`` is being handled, for its traceback):
        skipped when torch.compile could not build the kernel, else an error."""
        if type(e).__module__.startswith(("torch._inductor", "torch._dynamo")):
            # torch.compile could not build FlexAttention's kernel for this shape: torch cannot run it
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return SideResult(
                self.name,
                Verdict.SKIPPED,
                f"torch:{self.backend} could not compile its kernel: {type(e).__name__}: {first}",
                fields=fields,
                raw=traceback.format_exc(),
                notes=list(expr.notes),
            )
        return SideResult(
            self.name,
            Verdict.ERROR,
            f"{type(e).__name__}: {e}",
            fields=fields,
            raw=traceback.format_exc(),
            notes=list(expr.notes),
        )

    def run(self, problem: Problem, seed: int = 0) -> SideResult:
        from ckfmha.upstream.judging import judge

        expr = express(problem, self.backend)
        if not expr:
            return SideResult(self.name, Verdict.SKIPPED, expr.reason)
        device, why = self._device()
        if device is None:
            return SideResult(self.name, Verdict.SKIPPED, why)
        inputs, _ = inputs_and_reference(problem, seed)
        fields = {
            "backend": self.backend,
            "device": device,
            "mask": expr.mask,
            "additive": list(expr.additive),
            "gqa": expr.gqa,
            "virtual_sink_key": expr.virtual_sink_key,
        }
        t0 = time.perf_counter()
        try:
            flex_fn = self._flex_fn(device) if self.backend == "flex" else None
            outs = torch_outputs(problem, inputs, expr, device, flex_fn)
        except TorchUnavailable as e:
            return SideResult(self.name, Verdict.SKIPPED, str(e), fields=fields, notes=list(expr.notes))
        except NotImplementedError as e:  # e.g. FlexAttention's backward on the CPU
            return SideResult(
                self.name,
                Verdict.SKIPPED,
                f"torch:{self.backend} on {device}: {e}",
                fields=fields,
                notes=list(expr.notes),
            )
        except Exception as e:
            return self._crash(e, fields, expr)
        fields["seconds"] = time.perf_counter() - t0
        j = judge(problem, seed, outs, expr.compare, VERDICT_RULE)
        return SideResult(
            self.name,
            j.verdict,
            j.words,
            outputs=outs,
            checks=j.checks,
            fields=fields,
            notes=list(expr.notes),
            rule=VERDICT_RULE,
        )
