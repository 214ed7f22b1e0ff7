"""Running items: pass with a correct backend, readable FAIL with a wrong one, crashes contained, unwritten
elements caught, skips with reasons, report schema, JUnit properties."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET

import pytest

from tests.test_plugin_fixtures import make_project

pytest_plugins = ["pytester"]


def test_correct_backend_passes_and_writes_reports(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path)
    res = pytester.runpytest(
        *base,
        "--ckfmha-category",
        "full",
        "--ckfmha-report",
        "r.json",
        "--ckfmha-report",
        "r.csv",
        "--junitxml",
        "j.xml",
        "-rs",
    )
    res.assert_outcomes(passed=6, skipped=2)  # 2 qs kernel items: the backend cannot realize them
    out = res.stdout.str()
    assert "ckfmha summary" in out and "fwd" in out and "worst abs err" in out and "best TFLOPS" in out
    assert "cold builds: " in out and "median 0.25 s" in out
    assert "backends testref  device test device 0  seed 0  items 8" in out
    from pytest_ckfmha.reporting import REPORT_SCHEMA, ROW_FIELDS

    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["schema"] == REPORT_SCHEMA and doc["version"] == 2 and doc["fields"] == list(ROW_FIELDS)
    assert doc["category"] == "full" and doc["arch"] == "gfx942" and doc["summary"]["fwd"]["passed"] == 6
    # where it ran: the command, the package versions (from metadata), the device of the items
    import platform

    import numpy

    env = doc["environment"]
    assert env["command"].startswith("pytest ") and "--ckfmha-category full --ckfmha-report r.json" in env["command"]
    assert env["packages"]["numpy"] == numpy.__version__ and env["packages"]["pytest"] == pytest.__version__
    assert env["python"] == platform.python_version() and env["devices"] == ["test device 0"]
    rows = doc["rows"]
    assert len(rows) == 8 and all(set(r) == set(ROW_FIELDS) for r in rows)
    ok = [r for r in rows if r["verdict"] == "passed"]
    for r in ok:
        assert r["backend"] == "testref" and r["kernel_id"] and r["max_abs_err"] < 0.01 and r["tflops"] > 0
        assert r["gbps"] > 0 and r["flops"] > 0 and r["unwritten"] == 0 and r["build_s"] >= 0
        assert r["device"] == "test device 0"
        assert 0 < r["tol_ratio"] <= 1  # the validator's figure at the worst element: passed
    assert any(r["build_s"] == 0.25 for r in ok)  # cold build time of the kernel
    plan = [r for r in rows if r["kind"] == "plan"]
    assert len(plan) == 3 and all(r["plan_kernels"] for r in plan)
    skipped = [r for r in rows if r["verdict"] == "skipped"]
    assert all("pipeline qs is not realized by the test backend" in r["reason"] for r in skipped)
    with open(pytester.path / "r.csv", newline="") as fh:
        crow = list(csv.DictReader(fh))
    assert [r["id"] for r in crow] == [r["id"] for r in rows] and list(crow[0]) == list(ROW_FIELDS)
    tree = ET.parse(pytester.path / "j.xml")
    props = {p.get("name") for p in tree.iter("property")}
    assert {"kernel_id", "max_abs_err", "tflops", "backend", "arch"} <= props


def test_wrong_backend_fails_with_readable_message(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "--ckfmha-report", "r.json")
    res.assert_outcomes(failed=4, skipped=1)
    out = res.stdout.str()
    assert "output differs from the reference (testref backend, arch gfx942, seed 0)" in out
    assert "o: FAIL" in out and "mismatches=1/" in out and "first at (0, 0, 0, 5)" in out
    assert "Traceback" not in out
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    failed = [r for r in rows if r["verdict"] == "failed"]
    assert len(failed) == 4 and all(r["mismatches"] == 1 and r["max_abs_err"] >= 3 for r in failed)
    assert all(r["tol_ratio"] > 1 for r in failed)  # the injected +4.0 is beyond atol + rtol * |ref|
    assert "failed" in out and "ckfmha summary" in out


def test_crash_fails_the_item_not_the_run(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="crash")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    res.assert_outcomes(failed=4, skipped=1)
    res.stdout.fnmatch_lines(["*stage fwd (fwd.fp16.batch*) crashed: RuntimeError: boom: illegal memory access*"])


def test_unwritten_elements_fail(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="partial")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    res.assert_outcomes(failed=4, skipped=1)
    res.stdout.fnmatch_lines(
        ["*output 'o': 1 of 2048 element(s) left unwritten (still the poison NaN), first at (0, 0, 0, 7)*"]
    )
    assert "computed" not in res.stdout.str()


def test_computed_nan_is_called_nan(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="nan")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke")
    res.assert_outcomes(failed=4, skipped=1)
    res.stdout.fnmatch_lines(
        [
            "*output 'o': 1 of 2048 element(s) are NaN where the reference is finite (a NaN the "
            "kernel computed), first at (0, 0, 0, 7)*"
        ]
    )
    assert "left unwritten" not in res.stdout.str()


def test_skip_reasons(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode="unavailable")
    res = pytester.runpytest(*base, "--ckfmha-category", "smoke", "-rs")
    res.assert_outcomes(skipped=5)
    res.stdout.fnmatch_lines(["*backend testref is not available: no GPU in this test*"])
    # the real cpu backend and its FLOP limit
    base = make_project(pytester, monkeypatch, tmp_path, mode=None)
    res = pytester.runpytest(
        *base, "--ckfmha-category", "smoke", "--ckfmha-backend", "cpu", "--ckfmha-cpu-max-flops", "1000", "-rs"
    )
    res.assert_outcomes(skipped=5)
    res.stdout.fnmatch_lines(
        ["*shape has 1.31e+05 FLOPs, over the cpu backend's limit 1e+03 (--ckfmha-cpu-max-flops)*"]
    )


def test_cpu_backend_runs_the_hand_built_kernels(pytester, monkeypatch, tmp_path):
    base = make_project(pytester, monkeypatch, tmp_path, mode=None)
    res = pytester.runpytest(
        *base, "--ckfmha-category", "full", "--ckfmha-backend", "cpu", "--ckfmha-bench", "--ckfmha-report", "r.json"
    )
    assert res.ret == 0, res.stdout.str()
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    assert all(r["timed"] for r in rows if r["verdict"] == "passed")
    # the reference is computed once per (shape, seed) and shared by the shape's items
    cached = [
        r["ref_cached"] for r in rows if r["verdict"] == "passed" and r["id"].startswith("fwd-fp16-batch-b1h2s16d64::")
    ]
    assert cached.count(False) <= 1 and cached.count(True) >= 1


def test_the_backend_releases_its_device_memory_after_every_item(pytester, monkeypatch, tmp_path):
    # workers sharing a GPU: each item ends by handing cached device memory back, a failing or skipped one too
    base = make_project(pytester, monkeypatch, tmp_path, mode="wrong")
    log = tmp_path / "released.txt"
    monkeypatch.setenv("CKT_RELEASE_LOG", str(log))
    pytester.runpytest_subprocess(*base, "--ckfmha-category", "full", "--ckfmha-report", "r.json")
    rows = json.loads((pytester.path / "r.json").read_text())["rows"]
    ran = [r for r in rows if r["verdict"] not in ("skipped", "not_run")]
    assert len(ran) >= 2 and any(r["verdict"] == "failed" for r in ran)
    assert len(log.read_text().split()) == len(rows) == 8  # the skipped items (backend loaded) release too
