"""xdist: -n uses ckfmha's scheduler (kernel groups from node ids, each built once and then spread: more in
test_plugin_schedule*.py; a dead worker's item is failed, not re-run); GPU per worker."""

from __future__ import annotations

import pytest

from pytest_ckfmha.scheduling import BuildOnceScheduling, kernel_groups
from pytest_ckfmha.xdist_support import assign_gpu
from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def test_xdist_run_groups_items_by_kernel(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-category", "full", "-n", "2", "-v", "--ckfmha-report", "r.json"
    )
    assert res.ret == 0, res.stdout.str()
    out = res.stdout.str()
    assert "scheduling tests via BuildOnceScheduling" in out and "@ck-" not in out
    res.assert_outcomes(passed=6, skipped=2)
    import json
    import re

    doc = json.loads((pytester.path / "r.json").read_text())
    rows = doc["rows"]
    # the verbose lines show node ids with '.' turned into '::': map them back through the report's node ids
    nodeid_of = {r["nodeid"].replace("::", "."): r["nodeid"] for r in rows}
    worker_of = {
        nodeid_of[m.group(2).replace("::", ".")]: m.group(1)
        for m in re.finditer(r"\[(gw\d+)\] \[\s*\d+%\] \w+ (\S+)", out)
    }
    assert len(worker_of) == 8
    assert len(set(kernel_groups([r["nodeid"] for r in rows]).values())) == 3
    assert set(worker_of.values()) == {"gw0", "gw1"}  # the first builds of two kernels go to both workers
    # workers' rows carry their device to the controller, which names it in the environment
    assert doc["environment"]["devices"] == ["test device 0"]
    assert {r["device"] for r in rows if r["verdict"] == "passed"} == {"test device 0"}
    assert len(rows) == doc["collected"] == 8


def test_kernel_groups():
    k1 = "ckfmha::fwd-a::fwd.k1"
    ids = [
        k1,
        "ckfmha::fwd-a::fwd.k2",
        "ckfmha::fwd-a::plan",
        "ckfmha::fwd-b::fwd.k1",
        "ckfmha::fwd-b::plan",
        "ckfmha::fwd-c::plan",
        "tests/test_x.py::test_y",
        "ckfmha-parity::torch::default-01-x",
    ]
    g = kernel_groups(ids)
    assert (
        g[k1] == g["ckfmha::fwd-a::plan"] == g["ckfmha::fwd-b::fwd.k1"] == g["ckfmha::fwd-b::plan"] == "kernel:fwd.k1"
    )
    assert g["ckfmha::fwd-a::fwd.k2"] == "kernel:fwd.k2"
    assert g["ckfmha::fwd-c::plan"] == "ckfmha::fwd-c::plan"  # a shape without kernel items: a group of one
    assert g["tests/test_x.py::test_y"] == "tests/test_x.py::test_y"


class _Node:
    def __init__(self, name):
        self.gateway = type("G", (), {"id": name})()
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent.append(list(indices))

    def shutdown(self):
        self.shutting_down = True


def _make(nodes, collection):
    s = BuildOnceScheduling(len(nodes))
    for n in nodes:
        s.add_node(n)
        s.add_node_collection(n, collection)
    s.schedule()
    return s


def test_scheduler_sends_builds_first_and_never_reruns_a_crashed_item():
    coll = [f"ckfmha::s{i}::fwd.k{i % 3}" for i in range(9)] + [f"ckfmha::s{i}::plan" for i in range(9)]
    a, b = _Node("gw0"), _Node("gw1")
    s = _make([a, b], coll)
    sent_a = [coll[i] for batch in a.sent for i in batch]
    first_b = coll[b.sent[0][0]]
    groups = kernel_groups(coll)
    assert len({groups[n] for n in sent_a + [first_b]}) == 3  # the three kernels' builds, before any sibling
    # gw0 dies while running its first item: it is reported and never sent again
    crashed = s.remove_node(a)
    assert crashed == sent_a[0]
    a2 = _Node("gw2")
    s.add_node(a2)
    s.add_node_collection(a2, coll)
    s.schedule()
    resent = [coll[i] for batch in a2.sent + b.sent for i in batch]
    assert crashed not in resent and set(sent_a[1:]) <= set(resent)
    # finish everything: each node completes what it was sent until nothing is pending
    while s.has_pending:
        for node in (a2, b):
            for batch in list(node.sent):
                for i in batch:
                    s.mark_test_complete(node, i)
    assert s.tests_finished and not len(s.pool)
    every = [coll[i] for node in (a, a2, b) for batch in node.sent for i in batch]
    assert sorted(every) == sorted(coll + sent_a[1:])  # re-queued items sent twice (second time on a live node)


@pytest.mark.parametrize(
    "env, worker, count, want",
    [
        ({}, "gw3", 4, "3"),
        ({}, "gw5", 4, "1"),
        ({}, "gw0", 1, None),  # one GPU: nothing to do
        ({}, "master", 4, None),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, "gw1", 8, "3"),  # index into the outer list
        ({"HIP_VISIBLE_DEVICES": "4,5,6"}, "gw4", 8, "5"),
        ({"CUDA_VISIBLE_DEVICES": "7"}, "gw1", 8, None),  # a single outer device is kept
    ],
)
def test_gpu_per_worker(env, worker, count, want):
    environ = dict(env)
    got = assign_gpu(environ, worker, count=lambda: count)
    if want is None:
        assert got == {} and environ == env
    else:
        assert environ["CUDA_VISIBLE_DEVICES"] == environ["HIP_VISIBLE_DEVICES"] == want
