"""The marker table of tests/conftest.py: registered markers only, entries that name real files and tests, and the
one skip rule for GPU tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests import conftest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _registered() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^markers = \[(.*?)^\]", text, re.M | re.S)
    assert block, "pyproject.toml registers the markers under [tool.pytest.ini_options]"
    return set(re.findall(r'^\s*"([a-z_]+):', block.group(1), re.M))


def test_every_marker_of_the_table_is_registered() -> None:
    used = {m for marks in (*conftest.MARKS.values(), *conftest.FIXTURE_MARKS.values()) for m in marks}
    assert used <= _registered() == {"gpu", "slow", "network", "integration"}
    assert "--strict-markers" in (ROOT / "pyproject.toml").read_text()


def test_every_entry_names_a_test_file_and_test_that_exist() -> None:
    files = set(conftest.MARKS) | set(conftest.GPU_FILES) | set(conftest.TRITON_INTERPRETER_FILES)
    missing = []
    for key in sorted(files):
        name, _, test = key.partition("::")
        path = TESTS / name
        if not path.is_file():
            missing.append(key)
        elif test:
            tree = ast.parse(path.read_text())
            if test not in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}:
                missing.append(key)
    assert missing == []
    assert {f for f in conftest.GPU_FILES if "gpu" not in conftest.MARKS.get(f, ())} == set()


def test_markers_for_merges_file_test_and_fixture_marks(monkeypatch) -> None:
    monkeypatch.setattr(conftest, "MARKS", {"a.py": ("gpu",), "a.py::test_x": ("slow", "gpu")})
    monkeypatch.setattr(conftest, "FIXTURE_MARKS", {"ck_tree": ("network", "slow")})
    assert conftest.markers_for("a.py", "test_x", ["tmp_path", "ck_tree"]) == ["gpu", "slow", "network"]
    assert conftest.markers_for("a.py", "test_y", ["tmp_path"]) == ["gpu"]
    assert conftest.markers_for("b.py", "test_x", []) == []


@pytest.fixture
def no_device(monkeypatch):
    monkeypatch.setattr(conftest, "_missing_device", lambda: "needs a CUDA or ROCm GPU: torch 9.9 is a CPU-only build")
    conftest._missing_interpreter.cache_clear()
    yield
    conftest._missing_interpreter.cache_clear()


def test_a_gpu_test_without_a_device_is_skipped_with_the_reason(no_device, monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert (
        conftest.skip_reason("test_upstream_torch_gpu.py") == "needs a CUDA or ROCm GPU: torch 9.9 is a CPU-only build"
    )
    assert conftest.skip_reason("test_triton_bwd.py") == (
        "needs a CUDA or ROCm GPU: torch 9.9 is a CPU-only build; "
        "TRITON_INTERPRET=1 runs it on the CPU in Triton's interpreter"
    )


def test_the_triton_interpreter_stands_in_for_the_gpu_in_the_triton_files(no_device, monkeypatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert conftest.skip_reason("test_triton_bwd.py") is None
    assert conftest.skip_reason("test_containment_gpu.py") is not None  # real GPU kernels only


def test_a_device_runs_every_gpu_test(monkeypatch) -> None:
    monkeypatch.setattr(conftest, "_missing_device", lambda: None)
    assert all(conftest.skip_reason(f) is None for f in conftest.GPU_FILES)


def test_the_missing_device_is_named() -> None:
    reason = conftest._missing_device()
    try:
        import torch
    except ImportError:
        assert reason is not None and "torch is not installed" in reason
        return
    if torch.cuda.is_available():
        assert reason is None
    else:
        assert reason is not None and re.match(r"needs a (CUDA or ROCm|CUDA|ROCm) GPU: torch \S+ ", reason)
