"""One rule in one place: whether a backward plan ends with convert_dq (:func:`ckfmha.plan.needs_convert`), read
by the dispatcher's plan structure and the cpu / triton dq_dk_dv stages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckfmha.dispatcher import Dispatcher
from ckfmha.plan import StageRole, needs_convert
from ckfmha.problem import Problem
from ckfmha.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "dtype,deterministic,convert",
    [("fp16", False, True), ("bf16", True, True), ("fp32", False, False), ("fp32", True, True)],
)
def test_needs_convert_and_the_plan_structure_agree(dtype, deterministic, convert):
    p = Problem(family="bwd", dtype=dtype, deterministic=deterministic, seqlen_q=16, hdim_q=64)
    assert needs_convert(p) is convert
    roles = Dispatcher(Registry("gfx942", [], source="empty")).structures(p)
    assert roles == [[StageRole.DOT_DO_O, StageRole.DQ_DK_DV] + ([StageRole.CONVERT_DQ] if convert else [])]


@pytest.mark.parametrize(
    "path", ["ckfmha/dispatcher.py", "ckfmha/backends/cpu/stages.py", "ckfmha/backends/triton/launch_bwd.py"]
)
def test_the_users_import_the_rule_and_restate_it_nowhere(path):
    tree = ast.parse((ROOT / path).read_text())
    imported = {
        (node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert ("ckfmha.plan", "needs_convert") in imported
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "needs_convert" for n in ast.walk(tree))
