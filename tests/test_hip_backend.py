"""The hip backend's build and run plumbing, without an AMD GPU: a fake CK checkout (its generator a script), a fake
HIP compiler that builds ckfmha's real wrapper with g++ against a fake CK, and host memory instead of the GPU
(tests/hip_fakes.py, tests/data/fake_ck/README.md).

What runs for real: codegen (generator call, wrapper, compile_commands.json), the build (commands, cache key,
locks, logs kept on failure), ctypes loading with the ABI check, the descriptor of a stage, the wrapper's member
detection, range checks and status codes, the runner's execution loop (outputs copied back, failures as the
stage's reason). What is fake: CK's kernels (the fake fmha_fwd copies q into o through the args' strides) and the
device (HostMemory)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ckfmha.backends.base import Availability
from ckfmha.backends.hip.backend import HipBackend
from ckfmha.backends.hip.build import BuildError, forget_compiler_versions
from ckfmha.backends.hip.library import KernelCallError, KernelLibrary, LibraryError
from ckfmha.backends.hip.memory import HostMemory
from ckfmha.family_records import stage_outputs
from ckfmha.inputs import make_inputs
from ckfmha.naming import parse_ck_name
from ckfmha.plan import Plan, Stage, StageRole
from ckfmha.problem import Layout, Problem
from ckfmha.runner import StageCrash, execute, prepare_tensors
from codegen.abi import make_descriptor
from tests.hip_fakes import FWD_KERNEL, FWD_KERNEL_NLSE, install_fake_rocm, make_fake_checkout

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ (the fake HIP compiler builds with it)")

CONFIG = parse_ck_name(FWD_KERNEL).config


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One fake ROCm, checkout and build cache for the module: tests that only need a built library share it (the
    compiler's and the checkout's paths are part of the build key)."""
    d = tmp_path_factory.mktemp("hip")
    mp = pytest.MonkeyPatch()
    try:
        install_fake_rocm(d / "rocm", mp)
    finally:
        mp.undo()
    return SimpleNamespace(rocm=d / "rocm", root=make_fake_checkout(d / "ck"), cache=d / "cache")


@pytest.fixture
def env(shared, tmp_path, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CK_ROOT", raising=False)
    for var in ("FAKE_HIPCC_FAIL", "FAKE_HIPCC_VERSION", "FAKE_CK_DEFINES", "FAKE_CK_RETURN", "FAKE_CK_THROW"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("FAKE_HIP_ERROR", raising=False)
    monkeypatch.setenv("FAKE_HIPCC_LOG", str(tmp_path / "hipcc.log"))
    install_fake_rocm(shared.rocm, monkeypatch)
    return SimpleNamespace(root=shared.root, tmp=tmp_path, log=tmp_path / "hipcc.log", shared=shared.cache)


def backend(env, name: str | None = None, **kw) -> HipBackend:
    """A backend on the fake checkout; ``name``: a private build cache (else the module's shared one)."""
    return HipBackend(
        ck_root=env.root,
        arch="gfx942",
        memory=HostMemory(),
        cache_dir=env.shared if name is None else env.tmp / name,
        progress=kw.pop("progress", None),
        **kw,
    )


def hipcc_calls(env) -> list[str]:
    return env.log.read_text().splitlines() if env.log.is_file() else []


def test_build_runs_the_commands_once_per_key(env):
    b = backend(env, "own")
    built = b.build(CONFIG)
    assert not built.cached and isinstance(built.artifact, KernelLibrary)
    assert built.artifact.kernel == FWD_KERNEL and built.artifact.apis == ("fwd",)
    calls = hipcc_calls(env)
    compiles = [c for c in calls if " -c " in f" {c} "]
    assert len(compiles) == 3  # the instance, the api file, the wrapper
    assert all("--offload-arch=gfx942" in c and "-DCK_USE_FNUZ_FP8" in c and "-std=c++20" in c for c in compiles)
    assert [c for c in calls if c.startswith("-shared")] and "--version" in calls
    assert built.info["steps"][-1]["step"] == "link" and built.info["kernel"] == FWD_KERNEL
    again = backend(env, "own").build(CONFIG)  # another process's view: the cache entry
    assert again.cached and again.artifact.kernel == FWD_KERNEL
    assert len([c for c in hipcc_calls(env) if " -c " in f" {c} "]) == 3
    env.log.unlink()
    forget_compiler_versions()  # (per process the version is read once per compiler file)
    import os

    os.environ["FAKE_HIPCC_VERSION"] = "-next"
    try:
        upgraded = backend(env, "own").build(CONFIG)
    finally:
        del os.environ["FAKE_HIPCC_VERSION"]
        forget_compiler_versions()
    assert not upgraded.cached  # a new compiler version is a new key
    assert len([c for c in hipcc_calls(env) if " -c " in f" {c} "]) == 3


def test_a_failed_compile_shows_its_log_and_keeps_the_logs(env, monkeypatch):
    monkeypatch.setenv("FAKE_HIPCC_FAIL", "ckfmha_wrapper")
    b = backend(env, "own")
    with pytest.raises(BuildError) as ei:
        b.build(CONFIG)
    msg = str(ei.value)
    assert "compile of ckfmha_wrapper.cpp failed (exit status 1)" in msg
    assert "error: fake compile failure in ckfmha_wrapper.cpp" in msg
    kept = ei.value.log_dir
    assert kept is not None and f"(all logs and the commands are kept in {kept})" in msg
    assert (kept / "compile_commands.json").is_file()
    assert any("fake compile failure" in p.read_text() for p in kept.glob("*.log"))
    monkeypatch.delenv("FAKE_HIPCC_FAIL")
    assert not b.build(CONFIG).cached  # nothing half-built was cached


def _plan(problem: Problem, config=CONFIG) -> Plan:
    return Plan(problem, (Stage(StageRole.FWD, config, outputs=stage_outputs(problem, StageRole.FWD, config)),))


def test_a_stage_runs_through_the_descriptor_and_its_outputs_come_back(env):
    # bshd in, bhsd out: the fake kernel copies q into o through the strides the descriptor carried
    p = Problem(batch=2, nhead_q=3, seqlen_q=5, seqlen_k=7, hdim_q=64, lse=True, input_layout=Layout.BSHD)
    assert p.output_layout is Layout.BHSD
    plan = _plan(p)
    tensors, written = prepare_tensors(p, plan, make_inputs(p, seed=1))
    assert "o" in written and "o" not in tensors  # the runner stores what the stage returns
    ex = execute(backend(env), plan, tensors, timing=True)
    np.testing.assert_array_equal(tensors["o"], tensors["q"].transpose(0, 2, 1, 3))
    expected_lse = np.broadcast_to(np.arange(p.seqlen_q, dtype=np.float32), (p.batch, p.nhead_q, p.seqlen_q))
    np.testing.assert_array_equal(tensors["lse"], expected_lse)
    assert ex.stages[0].device_ms is not None and ex.stages[0].cold


@pytest.mark.parametrize(
    ("var", "value", "reason"),
    [
        (
            "FAKE_CK_RETURN",
            "-1",
            rf"NO_KERNEL: fmha_fwd returned -1: no instance in this library \({FWD_KERNEL}\) serves these arguments",
        ),
        (
            "FAKE_HIP_ERROR",
            "1",
            r"HIP_ERROR: fmha_fwd: kernel launch failed: hipErrorInvalidImage \(fake invalid image\)",
        ),
        ("FAKE_CK_THROW", "1", r"EXCEPTION: fmha_fwd threw: fake CK exception"),
    ],
)
def test_the_wrappers_status_and_message_become_the_failure_reason(env, monkeypatch, var, value, reason):
    p = Problem(batch=1, nhead_q=2, seqlen_q=4, seqlen_k=4, hdim_q=64, lse=True)
    plan = _plan(p)
    tensors, _ = prepare_tensors(p, plan, make_inputs(p))
    b = backend(env)
    b.build(CONFIG)
    monkeypatch.setenv(var, value)
    with pytest.raises(
        StageCrash, match=r"stage fwd \(.*\) crashed: KernelCallError: ckfmha_run_fwd \(lib.*\.so\): " + reason
    ):
        execute(b, plan, tensors, contain=True)
    assert "o" not in tensors  # a failed call returns nothing


def _fwd_library(env, name: str | None = None) -> KernelLibrary:
    return backend(env, name).build(CONFIG).artifact


def test_values_ck_cannot_hold_and_members_it_lacks_are_named(env):
    lib = _fwd_library(env)
    base = dict(dtype=0, hdim_q=64, hdim_v=64, nhead_q=1, nhead_k=1, batch=1, seqlen_q=1, seqlen_k=1)
    with pytest.raises(
        KernelCallError, match=r"OUT_OF_RANGE: batch_stride_q = 2147483648 does not fit this CK's int32_t"
    ):
        lib.call("fwd", make_descriptor(**base, batch_stride_q=2**31))
    with pytest.raises(KernelCallError, match=r"UNSUPPORTED_FIELD: this CK's fmha_fwd_traits has no member has_sink"):
        lib.call("fwd", make_descriptor(**base, has_sink=True))
    with pytest.raises(KernelCallError, match=r"has only do_fp8_static_quant \(pertensor\), not qscale_type 2"):
        lib.call("fwd", make_descriptor(**base, qscale_type=2))
    with pytest.raises(KernelCallError, match=r"this CK's fmha_fwd_args has no member kv_indptr"):
        lib.call("fwd", make_descriptor(**base, kv_indptr_ptr=4096))
    with pytest.raises(KernelCallError, match=r"BAD_VALUE: descriptor: dtype code 99, known codes 0..7"):
        lib.call("fwd", make_descriptor(**{**base, "dtype": 99}))
    with pytest.raises(KernelCallError, match=r"OUT_OF_RANGE: mask_type = 4294967296 does not fit"):
        lib.call("fwd", make_descriptor(**base, mask_type=2**32))
    bad = make_descriptor(**base)
    bad.struct_size = 8
    with pytest.raises(KernelCallError, match=r"BAD_DESCRIPTOR: descriptor: struct_size 8, this library's ckfmha_desc"):
        lib.call("fwd", bad)
    with pytest.raises(LibraryError, match=r"exports no ckfmha_run_bwd \(it holds fmha_fwd_d64.*apis: fwd\)"):
        lib.call("bwd", make_descriptor(**base))


def test_a_newer_ck_layout_is_detected_at_compile_time(env, monkeypatch):
    monkeypatch.setenv("FAKE_CK_DEFINES", "-DFAKE_CK_NEW=1")  # traits with qscale_type / has_sink, args with sink_ptr
    lib = _fwd_library(env, "cache-new")
    o = np.zeros(4, np.float16)
    q = np.ones(4, np.float16)
    base = dict(
        dtype=0, hdim_q=4, hdim_v=4, nhead_q=1, nhead_k=1, batch=1, seqlen_q=1, seqlen_k=1,
        q_ptr=q.ctypes.data, o_ptr=o.ctypes.data,
    )  # fmt: skip
    lib.call("fwd", make_descriptor(**base, has_sink=True, sink_ptr=q.ctypes.data, qscale_type=2))
    np.testing.assert_array_equal(o, q)


def test_libraries_of_another_abi_are_refused(tmp_path):
    src = tmp_path / "x.c"
    src.write_text(
        "#include <stdint.h>\nint32_t ckfmha_abi_version(void){return 99;}\nuint64_t ckfmha_desc_size(void){return 8;}\n"
        'const char* ckfmha_kernel_name(void){return "k";}\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(tmp_path / "libx.so")], check=True)
    with pytest.raises(
        LibraryError, match=r"speaks ABI version 99 with a 8-byte descriptor; this ckfmha speaks version 1"
    ):
        KernelLibrary(tmp_path / "libx.so")
    (tmp_path / "y.c").write_text("int nothing(void){return 0;}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp_path / "y.c"), "-o", str(tmp_path / "liby.so")], check=True)
    with pytest.raises(LibraryError, match=r"exports no ckfmha_abi_version \(not a ckfmha kernel library\)"):
        KernelLibrary(tmp_path / "liby.so")
    with pytest.raises(LibraryError, match=r"cannot load the kernel library"):
        KernelLibrary(tmp_path / "missing.so")
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_build_many_prints_a_line_per_kernel_and_the_slowest(env):
    lines: list[str] = []
    b = backend(env, "own", progress=lines.append)
    out = b.build_many([CONFIG, parse_ck_name(FWD_KERNEL_NLSE).config], workers=2)
    assert all(not isinstance(x, BaseException) for x in out)
    assert sorted(ln.split()[0] for ln in lines[:2]) == ["[1/2]", "[2/2]"]
    assert all(" built fwd.fp16.batch.d64x64" in ln for ln in lines[:2])
    assert lines[-1].startswith("slowest: fwd.fp16.batch.d64x64") and len(lines) == 3


def test_supports_only_the_checkouts_kernels(env):
    b = backend(env)
    assert b.supports(CONFIG) is None
    other = CONFIG.replace(hdim_q=128, hdim_v=128)
    assert "not in the CK checkout's kernel space" in (b.supports(other) or "")
    assert "no CK checkout" in (HipBackend(ck_root=None, arch="gfx942").supports(CONFIG) or "")


def test_available_names_everything_missing(env, monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    reason = HipBackend().available().reason
    assert "no ROCm GPU" in reason and "no HIP compiler" in reason and "no CK checkout" in reason
    install_fake_rocm(tmp_path / "rocm2", monkeypatch)
    reason = HipBackend(ck_root=env.root).available().reason
    assert reason.startswith("no ROCm GPU") and "compiler" not in reason and "checkout" not in reason
    monkeypatch.setenv("CK_ROOT", str(tmp_path / "not-ck"))
    assert "no usable CK checkout: $CK_ROOT" in HipBackend().available().reason


def test_auto_prefers_hip_then_triton_then_cpu(monkeypatch):
    import ckfmha.backends as backends

    avail = {"hip": False, "triton": False}

    def fake_get(name):
        return SimpleNamespace(available=lambda: Availability(avail[name], "" if avail[name] else "no"))

    monkeypatch.setattr(backends, "get_backend", fake_get)
    assert backends.auto_backend_name() == "cpu"
    avail["triton"] = True
    assert backends.auto_backend_name() == "triton"
    avail["hip"] = True
    assert backends.auto_backend_name() == "hip"


def test_the_cli_explains_why_hip_cannot_run_here(capsys, monkeypatch, tmp_path):
    from ckfmha.cli import main

    monkeypatch.delenv("CK_ROOT", raising=False)
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "nowhere"))
    rc = main(["run", "-prec=fp16", "-b=1", "-h=2", "-s=64", "-d=64", "--backend", "hip", "--arch", "gfx942"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "backend hip is not available here: no ROCm GPU" in err and "no CK checkout" in err


def test_the_plugin_takes_its_kernel_space_from_the_checkout(env):
    from pytest_ckfmha.collect import kernel_set

    config = SimpleNamespace(hook=SimpleNamespace(pytest_ckfmha_kernels=lambda **kw: None))
    settings = SimpleNamespace(
        arch="gfx942", receipt=None, profile=None, mask_mode="simplified", sweep=None, filter="c.lse == True",
        filter_file=None, allow_empty=False, ck_root=env.root,
    )  # fmt: skip
    assert kernel_set(config, settings) == [CONFIG]
    settings.ck_root = None
    assert len(kernel_set(config, settings)) > 1000  # the enumeration
    assert Path(env.root).is_dir()


def test_the_bwd_wrapper_fills_cks_bwd_spelling_of_the_scale(tmp_path):
    # fmha_bwd_args has `scale` where the forward args have `scale_s` (fmha_bwd.hpp); the fake fmha_bwd returns it
    from codegen.abi import HEADER_NAME, c_header
    from codegen.wrapper import WRAPPER_NAME, wrapper_source
    from tests.hip_fakes import FAKE_CK

    (tmp_path / HEADER_NAME).write_text(c_header())
    (tmp_path / WRAPPER_NAME).write_text(wrapper_source("bwd", "fake_bwd_kernel"))
    lib_path = tmp_path / "libbwd.so"
    cmd = ["g++", "-std=c++20", "-fPIC", "-shared", "-O0", f"-I{FAKE_CK}", f"-I{tmp_path}"]
    cmd += [str(tmp_path / WRAPPER_NAME), str(FAKE_CK / "fake_ck.cpp"), "-o", str(lib_path)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lib = KernelLibrary(lib_path)
    assert lib.kernel == "fake_bwd_kernel" and lib.apis == ("bwd",)
    base = dict(dtype=0, hdim_q=64, hdim_v=64, nhead_q=1, nhead_k=1, batch=1, seqlen_q=1, seqlen_k=1)
    base["is_v_rowmajor"] = True  # fmha_bwd_traits has no V layout: row-major only
    assert lib.call("bwd", make_descriptor(**base, scale_s=0.125)) == 0.125
    with pytest.raises(KernelCallError, match=r"OUT_OF_RANGE: max_seqlen_k = 4294967296 does not fit this CK's int32"):
        lib.call("bwd", make_descriptor(**base, max_seqlen_k=2**32))
