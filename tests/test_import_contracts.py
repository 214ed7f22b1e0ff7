"""The import rules, and the tests' use of private names.

* The import-linter contracts of pyproject.toml (``[tool.importlinter]``: layers, no cycles, the reference and
  the backends independent, torch/triton/matplotlib imported only where allowed, the plugin on top) hold on the
  tree, and each catches an injected fault in a copy of the tree: a lazy import that closes a cycle, the reference
  importing a backend, a core module importing torch, ckfmha importing the plugin, the Triton backend's device
  bottom importing a launcher, one backend importing another, a cycle inside the plugin.
* No test imports a private name (a module or attribute whose name starts with ``_``) of ckfmha, pytest_ckfmha or
  codegen, except those of :data:`PRIVATE_ALLOWED`; the scan catches every form of such a use.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ckfmha", "pytest_ckfmha", "codegen")


# ------------------------------------------------------------------------------------ import-linter contracts
def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the packages under ``cwd`` with ``cwd``'s pyproject.toml (no cache)."""
    pytest.importorskip("importlinter", reason="import-linter is not installed (pip install -e '.[lint]')")
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**_clean_env(), "PYTHONPATH": str(cwd)},
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def broken_contracts(output: str, names) -> set[str]:
    """Those of ``names`` that lint-imports' summary reports BROKEN (it wraps lines at 80 columns, sometimes
    eating the space before KEPT / BROKEN: compared without whitespace)."""
    summary = re.sub(r"\s+", "", output.split("Contracts:", 1)[0])
    return {n for n in names if re.sub(r"\s+", "", n) + "BROKEN" in summary}


def contract_names() -> dict[str, str]:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: " ".join(c["name"].split()) for c in config["contracts"]}


def test_the_tree_keeps_every_import_contract() -> None:
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BROKEN" not in r.stdout and f"Contracts: {len(contract_names())} kept, 0 broken." in r.stdout


#: (file, the lines added at its end, the contract ids it must break, a line of lint-imports' report)
FAULTS = [
    (
        "ckfmha/kernel.py",
        "\n\ndef _fault():\n    from ckfmha import runner  # a lazy import counts too\n\n    return runner\n",
        {"layers", "no-cycles"},
        "ckfmha.kernel -> ckfmha.runner",
    ),
    (
        "ckfmha/reference/__init__.py",
        "\nfrom ckfmha.backends.cpu import stages as _stages  # noqa: E402\n",
        {"layers", "reference-independent"},
        "ckfmha.reference -> ckfmha.backends.cpu.stages",
    ),
    (
        "ckfmha/masking.py",
        "\n\ndef _fault():\n    import torch\n\n    return torch\n",
        {"gpu-packages"},
        "ckfmha.masking -> torch",
    ),
    (
        "ckfmha/outputs.py",
        "\n\ndef _fault():\n    import pytest_ckfmha.plugin\n\n    return pytest_ckfmha.plugin\n",
        {"plugin-on-top", "layers"},
        "ckfmha.outputs -> pytest_ckfmha.plugin",
    ),
    (
        "ckfmha/backends/triton/capability.py",
        "\n\ndef _fault():\n    from ckfmha.backends.triton import launch\n\n    return launch\n",
        {"triton-layers", "no-cycles"},
        "ckfmha.backends.triton.capability -> ckfmha.backends.triton.launch",
    ),
    (
        "ckfmha/backends/hip/__init__.py",
        "\nfrom ckfmha.backends.cpu import backend as _cpu  # noqa: E402\n",
        {"backends-independent"},
        "ckfmha.backends.hip -> ckfmha.backends.cpu.backend",
    ),
]


@pytest.fixture(scope="module")
def faulty_tree(tmp_path_factory) -> tuple[Path, str]:
    """A copy of the packages and pyproject.toml with every fault of :data:`FAULTS` injected; lint-imports' output
    on it."""
    tree = tmp_path_factory.mktemp("faulty")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    for path, code, _, _ in FAULTS:
        with open(tree / path, "a") as fh:
            fh.write(code)
    r = lint_imports(tree)
    assert r.returncode != 0, r.stdout + r.stderr
    return tree, r.stdout


@pytest.mark.parametrize("path, code, contracts, line", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_injected_fault_breaks_its_contracts(faulty_tree, path, code, contracts, line) -> None:
    _, out = faulty_tree
    names = contract_names()
    assert {names[c] for c in contracts} <= broken_contracts(out, names.values()), out
    assert line in " ".join(out.split()), out  # lint-imports wraps its lines at 80 columns


def test_a_cycle_inside_a_package_is_caught(tmp_path) -> None:
    """The reverse of a real import inside pytest_ckfmha (picked from the graph, so the test follows renames)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("pytest_ckfmha", exclude_type_checking_imports=True)
    a, b = sorted(
        (m, n)
        for m in graph.modules
        for n in graph.find_modules_directly_imported_by(m)
        if n.startswith("pytest_ckfmha.") and m != "pytest_ckfmha"
    )[0]
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / (b.replace(".", "/") + ".py")
    if not module.is_file():
        module = tmp_path / b.replace(".", "/") / "__init__.py"
    with open(module, "a") as fh:
        fh.write(f"\n\ndef _fault():\n    import {a}\n\n    return {a}\n")
    r = lint_imports(tmp_path)
    names = contract_names()
    assert broken_contracts(r.stdout, names.values()) == {names["no-cycles"]}, r.stdout
    assert "No cycles are allowed in pytest_ckfmha." in r.stdout


def test_the_broken_contract_parser() -> None:
    out = """
        ckfmha's layers (ARCHITECTURE.md): each imports only the layers below it KEPT (2 ignored imports)
        No import cycle between the modules (or sub-packages) of one package, at any
        depth BROKEN (2 ignored imports)
        The NumPy reference (the oracle) imports no backend, no dispatcher and no runnerKEPT
        torch and triton are imported by the GPU backends onlyBROKEN
        Contracts: 2 kept, 2 broken.
        No cycles are allowed in ckfmha. The NumPy reference (the oracle) imports no backend BROKEN
        """
    names = [
        "ckfmha's layers (ARCHITECTURE.md): each imports only the layers below it",
        "No import cycle between the modules (or sub-packages) of one package, at any depth",
        "The NumPy reference (the oracle) imports no backend, no dispatcher and no runner",
        "torch and triton are imported by the GPU backends only",
    ]
    assert broken_contracts(out, names) == {names[1], names[3]}


# ------------------------------------------------------------------------------------ private names in the tests
#: (test file, private name): why the test reaches it -- none: the tests use public names only. A name is reported up
#: to its first private part.
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("test_enumeration_names.py", "ckfmha.enumeration._fwdlike"): (
        "the split-KV names path names its fallback pairs in the shared fwd-like enumerator: the fallback test spies "
        "on that module's render_ck_names binding"
    ),
}

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _in_project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _chain(node: ast.expr) -> list[str]:
    """``a.b.c`` as ``["a", "b", "c"]`` (``[]`` unless the root is a plain name)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def private_uses(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every private name of the packages that ``source`` reaches: an import of a private module
    or name (``from ckfmha.x import _y``, ``import ckfmha._x``, at any depth, inside functions too), an attribute of
    an imported module (``runner._registry``), a dotted string (``monkeypatch.setattr("ckfmha.x._y", ...)``) and a
    name string next to a module (``monkeypatch.setattr(stages, "_y", ...)``, ``getattr(mod, "_y")``). ``name``
    stops at its first private part."""
    found: set[tuple[int, str]] = set()
    modules: dict[str, str] = {}  # local name -> the module of the packages it is bound to

    def hit(line: int, prefix: list[str], parts: list[str]) -> None:
        for i, part in enumerate(parts):
            if is_private(part):
                found.add((line, ".".join([*prefix, *parts[: i + 1]])))
                return

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _in_project(a.name):
                    hit(node.lineno, [], a.name.split("."))
                    local = a.asname or a.name.split(".")[0]
                    modules[local] = a.name if a.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _in_project(node.module):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                hit(node.lineno, [], full.split("."))
                if _is_module(full):
                    modules[a.asname or a.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain and chain[0] in modules:
                hit(node.lineno, [modules[chain[0]]], chain[1:])
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if _DOTTED.fullmatch(first.value) and _in_project(first.value):
                    hit(node.lineno, [], first.value.split("."))
            elif len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                chain = _chain(first)
                if chain and chain[0] in modules:
                    target = ".".join([modules[chain[0]], *chain[1:]])
                    if _is_module(target):
                        hit(node.lineno, [target], [node.args[1].value])
    return sorted(found)


def _test_files() -> list[Path]:
    tests = ROOT / "tests"
    return sorted(f for f in tests.rglob("*.py") if "data" not in f.relative_to(tests).parts)


def test_no_test_imports_a_private_name_beyond_the_allow_list() -> None:
    used: dict[tuple[str, str], list[int]] = {}
    for f in _test_files():
        for line, name in private_uses(f.read_text()):
            used.setdefault((f.name, name), []).append(line)
    unexpected = {
        f"{file}:{lines[0]}: {name}" for (file, name), lines in used.items() if (file, name) not in PRIVATE_ALLOWED
    }
    assert not unexpected, f"use a public name, or add it to PRIVATE_ALLOWED with the reason: {sorted(unexpected)}"
    stale = set(PRIVATE_ALLOWED) - set(used)
    assert not stale, f"allowed but no longer used (remove them from PRIVATE_ALLOWED): {sorted(stale)}"


@pytest.mark.parametrize(
    "source, found",
    [
        ("from ckfmha.runner import _forward_for_backward, execute", [(1, "ckfmha.runner._forward_for_backward")]),
        ("from ckfmha.reference._core import attend", [(1, "ckfmha.reference._core")]),
        ("from ckfmha.reference import _core", [(1, "ckfmha.reference._core")]),
        ("import ckfmha.reference._core as core", [(1, "ckfmha.reference._core")]),
        ("def f():\n    from pytest_ckfmha.options import _OPTIONS\n", [(2, "pytest_ckfmha.options._OPTIONS")]),
        ("from codegen import emit\nemit._private(1)", [(2, "codegen.emit._private")]),
        ("import ckfmha.runner\nckfmha.runner._registry.cache_clear()", [(2, "ckfmha.runner._registry")]),
        ("from ckfmha import runner as r\nx = r._registry", [(2, "ckfmha.runner._registry")]),
        (
            "def t(monkeypatch):\n    monkeypatch.setattr('ckfmha.matrix._file_order', None)",
            [(2, "ckfmha.matrix._file_order")],
        ),
        (
            "from ckfmha.backends.cpu import stages\ngetattr(stages, '_store_dq_rows')",
            [(2, "ckfmha.backends.cpu.stages._store_dq_rows")],
        ),
        # public names, dunders, private local aliases and other packages are fine
        ("from ckfmha import rng as _rng\n_rng.philox\nfrom ckfmha import __version__", []),
        ("import numpy as np\nnp._core\nfrom tests.ck_tree import _extract\nx._y", []),
    ],
)
def test_the_private_name_scan_finds_every_form(source: str, found) -> None:
    assert private_uses(source) == found


def test_an_injected_private_import_fails_the_check(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "tests" / "test_injected.py"
    fake.parent.mkdir()
    fake.write_text("from ckfmha.dispatcher import _rank\n\n\ndef test_x():\n    assert _rank\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"test_injected\.py:1: ckfmha\.dispatcher\._rank"):
        test_no_test_imports_a_private_name_beyond_the_allow_list()
