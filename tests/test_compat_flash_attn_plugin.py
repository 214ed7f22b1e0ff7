"""``--ckfmha-flash-attn-compat``: a foreign test file that imports ``flash_attn_2_cuda`` at module level runs on
ckfmha (cpu backend, CPU tensors), and with ``--ckfmha-report`` the process's kernel log lands beside the report,
readable by ``ckfmha coverage``; combined with ``--ckfmha-sample``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

pytest_plugins = ["pytester"]

FOREIGN = """
import pytest
import torch
import flash_attn_2_cuda as flash_attn_gpu  # what flash_attn_interface.py does at import time

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq", [8, 24])
def test_fwd(causal, sq):
    torch.manual_seed(0)
    q = torch.randn(1, sq, 2, 32, dtype=torch.float16)
    k = torch.randn(1, 16, 2, 32, dtype=torch.float16)
    out, lse, p, rng = flash_attn_gpu.fwd(q, k, k, None, None, 0.0, 32 ** -0.5, causal, -1, -1, 0.0, False, None)
    assert out.shape == q.shape and lse.shape == (1, 2, sq)
"""


def test_foreign_suite_runs_on_ckfmha_and_logs_kernels(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    pytester.makepyfile(test_fa=FOREIGN)
    report = tmp_path / "fa.json"
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ckfmha-flash-attn-compat", "--ckfmha-backend", "cpu",
        "--ckfmha-report", str(report), "-q",
    )  # fmt: skip
    res.assert_outcomes(passed=4)
    log = tmp_path / "fa.flash_attn_calls.json"
    doc = json.loads(log.read_text())
    assert doc["schema"] == "ckfmha.flash_attn_calls" and doc["backend_option"] == "cpu"
    assert len(doc["calls"]) == 4
    assert {c["nodeid"] for c in doc["calls"]} == {
        f"test_fa.py::test_fwd[{sq}-{c}]" for sq in (8, 24) for c in ("False", "True")
    }
    assert all(c["stages"][0]["ck_name"].startswith("fmha_fwd_d32_fp16_batch") for c in doc["calls"])
    from ckfmha.cli import main

    assert main(["coverage", str(report), "--family", "fwd", "--format", "json"]) == 0


def test_without_the_option_the_module_is_missing(pytester, monkeypatch):
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    pytester.makepyfile(test_fa=FOREIGN)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    assert res.ret == pytest.ExitCode.INTERRUPTED  # a collection error: flash_attn_2_cuda is not importable
    assert "No module named 'flash_attn_2_cuda'" in res.stdout.str()
