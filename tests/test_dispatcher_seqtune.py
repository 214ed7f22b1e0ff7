"""Dispatcher seqtune over the sm90 (Triton) kernel space: short masked problems take the 64-row tile through the
``short_query_tiles`` rules of data/heuristics.yaml; the rules' file is validated like every data file."""

from __future__ import annotations

from functools import lru_cache

import pytest

from ckfmha.dispatcher import Dispatcher, short_query_limit
from ckfmha.heuristics import Heuristics, HeuristicsError, load_heuristics
from ckfmha.problem import Problem
from ckfmha.registry import Registry


@lru_cache(maxsize=1)
def sm90() -> Dispatcher:
    return Dispatcher(Registry.from_enumeration("sm90", mask_mode="generic"), num_cus=132)


def tile(hdim: int, seqlen: int, mask: str) -> tuple[int, int]:
    p = Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=seqlen, seqlen_k=seqlen, hdim_q=hdim, mask=mask)
    return tuple(sm90().select(p).stages[0].kernel.algorithm.tile[:2])


@pytest.mark.parametrize("hdim", [64, 128])
def test_short_masked_problems_take_the_small_query_tile(hdim: int) -> None:
    assert tile(hdim, 1024, "b") == (64, 64)
    assert tile(hdim, 2048, "t") == (64, 64)
    assert tile(hdim, 4096, "b") == (128, 128)  # past the rule's 2048 rows: the big tile again
    assert tile(hdim, 1024, "0") == (128, 128)  # no mask: the rule does not apply


def test_the_rule_is_what_decides() -> None:
    d256 = (
        sm90()
        .select(Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=1024, seqlen_k=1024, hdim_q=256, mask="b"))
        .stages[0]
        .kernel
    )
    assert tuple(d256.algorithm.tile[:2]) == (128, 64) and short_query_limit(d256) == 0  # the rule stops at d128
    d128 = (
        sm90()
        .select(Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=1024, seqlen_k=1024, hdim_q=128, mask="b"))
        .stages[0]
        .kernel
    )
    assert short_query_limit(d128) == 2048


def test_without_the_rule_a_short_masked_problem_keeps_the_big_tile() -> None:
    real = load_heuristics()
    no_rule = Heuristics("test: no short_query_tiles", real.rules, ())
    d = Dispatcher(sm90().registry, num_cus=132, heuristics=no_rule)
    p = Problem(dtype="fp16", batch=2, nhead_q=4, seqlen_q=1024, seqlen_k=1024, hdim_q=128, mask="b")
    assert tuple(d.select(p).stages[0].kernel.algorithm.tile[:2]) == (128, 128)


@pytest.mark.parametrize(
    "body, words",
    [
        ('short_query_tiles:\n  - {when: "c.mask !=", max_seqlen_q: 2048}\n', "short_query_tiles[0].when"),
        (
            "short_query_tiles:\n  - {when: \"c.mask != 'none'\", max_seqlen_q: big}\n",
            "short_query_tiles[0].max_seqlen_q: expected an integer, found 'big'",
        ),
        (
            "short_query_tiles:\n  - {when: \"c.mask != 'none'\", max_seqlen_q: 2048, limit: 3}\n",
            "short_query_tiles[0]: unknown key(s) 'limit'",
        ),
        ("short_query_tiles: {when: x}\n", "short_query_tiles: expected a list"),
        ("tiles_short: []\n", "top level: unknown key(s) 'tiles_short'"),
    ],
)
def test_malformed_heuristics_file_names_the_entry(tmp_path, body: str, words: str) -> None:
    (tmp_path / "heuristics.yaml").write_text("schema: 1\nrules: []\n" + body)
    with pytest.raises(HeuristicsError) as err:
        load_heuristics(tmp_path / "heuristics.yaml")
    assert words in str(err.value) and "heuristics.yaml" in str(err.value)
