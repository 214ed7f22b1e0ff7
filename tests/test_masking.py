import numpy as np
import pytest

from ckfmha.masking import MaskError, MaskKind, MaskSpec


def brute(y, x, sq, sk):
    return np.array([[max(0, i + 1 - y) <= j < min(i + x, sk) for j in range(sk)] for i in range(sq)])


@pytest.mark.parametrize(
    "text,kind,lr",
    [
        ("0", MaskKind.NONE, None),
        ("1", MaskKind.TOP_LEFT, (-1, 0)),
        ("t", MaskKind.TOP_LEFT, (-1, 0)),
        ("2", MaskKind.BOTTOM_RIGHT, (-1, 0)),
        ("b", MaskKind.BOTTOM_RIGHT, (-1, 0)),
        ("t:3,5", MaskKind.TOP_LEFT, (3, 5)),
        ("b:10,11", MaskKind.BOTTOM_RIGHT, (10, 11)),
        ("xt:4", MaskKind.TOP_LEFT, (2, 1)),
        ("xb:16", MaskKind.BOTTOM_RIGHT, (8, 7)),
        ("xt:-1", MaskKind.TOP_LEFT, (-1, 0)),
        ("t:-1,0", MaskKind.TOP_LEFT, (-1, 0)),
    ],
)
def test_parse(text, kind, lr):
    m = MaskSpec.parse(text)
    assert m.kind is kind
    if lr:
        assert (m.left, m.right) == lr
    assert MaskSpec.parse(m.to_ck()) == m


def test_causal_equivalences_and_printing():
    assert MaskSpec.parse("1") == MaskSpec.parse("t") == MaskSpec.parse("t:-1,0") == MaskSpec.parse("xt:-1")
    assert MaskSpec.parse("2") == MaskSpec.parse("b:-1,0") == MaskSpec.parse("xb:-1")
    assert MaskSpec.parse("t").ck_printed() == "t(-1:0)"
    assert MaskSpec.parse("g:3,4").ck_printed() == "g(3:4)"
    assert MaskSpec.parse("0").ck_printed() == "n"


@pytest.mark.parametrize("bad", ["3", "t:1", "q:1,2", "t:a,b", "xt:z", "g:-1,-1", "t:-1,-1"])
def test_parse_errors(bad):
    with pytest.raises(MaskError, match="mask"):
        MaskSpec.parse(bad)


def test_coordinates_match_ck():
    # CK: causal top-left -> (y, x) = (sq, 1); causal bottom-right -> (sq, sk - sq + 1)
    assert MaskSpec.causal().coordinates(5, 8) == (5, 1)
    assert MaskSpec.causal(True).coordinates(5, 8) == (5, 4)
    # block_masking.hpp picture: l=1/r=3 top-left is x=4,y=2; l=4/r=2 bottom-right on 5x8 is x=6,y=2
    assert MaskSpec.window(1, 3).coordinates(5, 8) == (2, 4)
    assert MaskSpec.window(4, 2, bottom_right=True).coordinates(5, 8) == (2, 6)


@pytest.mark.parametrize("spec", ["t", "b", "t:3,5", "b:4,35", "b:0,0", "t:0,2", "g:2,3", "xb:5"])
@pytest.mark.parametrize("sq,sk", [(5, 8), (8, 5), (1, 10), (7, 7), (3, 0)])
def test_key_range_matches_formula(spec, sq, sk):
    m = MaskSpec.parse(spec)
    y, x = m.coordinates(sq, sk)
    want = brute(y, x, sq, sk).reshape(sq, sk)
    assert np.array_equal(m.allowed(sq, sk), want)
    assert m.unmasked_area(sq, sk) == int(want.sum())


def test_generic_mask_is_the_kernels_bottom_right_window():
    # mask.hpp: g:y,x stores left = y, right = x; the kernels build a bottom-right window from them
    # (make_generic_attention_mask_from_lr_window(..., mask_type == MASK_FROM_TOP_LEFT) is false for g)
    m = MaskSpec.parse("g:2,1")
    assert m.kind is MaskKind.GENERIC and (m.y, m.x) == (2, 1) and m.kernel_window() == (2, 1, False)
    assert m.coordinates(4, 4) == (3, 2)
    assert m.coordinates(3, 9) == (1 + 2 + 3 - 9, 1 + 1 + 9 - 3) == MaskSpec.window(2, 1, True).coordinates(3, 9)
    assert [np.flatnonzero(r).tolist() for r in m.allowed(4, 4)] == [[0, 1], [0, 1, 2], [0, 1, 2, 3], [1, 2, 3]]
    # negative = unbounded, as for a window: left -> sk - 1, right -> sq - 1
    assert MaskSpec.parse("g:-1,0").allowed(5, 8).tolist() == MaskSpec.causal(True).allowed(5, 8).tolist()
    with pytest.raises(MaskError, match="no mask has no window"):
        MaskSpec().kernel_window()


def test_bottom_right_semantics():
    a = MaskSpec.causal(True).allowed(3, 6)
    assert a[-1].all() and a[0].sum() == 4  # last query sees every key
    a = MaskSpec.causal(True).allowed(6, 3)
    assert not a[:3].any() and a[3:].any()  # sq > sk: first rows fully masked


def test_area_large_is_exact():
    m = MaskSpec.causal()
    assert m.unmasked_area(100_000, 100_000) == 100_000 * 100_001 // 2
    assert MaskSpec().unmasked_area(100_000, 70_000) == 7_000_000_000


@pytest.mark.parametrize(
    "word,want",
    [
        ("none", MaskSpec()),
        ("no_mask", MaskSpec()),
        ("causal", MaskSpec.causal()),
        ("top_left", MaskSpec.causal()),
        ("bottom_right", MaskSpec.causal(True)),
    ],
)
def test_mask_words_are_the_same_vocabulary(word, want):
    assert MaskSpec.parse(word) == want
    assert MaskSpec.parse(f"  {word} ") == want


@pytest.mark.parametrize(
    "text,value",
    [
        ("t:99999999999999999999,0", "99999999999999999999"),
        ("b:0,2147483648", "2147483648"),
        ("g:2147483648,1", "2147483648"),
        ("xt:2147483648", "2147483648"),
        ("t:-2147483649,0", "-2147483649"),
    ],
)
def test_mask_numbers_must_fit_int32(text, value):
    with pytest.raises(MaskError) as e:
        MaskSpec.parse(text)
    msg = str(e.value)
    assert text in msg and f"({value} is outside int32 (-2147483648..2147483647" in msg


@pytest.mark.parametrize("kw,field", [(dict(left=2**31, right=0), "left"), (dict(left=1, right=-(2**31) - 1), "right")])
def test_mask_constructor_bounds(kw, field):
    with pytest.raises(MaskError, match=rf"mask\.{field}: -?\d+ is outside int32"):
        MaskSpec(MaskKind.TOP_LEFT, **kw)
    with pytest.raises(MaskError, match=r"mask\.y: 2147483648 is outside int32"):
        MaskSpec.generic(2**31, 1)


def test_int32_extreme_windows_compute_without_overflow():
    # the largest accepted numbers: key_range used to raise OverflowError for out-of-int32 windows
    for text in ("t:2147483647,0", "b:0,2147483647", "g:2147483647,-2147483645", "t:-2147483648,5"):
        m = MaskSpec.parse(text)
        start, end = m.key_range(4, 6)
        assert start.shape == (4,) and (end >= start).all()
    assert MaskSpec.parse("t:2147483647,0").unmasked_area(3, 3) == 6
