"""Shared pieces of the pytester tests: a tiny matrix, a hand-built kernel set and test backends (conftest text).

pytester's in-process runs drop the modules first imported inside them; numpy cannot be imported twice in a
process, so everything the inner runs import is imported here first."""

import ml_dtypes  # noqa: F401
import numpy  # noqa: F401

import ckfmha.backends.base  # noqa: F401
import ckfmha.backends.cpu  # noqa: F401
import ckfmha.backends.cpu.stages  # noqa: F401
import ckfmha.dispatcher  # noqa: F401
import ckfmha.inputs  # noqa: F401
import ckfmha.matrix  # noqa: F401
import ckfmha.reference  # noqa: F401
import ckfmha.runner  # noqa: F401
import ckfmha.selection  # noqa: F401
import ckfmha.validator  # noqa: F401
import ckfmha.work  # noqa: F401
import pytest_ckfmha.collect  # noqa: F401
import pytest_ckfmha.execute  # noqa: F401
import pytest_ckfmha.items  # noqa: F401
import pytest_ckfmha.refcache  # noqa: F401
import pytest_ckfmha.reporting  # noqa: F401
import pytest_ckfmha.state  # noqa: F401
import pytest_ckfmha.xdist_support  # noqa: F401

MATRIX = """\
schema: 1
family: fwd
entries:
  - name: plain
    category: smoke
    batch: 1
    nhead_q: 2
    seqlen_q: 16
    hdim_q: 64
    product: {mask: [none, causal]}
  - {name: longer, category: full, batch: 1, nhead_q: 2, seqlen_q: 40, seqlen_k: 24, hdim_q: 64}
  - {name: big, category: nightly, batch: 2, nhead_q: 4, seqlen_q: 64, hdim_q: 64, lse: true}
"""

CONFTEST = '''
import os
import numpy as np
import pytest
from ckfmha.kernel import KernelConfig
from ckfmha.backends.base import Availability, Backend, BuiltKernel, StageResult


def k(pipeline, bm0, mask="none", lse=False):
    return KernelConfig.make(family="fwd", dtype="fp16", mode="batch", hdim_q=64, hdim_v=64, arch_tag="gfx9",
                             mask=mask, lse=lse, pipeline=pipeline, tile=[bm0, 64, 32, 64, 32, 64],
                             warps=[[4, 1, 1], [4, 1, 1]], warp_tiles=[[32, 32, 16], [32, 32, 16]],
                             pad_s=1, pad_sk=1, pad_d=1, pad_dv=1)


KERNELS = [k("qr", 64), k("qr", 128), k("qr_async", 128), k("qs", 64), k("qr", 64, mask="any"),
           k("qr", 64, lse=True)]


class TestBackend(Backend):
    name = "testref"

    def __init__(self, mode):
        self.mode = mode

    def available(self):
        return Availability.no("no GPU in this test") if self.mode == "unavailable" else Availability.yes()

    def device(self):
        return f"test device pid {os.getpid()}" if os.environ.get("CKT_DEVICE_PID") else "test device 0"

    def supports(self, c):
        return "pipeline qs is not realized by the test backend" if c.pipeline.value == "qs" else None

    def declines(self, problem):
        if os.environ.get("CKT_DECLINE_MASKED") and problem.mask.kind.name != "NONE":
            return f"mask: {problem.mask}: the test backend runs no masked problem (rule: unmasked only)"
        return None

    def build(self, c):
        return BuiltKernel(c, self.name, build_seconds=0.25)

    def run_stage(self, kernel, stage, problem, inputs, *, timing=False, context=None):
        from ckfmha.reference import reference
        if self.mode == "crash" or (self.mode == "raise_on" and os.environ["CKT_DIE_ON"] in kernel.config.kernel_id):
            raise RuntimeError("boom: illegal memory access")
        if os.environ.get("CKT_DIE", "") and os.environ.get("CKT_DIE_ON", "@") in kernel.config.kernel_id:
            die(os.environ["CKT_DIE"])
        ref = reference(problem, dict(inputs))
        tensors = {s.name: s.allocate() for s in stage.outputs if s.required}
        tensors["o"][...] = ref["o"].astype(tensors["o"].dtype)
        if "lse" in tensors:
            tensors["lse"][...] = ref["lse"]
        if self.mode == "wrong":
            tensors["o"].flat[5] += np.float16(4.0)
        if self.mode == "partial":  # leaves one element unwritten: it keeps the caller's poison
            from ckfmha.poison import poisoned
            tensors["o"].flat[7] = poisoned((1,), tensors["o"].dtype)[0]
        if self.mode == "nan":  # computes one NaN
            tensors["o"].flat[7] = np.nan
        return StageResult(tensors, device_ms=0.5)

    def release_memory(self):
        if os.environ.get("CKT_RELEASE_LOG"):
            with open(os.environ["CKT_RELEASE_LOG"], "a") as f:
                f.write(f"{os.getpid()}\\n")


def die(how):
    """Process deaths a kernel can cause (the test sees their effect on the run)."""
    import signal, sys, time
    print(f"kernel says: about to {how}", flush=True)
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "abort":
        os.abort()
    elif how == "exit3":
        os._exit(3)
    elif how == "hang":
        time.sleep(3600)
    elif how == "slow":
        time.sleep(float(os.environ.get("CKT_SLOW_S", "1")))
        return
    time.sleep(5)


def pytest_ckfmha_kernels(config, arch):
    return KERNELS


def pytest_ckfmha_backend(config, name):
    mode = os.environ.get("CKT_MODE")
    return TestBackend(mode) if mode else None
'''


def make_project(pytester, monkeypatch, tmp_path, mode="ok", die=None, die_on="mask=any"):
    """A pytester project: the small matrix, the conftest above; ``die`` makes the kernels whose id contains
    ``die_on`` kill their process (segv, abort, exit3), hang or run slowly (slow: CKT_SLOW_S seconds)."""
    pytester.makefile(".yaml", small=MATRIX)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CKFMHA_NO_DETECT", "1")
    if die:
        monkeypatch.setenv("CKT_DIE", die)
        monkeypatch.setenv("CKT_DIE_ON", die_on)
    else:
        monkeypatch.delenv("CKT_DIE", raising=False)
    if mode:
        monkeypatch.setenv("CKT_MODE", mode)
    else:
        monkeypatch.delenv("CKT_MODE", raising=False)
    return ["-p", "no:cacheprovider", "--ckfmha-matrix", "small.yaml"]


def fail_report_writes(pytester) -> None:
    """Add to the project's conftest a session-finish hook (run before the plugin's) that makes every ``fsync`` of
    the report writer fail with ENOSPC: the report cannot be written at the end."""
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + """

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    import pytest_ckfmha.reporting as r
    def no_space(*a, **k):
        raise OSError(28, "No space left on device")
    r.os.fsync = no_space
"""
    )
