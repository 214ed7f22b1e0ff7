import numpy as np
import pytest

from ckfmha.inputs import make_inputs
from ckfmha.problem import Problem
from ckfmha.reference import PageTableError, reference
from ckfmha.reference.pagedkv import kv_sources


def _contiguous(p, x):
    k_of, v_of = kv_sources(p, x)
    return [k_of(b) for b in range(p.batch)], [v_of(b) for b in range(p.batch)]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_pagedkv_equals_contiguous(layout):
    p = Problem(
        family="fwd_pagedkv",
        batch=2,
        nhead_q=2,
        nhead_k=1,
        seqlen_q=3,
        seqlen_k=200,
        hdim_q=8,
        page_block_size=128,
        input_layout=layout,
        output_layout=layout,
        mask="b",
        dtype="fp32",
    )
    x = make_inputs(p, 4)
    ks, vs = _contiguous(p, x)
    plain = Problem(batch=2, nhead_q=2, nhead_k=1, seqlen_q=3, seqlen_k=200, hdim_q=8, mask="b", dtype="fp32")
    k = np.stack(ks)
    v = np.stack(vs)
    if layout == "bshd":
        plain = plain.replace(input_layout="bshd", output_layout="bshd")
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    ref_paged = reference(p, x, accum=np.float64)
    ref_plain = reference(plain, dict(q=x["q"], k=k, v=v), accum=np.float64)
    np.testing.assert_allclose(ref_paged["o"], ref_plain["o"], rtol=1e-12)
    # gather really goes through the table: page 0 of batch 0 is the table's first entry
    blk = x["block_table"][0, 0]
    page0 = x["k_cache"][blk] if layout == "bhsd" else x["k_cache"][blk].transpose(1, 0, 2)
    np.testing.assert_array_equal(ks[0][:, :128], page0)


@pytest.mark.parametrize("lookup", ["vllm", "sglang"])
@pytest.mark.parametrize("mem", ["vectorized", "linear"])
def test_batch_prefill_layouts_agree(lookup, mem):
    kw = dict(
        family="batch_prefill",
        mode="group",
        batch=3,
        nhead_q=2,
        seqlens_q=(2, 5, 1),
        seqlens_k=(9, 16, 0),
        hdim_q=16,
        page_block_size=8,
        kv_lookup=lookup,
        kv_layout=mem,
        dtype="fp16",
        mask="b",
    )
    p = Problem(**kw)
    x = make_inputs(p, 9)
    r = reference(p, x, accum=np.float64)
    ks, vs = _contiguous(p, x)
    # same sequences as a contiguous group-mode fwd problem
    g = Problem(
        mode="group", batch=3, nhead_q=2, seqlens_q=(2, 5, 1), seqlens_k=(9, 16, 0), hdim_q=16, dtype="fp16", mask="b"
    )
    k = np.concatenate(ks, axis=1)[None]
    v = np.concatenate(vs, axis=1)[None]
    r2 = reference(g, dict(q=x["q"], k=k, v=v, seqstart_q=x["seqstart_q"]), accum=np.float64)
    np.testing.assert_allclose(r["o"], r2["o"], rtol=1e-12)


def test_vectorized_layout_element_positions():
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=1,
        seqlens_q=(1,),
        seqlens_k=(16,),
        hdim_q=16,
        page_block_size=8,
        kv_lookup="vllm",
        kv_layout="vectorized",
        dtype="fp16",
    )
    x = make_inputs(p, 1)
    ks, vs = _contiguous(p, x)
    pg = x["block_table"][0, 1]
    t, d = 3, 13  # key 8 + 3 of sequence 0, feature 13; vec = 8
    assert ks[0][0, 8 + t, d] == x["k_cache"][pg, 0, d // 8, t, d % 8]
    assert vs[0][0, 8 + t, d] == x["v_cache"][pg, 0, t // 8, d, t % 8]


def test_bad_page_table_is_named():
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=1,
        seqlens_q=(1,),
        seqlens_k=(10,),
        hdim_q=8,
        page_block_size=4,
        kv_lookup="sglang",
        kv_layout="linear",
        dtype="fp16",
    )
    x = make_inputs(p, 1)
    x["kv_last_page_lens"] = np.array([3], dtype=np.int32)
    with pytest.raises(PageTableError, match="kv_last_page_lens"):
        reference(p, x)


def test_kv_blockscale_per_page():
    p = Problem(
        family="batch_prefill",
        mode="group",
        batch=2,
        seqlens_q=(2, 3),
        seqlens_k=(20, 7),
        hdim_q=16,
        page_block_size=16,
        kv_lookup="vllm",
        kv_layout="linear",
        dtype="fp8bf16",
        qscale="kv_blockscale",
    )
    x = make_inputs(p, 3)
    r = reference(p, x, accum=np.float64)
    x1 = dict(x, k_descale=x["k_descale"] * 2, v_descale=x["v_descale"] * 2)
    r1 = reference(p, x1, accum=np.float64)
    np.testing.assert_allclose(
        r1["o"],
        2 * reference(p.replace(scale=2 * p.softmax_scale), dict(x, v_descale=x["v_descale"]), accum=np.float64)["o"],
        rtol=1e-10,
    )
    assert not np.allclose(r["o"], r1["o"])
