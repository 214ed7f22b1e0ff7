"""Per-batch effective lengths (batch mode ``q_eff_lens`` / ``kv_eff_lens``) and group-mode query padding
(``s_qpad``) on the cpu backend, and the Triton forward's host check refusing what its kernel does not honour.

The cpu plan runs through :func:`ckfmha.runner.execute` (the stages and the dispatcher's plan) and through
:func:`ckfmha.run`, whose unwritten-output check exempts the padding rows no kernel writes
(:func:`ckfmha.runner.written_elements`); the outputs are compared with the reference, which marks those rows NaN
(never written).
"""

from __future__ import annotations

import numpy as np
import pytest

from ckfmha.backends.cpu import make_backend
from ckfmha.backends.cpu.layout import as_bhsd
from ckfmha.backends.cpu.sequences import key_rows, query_rows
from ckfmha.backends.triton.backend import unhonoured_lengths
from ckfmha.dispatcher import Dispatcher
from ckfmha.inputs import make_inputs, storage_dtype
from ckfmha.kernel import Family
from ckfmha.problem import Problem
from ckfmha.reference import reference, reference_forward
from ckfmha.runner import execute, prepare_tensors
from ckfmha.validator import validate
from tests.test_cpu_backend import cpu_registry

BASE = dict(batch=2, nhead_q=4, nhead_k=2, seqlen_q=100, seqlen_k=77, hdim_q=64, lse=True)
EFF_CASES = {
    "q-and-kv-causal": Problem(**BASE, mask="b", q_eff_lens=(100, 37), kv_eff_lens=(77, 20)),
    "q-empty-batch": Problem(**BASE, mask="t", q_eff_lens=(60, 0)),
    "kv-empty-batch": Problem(**BASE, kv_eff_lens=(0, 50)),
    "bias-window": Problem(
        **{**BASE, "lse": False}, mask="t:10,3", bias="elementwise", bias_rank=2, q_eff_lens=(9, 71)
    ),
    "group-qpad": Problem(
        mode="group", batch=2, nhead_q=2, seqlens_q=(17, 40), seqlens_k=(30, 65), s_qpad=(20, 45), hdim_q=64, lse=True
    ),
}


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckfmha-cache"))


def run_cpu(p: Problem, seed: int = 0) -> tuple[dict, dict]:
    """The cpu plan's outputs (through execute, see the module doc) and the reference's."""
    inputs = make_inputs(p, seed)
    plan = Dispatcher(cpu_registry(), backend=make_backend()).select(p)
    forward = None
    if p.is_backward:  # the forward's o / lse, as run() makes them
        f = reference_forward(p, inputs, np.float32)
        forward = (f["o"].astype(storage_dtype(p.dtype)), f["lse"].astype(np.float32))
    tensors, written = prepare_tensors(p, plan, inputs, forward)
    execute(make_backend(), plan, tensors)
    return {n: tensors[n] for n in written}, reference(p, inputs)


def test_batch_rows_are_the_effective_lengths():
    p = EFF_CASES["q-and-kv-causal"]
    assert [query_rows(p, b) for b in range(2)] == [slice(0, 100), slice(0, 37)]
    assert [key_rows(p, b) for b in range(2)] == [slice(0, 77), slice(0, 20)]
    plain = p.replace(q_eff_lens=None, kv_eff_lens=None)
    assert [query_rows(plain, 1), key_rows(plain, 1)] == [slice(0, 100), slice(0, 77)]


@pytest.mark.parametrize("name", list(EFF_CASES))
def test_effective_lengths_match_the_reference_and_leave_the_rest_unwritten(name):
    p = EFF_CASES[name]
    out, ref = run_cpu(p)
    checks = validate(p, out, ref)
    assert set(checks) == ({"o", "lse"} if p.lse else {"o"})
    bad = [str(c) for c in checks.values() if not c]
    assert not bad, "\n".join(bad)
    # rows past a sequence's logical length keep the poison, exactly where the reference says "never written"
    o = out["o"].astype(np.float32)
    assert np.array_equal(np.isnan(o), np.isnan(ref["o"]))
    if p.mode.value == "batch" and p.q_eff_lens is not None:
        for b, n in enumerate(p.q_eff_lens):
            assert np.isnan(o[b, :, n:]).all() and np.isfinite(o[b, :, :n]).all()


def test_rows_past_q_eff_lens_are_not_computed_with_the_full_length():
    # a bottom-right mask aligns to the logical lengths: computing batch 1 over all 100 rows would shift it
    p = EFF_CASES["q-and-kv-causal"]
    out, ref = run_cpu(p)
    full, _ = run_cpu(p.replace(q_eff_lens=None, kv_eff_lens=None))
    assert not np.allclose(out["o"][1, :, :37].astype(np.float32), full["o"][1, :, :37].astype(np.float32))
    np.testing.assert_allclose(out["lse"][1, :, :37], ref["lse"][1, :, :37], rtol=1e-3, atol=1e-3)


BWD_QPAD = Problem(
    family="bwd",
    mode="group",
    batch=2,
    nhead_q=2,
    seqlens_q=(17, 40),
    seqlens_k=(30, 65),
    s_qpad=(20, 45),
    s_kpad=(31, 66),
    hdim_q=64,
    mask="b",
)


def _padding_rows(p: Problem) -> np.ndarray:
    """(total physical q rows,) -> True where the row lies past its sequence's logical length."""
    return np.concatenate([np.arange(pad) >= n for n, pad in zip(p.seqlens_q_list, p.qpad_list)])


def test_backward_group_query_padding_matches_the_reference():
    p = BWD_QPAD
    out, ref = run_cpu(p)
    checks = validate(p, out, ref)
    assert set(checks) == {"dq", "dk", "dv"} and all(checks.values()), [str(c) for c in checks.values()]
    # the padding rows of dQ and D: never written (the poison) and NaN in the reference; every other row finite
    pad = _padding_rows(p)
    assert pad.sum() == 3 + 5
    dq_out, dq_ref = (as_bhsd(a.astype(np.float32), p.input_layout)[0] for a in (out["dq"], ref["dq"]))
    for name, o, r in (("dq", dq_out, dq_ref), ("d", out["d"][0], ref["d"][0])):  # (h, s[, d])
        assert np.isnan(r[:, pad]).all() and np.isnan(o[:, pad]).all(), name
        assert np.isfinite(o[:, ~pad]).all() and np.isfinite(r[:, ~pad]).all(), name


def test_run_backward_exempts_only_the_query_padding_rows():
    """ckfmha.run's unwritten-output check over a group-mode s_qpad backward: the padding rows of d / dq are
    exempt; a logical dQ row left unwritten (the injected fault: a convert_dq that skipped it) is still caught."""
    import ckfmha
    from ckfmha.backends.cpu import stages
    from ckfmha.runner import UnwrittenOutputError, written_elements

    p = BWD_QPAD
    inputs = make_inputs(p, 0)
    res = ckfmha.run(p, inputs, backend="cpu", registry=cpu_registry())
    bad = [str(r) for r in validate(p, res.outputs, reference(p, inputs)).values() if not r.passed]
    assert not bad, bad
    for name in ("d", "dq"):
        mask = written_elements(p, name)
        assert mask is not None and int((~mask).sum()) == 8, name  # exactly the 3 + 5 padding rows exempt
    real = stages.store_dq_rows

    def skip_first_row(p_, tensors, acc, sdt):
        real(p_, tensors, acc, sdt)
        as_bhsd(tensors["dq"], p_.input_layout)[0, :, 0] = np.nan  # logical row 0 of sequence 0 left unwritten

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, "store_dq_rows", skip_first_row)
        with pytest.raises(UnwrittenOutputError, match="output 'dq'"):
            ckfmha.run(p, inputs, backend="cpu", registry=cpu_registry())


def test_a_stage_that_writes_every_row_is_caught():
    # the injected fault: the padding rows written (as the stage did before) must fail the comparison
    p = EFF_CASES["q-empty-batch"]
    out, ref = run_cpu(p)
    out["o"][1] = 0
    assert not validate(p, out, ref, names=["o"])["o"]


# ------------------------------------------------------------------ the Triton forward's host check (no GPU)
@pytest.mark.parametrize(
    "p,family,words",
    [
        (
            Problem(**BASE, q_eff_lens=(100, 37)),
            Family.FWD,
            "q_eff_lens: (100, 37): the triton forward runs seqlen_q=100 query rows in every batch",
        ),
        (
            EFF_CASES["group-qpad"],
            Family.FWD,
            "s_qpad: (20, 45): the triton forward takes a sequence's query length from seqstart_q (the padded "
            "lengths (20, 45), not seqlens_q (17, 40))",
        ),
    ],
)
def test_triton_forward_refuses_lengths_it_does_not_honour(p, family, words):
    why = unhonoured_lengths(family, p)
    assert why is not None and why.startswith(words), why


@pytest.mark.parametrize(
    "p,family",
    [
        (Problem(**BASE), Family.FWD),
        (Problem(**BASE, kv_eff_lens=(77, 20)), Family.FWD),  # the launcher's device copy of the lengths
        (Problem(**BASE, family="fwd_splitkv", num_splits=2, kv_eff_lens=(77, 20)), Family.FWD_SPLITKV),
        (Problem(**BASE, family="fwd_pagedkv", page_block_size=128, kv_eff_lens=(77, 20)), Family.FWD_PAGEDKV),
        (Problem(**BASE, family="fwd_appendkv", seqlen_knew=8, kv_eff_lens=(77, 20)), Family.FWD_SPLITKV),
        (Problem(**BASE, family="fwd_appendkv", seqlen_knew=8, kv_eff_lens=(77, 20)), Family.FWD_APPENDKV),
        (EFF_CASES["group-qpad"].replace(s_qpad=None, s_kpad=(31, 70)), Family.FWD),
        (EFF_CASES["group-qpad"].replace(family="bwd", lse=False), Family.BWD_DQ_DK_DV),  # launch_bwd's own check
    ],
)
def test_triton_forward_accepts_lengths_it_honours(p, family):
    assert unhonoured_lengths(family, p) is None


def test_triton_check_preconditions_raises_the_length_rule():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from ckfmha.backends.triton.launch import PreconditionError, check_preconditions

    p = Problem(**BASE, q_eff_lens=(100, 37))
    c = Dispatcher(cpu_registry(), backend=make_backend()).select(p).stages[0].kernel  # a fwd kernel that fits p
    assert c.family is Family.FWD
    check_preconditions(c, p.replace(q_eff_lens=None))
    with pytest.raises(PreconditionError, match=r"q_eff_lens: \(100, 37\): the triton forward"):
        check_preconditions(c, p)


@pytest.mark.parametrize("case", [c for c in EFF_CASES if c != "bias-window"])
def test_run_accepts_the_unwritten_padding_rows(case: str) -> None:
    """ckfmha.run checks that every element the plan must write was written: the rows past a sequence's logical
    length are exempt (never written by CK's kernels); every other row is still required."""
    import ckfmha
    from ckfmha.runner import written_elements

    p = EFF_CASES[case]
    inputs = make_inputs(p, 0)
    res = ckfmha.run(p, inputs, backend="cpu", registry=cpu_registry())
    bad = [str(r) for r in validate(p, res.outputs, reference(p, inputs)).values() if not r.passed]
    assert not bad, bad
    mask = written_elements(p, "o")
    if p.q_eff_lens is None and p.s_qpad is None:
        assert mask is None  # key lengths alone leave every query row written
    else:
        assert mask is not None and not mask.all() and mask.any()  # some rows exempt, the rest required


@pytest.mark.parametrize("family", ["fwd", "bwd"])
def test_triton_backend_declines_group_query_padding_the_cpu_backend_runs(family):
    """A problem no Triton kernel addresses is declined up front (the plugin skips its items with these words),
    while the cpu backend declines nothing; the same problem without query padding is not declined."""
    from ckfmha.backends.triton.backend import TritonBackend

    padded = EFF_CASES["group-qpad"].replace(family=family, lse=family == "fwd")
    why = TritonBackend().declines(padded)
    assert why is not None and why.startswith("s_qpad: (20, 45): the triton kernels take"), why
    assert "rule: no query padding in group mode" in why
    assert TritonBackend().declines(padded.replace(s_qpad=None)) is None
    assert make_backend().declines(padded) is None


def test_triton_backend_declines_the_forwards_unhonoured_batch_lengths():
    from ckfmha.backends.triton.backend import TritonBackend

    why = TritonBackend().declines(EFF_CASES["q-empty-batch"])
    assert why is not None and why.startswith("q_eff_lens: (60, 0)"), why
