"""On a GPU: a hung GPU kernel is really stopped, a GPU fault and an out-of-memory item fail alone, and on a
multi-GPU machine each xdist worker runs on a GPU of its own.

The inner pytest runs use a test backend (from a conftest, through the ``pytest_ckfmha_backend`` hook) whose stages
launch real Triton kernels: a kernel that spins forever, a kernel that stores far out of bounds (CUDA's sticky
"illegal memory access"), and a small correct GPU computation for every other item.  After the hang is killed
and after the fault, later items must run on the GPU and pass.
"""

from __future__ import annotations

import json

import pytest

from tests.test_plugin_fixtures import MATRIX

pytest_plugins = ["pytester"]


# marked gpu (and skipped, as one skip, without a GPU) by tests/conftest.py

CONFTEST = '''
import os
import numpy as np
from ckfmha.kernel import KernelConfig
from ckfmha.backends.base import Availability, Backend, BuiltKernel, StageResult


def k(pipeline, bm0, mask="none"):
    return KernelConfig.make(family="fwd", dtype="fp16", mode="batch", hdim_q=64, hdim_v=64, arch_tag="gfx9",
                             mask=mask, pipeline=pipeline, tile=[bm0, 64, 32, 64, 32, 64],
                             warps=[[4, 1, 1], [4, 1, 1]], warp_tiles=[[32, 32, 16], [32, 32, 16]],
                             pad_s=1, pad_sk=1, pad_d=1, pad_dv=1)


def pytest_ckfmha_kernels(config, arch):
    return [k("qr", 64), k("qr", 64, mask="any")]


class GpuTestBackend(Backend):
    """Launches real Triton kernels; CKG_MODE=hang|fault misbehaves on the kernels of the unmasked shape."""
    name = "gputest"

    def available(self):
        return Availability.yes()

    def device(self):
        import torch
        return f"{torch.cuda.get_device_name()} uuid {torch.cuda.get_device_properties(0).uuid} pid {os.getpid()}"

    def supports(self, c):
        return None

    def build(self, c):
        return BuiltKernel(c, self.name)

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def spin(flag, out):
            i = 0
            while tl.load(flag, volatile=True) == 0:
                i += 1
            tl.store(out, i)

        @triton.jit
        def wild_store(out):
            tl.store(out + (1 << 40), 1.0)

        @triton.jit
        def scale(x, y, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            m = offs < n
            tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0, mask=m)

        misbehave = kernel.config.kernel_id.endswith("gfx9")  # the unmasked kernel; the causal one ends in any
        mode = os.environ.get("CKG_MODE", "")
        if misbehave and mode == "hang":
            flag = torch.zeros(1, dtype=torch.int32, device="cuda")
            spin[(1,)](flag, torch.zeros(1, dtype=torch.int32, device="cuda"))
            torch.cuda.synchronize()
        if misbehave and mode == "fault":
            wild_store[(1,)](torch.zeros(1, device="cuda"))
            torch.cuda.synchronize()
        if misbehave and mode == "oom":
            torch.empty(1 << 46, dtype=torch.uint8, device="cuda")  # 64 TiB: more than any GPU has
        x = torch.arange(1000, dtype=torch.float32, device="cuda")
        y = torch.empty_like(x)
        scale[(1,)](x, y, 1000, BLOCK=1024)
        assert torch.equal(y, x * 2), "the GPU computed a wrong result"
        from ckfmha.reference import reference
        ref = reference(problem, dict(inputs))
        outputs = {s.name: s.allocate() for s in stage.outputs if s.required}
        outputs["o"][...] = ref["o"].astype(outputs["o"].dtype)
        return StageResult(outputs, device_ms=0.5)


def pytest_ckfmha_backend(config, name):
    return GpuTestBackend()
'''


def _run(pytester, monkeypatch, tmp_path, mode: str, *extra):
    pytester.makefile(".yaml", small=MATRIX)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    monkeypatch.setenv("CKG_MODE", mode)
    res = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--ckfmha-matrix",
        "small.yaml",
        "--ckfmha-category",
        "smoke",
        "--ckfmha-report",
        "r.json",
        *extra,
        timeout=300,
    )
    rows = {
        r["id"].split("::")[0] + "::" + r["kind"]: r for r in json.loads((pytester.path / "r.json").read_text())["rows"]
    }
    return res, rows


@pytest.mark.parametrize("xdist", [False, True])
def test_a_hung_gpu_kernel_is_stopped_and_the_gpu_serves_the_next_items(pytester, monkeypatch, tmp_path, xdist):
    extra = ("-n", "2") if xdist else ()
    res, rows = _run(pytester, monkeypatch, tmp_path, "hang", "--ckfmha-timeout", "20", *extra)
    res.assert_outcomes(passed=2, failed=2)
    hung = [r for r in rows.values() if r["verdict"] == "timeout"]
    assert len(hung) == 2 and all("still running after 20 s" in r["reason"] for r in hung)
    ok = [r for r in rows.values() if r["verdict"] == "passed"]
    assert len(ok) == 2 and all(r["device"] for r in ok)  # ran on the GPU after (or beside) the killed kernel
    assert res.duration < 200


def test_a_gpu_fault_fails_its_items_alone(pytester, monkeypatch, tmp_path):
    res, rows = _run(pytester, monkeypatch, tmp_path, "fault")
    res.assert_outcomes(passed=2, failed=2)
    bad = [r for r in rows.values() if r["verdict"] != "passed"]
    assert all(("illegal memory access" in r["reason"] or "crashed" in r["reason"]) for r in bad), bad
    ok = [r for r in rows.values() if r["verdict"] == "passed"]
    pids = {r["device"] for r in bad} | {r["device"] for r in ok}
    assert len(ok) == 2 and len(pids) >= 2  # the causal items ran in a fresh process with a working GPU


def test_an_out_of_memory_item_fails_alone_with_that_reason(pytester, monkeypatch, tmp_path):
    res, rows = _run(pytester, monkeypatch, tmp_path, "oom", "-n", "2")
    res.assert_outcomes(passed=2, failed=2)
    bad = [r for r in rows.values() if r["verdict"] != "passed"]
    assert all(r["verdict"] == "failed" and "out of memory" in r["reason"].lower() for r in bad), bad
    assert len([r for r in rows.values() if r["verdict"] == "passed"]) == 2


def _gpu_count() -> int:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def test_each_worker_runs_on_a_gpu_of_its_own(pytester, monkeypatch, tmp_path):
    n = _gpu_count()
    if n < 2:
        pytest.skip(f"needs two GPUs: nvidia-smi -L lists {n}")
    res, rows = _run(pytester, monkeypatch, tmp_path, "", "-n", str(n))
    res.assert_outcomes(passed=4)
    by_worker: dict[str, set] = {}
    for r in rows.values():
        by_worker.setdefault(r["worker"], set()).add(r["device"].split(" uuid ")[1].split()[0])
    assert all(len(uuids) == 1 for uuids in by_worker.values()), by_worker  # a worker never moves to another GPU
    used = set().union(*by_worker.values())
    assert len(used) == min(len(by_worker), n), by_worker  # the workers that ran items were on different GPUs
