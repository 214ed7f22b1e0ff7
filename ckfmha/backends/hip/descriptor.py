"""One plan stage as a ``ckfmha_desc`` (:mod:`codegen.abi`): pointers, sizes, strides and switches for CK's api.

:func:`stage_descriptor` takes the problem, the api the stage calls and the stage's buffers as
:class:`DeviceArray` s (an address plus the array's shape and strides in elements -- the buffers were allocated
from the NumPy arrays, so every size is the dtype's, never assumed) and fills the descriptor the way CK's own
runners fill its args (example/ck_tile/01_fmha/fmha_fwd_runner.hpp, fmha_bwd_runner.hpp):

* sequence tensors (q, k, v, o, knew, vnew, do, dq, dk, dv, dbias and the paged caches) in ``bshd``
  (b, s, h, d) or ``bhsd`` (b, h, s, d): ``stride_*`` = the sequence axis' stride, ``nhead_stride_*`` = the head
  axis', ``batch_stride_*`` = the first axis' (a page cache's first axis is the page);
* ``lse`` / ``d`` (b, h, s): ``nhead_stride_lse`` / ``nhead_stride_lsed`` and the batch strides;
* the split-KV partials ``o_acc`` (splits, b, h, s, dv) and ``lse_acc`` (splits, b, h, s), the backward's
  ``dq_acc`` (splits, b, h, s, d): split, batch, head and row strides;
* the elementwise bias (b|1, h|1, sq, sk): a broadcast axis gets stride 0; ALiBi slopes (1|b, h):
  ``stride_bias`` = nhead_q for per-batch slopes, 0 otherwise (fmha_fwd.hpp: "if alibi, b*h need set this to h,
  1*h need set this to 0");
* sizes: batch mode ``seqlen_q`` / ``seqlen_k`` as given; group mode the packed totals (``shape_seqlen_q`` of
  the runner) with ``max_seqlen_q`` the longest sequence; the mask as CK's ``mask_enum`` and window
  (:meth:`ckfmha.masking.MaskSpec.kernel_window`: no mask = type 0, window (-1, -1); top-left / bottom-right
  windows = type 1 / 2; ``g:y,x`` = type 3 with (y, x)); the softmax scale ``scale_s`` for every api but
  fwd_appendkv (no softmax: its args have no scale); group mode's ``seqstart_q`` / ``seqstart_k`` (batch prefill:
  ``seqstart_q`` only, its K/V ranges are ``kv_indptr``'s -- fmha_batch_prefill_args has no seqstart_k_ptr).

Every value is a Python int stored as int64: nothing is narrowed here; the wrapper checks each against the type of
the CK member it goes to. What a descriptor cannot express for an api (a batch-prefill cache in the vectorized
layout, stored dropout random values) is a :class:`~codegen.abi.DescriptorError` naming it.
"""

from __future__ import annotations

from typing import NamedTuple

from ckfmha.kernel import Bias, KVMemoryLayout, Mode, QScale, Rope, VLayout
from ckfmha.masking import MaskKind
from ckfmha.problem import Layout, Problem
from codegen.abi import DTYPE_CODES, Descriptor, DescriptorError, make_descriptor

_QSCALE_CODE = {QScale.NONE: 0, QScale.PERTENSOR: 1, QScale.BLOCKSCALE: 2, QScale.KV_BLOCKSCALE: 3, QScale.MX: 4}
_ROPE_CODE = {Rope.NONE: 0, Rope.INTERLEAVED: 1, Rope.HALF_ROTATED: 2}
_BIAS_CODE = {Bias.NONE: 0, Bias.ELEMENTWISE: 1, Bias.ALIBI: 2}

#: api -> the tensors its call writes (downloaded after the call)
API_OUTPUTS: dict[str, tuple[str, ...]] = {
    "fwd": ("o", "lse"),
    "fwd_splitkv": ("o", "lse", "o_acc", "lse_acc"),
    "pagedkv_prefill": ("o", "lse"),
    "batch_prefill": ("o", "lse"),
    "fwd_appendkv": ("q", "k", "v", "k_cache", "v_cache"),
    "bwd": ("d", "dq", "dk_raw", "dv_raw", "dbias_raw", "dq_acc"),
}


class DeviceArray(NamedTuple):
    """A buffer the kernel sees: its address, shape and strides in elements."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def _seq(d: Descriptor, tag: str, a: DeviceArray, layout: Layout, *, row: bool = True) -> None:
    """Strides of a (b, s, h, d) / (b, h, s, d) tensor (see the module doc)."""
    if len(a.strides) != 4:
        raise DescriptorError(f"{tag}: a sequence tensor has 4 axes, this one has shape {a.shape}")
    b, x, y, _ = a.strides
    s_axis, h_axis = (x, y) if layout is Layout.BSHD else (y, x)
    values = {f"nhead_stride_{tag}": h_axis, f"batch_stride_{tag}": b}
    if row:
        values[f"stride_{tag}"] = s_axis
    _set(d, **values)


def _set(d: Descriptor, **values) -> None:
    from codegen.abi import set_field

    for k, v in values.items():
        set_field(d, k, v)


def _ptr(arrays: dict[str, DeviceArray], name: str) -> int | None:
    a = arrays.get(name)
    return a.ptr if a is not None else None


def _common(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray]) -> None:
    if p.dtype.value not in DTYPE_CODES:
        raise DescriptorError(f"dtype: {p.dtype.value} has no CK data_type code (known: {', '.join(DTYPE_CODES)})")
    group = p.mode is Mode.GROUP
    _set(
        d,
        dtype=DTYPE_CODES.index(p.dtype.value),
        is_group_mode=group,
        is_v_rowmajor=p.vlayout is VLayout.ROW,
        batch=p.batch,
        seqlen_q=p.total_q if group else p.seqlen_q,
        seqlen_k=p.seqstart_k[-1] if group else p.seqlen_k,
        max_seqlen_q=max(p.seqlens_q_list) if p.seqlens_q_list else 0,
        hdim_q=p.hdim_q,
        hdim_v=p.hdim_v,
        nhead_q=p.nhead_q,
        nhead_k=p.nhead_k,
        qscale_type=_QSCALE_CODE[p.qscale],
    )
    q = arrays["q"]
    _set(d, q_ptr=q.ptr)
    _seq(d, "q", q, p.input_layout)
    if group:
        _set(d, seqstart_q_ptr=_ptr(arrays, "seqstart_q"))


def _mask(d: Descriptor, p: Problem) -> None:
    m = p.mask
    if m.kind is MaskKind.NONE:
        _set(d, mask_type=0, window_size_left=-1, window_size_right=-1)
        return
    left, right, _top_left = m.kernel_window()
    code = {MaskKind.TOP_LEFT: 1, MaskKind.BOTTOM_RIGHT: 2, MaskKind.GENERIC: 3}[m.kind]
    _set(d, mask_type=code, window_size_left=left, window_size_right=right)


def _bias(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray]) -> None:
    _set(d, bias_type=_BIAS_CODE[p.bias])
    if p.bias is Bias.ELEMENTWISE:
        b = arrays["bias"]
        bb, hb = b.shape[0], b.shape[1]
        _set(
            d,
            bias_ptr=b.ptr,
            stride_bias=b.strides[2],
            nhead_stride_bias=b.strides[1] if hb > 1 else 0,
            batch_stride_bias=b.strides[0] if bb > 1 else 0,
        )
    elif p.bias is Bias.ALIBI:
        s = arrays["alibi_slopes"]
        _set(d, bias_ptr=s.ptr, stride_bias=p.nhead_q if s.shape[0] > 1 else 0)


def _attention(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray], *, dropout: bool = True) -> None:
    """What the attention apis share: K/V, O, LSE, mask, bias, soft-cap, sink, descales, dropout."""
    for name in ("k", "v"):
        a = arrays.get(name, arrays.get(f"{name}_cache"))
        if a is None:
            raise DescriptorError(f"{name}: the stage has neither {name} nor {name}_cache")
        _set(d, **{f"{name}_ptr": a.ptr})
        _seq(d, name, a, p.input_layout)
    o = arrays["o"]
    _set(d, o_ptr=o.ptr)
    _seq(d, "o", o, p.output_layout)
    if p.lse:
        lse = arrays["lse"]
        _set(d, lse_ptr=lse.ptr, has_lse=True, nhead_stride_lse=lse.strides[1], batch_stride_lse=lse.strides[0])
    _mask(d, p)
    _bias(d, p, arrays)
    if p.logits_soft_cap:
        _set(d, has_logits_soft_cap=True, logits_soft_cap=float(p.logits_soft_cap))
    if p.sink:
        _set(d, has_sink=True, sink_ptr=_ptr(arrays, "sink"))
    for n in ("q", "k", "v"):
        if f"{n}_descale" in arrays:
            _set(d, **{f"{n}_descale_ptr": arrays[f"{n}_descale"].ptr})
    if p.min_seqlen_q:
        _set(d, skip_min_seqlen_q=True, min_seqlen_q=p.min_seqlen_q)
    if dropout and p.p_drop > 0:
        _set(d, has_dropout=True, p_drop=float(p.p_drop), drop_seed=p.drop_seed, drop_offset=p.drop_offset)


def _paged(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray]) -> None:
    if "block_table" in arrays:
        bt = arrays["block_table"]
        _set(
            d,
            block_table_ptr=bt.ptr,
            batch_stride_block_table=bt.strides[0],
            page_block_size=p.page_block_size,
            use_pagedkv=True,
        )
    if "cache_batch_idx" in arrays:
        _set(d, cache_batch_idx_ptr=arrays["cache_batch_idx"].ptr)
    seqlen_k = arrays.get("cache_seqlens", arrays.get("seqlen_k"))
    if seqlen_k is not None:
        _set(d, seqlen_k_ptr=seqlen_k.ptr)


def _acc(d: Descriptor, arrays: dict[str, DeviceArray], num_splits: int) -> None:
    o_acc, lse_acc = arrays["o_acc"], arrays["lse_acc"]
    s, b, h, r, _ = o_acc.strides
    _set(
        d,
        o_acc_ptr=o_acc.ptr,
        lse_acc_ptr=lse_acc.ptr,
        num_splits=num_splits,
        split_stride_o_acc=s,
        batch_stride_o_acc=b,
        nhead_stride_o_acc=h,
        stride_o_acc=r,
        split_stride_lse_acc=lse_acc.strides[0],
        batch_stride_lse_acc=lse_acc.strides[1],
        nhead_stride_lse_acc=lse_acc.strides[2],
    )


def _appendkv(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray]) -> None:
    for name in ("k", "v"):
        a = arrays.get(f"{name}_cache", arrays.get(name))
        if a is None:
            raise DescriptorError(f"{name}: the stage has neither {name}_cache nor {name}")
        _set(d, **{f"{name}_ptr": a.ptr})
        _seq(d, name, a, p.input_layout)
    for name in ("knew", "vnew"):
        if name in arrays:
            _set(d, **{f"{name}_ptr": arrays[name].ptr})
            _seq(d, name, arrays[name], p.input_layout)
    _set(d, seqlen_knew=p.seqlen_knew, rope_type=_ROPE_CODE[p.rope], has_mask=p.mask.kind is not MaskKind.NONE)
    if p.rotary_dim:
        _set(
            d,
            rotary_dim=p.rotary_dim,
            rotary_cos_ptr=_ptr(arrays, "rotary_cos"),
            rotary_sin_ptr=_ptr(arrays, "rotary_sin"),
        )
    _paged(d, p, arrays)


def _batch_prefill(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray]) -> None:
    if p.kv_layout is KVMemoryLayout.VECTORIZED:
        raise DescriptorError(
            "kv_layout: the vectorized page-cache layout has no stride form in the descriptor (only linear)"
        )
    _set(
        d,
        kv_indptr_ptr=_ptr(arrays, "kv_indptr"),
        kv_page_indices_ptr=_ptr(arrays, "kv_page_indices"),
        num_total_pages=arrays["k_cache"].shape[0],
        page_block_size=p.page_block_size,
        use_pagedkv=True,
    )
    if p.page_block_size > 1:  # with one-token pages every last page holds one token (CK before page sizes)
        _set(d, kv_last_page_lens_ptr=_ptr(arrays, "kv_last_page_lens"))


def _bwd(d: Descriptor, p: Problem, arrays: dict[str, DeviceArray], is_deterministic: bool) -> None:
    for name in ("k", "v"):
        _set(d, **{f"{name}_ptr": arrays[name].ptr})
        _seq(d, name, arrays[name], p.input_layout)
    for name, tag, layout in (
        ("o", "o", p.output_layout),
        ("do", "do", p.output_layout),
        ("dq", "dq", p.input_layout),
        ("dk_raw", "dk", p.input_layout),
        ("dv_raw", "dv", p.input_layout),
    ):
        _set(d, **{f"{tag}_ptr": arrays[name].ptr})
        _seq(d, tag, arrays[name], layout)
    lse, dd = arrays["lse"], arrays["d"]
    if lse.strides != dd.strides:
        raise DescriptorError(f"d: CK takes one stride set for lse and d (lsed); lse {lse.strides}, d {dd.strides}")
    _set(d, lse_ptr=lse.ptr, d_ptr=dd.ptr, nhead_stride_lsed=lse.strides[1], batch_stride_lsed=lse.strides[0])
    acc = arrays["dq_acc"]
    s, b, h, r, _ = acc.strides
    _set(
        d,
        dq_acc_ptr=acc.ptr,
        split_stride_dq_acc=s,
        batch_stride_dq_acc=b,
        nhead_stride_dq_acc=h,
        stride_dq_acc=r,
        max_seqlen_k=max(p.seqlens_k_list) if p.seqlens_k_list else 0,
        is_deterministic=is_deterministic,
    )
    _mask(d, p)
    _bias(d, p, arrays)
    if p.dbias:
        db = arrays["dbias_raw"]
        _set(d, dbias_ptr=db.ptr, has_dbias=True)
        _seq(d, "dbias", db, p.input_layout)
    if p.p_drop > 0:
        _set(
            d,
            has_dropout=True,
            p_drop=float(p.p_drop),
            p_undrop=1.0 / (1.0 - float(p.p_drop)),
            drop_seed=p.drop_seed,
            drop_offset=p.drop_offset,
        )
    if p.mode is Mode.GROUP and "seqlen_k" in arrays:
        _set(d, seqlen_k_ptr=arrays["seqlen_k"].ptr)


def stage_descriptor(
    problem: Problem,
    api: str,
    arrays: dict[str, DeviceArray],
    *,
    num_splits: int = 1,
    is_deterministic: bool = False,
    stream: int | None = None,
    time_kernel: bool = False,
    cold_niters: int = 0,
    nrepeat: int = 1,
) -> Descriptor:
    """The descriptor of one call of ``api`` on ``arrays`` (see the module doc)."""
    p = problem
    d = make_descriptor(stream=stream, time_kernel=time_kernel, cold_niters=cold_niters, nrepeat=nrepeat)
    _common(d, p, arrays)
    if api != "fwd_appendkv":  # append-KV has no softmax (fmha_fwd_appendkv_args has no scale)
        _set(d, scale_s=float(p.softmax_scale))
    if p.mode is Mode.GROUP and api != "batch_prefill":  # batch prefill's K/V ranges are kv_indptr's
        _set(d, seqstart_k_ptr=_ptr(arrays, "seqstart_k"))
    if api == "fwd_appendkv":
        _appendkv(d, p, arrays)
    elif api == "bwd":
        _bwd(d, p, arrays, is_deterministic)
    else:
        _attention(d, p, arrays, dropout=api in ("fwd", "batch_prefill"))
        if api == "fwd_splitkv":
            _acc(d, arrays, num_splits)
            _paged(d, p, arrays)
        elif api == "pagedkv_prefill":
            _paged(d, p, arrays)
        elif api == "batch_prefill":
            _batch_prefill(d, p, arrays)
        elif api == "fwd":
            if p.mode is Mode.GROUP and "seqlen_k" in arrays and p.s_kpad is not None:
                _set(d, seqlen_k_ptr=arrays["seqlen_k"].ptr)
        else:
            raise DescriptorError(f"api: {api!r} has no descriptor mapping")
    return d
