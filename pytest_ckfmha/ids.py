"""Readable, stable ids.

A shape id names every field of the problem that differs from its default, so two different problems never
share an id and the same problem always gets the same one (no hashes, no sets, no run-dependent values)::

    {family}-{dtype}-{mode}-b{batch}h{nhead_q}[k{nhead_k}]s{seqlen_q}[x{seqlen_k}]d{hdim_q}[x{hdim_v}][-feature...]

Group mode lists the per-sequence lengths (``s1_17_100x1_17_100``).  Features, in this order: mask (``causal``,
``causalbr``, ``win{l}_{r}``, ``winbr{l}_{r}``, ``gmask{y}_{x}``), ``bias``/``alibi`` (+ rank), ``lse``,
``drop{p}`` (+ ``dseed``/``doff``), ``softcap{c}``, ``sink``, ``scale{s}``, ``qs{qscale}``, layouts
(``bshd``/``ibshd``/``obshd``), ``vcol``, ``page{n}``, ``{kv_lookup}``, ``{kv_layout}``, ``cbi``, ``knew{n}``,
``rope{dim}{i|h}``, ``split{n}``, ``minq{n}``, ``det``, ``dbias``, ``kpad{...}``.

Item ids: ``<shape id>::<kernel id>`` for a pinned kernel, ``<shape id>::plan`` for the dispatcher's own plan
(pytest's node id adds the ``ckfmha::`` collector in front).
"""

from __future__ import annotations

from ckfmha.masking import MaskKind
from ckfmha.problem import Layout, Problem


def _num(x: float) -> str:
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def _lens(xs) -> str:
    return "_".join(str(x) for x in xs)


def family_token(problem: Problem) -> str:
    from ckfmha.families import problem_family_of

    return problem_family_of(problem)


def shape_id(p: Problem) -> str:
    """The problem's shape id (see the module doc)."""
    return "-".join([family_token(p), p.dtype.value, p.mode.value, _dims(p), *_feature_tokens(p)])


def _dims(p: Problem) -> str:
    """``b{batch}h{nhead_q}[k{nhead_k}]s{seqlen_q}[x{seqlen_k}]d{hdim_q}[x{hdim_v}]`` (group mode: per-sequence
    lengths)."""
    dims = f"b{p.batch}h{p.nhead_q}"
    if p.nhead_k != p.nhead_q:
        dims += f"k{p.nhead_k}"
    if p.mode.value == "group":
        dims += f"s{_lens(p.seqlens_q)}"
        if p.seqlens_k != p.seqlens_q:
            dims += f"x{_lens(p.seqlens_k)}"
    else:
        dims += f"s{p.seqlen_q}"
        if p.seqlen_k != p.seqlen_q:
            dims += f"x{p.seqlen_k}"
    dims += f"d{p.hdim_q}"
    if p.hdim_v != p.hdim_q:
        dims += f"x{p.hdim_v}"
    return dims


def _feature_tokens(p: Problem) -> list[str]:
    """The feature tokens, in the module doc's order: mask, bias, softmax features, then the storage ones."""
    parts: list[str] = []
    m = p.mask
    if m.kind is MaskKind.GENERIC:
        parts.append(f"gmask{m.y}_{m.x}")
    elif m.kind is not MaskKind.NONE:
        br = "br" if m.kind is MaskKind.BOTTOM_RIGHT else ""
        parts.append(f"causal{br}" if m.is_causal else f"win{br}{m.left}_{m.right}")
    if p.bias.value != "none":
        parts.append(("bias" if p.bias.value == "elementwise" else "alibi") + (str(p.bias_rank) if p.bias_rank else ""))
    if p.lse:
        parts.append("lse")
    if p.p_drop:
        parts.append(f"drop{_num(p.p_drop)}")
    if p.drop_seed != 1:
        parts.append(f"dseed{p.drop_seed}")
    if p.drop_offset:
        parts.append(f"doff{p.drop_offset}")
    if p.logits_soft_cap:
        parts.append(f"softcap{_num(p.logits_soft_cap)}")
    if p.sink:
        parts.append("sink")
    if p.scale:
        parts.append(f"scale{_num(p.scale)}")
    if p.qscale.value != "none":
        parts.append(f"qs{p.qscale.value}")
    return parts + _storage_tokens(p)


def _storage_tokens(p: Problem) -> list[str]:
    """Layout, V layout, paging, append-KV, split, min seqlen, backward and padding tokens, in the module doc's
    order."""
    parts: list[str] = []
    if p.input_layout is Layout.BSHD and p.output_layout is Layout.BSHD:
        parts.append("bshd")
    else:
        if p.input_layout is Layout.BSHD:
            parts.append("ibshd")
        if p.output_layout is Layout.BSHD:
            parts.append("obshd")
    if p.vlayout.value != "row":
        parts.append("vcol")
    if p.page_block_size:
        parts.append(f"page{p.page_block_size}")
    if p.kv_lookup.value != "none":
        parts.append(p.kv_lookup.value)
    if p.kv_layout.value != "none":
        parts.append(p.kv_layout.value)
    if p.cache_batch_idx:
        parts.append("cbi")
    if p.seqlen_knew:
        parts.append(f"knew{p.seqlen_knew}")
    if p.rotary_dim:
        parts.append(f"rope{p.rotary_dim}{'i' if p.rope.value == 'interleaved' else 'h'}")
    if p.num_splits != 1:
        parts.append(f"split{p.num_splits}")
    if p.min_seqlen_q:
        parts.append(f"minq{p.min_seqlen_q}")
    if p.deterministic:
        parts.append("det")
    if p.dbias:
        parts.append("dbias")
    if p.s_kpad is not None:
        parts.append(f"kpad{_lens(p.s_kpad)}")
    return parts


PLAN = "plan"


def group_name(kernel_id: str) -> str:
    """xdist_group name of a kernel: short (xdist appends it to every node id) and stable."""
    import hashlib

    return "ck-" + hashlib.sha1(kernel_id.encode()).hexdigest()[:12]
