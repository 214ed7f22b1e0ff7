from ckfmha.problem import Problem
from ckfmha.work import bytes_moved, flops, gbps, tflops


def test_fwd_flops_no_mask_and_causal():
    p = Problem(batch=2, nhead_q=8, nhead_k=2, seqlen_q=1024, seqlen_k=2048, hdim_q=128, hdim_v=64)
    assert flops(p) == 2 * 8 * (2 * 1024 * 2048 * 128 + 2 * 1024 * 2048 * 64)
    c = p.replace(mask="t", seqlen_k=1024)
    area = 1024 * 1025 // 2
    assert flops(c) == 2 * 8 * (2 * area * 128 + 2 * area * 64)


def test_fwd_bytes_and_rates():
    # research/upstream_testing.md 4.9: K/V counted with nhead_k, causal area exact
    p = Problem(batch=1, nhead_q=32, nhead_k=8, seqlen_q=4096, hdim_q=128, mask="t")
    assert bytes_moved(p) == 32 * (2 * 4096 * 128 * 2) + 8 * (2 * 4096 * 128 * 2)
    assert tflops(p, 2.0) == flops(p) / 1e9 / 2.0
    assert gbps(p, 2.0) == bytes_moved(p) / 1e6 / 2.0
    f8 = Problem(dtype="fp8bf16", seqlen_q=10, hdim_q=16)  # 1-byte inputs, 2-byte output
    assert bytes_moved(f8) == 1 * (10 * 16 + 2 * 10 * 16) + 1 * (10 * 16 + 10 * 16)


def test_group_mode_sums_sequences():
    p = Problem(mode="group", batch=2, nhead_q=2, seqlens_q=(3, 5), seqlens_k=(7, 2), hdim_q=16, mask="b")
    exp = sum(2 * (2 * p.mask.unmasked_area(q, k) * 16 * 2) for q, k in [(3, 7), (5, 2)])
    assert flops(p) == exp


def test_bwd_counts_and_int64_safety():
    p = Problem(family="bwd", batch=1, nhead_q=4, seqlen_q=100, seqlen_k=50, hdim_q=64, hdim_v=32)
    assert flops(p) == 4 * (3 * 2 * 100 * 50 * 64 + 2 * 2 * 100 * 50 * 32)
    big = Problem(batch=64, nhead_q=128, seqlen_q=1 << 17, hdim_q=256)
    assert flops(big) == 64 * 128 * 4 * (1 << 34) * 256 and flops(big) > 2**56  # Python ints, no int32/64 wrap
    assert bytes_moved(p) == 4 * (
        2 * (100 * 64 + 50 * 64 + 50 * 32) + 2 * (100 * 32 * 2) + 2 * (100 * 64 + 50 * 64 + 50 * 32) + 4 * 100
    )
