"""Nightly sweeps at GPU speed, inner pytest runs: one kernel's items spread over both xdist workers; each item
records its worker, GPU and reference; ``--ckfmha-reference torch`` judges as numpy does; ``--ckfmha-shard auto``
and huge shard counts; a previous report's durations rebalance the shards."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]

CI_VARS = ("CI_NODE_INDEX", "CI_NODE_TOTAL", "JOB_COMPLETION_INDEX")

# one kernel serves every shape: with one kernel per shape, the whole run is one kernel group
ONE_KERNEL_MATRIX = """\
schema: 1
family: fwd
entries:
  - name: lens
    category: smoke
    batch: 1
    nhead_q: 2
    hdim_q: 64
    product: {seqlen_q: [16, 24, 32, 40, 48, 56]}
"""


def _props(path) -> dict[str, dict[str, str]]:
    """JUnit XML: test (class name and name) -> its properties."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        out[f"{case.get('classname')}::{case.get('name')}"] = {
            str(p.get("name")): str(p.get("value")) for p in case.iter("property")
        }
    return out


def _no_ci(monkeypatch):
    for v in CI_VARS:
        monkeypatch.delenv(v, raising=False)


def test_one_kernel_s_items_spread_over_both_workers_and_record_them(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base = make_project(pytester, monkeypatch, tmp_path)
    pytester.makefile(".yaml", one=ONE_KERNEL_MATRIX)
    base[base.index("small.yaml")] = "one.yaml"
    res = pytester.runpytest_subprocess(
        *base,
        "--ckfmha-category",
        "smoke",
        "--ckfmha-max-kernels-per-shape",
        "1",
        "-n",
        "2",
        "-v",
        "--junitxml",
        "j.xml",
    )
    assert res.ret == 0, res.stdout.str()
    assert "scheduling tests via BuildOnceScheduling" in res.stdout.str()
    res.assert_outcomes(passed=12)
    props = _props(pytester.path / "j.xml")
    assert len(props) == 12 and len({p["kernel_id"] for p in props.values()}) == 1  # one kernel group
    workers = [p["worker"] for p in props.values()]
    assert set(workers) == {"gw0", "gw1"} and min(workers.count("gw0"), workers.count("gw1")) >= 2
    assert {p["reference"] for p in props.values()} == {"numpy"}  # auto, not a GPU backend: numpy
    assert {p["gpu"] for p in props.values()} == {""}


def _verdicts(pytester, base, reference: str) -> dict[str, tuple[str, str]]:
    res = pytester.runpytest_subprocess(
        *base, "--ckfmha-category", "full", "--ckfmha-reference", reference, "--junitxml", f"{reference}.xml"
    )
    assert res.ret in (0, 1), res.stdout.str()
    return {n: (p["verdict"], p.get("reference", "")) for n, p in _props(pytester.path / f"{reference}.xml").items()}


@pytest.mark.parametrize("mode", ["ok", "wrong"])
def test_the_torch_reference_on_the_cpu_gives_numpy_s_verdicts(pytester, monkeypatch, tmp_path, mode):
    pytest.importorskip("torch")
    base = make_project(pytester, monkeypatch, tmp_path, mode=mode)
    numpy_run = _verdicts(pytester, base, "numpy")
    torch_run = _verdicts(pytester, base, "torch")
    assert len(numpy_run) == 8 and numpy_run.keys() == torch_run.keys()
    ran = [n for n, (v, _) in numpy_run.items() if v != "skipped"]
    assert (
        len(ran) == 6
        and {numpy_run[n][1] for n in ran} == {"numpy"}
        and {torch_run[n][1] for n in ran} == {"torch:cpu"}
    )
    assert {n: v for n, (v, _) in numpy_run.items()} == {n: v for n, (v, _) in torch_run.items()}
    assert {numpy_run[n][0] for n in ran} == {"passed" if mode == "ok" else "failed"}
    # each reference has its own cache entry (refcache.py): the torch run computed its own
    refs = list((tmp_path / "cache" / "references").glob("*.npz"))
    assert len(refs) == 2 * 3  # 3 shapes, 2 references


def _selected(pytester, base, *args) -> tuple[int, list[str], str]:
    res = pytester.runpytest(*base, "--ckfmha-category", "full", "--collect-only", "-q", *args)
    out = res.stdout.str() + res.stderr.str()
    return res.ret, sorted(line for line in res.stdout.lines if line.startswith("ckfmha::")), out


def test_shard_auto_takes_k_and_n_from_the_ci(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _no_ci(monkeypatch)
    shards = [_selected(pytester, base, "--ckfmha-shard", f"{k}/2")[1] for k in (1, 2)]
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])
    monkeypatch.setenv("CI_NODE_INDEX", "2")
    monkeypatch.setenv("CI_NODE_TOTAL", "2")
    assert _selected(pytester, base, "--ckfmha-shard", "auto")[1] == shards[1]
    _no_ci(monkeypatch)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")  # 0-based
    assert _selected(pytester, base, "--ckfmha-shard", "auto", "--ckfmha-shard-total", "2")[1] == shards[0]
    ret, _, out = _selected(pytester, base, "--ckfmha-shard", "auto")
    assert ret == pytest.ExitCode.USAGE_ERROR and "give the count with --ckfmha-shard-total N" in out
    _no_ci(monkeypatch)
    ret, _, out = _selected(pytester, base, "--ckfmha-shard", "auto")
    assert ret == pytest.ExitCode.USAGE_ERROR
    assert "--ckfmha-shard: 'auto' finds no CI variables: set CI_NODE_INDEX and CI_NODE_TOTAL" in out
    assert "JOB_COMPLETION_INDEX" in out


@pytest.mark.parametrize(
    "args, words",
    [
        (("--ckfmha-shard", "1/100000000"), "--ckfmha-shard: '1/100000000' needs 1 <= N <= 10,000"),
        (("--ckfmha-shard", "1/99999999999999999999"), "--ckfmha-shard: '1/99999999999999999999' needs 1 <= N"),
        (("--ckfmha-shard", "auto", "--ckfmha-shard-total", "99999999999999999999"), "--ckfmha-shard-total: '9999"),
    ],
)
def test_huge_shard_counts_are_usage_errors(pytester, monkeypatch, tmp_path, args, words):
    base = make_project(pytester, monkeypatch, tmp_path)
    _no_ci(monkeypatch)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    ret, _, out = _selected(pytester, base, *args)
    assert ret == pytest.ExitCode.USAGE_ERROR and words in out and "INTERNALERROR" not in out


def test_durations_of_a_previous_report_rebalance_the_shards(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    _no_ci(monkeypatch)
    res = pytester.runpytest(*base, "--ckfmha-category", "full", "--ckfmha-report", "prev.json")
    res.assert_outcomes(passed=6, skipped=2)
    by_model = _selected(pytester, base, "--ckfmha-shard", "1/2")[1]
    in_shard_2 = _selected(pytester, base, "--ckfmha-shard", "2/2")[1]
    doc = json.loads((pytester.path / "prev.json").read_text())
    from pytest_ckfmha.scheduling import kernel_groups

    groups = kernel_groups([r["nodeid"] for r in doc["rows"]])
    # a kernel group shard 2 had by the model takes 100 s now: alone in shard 1 (the costliest group goes first),
    # the rest in shard 2
    slow = groups[in_shard_2[0]]
    for r in doc["rows"]:
        r["duration_s"] = 100.0 if groups[r["nodeid"]] == slow else 0.5
        r["verdict"] = "passed"
    (pytester.path / "prev.json").write_text(json.dumps(doc))
    ret, by_time, out = _selected(pytester, base, "--ckfmha-shard", "1/2", "--ckfmha-durations", "prev.json")
    assert ret == 0, out
    assert by_time == sorted(n for n, g in groups.items() if g == slow) and by_time != by_model
    ret, _, out = _selected(pytester, base, "--ckfmha-durations", "missing.json")
    assert ret == pytest.ExitCode.USAGE_ERROR and "--ckfmha-durations: 'missing.json' is not a report" in out
