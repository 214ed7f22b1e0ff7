"""A kernel child forked before the collection (pytest_ckfmha/isolation.py, warmup.py) knows no item: it runs work
orders (an item's work as picklable data, bound to the process's state in the child), and an item without one is
sent to a fresh child forked after the collection, which finds it by node id."""

from __future__ import annotations

import os
from functools import partial

import pytest

from pytest_ckfmha.isolation import ChildExecutor, ItemResult

COLLECTED: dict[str, str] = {}  # the "collection": filled after the early fork, so only later children see it


def _by_node_id(nodeid: str) -> ItemResult:
    return ItemResult("passed", "passed", "", {"pid": os.getpid(), "how": f"collection:{COLLECTED[nodeid]}"})


def _ordered(state: str, *, value: int) -> ItemResult:
    return ItemResult("passed", "passed", "", {"pid": os.getpid(), "how": f"order:{state}:{value}"})


def _resolve(nodeid: str, order=None):
    if order is not None:
        return partial(order, "the child's state")
    return partial(_by_node_id, nodeid)


@pytest.fixture
def executor():
    COLLECTED.clear()
    ex = ChildExecutor(_resolve)
    yield ex
    ex.close()
    COLLECTED.clear()


def _run(ex: ChildExecutor, nodeid: str, order=None) -> dict:
    status, result, output = ex.run(nodeid, 30, order)
    assert status == "done", (status, result, output)
    assert isinstance(result, ItemResult) and result.verdict == "passed", result
    return result.props


def test_an_early_child_runs_orders_then_gives_way_to_one_that_knows_the_collection(executor):
    executor.prestart(None, early=True)
    assert executor.early
    COLLECTED["a"] = "item a"  # the collection ends after the fork
    first = _run(executor, "a", partial(_ordered, value=1))
    second = _run(executor, "a", partial(_ordered, value=2))
    assert first["how"] == "order:the child's state:1" and second["how"] == "order:the child's state:2"
    assert first["pid"] == second["pid"] != os.getpid()  # one warm child served both
    third = _run(executor, "a")  # no order: the early child cannot find it, a fresh child does
    assert third["how"] == "collection:item a" and third["pid"] not in (first["pid"], os.getpid())
    assert not executor.early and executor.started == 2


def test_an_unpicklable_order_falls_back_to_the_collection(executor):
    executor.prestart(None, early=True)
    COLLECTED["b"] = "item b"
    got = _run(executor, "b", lambda state: None)  # a lambda cannot be pickled
    assert got["how"] == "collection:item b" and executor.started == 2


def test_a_child_forked_after_the_collection_ignores_no_order(executor):
    COLLECTED["c"] = "item c"
    executor.prestart(None, early=False)
    assert not executor.early
    assert _run(executor, "c")["how"] == "collection:item c"
    assert _run(executor, "c", partial(_ordered, value=3))["how"] == "order:the child's state:3"
    assert executor.started == 1


@pytest.mark.parametrize(
    ("category", "ck_smoke", "parity", "isolation", "args", "early"),
    [
        ("smoke", None, None, "child", [], True),
        (None, "fwd", None, "child", [], True),  # CK smoke lines: matrix items with work orders
        (None, "fwd", "tile_example", "child", [], False),  # CK smoke lines as parity items: no work orders
        (None, None, "tile_example", "child", [], False),
        ("smoke", None, None, "inline", [], False),
        ("smoke", None, None, "child", ["tests/sub"], False),  # paths: conftests that load during the collection
    ],
)
def test_which_runs_fork_their_child_before_the_collection(category, ck_smoke, parity, isolation, args, early):
    from types import SimpleNamespace

    from pytest_ckfmha.warmup import forks_early

    s = SimpleNamespace(category=category, ck_smoke=ck_smoke, parity=parity, isolation=isolation)
    assert forks_early(s, args) is early
