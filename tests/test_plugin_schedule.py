"""Nightly sweeps at GPU speed, the scheduler's side: each kernel built once and then spread over the workers,
longest first (pytest_ckfmha/scheduling.py); costs from the model or a previous report's durations
(pytest_ckfmha/costs.py); shards balanced by them, ``--ckfmha-shard auto`` from the CI's variables and huge shard
counts refused (pytest_ckfmha/sharding.py)."""

from __future__ import annotations

import pytest

from pytest_ckfmha.costs import costs, durations_of, row_seconds
from pytest_ckfmha.scheduling import BuildOnceScheduling, WorkPool, kernel_groups, memory_budget_bytes
from pytest_ckfmha.sharding import MAX_SHARDS, assign_shards, parse_shard, shard_from_env


class _Node:
    def __init__(self, name):
        self.gateway = type("G", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def _start(nodes, collection, cost=None, memory=None, budget=None):
    s = BuildOnceScheduling(
        len(nodes),
        costs=(lambda ids: dict(cost)) if cost else None,
        memory=(lambda ids: dict(memory)) if memory else None,
        budget=budget,
    )
    for n in nodes:
        s.add_node(n)
        s.add_node_collection(n, collection)
    s.schedule()
    return s


def _simulate(s, nodes, collection, stop_after=None, running=None):
    """Run the protocol as xdist's workers do (a worker runs an item once it knows the next one, or is shut down);
    one item per step, round-robin over the workers. Returns [(worker, node id)] in completion order.  ``running``:
    called with the node ids the workers run in each round (one per worker that can run)."""
    done: list[tuple[str, str]] = []
    ran = {n: 0 for n in nodes}
    while s.has_pending:
        progressed = False
        if running is not None:
            running([collection[n.sent[ran[n]]] for n in nodes
                     if n.sent[ran[n] :] and (len(n.sent[ran[n] :]) >= 2 or n.shutting_down)])  # fmt: skip
        for n in nodes:
            queue = n.sent[ran[n] :]
            if queue and (len(queue) >= 2 or n.shutting_down):
                done.append((n.gateway.id, collection[queue[0]]))
                ran[n] += 1
                s.mark_test_complete(n, queue[0])
                progressed = True
                if stop_after is not None and len(done) >= stop_after:
                    return done
        assert progressed, f"deadlock: {[(n.gateway.id, n.sent[ran[n] :]) for n in nodes]}"
    return done


def test_a_kernel_is_built_by_its_first_item_alone_then_its_items_spread():
    coll = [f"ckfmha::s{i}::fwd.k0" for i in range(6)] + [f"ckfmha::s{i}::plan" for i in range(6)]
    cost = {n: 10.0 + i for i, n in enumerate(coll)}  # s0's kernel item is the cheapest: it builds
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll, cost)
    assert [coll[i] for i in a.sent] == [coll[0], coll[11]]  # the build, then (held) its costliest sibling
    assert b.sent == []  # nothing to do until the kernel is built
    done = _simulate(s, [a, b], coll)
    assert done[0] == ("gw0", coll[0])
    assert sorted(n for _, n in done) == sorted(coll)
    on_b = [n for w, n in done if w == "gw1"]
    assert len(on_b) >= 4  # spread after the build: the old scheduler ran all 12 on one worker
    assert s.tests_finished and a.shutting_down and b.shutting_down


def test_items_start_longest_first_and_the_first_builds_early():
    # two kernels of 3 items each and three items of their own (groups of one), with costs
    coll = [
        "ckfmha::a::fwd.k1",
        "ckfmha::b::fwd.k1",
        "ckfmha::c::fwd.k1",
        "ckfmha::d::fwd.k2",
        "ckfmha::e::fwd.k2",
        "ckfmha::f::fwd.k2",
        "tests/t.py::test_small",
        "tests/t.py::test_big",
        "tests/t.py::test_mid",
    ]
    cost = dict(zip(coll, [5, 9, 7, 1, 2, 3, 4, 100, 8], strict=True))
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll, cost)
    first = [coll[a.sent[0]], coll[b.sent[0]]]
    # test_big (100) costs more than either kernel (21, 6): it goes first; then k1's build (its cheapest item)
    assert first == ["tests/t.py::test_big", "ckfmha::a::fwd.k1"]
    order = [coll[i] for n in (a, b) for i in n.sent]
    assert "ckfmha::d::fwd.k2" in order  # k2 builds early, before the cheap items of its own
    done = _simulate(s, [a, b], coll)
    singles = [n for _, n in done if n.startswith("tests/")]
    assert singles == ["tests/t.py::test_big", "tests/t.py::test_mid", "tests/t.py::test_small"]


def test_a_dead_worker_s_item_is_never_rerun_and_its_build_is_redone_elsewhere():
    coll = [f"ckfmha::s{i}::fwd.k{i % 2}" for i in range(6)] + [f"ckfmha::s{i}::plan" for i in range(6)]
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll)
    sent_a = [coll[i] for i in a.sent]
    assert len({kernel_groups(coll)[n] for n in sent_a}) == 1  # a build and a held sibling of it
    crashed = s.remove_node(a)
    assert crashed == sent_a[0]
    a2 = _Node("gw2")
    s.add_node(a2)
    s.add_node_collection(a2, coll)
    s.schedule()
    done = _simulate(s, [a2, b], coll)
    ran = [n for _, n in done]
    assert crashed not in ran and sorted(ran + [crashed]) == sorted(coll)
    assert s.tests_finished


def test_mark_test_pending_queues_the_item_first():
    coll = [f"tests/t.py::test_{i}" for i in range(6)]
    a = _Node("gw0")
    s = _start([a], coll, {n: float(i) for i, n in enumerate(coll)})
    assert [coll[i] for i in a.sent] == [coll[5], coll[4]]  # longest first
    s.mark_test_complete(a, 5)
    assert coll[a.sent[-1]] == coll[3]
    s.mark_test_pending(coll[5])  # a rerun plugin wants test_5 again: it is next, ahead of test_2
    s.mark_test_complete(a, 4)
    assert coll[a.sent[-1]] == coll[5]


def test_costs_from_a_previous_report_replace_the_model():
    rows = [
        {"id": "a::k", "nodeid": "ckfmha::a::k@ck-1", "verdict": "passed", "duration_s": 3.0},
        {"id": "b::k", "nodeid": "ckfmha::b::k", "verdict": "failed", "duration_s": 0, "time_ms": 500, "build_s": 2},
        {"id": "c::k", "nodeid": "ckfmha::c::k", "verdict": "skipped", "duration_s": 0.1},
        {"id": "d::plan", "nodeid": "ckfmha::old::plan", "verdict": "passed", "duration_s": "7"},
    ]
    assert row_seconds(rows[1]) == 2.5 and row_seconds(rows[2]) is None
    d = durations_of(rows)
    got = costs(["ckfmha::a::k", "ckfmha::b::k", "ckfmha::c::k", "ckfmha::d::plan"], lambda n: 1e9, d)
    # c has no time: the mean of the measured ones; d is found by its report id
    assert got == {"ckfmha::a::k": 3.0, "ckfmha::b::k": 2.5, "ckfmha::c::k": 12.5 / 3, "ckfmha::d::plan": 7.0}
    assert costs(["ckfmha::z::k"], lambda n: 42.0, d) == {"ckfmha::z::k": 42.0}  # nothing measured: the model


def test_durations_rebalance_shards():
    ids = [f"ckfmha::s{i}::fwd.k{i}" for i in range(4)]
    model = {n: 1.0 for n in ids}
    assert assign_shards(ids, model, 2) == {ids[0]: 1, ids[1]: 2, ids[2]: 1, ids[3]: 2}
    measured = dict(zip(ids, [1.0, 10.0, 9.0, 1.0], strict=True))
    got = assign_shards(ids, measured, 2)
    assert got == {ids[1]: 1, ids[2]: 2, ids[0]: 2, ids[3]: 1}  # LPT: 10 + 1 | 9 + 1
    assert got == assign_shards(list(reversed(ids)), measured, 2)  # deterministic whatever the order


@pytest.mark.parametrize(
    "env, total, want",
    [
        ({"CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "4"}, None, (3, 4)),
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "1", "JOB_COMPLETION_INDEX": "5"}, None, (1, 1)),
        ({"JOB_COMPLETION_INDEX": "0"}, 8, (1, 8)),
        ({"JOB_COMPLETION_INDEX": "7"}, 8, (8, 8)),
    ],
)
def test_shard_auto_reads_the_ci_variables(env, total, want):
    assert parse_shard("auto", total, env) == want == shard_from_env(env, total)


@pytest.mark.parametrize(
    "env, total, words",
    [
        ({}, None, "finds no CI variables: set CI_NODE_INDEX and CI_NODE_TOTAL"),
        ({"CI_NODE_INDEX": "2"}, None, "CI_NODE_TOTAL is unset"),
        ({"CI_NODE_INDEX": "5", "CI_NODE_TOTAL": "4"}, None, "1 <= CI_NODE_INDEX <= CI_NODE_TOTAL; they are 5 and 4"),
        ({"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "4"}, None, "$CI_NODE_INDEX, which is 'x'"),
        ({"JOB_COMPLETION_INDEX": "2"}, None, "give the count with --ckfmha-shard-total N"),
        ({"JOB_COMPLETION_INDEX": "8"}, 8, "JOB_COMPLETION_INDEX < --ckfmha-shard-total; they are 8 and 8"),
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "99999999999999999999"}, None, "needs 1 <= N <= 10,000"),
    ],
)
def test_shard_auto_refuses_without_usable_variables(env, total, words):
    with pytest.raises(pytest.UsageError) as e:
        parse_shard("auto", total, env)
    assert str(e.value).startswith("--ckfmha-shard: 'auto") and words in str(e.value)


@pytest.mark.parametrize("value", ["1/100000000", "1/99999999999999999999", f"1/{MAX_SHARDS + 1}", "0/3", "2/1", "x"])
def test_bad_shard_values_are_usage_errors(value):
    with pytest.raises(pytest.UsageError) as e:
        parse_shard(value, None, {})
    assert str(e.value).startswith(f"--ckfmha-shard: {value!r} ")


def test_the_largest_shard_count_is_accepted():
    assert parse_shard(f"{MAX_SHARDS}/{MAX_SHARDS}", None, {}) == (MAX_SHARDS, MAX_SHARDS)


@pytest.mark.parametrize(
    "setting, backend, gpu, want",
    [
        ("auto", "cpu", "", "numpy"),
        ("auto", "triton", "0:uuid", "torch:cuda"),
        ("auto", "hip", "", "numpy"),  # torch sees no GPU
        ("auto", "testref", "0:uuid", "numpy"),  # not a GPU backend
        ("torch", "cpu", "", "torch:cpu"),
        ("torch", "triton", "0:uuid", "torch:cuda"),
        ("numpy", "triton", "0:uuid", "numpy"),
    ],
)
def test_which_reference_judges_the_item(monkeypatch, setting, backend, gpu, want):
    from pytest_ckfmha import execute

    monkeypatch.setattr(execute, "torch_gpu", lambda: gpu)
    assert execute.reference_choice(setting, backend) == want


def test_each_reference_has_its_own_cache_key_and_numpy_keeps_the_old_one():
    from ckfmha.problem import Problem
    from pytest_ckfmha.refcache import ref_key

    p = Problem(batch=1, nhead_q=1, seqlen_q=8, hdim_q=32)
    keys = {r: ref_key(p, 0, "ocp", r) for r in ("numpy", "torch:cuda", "torch:cpu")}
    assert len(set(keys.values())) == 3 and keys["numpy"] == ref_key(p, 0, "ocp")


def test_the_worker_is_named(monkeypatch):
    from pytest_ckfmha.execute import worker_id

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert worker_id() == "gw3"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert worker_id() == "main"


def test_a_worker_waiting_for_a_build_is_shut_down_when_nothing_is_left_for_it():
    # gw0 gets the big single item, gw1 the kernel's build and then its held sibling: gw0, whose last item runs only
    # once it knows the next one or is shut down, must be shut down when the pool runs dry
    coll = ["tests/t.py::test_big", "ckfmha::a::fwd.k1", "ckfmha::b::fwd.k1"]
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll, {coll[0]: 100.0, coll[1]: 1.0, coll[2]: 2.0})
    assert [coll[i] for i in a.sent] == [coll[0]] and [coll[i] for i in b.sent] == [coll[1], coll[2]]
    done = _simulate(s, [a, b], coll)
    assert sorted(n for _, n in done) == sorted(coll) and a.shutting_down and b.shutting_down


def test_the_controller_costs_items_by_their_shape_s_flops_or_by_durations(monkeypatch):
    from types import SimpleNamespace

    from ckfmha.problem import Problem
    from ckfmha.work import flops
    from pytest_ckfmha import state
    from pytest_ckfmha.costs import nodeid_costs

    small, big = (
        Problem(batch=1, nhead_q=1, seqlen_q=16, hdim_q=32),
        Problem(batch=2, nhead_q=4, seqlen_q=64, hdim_q=64),
    )
    specs = [SimpleNamespace(shape_id=sid, shape=SimpleNamespace(problem=p)) for sid, p in (("s", small), ("b", big))]
    settings = SimpleNamespace(category="full", ck_smoke=None, parity=None, durations=None)
    st = SimpleNamespace(settings=settings, specs=lambda: specs)
    monkeypatch.setattr(state, "has_state", lambda config: True)
    monkeypatch.setattr(state, "get_state", lambda config: st)
    ids = ["ckfmha::s::fwd.k1", "ckfmha::b::fwd.k1", "ckfmha::b::plan", "tests/t.py::test_x"]
    got = nodeid_costs(object(), ids)
    assert got == {ids[0]: flops(small) + 1.0, ids[1]: flops(big) + 1.0, ids[2]: flops(big) + 1.0, ids[3]: 1.0}
    monkeypatch.setattr(settings, "durations", "prev.json")  # the measured seconds of two items:
    monkeypatch.setattr("pytest_ckfmha.costs.load_durations", lambda path: {ids[0]: 9.0, ids[2]: 3.0})
    # the others get their mean
    assert nodeid_costs(object(), ids) == {ids[0]: 9.0, ids[1]: 6.0, ids[2]: 3.0, ids[3]: 6.0}


def test_items_that_would_exceed_the_memory_budget_wait_and_one_always_runs():
    # 4 workers; six huge items (60 each) and twelve small ones (1 each), budget 100: never two huge items at once,
    # the small ones fill the other workers meanwhile, and a 150-item (over the whole budget) still runs, alone
    coll = [f"tests/t.py::test_huge{i}" for i in range(6)] + [f"tests/t.py::test_small{i}" for i in range(12)]
    coll.append("tests/t.py::test_giant")
    memory = {n: 60.0 if "huge" in n else 1.0 for n in coll}
    memory["tests/t.py::test_giant"] = 150.0
    cost = {n: memory[n] for n in coll}
    nodes = [_Node(f"gw{i}") for i in range(4)]
    s = _start(nodes, coll, cost, memory, budget=100.0)
    peaks: list[float] = []
    done = _simulate(s, nodes, coll, running=lambda ids: peaks.append(sum(memory[n] for n in ids)))
    assert sorted(n for _, n in done) == sorted(coll)
    rounds_with_giant = [p for p in peaks if p >= 150]
    assert rounds_with_giant and all(p == 150 for p in rounds_with_giant)  # the giant ran alone
    assert max(p for p in peaks if p < 150) <= 100  # otherwise within the budget
    unlimited = _start([_Node(f"gw{i}") for i in range(4)], coll, cost)
    wide: list[float] = []
    _simulate(unlimited, unlimited.nodes, coll, running=lambda ids: wide.append(sum(memory[n] for n in ids)))
    assert max(wide) > 150  # without a budget the huge items start together (the run a budget prevents)


def test_memory_budget_setting_to_bytes():
    assert memory_budget_bytes(("share", 0.5), total=64e9) == 32e9
    assert memory_budget_bytes(("bytes", 48e9), total=64e9) == 48e9
    assert memory_budget_bytes(None, total=64e9) is None


def _shape(nid):
    return nid.split("::")[1]


def test_shape_affinity_keeps_a_shape_s_items_on_one_worker():
    # two shapes of three kernel items each (each kernel a group of one: all released at once); longest first alone
    # would interleave them (gw0: s1 k1, s2 k3, s2 k5; gw1: s2 k2, s1 k4, s1 k6): each worker would generate both
    # shapes' inputs and references
    coll = [f"ckfmha::s1::fwd.k{i}" for i in (1, 4, 6)] + [f"ckfmha::s2::fwd.k{i}" for i in (2, 3, 5)]
    cost = {f"ckfmha::s{s}::fwd.k{i}": 10.0 - i for s, i in ((1, 1), (2, 2), (2, 3), (1, 4), (2, 5), (1, 6))}
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll, cost)
    assert [coll[i] for i in a.sent] == ["ckfmha::s1::fwd.k1", "ckfmha::s1::fwd.k4"]  # then its shape's next
    assert [coll[i] for i in b.sent] == ["ckfmha::s2::fwd.k2", "ckfmha::s2::fwd.k3"]
    done = _simulate(s, [a, b], coll)
    assert sorted(n for _, n in done) == sorted(coll)
    assert {w: {_shape(n) for v, n in done if v == w} for w in ("gw0", "gw1")} == {"gw0": {"s1"}, "gw1": {"s2"}}
    assert [n for w, n in done if w == "gw0"] == ["ckfmha::s1::fwd.k1", "ckfmha::s1::fwd.k4", "ckfmha::s1::fwd.k6"]


def test_shape_affinity_takes_only_released_items_that_fit():
    coll = [
        "ckfmha::s0::fwd.k3",  # k3's build (the cheapest of its group): s1's k3 item is held until it completes
        "ckfmha::s1::fwd.k1",
        "ckfmha::s1::fwd.k2",
        "ckfmha::s1::fwd.k3",
        "ckfmha::s1::fwd.k4",  # k4's build, not started: k4 is unbuilt
        "ckfmha::s2::fwd.k4",
        "tests/t.py::test_x",
    ]
    cost = dict(zip(coll, [1.0, 2.0, 3.0, 50.0, 4.0, 60.0, 100.0], strict=True))
    pool = WorkPool(coll, kernel_groups(coll), cost)
    units: dict[str, list[str]] = {}
    for nid in coll:
        units.setdefault(pool.groups[nid], []).append(nid)
    for g, ids in units.items():
        pool.add_group(g, ids)
    assert pool.take(lambda n: n == coll[0]) == coll[0]  # k3 builds: s1's k3 item is held
    big = {"ckfmha::s1::fwd.k1", "ckfmha::s1::fwd.k2"}  # over the memory budget
    # s1's released items do not fit, its k3 item is held, its k4 item is an unbuilt group's: the longest first
    assert pool.take(lambda n: n not in big, prefer=("s1",)) == "tests/t.py::test_x"
    assert len(pool) == 5
    # once they fit they go ahead of k4's build (total cost 64), costliest first
    assert pool.take(prefer=("s1",)) == "ckfmha::s1::fwd.k2"
    assert pool.take(prefer=("s1",)) == "ckfmha::s1::fwd.k1"
    assert pool.take(prefer=("s1",)) == "ckfmha::s1::fwd.k4"  # the order's next: k4 builds
    assert pool.take(prefer=("s1",)) is None and len(pool) == 2  # only held siblings are left
    assert pool.take_held([coll[0]], lambda n: True) == "ckfmha::s1::fwd.k3"  # the build's worker takes it, as before


def test_shape_affinity_sends_every_item_once_and_the_queue_length_stays_right():
    # 4 shapes x (3 kernels shared by the shapes + plan), three workers: builds, held siblings, released items and
    # affinity all at once; costs interleave the shapes
    coll = [f"ckfmha::s{s}::{k}" for s in range(4) for k in ("fwd.k0", "fwd.k1", "fwd.k2", "plan")]
    cost = {n: float((7 * i) % 11 + 1) for i, n in enumerate(coll)}
    nodes = [_Node(f"gw{i}") for i in range(3)]
    s = _start(nodes, coll, cost)

    def check(running):
        sent = [coll[i] for n in nodes for i in n.sent]
        assert len(sent) == len(set(sent))  # none sent twice
        assert len(s.pool) == len(coll) - len(sent)  # none lost nor counted twice (stale heap entries skipped)

    done = _simulate(s, nodes, coll, running=check)
    assert sorted(n for _, n in done) == sorted(coll)
    assert sorted(i for n in nodes for i in n.sent) == list(range(len(coll)))  # every item sent exactly once
    assert len(s.pool) == 0 and s.tests_finished and all(n.shutting_down for n in nodes)
    pairs = sum(_shape(coll[x]) == _shape(coll[y]) for n in nodes for x, y in zip(n.sent, n.sent[1:]))
    assert pairs >= 6  # affinity took items, each leaving a stale heap entry (7 pairs; longest first alone: 3)
    # an item taken through affinity leaves a stale heap entry: released again (a dead worker's pending item,
    # mark_test_pending) it is taken once, at its new place
    ids = [f"ckfmha::s{i}::fwd.k{i}" for i in (1, 2)] + [f"tests/t.py::test_{i}" for i in range(2)]
    pool = WorkPool(ids, kernel_groups(ids), dict(zip(ids, [1.0, 2.0, 3.0, 4.0], strict=True)))
    for nid in ids:
        pool.add_group(nid, [nid])
    assert pool.take() == ids[3]
    assert pool.take(prefer=("s1",)) == ids[0] and pool.take(prefer=("s2",)) == ids[1] and len(pool) == 1
    pool.give_back(ids[3], [ids[0]])  # the worker died running test_1, with s1's item pending
    pool.release(ids[1], first=True)  # a rerun plugin wants s2's item again
    assert len(pool) == 3
    assert [pool.take() for _ in range(4)] == [ids[1], ids[2], ids[0], None] and len(pool) == 0


def test_a_shape_another_worker_holds_is_passed_over_while_anything_else_is_admitted():
    coll = ["ckfmha::s1::fwd.k1", "ckfmha::s2::fwd.k2", "ckfmha::s3::fwd.k3"]
    pool = WorkPool(coll, kernel_groups(coll), dict(zip(coll, [30.0, 20.0, 10.0], strict=True)))
    for nid in coll:
        pool.add_group(nid, [nid])
    assert pool.take(avoid={"s1"}) == "ckfmha::s2::fwd.k2"  # s1's costlier item waits for the worker holding s1
    assert pool.take(lambda n: n != "ckfmha::s3::fwd.k3", avoid={"s1"}) == "ckfmha::s1::fwd.k1"  # nothing else fits
    assert pool.take(avoid={"s3"}) == "ckfmha::s3::fwd.k3" and len(pool) == 0  # nothing else is left


def test_a_shape_s_item_released_later_waits_for_the_worker_that_holds_the_shape():
    # s1's k2 item is held until k2's build (on s0, cheaper) completes; by then gw0 runs s1's k1 item and holds s1:
    # gw1, asking first, takes other work and leaves s1's k2 item to gw0
    coll = ["ckfmha::s0::fwd.k2", "ckfmha::s1::fwd.k1", "ckfmha::s1::fwd.k2"]
    coll += [f"ckfmha::x{i}::fwd.k{10 + i}" for i in range(4)]
    cost = {coll[0]: 1.0, coll[1]: 100.0, coll[2]: 90.0, **{n: 2.0 for n in coll[3:]}}
    a, b = _Node("gw0"), _Node("gw1")
    s = _start([a, b], coll, cost)
    sent = lambda node: [coll[i] for i in node.sent]  # noqa: E731
    assert sent(a)[0] == "ckfmha::s1::fwd.k1" and sent(b)[0] == "ckfmha::s0::fwd.k2"
    s.mark_test_complete(b, b.sent[0])  # k2 built: s1's k2 item is released while gw0 holds s1
    assert "ckfmha::s1::fwd.k2" not in sent(b) and len(sent(b)) == 3
    s.mark_test_complete(a, a.sent[0])
    assert sent(a)[2] == "ckfmha::s1::fwd.k2"  # gw0 asks again: its shape's item first


def test_a_build_of_a_held_shape_is_never_passed_over():
    # builds happen early whatever shape they are of: only released items wait for the worker holding their shape
    coll = ["ckfmha::s1::fwd.k1", "ckfmha::s2::fwd.k1", "ckfmha::s3::fwd.k3"]
    pool = WorkPool(coll, kernel_groups(coll), dict(zip(coll, [30.0, 40.0, 10.0], strict=True)))
    pool.add_group("kernel:fwd.k1", coll[:2])  # k1 unbuilt: its cheapest item (s1's) builds it
    pool.add_group(coll[2], coll[2:])
    assert pool.take(avoid={"s1"}) == "ckfmha::s1::fwd.k1"
