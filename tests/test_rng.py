import numpy as np
import pytest

from ckfmha import rng


def test_philox4x32_10_known_answers():
    # Random123 kat_vectors for philox4x32_10
    assert list(rng.philox4x32([0, 0, 0, 0], [0, 0])) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert list(rng.philox4x32([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2)) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert list(rng.philox4x32([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0])) == [
        0xD16CFE09,
        0x94FDCCEB,
        0x5001E420,
        0x24126EA1,
    ]


def _philox_scalar(ctr, key, rounds):
    """Independent scalar Philox with Python ints."""
    c, k = list(ctr), list(key)
    for r in range(rounds):
        if r:
            k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
    return c


def test_vectorized_matches_scalar_for_7_rounds():
    g = np.random.default_rng(0)
    ctr = g.integers(0, 2**32, size=(5, 4), dtype=np.uint64).astype(np.uint32)
    key = g.integers(0, 2**32, size=(5, 2), dtype=np.uint64).astype(np.uint32)
    got = rng.philox4x32(ctr, key, rounds=7)
    for i in range(5):
        assert list(got[i]) == _philox_scalar([int(x) for x in ctr[i]], [int(x) for x in key[i]], 7)


def test_dropout_mapping_is_documented_contract():
    seed, offset, b, h, nhead = 0x123456789, 77, 1, 2, 3
    rv = rng.dropout_randval(seed, offset, b, h, nhead, np.arange(40), np.arange(70))
    for i, j in [(0, 0), (5, 33), (39, 69), (31, 31), (12, 7)]:
        r, c = i % 32, j % 32
        lane = c + 32 * ((r // 8) % 2)  # CK's order (reference_batched_dropout_randval.hpp)
        byte = 8 * (r // 16) + r % 8
        sub = offset + (b * nhead + h) * 64 + lane
        words = _philox_scalar([sub & 0xFFFFFFFF, sub >> 32, i // 32, j // 32], [seed & 0xFFFFFFFF, seed >> 32], 7)
        assert rv[i, j] == (words[byte // 4] >> (8 * (byte % 4))) & 0xFF


def test_dropout_subranges_and_heads_consistent():
    full = rng.dropout_randval(5, 0, 0, np.arange(2), 2, np.arange(64), np.arange(96))
    part = rng.dropout_randval(5, 0, 0, 1, 2, np.arange(10, 50), np.arange(33, 90))
    assert np.array_equal(full[1, 10:50, 33:90], part)
    assert not np.array_equal(full[0], full[1])


def test_keep_rate_and_threshold():
    assert rng.p_undrop_u8(0.2) == 204
    assert rng.p_undrop_u8(0.0) == 255
    assert rng.p_undrop_u8(0.6) == 101  # CK's float32 arithmetic; float64 would give 102
    rv = rng.dropout_randval(1, 0, 0, np.arange(4), 4, np.arange(128), np.arange(128))
    keep = rng.dropout_keep(rv, 0.2)
    assert abs(keep.mean() - 205 / 256) < 0.01


def test_bad_arguments():
    with pytest.raises(ValueError, match="counter"):
        rng.philox4x32([0, 0, 0], [0, 0])
