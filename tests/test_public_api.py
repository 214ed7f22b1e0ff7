"""The public Python API: ``from ckfmha import Problem, make_inputs, run, explain, reference, validate``."""

from __future__ import annotations

import pydoc
import subprocess
import sys

import numpy as np
import pytest

import ckfmha
from ckfmha import Problem, explain, make_inputs, reference, run, validate

PUBLIC = {
    "Problem": Problem,
    "make_inputs": make_inputs,
    "run": run,
    "explain": explain,
    "reference": reference,
    "validate": validate,
}


def small() -> Problem:
    return Problem.from_ck_args("-prec=fp16 -b=1 -h=2 -s=64 -d=32 -mask=t -lse=1")


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_name_has_a_real_docstring(name: str) -> None:
    obj = PUBLIC[name]
    doc = obj.__doc__ or ""
    assert len(doc.split()) >= 8, f"{name}: {doc!r}"
    assert getattr(ckfmha, name) is obj
    assert " ".join(doc.split()[:4]) in " ".join(pydoc.render_doc(obj).split())  # help() shows it


def test_run_and_explain_docstrings_document_parameters_returns_and_errors() -> None:
    for fn in (run, explain):
        doc = fn.__doc__
        assert "see the module doc" not in doc
        for word in ("Parameters", "Returns", "Raises", "problem", "backend", "arch", "receipt", "mask_mode"):
            assert word in doc, (fn.__name__, word)
    assert "inputs" in run.__doc__ and "RunResult" in run.__doc__ and "NoKernelError" in run.__doc__
    assert "Explanation" in explain.__doc__


def test_reference_is_the_callable_package() -> None:
    import ckfmha.reference as package

    assert reference is package and callable(reference)
    assert "callable" in reference.__doc__ and "reference(problem, inputs" in reference.__doc__
    p = small()
    inputs = make_inputs(p, seed=1)
    got, want = reference(p, inputs), package.reference(p, inputs)
    assert set(got) == set(want) == {"o", "lse"}
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    got64 = reference(p, inputs, np.float64)
    assert got64["o"].dtype == np.float64
    with pytest.raises(ValueError, match="accum: float16 must be float32 or float64"):
        reference(p, inputs, np.float16)
    # the per-family functions stay reachable
    np.testing.assert_array_equal(reference.reference_forward(p, inputs, np.float32)["o"], want["o"])


def test_run_output_validates_against_the_reference() -> None:
    p = small()
    inputs = make_inputs(p, seed=0)
    result = run(p, inputs)
    checks = validate(p, result.outputs, reference(p, inputs))
    assert set(checks) == {"o", "lse"}
    assert all(c.passed and c.mismatch_count == 0 for c in checks.values()), [str(c) for c in checks.values()]
    assert result.plan.stages[0].kernel.kernel_id.startswith("fwd.fp16.batch.d32x32.")
    exp = explain(p)
    assert exp.stages[0].chosen == result.plan.stages[0].kernel


def test_import_ckfmha_stays_light() -> None:
    code = (
        "import sys, ckfmha, ckfmha.cli; heavy = [m for m in ('numpy', 'ckfmha.enumeration', 'ckfmha.reference')"
        " if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert {"make_inputs", "reference", "validate", "run", "explain", "Problem"} <= set(dir(ckfmha))
    with pytest.raises(AttributeError, match="module 'ckfmha' has no attribute 'nope'"):
        ckfmha.nope  # noqa: B018
