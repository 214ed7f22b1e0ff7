"""Which problems each PyTorch attention backend can express exactly, and how (pure logic, no torch import).

Backends: ``math``, ``efficient``, ``flash``, ``cudnn`` (``torch.nn.functional.scaled_dot_product_attention``
restricted with ``torch.nn.attention.sdpa_kernel``) and ``flex`` (``torch.nn.attention.flex_attention``).
:func:`express` returns an :class:`Expression`: ``ok`` or the reason it is not expressible, plus how each
feature is realised and which outputs are compared.  The rules are *semantic* (can the API state CK's
computation at all, without losing precision the tolerance cannot absorb); hardware limits that torch checks at
run time (head-dim limits, GPU generation, alignment) are not guessed here: torch's own refusal ("No available
kernel") becomes a ``skipped`` result with torch's words.

What is modelled (CK's logit pipeline ``s = scale*q.k -> soft-cap -> +bias/ALiBi -> mask -> softmax(+sink)``):

* masks -- flex: ``mask_mod`` from CK's exact per-row key range (every top-left / bottom-right window and
  generic mask).  SDPA: top-left causal -> ``is_causal=True``; bottom-right causal -> ``causal_lower_right``
  (flash, efficient) or a dense boolean/additive ``attn_mask`` (math, cudnn); windows / generic -> dense mask
  (not flash: flash takes no ``attn_mask`` and SDPA exposes no ``window_size``).
* elementwise bias -- SDPA: additive ``attn_mask`` in the query dtype (exact: the bias is stored in that dtype);
  flex: ``score_mod`` adds the captured bias.  Not flash.
* ALiBi -- flex: ``score_mod`` adds CK's ALiBi term in fp32.  SDPA: only with fp32 (an additive mask is
  stored in the query dtype, and fp16/bf16 round ``slope*distance`` far beyond the tolerance).  Not flash.
* soft-cap -- flex only (``score_mod``: ``cap*tanh(s/cap)``); SDPA cannot change the score.
* sink -- modelled as a *virtual key*: K and V get one extra zero row whose logit is the per-head sink value
  (flex: ``score_mod`` sets it, ``mask_mod`` always allows it; SDPA: an extra additive-mask column, fp32 only
  for the same rounding reason as ALiBi).  O and LSE then equal CK's (sink in the softmax denominator).
* GQA -- ``enable_gqa=True`` (math, flash, flex) or K/V ``repeat_interleave`` (efficient, cudnn; autograd
  sums dK/dV over the group).
* group mode -- one call per sequence (also honours ``s_kpad``).
* not expressible anywhere: dropout (torch draws its own random mask, not CK's philox stream), fp8 /
  quantized dtypes, the split-KV / paged / append-KV / batch-prefill storage (families other than fwd and
  the whole backward).
* SDPA rows with no allowed key: SDPA's output there is backend-defined (NaN or 0), CK defines O=0 -> not
  expressible (flex defines O=0, LSE=-inf, as CK).
* LSE: SDPA does not return it (only private aten ops do) -> LSE is not compared (a note says so); flex
  returns it (``return_lse=True``, natural log) -> compared.  dBias: compared with ``math`` only (autograd
  through the dense additive mask); other backends compare dQ/dK/dV and note that dBias is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckfmha.kernel import Bias, DType, Family, Mode
from ckfmha.masking import MaskKind
from ckfmha.problem import Problem
from ckfmha.upstream.reference_cache import compared_names

SDPA_BACKENDS = ("math", "efficient", "flash", "cudnn")
BACKENDS = SDPA_BACKENDS + ("flex",)
DEFAULT_BACKEND = "math"
_DTYPES = {
    "math": (DType.FP16, DType.BF16, DType.FP32),
    "efficient": (DType.FP16, DType.BF16, DType.FP32),
    "flash": (DType.FP16, DType.BF16),
    "cudnn": (DType.FP16, DType.BF16),
    "flex": (DType.FP16, DType.BF16, DType.FP32),
}
_NATIVE_GQA = ("math", "flash", "flex")


@dataclass(frozen=True)
class Expression:
    """How a backend expresses a problem (``ok``) or why it cannot (``reason``)."""

    backend: str
    ok: bool
    reason: str = ""
    mask: str = "none"  # none | is_causal | causal_lower_right | dense | mask_mod
    additive: tuple[str, ...] = ()  # bias / alibi / sink / softcap, as realised (dense mask or score_mod)
    gqa: str = "none"  # none | enable_gqa | repeat_interleave
    virtual_sink_key: bool = False
    compare: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __bool__(self) -> bool:
        return self.ok


def parse_backend(spec: str) -> str:
    """``torch`` -> the default (``math``); ``torch:flash`` -> ``flash``; a bare backend name is accepted."""
    s = spec.strip()
    if s.startswith("torch"):
        s = s[len("torch") :].lstrip(":") or DEFAULT_BACKEND
    if s not in BACKENDS:
        raise ValueError(
            f"torch backend: {spec!r} unknown; allowed: torch, " + ", ".join(f"torch:{b}" for b in BACKENDS)
        )
    return s


def _no(backend: str, why: str) -> Expression:
    return Expression(backend, False, f"torch:{backend} cannot express this problem: {why}")


def has_empty_rows(p: Problem) -> bool:
    """True when some query row has no allowed key (a key-less sequence or a mask that empties a row)."""
    for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list):
        if sq == 0:
            continue
        if sk == 0:
            return True
        start, end = p.mask.key_range(sq, sk)
        if bool((end <= start).any()):
            return True
    return False


def express(problem: Problem, backend: str) -> Expression:
    """See the module doc; ``backend`` is one of :data:`BACKENDS` (or a ``torch[:backend]`` spec)."""
    b = parse_backend(backend)
    p = problem
    refusal = _refusal(p, b)
    if refusal is not None:
        return refusal
    compare, notes = _compared(p, b)
    gqa = "none"
    if p.nhead_q != p.nhead_k:
        gqa = "enable_gqa" if b in _NATIVE_GQA else "repeat_interleave"
        if gqa == "repeat_interleave":
            notes.append(f"GQA via repeat_interleave of K/V (torch:{b} has no enable_gqa)")
    if p.mode is Mode.GROUP:
        notes.append("group mode: one call per sequence")
    if b == "flex":
        return _express_flex(p, gqa, compare, notes)
    return _express_sdpa(p, b, gqa, compare, notes)


def _refusal(p: Problem, b: str) -> Expression | None:
    """Why no backend ``b`` can express ``p`` (family, dtype, dropout), or None."""
    if p.family not in (Family.FWD, Family.BWD_DQ_DK_DV):
        return _no(
            b,
            f"family {p.family.value}: torch computes plain attention; CK's split-KV / paged / "
            "append-KV / batch-prefill storage and kernels have no torch counterpart",
        )
    if p.dtype not in _DTYPES[b]:
        allowed = "/".join(d.value for d in _DTYPES[b])
        return _no(
            b,
            f"dtype {p.dtype.value}: torch:{b} computes in {allowed} only"
            + (" (no fp8 path matching CK's quantization)" if p.dtype.is_fp8_family else ""),
        )
    if p.p_drop > 0:
        return _no(
            b,
            f"dropout p={p.p_drop:g}: torch draws its own random mask, not CK's philox stream, so "
            "outputs cannot be compared",
        )
    return None


def _compared(p: Problem, b: str) -> tuple[list[str], list[str]]:
    """The outputs backend ``b`` is compared on, and a note for each one it cannot give (LSE, dBias)."""
    notes: list[str] = []
    compare = list(compared_names(p))
    if "lse" in compare and b != "flex":
        compare.remove("lse")
        notes.append(
            "lse not compared: scaled_dot_product_attention does not return the log-sum-exp (only private aten ops do)"
        )
    if "dbias" in compare and b != "math":
        compare.remove("dbias")
        notes.append(
            f"dbias not compared: torch:{b} does not give the bias gradient here (math does, through "
            "the dense additive mask)"
        )
    return compare, notes


def _express_flex(p: Problem, gqa: str, compare: list[str], notes: list[str]) -> Expression:
    """FlexAttention: every score term through ``score_mod``, every mask (and the sink key) through ``mask_mod``."""
    additive: list[str] = []
    if p.logits_soft_cap > 0:
        additive.append("softcap:score_mod")
    if p.bias is Bias.ELEMENTWISE:
        additive.append("bias:score_mod")
    elif p.bias is Bias.ALIBI:
        additive.append("alibi:score_mod")
    if p.sink:
        additive.append("sink:score_mod")
    mask = "mask_mod" if (p.mask.kind is not MaskKind.NONE or p.sink or has_empty_rows(p)) else "none"
    return Expression("flex", True, "", mask, tuple(additive), gqa, p.sink, tuple(compare), tuple(notes))


def _sdpa_refusal(p: Problem, b: str) -> Expression | None:
    """Why the SDPA backend ``b`` cannot express ``p`` (soft-cap, fully masked rows, flash's limits, ALiBi or a
    sink in half precision), or None."""
    if p.logits_soft_cap > 0:
        return _no(
            b,
            "logits soft-cap (cap*tanh(s/cap) before bias and mask) cannot be stated in "
            "scaled_dot_product_attention (the score enters the softmax unmodified); use torch:flex",
        )
    if has_empty_rows(p) and not p.sink:
        return _no(
            b,
            "some query rows have no allowed key: SDPA's output for fully masked rows is "
            "backend-defined (NaN or 0) while CK defines O=0; use torch:flex",
        )
    half = p.dtype in (DType.FP16, DType.BF16)
    if b == "flash":
        if p.hdim_q != p.hdim_v:
            return _no(b, f"hdim_q={p.hdim_q} != hdim_v={p.hdim_v}: flash needs one head dim for q, k and v")
        if p.bias is not Bias.NONE:
            return _no(b, f"{p.bias.value} bias: flash takes no attn_mask / bias")
        if p.sink:
            return _no(b, "sink: flash takes no attn_mask, which the virtual sink key needs")
        if p.mask.kind is MaskKind.GENERIC or (p.mask.kind is not MaskKind.NONE and not p.mask.is_causal):
            return _no(b, f"mask {p.mask.to_ck()}: flash takes no attn_mask and SDPA exposes no window_size")
    if p.bias is Bias.ALIBI and half:
        return _no(
            b,
            f"ALiBi in {p.dtype.value}: an additive attn_mask is stored in the query dtype, which "
            "rounds slope*distance beyond the tolerance; use torch:flex or fp32",
        )
    if p.sink and half:
        return _no(
            b,
            f"sink in {p.dtype.value}: the virtual sink key's logit would be stored in the query dtype "
            "in the attn_mask (rounding the sink logit); use torch:flex or fp32",
        )
    return None


def _express_sdpa(p: Problem, b: str, gqa: str, compare: list[str], notes: list[str]) -> Expression:
    """scaled_dot_product_attention: bias, ALiBi and the sink key in an additive ``attn_mask``; the mask as
    ``is_causal``, ``causal_lower_right`` or a dense ``attn_mask``."""
    refusal = _sdpa_refusal(p, b)
    if refusal is not None:
        return refusal
    additive: list[str] = []
    if p.bias is Bias.ELEMENTWISE:
        additive.append("bias:attn_mask")
    elif p.bias is Bias.ALIBI:
        additive.append("alibi:attn_mask")
    if p.sink:
        additive.append("sink:attn_mask(virtual key)")
    square = all(sq == sk for sq, sk in zip(p.seqlens_q_list, p.seqlens_k_list))
    if p.mask.kind is MaskKind.NONE:
        mask = "dense" if additive else "none"
    elif additive or not p.mask.is_causal:
        mask = "dense"
    elif p.mask.kind is MaskKind.TOP_LEFT:
        if b == "flash" and not square:
            return _no(
                b,
                "top-left causal with seqlen_q != seqlen_k: torch's flash refuses is_causal for "
                "non-square problems (flash-attn's causal is bottom-right)",
            )
        mask = "is_causal"
    elif square:  # bottom-right causal equals top-left causal when seqlen_q == seqlen_k
        mask = "is_causal"
    else:  # bottom-right causal, non-square
        mask = "causal_lower_right" if b in ("flash", "efficient") else "dense"
    return Expression(b, True, "", mask, tuple(additive), gqa, p.sink, tuple(compare), tuple(notes))
