"""The Triton backend's layers (ckfmha/backends/triton/__init__.py, "Layers"): each module imports only modules
below it -- function-level imports included -- and no module imports another's private name.

Needs no torch or triton: grimp (import-linter's graph) reads the sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ckfmha" / "backends" / "triton"

#: highest first; a module may import the ones after it (and the kernels only their own stack)
LAYERS = (
    "backend",
    "warmup",
    "execute",
    "launch",
    "launch_bwd",
    "launch_kvcache",
    "device",
    "kernels_bwd",
    "kernels_kvcache",
    "kernels",
    "capability",
)
#: what each module may import of the package (beyond that, only ckfmha modules outside it)
ALLOWED = {
    "backend": {"capability", "execute", "warmup"},
    "warmup": {"capability", "execute", "launch_bwd"},
    "execute": {"capability", "device", "launch", "launch_bwd", "launch_kvcache"},
    "launch": {"capability", "device", "kernels", "launch_kvcache"},
    "launch_bwd": {"capability", "device", "kernels_bwd"},
    "launch_kvcache": {"capability", "device", "kernels_kvcache"},
    "device": {"capability"},
    "kernels_bwd": {"kernels"},
    "kernels_kvcache": set(),
    "kernels": set(),
    "capability": set(),
}


def test_every_module_of_the_package_has_a_layer() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert modules == set(LAYERS) == set(ALLOWED)


def test_each_module_imports_only_the_layers_below_it() -> None:
    grimp = pytest.importorskip("grimp", reason="grimp (import-linter) is not installed (pip install -e '.[lint]')")
    graph = grimp.build_graph("ckfmha", cache_dir=None)
    prefix = "ckfmha.backends.triton."
    wrong = {}
    for name in LAYERS:
        imported = {
            m[len(prefix) :] for m in graph.find_modules_directly_imported_by(prefix + name) if m.startswith(prefix)
        }
        if not imported <= ALLOWED[name]:
            wrong[name] = sorted(imported - ALLOWED[name])
        below = set(LAYERS[LAYERS.index(name) + 1 :])
        assert ALLOWED[name] <= below, f"{name}: ALLOWED names a module that is not below it"
    assert wrong == {}
    assert not graph.find_shortest_chain(importer=prefix + "device", imported=prefix + "execute")
    assert not graph.find_shortest_chain(importer=prefix + "launch", imported=prefix + "backend")


def test_no_module_imports_a_private_name_of_another() -> None:
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ckfmha."):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert found == []


def test_the_package_and_its_backend_module_import_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ckfmha.backends.triton, ckfmha.backends.triton.backend; "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
