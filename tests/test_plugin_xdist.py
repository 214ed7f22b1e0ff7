"""xdist: -n implies loadgroup (node ids carry the kernel group), ids agree across workers; GPU per worker."""

from __future__ import annotations

import pytest

from pytest_ckfmha.xdist_support import assign_gpu
from tests.test_plugin_fixtures import setup

pytest_plugins = ["pytester"]


def test_xdist_loadgroup_run(pytester, monkeypatch, tmp_path):
    pytest.importorskip("xdist")
    base = setup(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest_subprocess(*base, "--ckfmha-category", "smoke", "-n", "2", "-v",
                                        "--ckfmha-report", "r.json")
    assert res.ret == 0, res.stdout.str()
    out = res.stdout.str()
    assert "@ck-" in out  # loadgroup: the node ids carry their kernel group
    res.assert_outcomes(passed=4, skipped=1)
    import json

    doc = json.loads((pytester.path / "r.json").read_text())
    rows = doc["rows"]
    # workers' rows carry their device to the controller, which names it in the environment
    assert doc["environment"]["devices"] == ["test device 0"]
    assert {r["device"] for r in rows if r["verdict"] == "passed"} == {"test device 0"}
    assert len(rows) == 5 and {r["id"].split("::")[0] for r in rows} == {"fwd-fp16-batch-b1h2s16d64",
                                                                       "fwd-fp16-batch-b1h2s16d64-causal"}


@pytest.mark.parametrize("env, worker, count, want", [
    ({}, "gw3", 4, "3"),
    ({}, "gw5", 4, "1"),
    ({}, "gw0", 1, None),  # one GPU: nothing to do
    ({}, "master", 4, None),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, "gw1", 8, "3"),  # index into the outer list
    ({"HIP_VISIBLE_DEVICES": "4,5,6"}, "gw4", 8, "5"),
    ({"CUDA_VISIBLE_DEVICES": "7"}, "gw1", 8, None),  # a single outer device is kept
])
def test_gpu_per_worker(env, worker, count, want):
    environ = dict(env)
    got = assign_gpu(environ, worker, count=lambda: count)
    if want is None:
        assert got == {} and environ == env
    else:
        assert environ["CUDA_VISIBLE_DEVICES"] == environ["HIP_VISIBLE_DEVICES"] == want
