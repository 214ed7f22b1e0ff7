"""The tests' markers, applied in one place, and the one skip rule for GPU tests.

Markers (registered in pyproject.toml): ``gpu`` (runs kernels on a CUDA or ROCm GPU), ``slow`` (10 s or more on
a busy 2-core machine, measured with ``--durations``), ``network`` (downloads the amd-aiter CK tree on first use;
cached on disk afterwards) and ``integration`` (a real CK tree or toolchain instead of fakes). :data:`MARKS` gives
them by file or by test name, :data:`FIXTURE_MARKS` to every test that uses a fixture; no test file marks itself
(the ``gpu`` marks some Triton files still carry in place are the same marker).

The one skip rule: a ``gpu`` test where torch sees no CUDA or ROCm GPU is skipped with the reason (which device is
missing, and why). The Triton files of :data:`TRITON_INTERPRETER_FILES` also run on the CPU in Triton's
interpreter (``TRITON_INTERPRET=1``). A file of :data:`GPU_FILES` needs the device for every test: without one it
is skipped at collection, one skip with the reason for the whole file, and never imported.

Selection: ``python3 -m pytest tests -q -m "not slow and not gpu and not network"`` is the quick local run;
``.ci/run`` deselects nothing.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

#: markers by test file name, or by ``file::test`` (the test's function name, parameters left out)
MARKS: dict[str, tuple[str, ...]] = {
    # the GPU files (see GPU_FILES)
    "test_upstream_torch_gpu.py": ("gpu",),
    "test_containment_gpu.py": ("gpu", "slow", "integration"),
    "test_triton_gpu.py": ("gpu",),
    "test_triton_bwd.py": ("gpu",),
    "test_triton_dropout_large.py": ("gpu",),
    # the hip backend's gfx942 syntax check and host build (CKFMHA_HIP_SYNTAX=1 and clang-19): ~4.5 min on 2 cores
    "test_hip_syntax.py::test_generated_sources_of_every_api_pass_the_gfx942_syntax_check": ("slow", "integration"),
    "test_hip_syntax.py::test_descriptors_reach_the_real_ck_structs_of_every_api": ("slow", "integration"),
    # pip builds the wheel (fetching setuptools for the build): ~20 s
    "test_packaging.py::test_the_wheel_ships_the_matrices_and_data": ("slow", "network", "integration"),
    # inner pytest runs under xdist with crashing and hanging workers: 20-45 s each on 2 cores
    "test_plugin_containment.py::test_containment_under_xdist": ("slow",),
    "test_plugin_containment.py::test_a_dying_xdist_worker_fails_its_item_without_rerunning_it": ("slow",),
    "test_plugin_containment.py::test_xdist_load_scheduling_keeps_the_crashed_item_in_the_report": ("slow",),
    "test_plugin_xdist.py::test_xdist_run_groups_items_by_kernel": ("slow",),
    # inner pytest runs of the scheduler and the sharding (xdist with 2 workers, CI variables): 10-45 s each
    "test_plugin_schedule_run.py": ("slow",),
    # inner pytest runs of CK's smoke lines against a fake checkout: 15-25 s
    "test_ck_smoke.py::test_parity_mode_runs_each_line_as_the_script_did": ("slow",),
    "test_ck_smoke.py::test_last_failed_reruns_the_failed_smoke_line": ("slow",),
    # the fake HIP compiler builds host programs with g++: 12-17 s
    "test_hip_backend.py::test_build_runs_the_commands_once_per_key": ("slow",),
    "test_hip_backend.py::test_a_failed_compile_shows_its_log_and_keeps_the_logs": ("slow",),
    # ckfmha adequacy: a baseline and one fault run, each an inner pytest run: 15-35 s
    "test_faults_cli.py::test_a_gqa_shape_catches_the_head_map_fault": ("slow",),
    "test_faults_cli.py::test_without_gqa_the_fault_escapes": ("slow",),
    # the packaged smoke category once clean and once per catalogued fault (cpu backend, -n 2): ~5-7 minutes
    "test_faults_cli.py::test_smoke_catches_every_catalogued_fault_on_the_cpu_backend": ("slow",),
    "test_triton_faults.py::test_each_triton_fault_is_caught_in_the_interpreter": ("slow",),
    "test_triton_faults.py::test_each_triton_fault_is_caught_on_the_gpu": ("gpu",),
    "test_triton_faults.py::test_smoke_catches_every_hosted_fault_on_the_gpu": ("gpu", "slow"),
    "test_hip_backend.py::test_build_many_prints_a_line_per_kernel_and_the_slowest": ("slow",),
}

#: markers for every test that uses the fixture: the amd-aiter CK tree (tests/ck_tree.py) downloads 40 MB once
FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "ck_tree": ("network", "slow", "integration"),
}

#: files whose every test needs a GPU: skipped at collection (one skip per file) where there is none
GPU_FILES = frozenset(
    {
        "test_upstream_torch_gpu.py",
        "test_containment_gpu.py",
        "test_triton_gpu.py",
        "test_triton_bwd.py",
        "test_triton_dropout_large.py",
    }
)

#: Triton files whose ``gpu`` tests also run in Triton's interpreter on the CPU (TRITON_INTERPRET=1)
TRITON_INTERPRETER_FILES = frozenset(
    {
        "test_triton_gpu.py",
        "test_triton_bwd.py",
        "test_triton_kvcache.py",
        "test_triton_coverage.py",
        "test_triton_dropout_large.py",
    }
)


def _interpreter_asked() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


@functools.cache
def _missing_device() -> str | None:
    """``None`` where torch sees a CUDA or ROCm GPU, else which device is missing and why."""
    try:
        import torch
    except ImportError:
        return "needs a CUDA or ROCm GPU: torch is not installed, so none can be seen (pip install 'ckfmha[gpu]')"
    if torch.cuda.is_available():
        return None
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    if hip:
        return f"needs a ROCm GPU: torch {torch.__version__} (ROCm {hip} build) sees none"
    if cuda:
        return f"needs a CUDA GPU: torch {torch.__version__} (CUDA {cuda} build) sees none"
    return f"needs a CUDA or ROCm GPU: torch {torch.__version__} is a CPU-only build"


@functools.cache
def _missing_interpreter() -> str | None:
    """``None`` where Triton's interpreter can stand in for the GPU, else why not."""
    if not _interpreter_asked():
        return "TRITON_INTERPRET=1 runs it on the CPU in Triton's interpreter"
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as e:
        return f"TRITON_INTERPRET=1 is set but {e.name} is not installed (pip install 'ckfmha[gpu]')"
    return None


def skip_reason(file_name: str) -> str | None:
    """Why a ``gpu`` test of ``file_name`` cannot run here, or ``None``: the one skip rule."""
    device = _missing_device()
    if device is None:
        return None
    if file_name in TRITON_INTERPRETER_FILES:
        interpreter = _missing_interpreter()
        if interpreter is None:
            return None
        return f"{device}; {interpreter}"
    return device


def markers_for(file_name: str, test_name: str, fixtures: tuple[str, ...] | list[str]) -> list[str]:
    """The markers the table gives a test (``test_name`` without its parameters)."""
    names = list(MARKS.get(file_name, ())) + list(MARKS.get(f"{file_name}::{test_name}", ()))
    for fixture, marks in FIXTURE_MARKS.items():
        if fixture in fixtures:
            names += marks
    return list(dict.fromkeys(names))


class _SkippedModule(pytest.Module):
    """A GPU-only file where there is no GPU: one skip with the reason, the file never imported."""

    reason = ""

    def collect(self):
        raise pytest.skip.Exception(self.reason, allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Path, parent):
    if module_path.name not in GPU_FILES:
        return None
    reason = skip_reason(module_path.name)
    if reason is None:
        return None
    module = _SkippedModule.from_parent(parent, path=module_path)
    module.reason = f"{module_path.name}, every test: {reason}"
    return module


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        file_name = item.path.name
        test_name = getattr(item, "originalname", None) or item.name.split("[")[0]
        for name in markers_for(file_name, test_name, getattr(item, "fixturenames", ())):
            if item.get_closest_marker(name) is None:
                item.add_marker(getattr(pytest.mark, name))
        if item.get_closest_marker("gpu") is not None and (reason := skip_reason(file_name)) is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
