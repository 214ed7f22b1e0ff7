"""The Triton backend's fault injectors (ckfmha/faults/triton_injectors.py, docs/faults.md): each fault the catalogue
says the Triton backend hosts makes a small problem that exercises it fail the comparison with the reference, the
same problem passes without it, and its outputs are bit for bit those of before once the fault is off.

Two ways to run the kernels:

* ``test_each_triton_fault_is_caught_in_the_interpreter`` (slow, CPU only): one child process with
  ``TRITON_INTERPRET=1`` (Triton's interpreter decides at import time, so it cannot join this process) runs every
  case of :data:`CASES` on torch CPU tensors and reports per fault; this file is that child's script too
  (``python tests/test_triton_faults.py FAULT ...`` prints one JSON line per fault).
* ``test_each_triton_fault_is_caught_on_the_gpu`` (``gpu``): the same cases in this process on a GPU; skipped
  without one by the one GPU skip rule of tests/conftest.py.
* ``test_smoke_catches_every_hosted_fault_on_the_gpu`` (``gpu``, ``slow``): ``ckfmha adequacy --category smoke
  --backend triton`` (docs/faults.md) reports every fault the Triton backend hosts caught.

The ``slow`` / ``gpu`` marks are set here (tests/conftest.py's table does not list this file yet).

The wiring without kernels (the catalogue's Triton rows, the hook points in the launchers, the injectors as pure
functions) is tests/test_faults.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FWD = dict(batch=1, nhead_q=2, seqlen_q=32, seqlen_k=48, hdim_q=64, lse=True)
SPLIT = dict(family="fwd_splitkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=100, hdim_q=64, num_splits=2, lse=True)
PAGED = dict(family="fwd_pagedkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=300, hdim_q=64, page_block_size=128)
APPEND = dict(family="fwd_appendkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=40, seqlen_knew=3, hdim_q=64)
ROPE = dict(APPEND, rotary_dim=32, rope="half_rotated")
BWD = dict(family="bwd", batch=1, nhead_q=2, seqlen_q=32, seqlen_k=40, hdim_q=64)
DROP = dict(FWD, p_drop=0.3)
GROUP = dict(mode="group", batch=2, nhead_q=2, seqlens_q=(9, 16), seqlens_k=(20, 30), s_kpad=(24, 30), hdim_q=64)

CASES: dict[str, dict] = {
    "splitkv_range_gap": SPLIT,
    "mask_left_off_by_one": dict(FWD, mask="t:5,0"),
    "mask_right_off_by_one": dict(FWD, mask="t"),
    "tail_key_tile_dropped": dict(FWD, seqlen_k=150),
    "page_index_off_by_one": PAGED,
    "last_page_len_off_by_one": PAGED,
    "append_offset_wrong": APPEND,
    "dropout_threshold_off_by_one": DROP,
    "dropout_seed_wrong": DROP,
    "dropout_offset_wrong": DROP,
    "dropout_rescale_missing": DROP,
    "ds_missing_d": BWD,
    "dq_slices_not_summed": dict(BWD, seqlen_k=300, deterministic=True),
    "sink_state_wrong": dict(FWD, sink=True),
    "rope_q_positions_wrong": ROPE,
    "group_seqstart_ignores_padding": dict(GROUP, lse=True),
    "alibi_slope_sign": dict(FWD, bias="alibi"),
    # the in-kernel faults (the kernels' FAULT switch)
    "gqa_head_map": dict(FWD, nhead_q=4, nhead_k=2, seqlen_q=80),  # rows not packed (the switch is not there)
    "lse_base2": FWD,
    "sink_every_split": dict(SPLIT, sink=True),
    "masked_rows_nan": dict(FWD, seqlen_q=40, seqlen_k=20, mask="b"),
    "empty_seqlen_q_nan_dkdv": dict(
        family="bwd", mode="group", batch=2, nhead_q=2, seqlens_q=(0, 16), seqlens_k=(16, 16), hdim_q=64
    ),
    "dk_scale_missing": BWD,
    "dq_scale_missing": BWD,
    "dq_stored_not_accumulated": dict(BWD, seqlen_k=300),
    "rope_halves_swapped": ROPE,
    "rope_dim_ignored": ROPE,
    # the backward side of faults whose hooks are in both the forward and the dq_dk_dv launchers
    "gqa_head_map@bwd": dict(BWD, nhead_q=4, nhead_k=2),
    "mask_right_off_by_one@bwd": dict(BWD, mask="t"),
    "tail_key_tile_dropped@bwd": dict(BWD, seqlen_k=150),
    "dropout_rescale_missing@bwd": dict(BWD, p_drop=0.3),
    "alibi_slope_sign@bwd": dict(BWD, bias="alibi"),
    "group_seqstart_ignores_padding@bwd": dict(GROUP, family="bwd"),
}
"""One small problem per fault the Triton backend hosts (Problem keyword arguments); ``fault@tag`` keys are more
problems of the same fault."""


def triton_faults() -> list[str]:
    """The catalogue's faults the Triton backend hosts, in catalogue order."""
    from ckfmha.faults import catalogue

    return [n for n, f in catalogue().items() if f.injection("triton").injectable]


def check_fault(name: str) -> dict:
    """Run CASES[name] on the Triton backend without, with and again without the fault: which outputs fail the
    reference with it, which fail without it, and which differ (bits; a non-deterministic backward's dQ: fails the
    reference) after it from before."""
    import numpy as np

    from ckfmha import Problem, make_inputs, reference, run, validate
    from ckfmha.faults import injected
    from ckfmha.outputs import compared_outputs
    from ckfmha.runner import UnwrittenOutputError

    p = Problem(**CASES[name])
    fault = name.split("@")[0]

    def outputs(inputs: dict) -> dict:
        res = run(p, inputs, backend="triton")
        return {n: np.array(res.outputs[n]) for n in compared_outputs(p) if n in res.outputs}

    inputs = make_inputs(p, seed=0)
    ref = reference(p, inputs)
    before = outputs(inputs)
    names = sorted(before)
    clean_failed = [n for n, c in validate(p, before, ref, names=names).items() if not c.passed]
    with injected(fault):
        try:
            faulty = outputs(inputs)
            failed = [n for n, c in validate(p, faulty, ref, names=names).items() if not c.passed]
        except UnwrittenOutputError as e:  # NaN / unwritten where the reference is finite: the runner's own check
            failed = [f"unwritten: {e}"]
    after = outputs(inputs)
    # a non-deterministic backward adds dQ's key tiles with atomics: their order (so dQ's bits) may change from run
    # to run on a GPU; there the run after the fault must pass the reference again instead of repeat the bits
    atomic = {"dq"} if p.is_backward and not p.deterministic else set()
    changed = [n for n in names if n not in atomic and not np.array_equal(after[n], before[n], equal_nan=True)]
    again = sorted(atomic & set(names))
    changed += [n for n, c in validate(p, after, ref, names=again).items() if not c.passed] if again else []
    return {"fault": name, "family": p.family.value, "clean_failed": clean_failed, "failed": failed, "changed": changed}


def assert_caught(r: dict) -> None:
    assert r["clean_failed"] == [], f"{r['fault']}: fails without the fault: {r['clean_failed']}"
    assert r["failed"], f"{r['fault']}: every output of its {r['family']} case still matches with the fault"
    assert r["changed"] == [], f"{r['fault']}: outputs differ after the fault was turned off: {r['changed']}"


def test_every_hosted_fault_has_a_case() -> None:
    assert sorted({n.split("@")[0] for n in CASES}) == sorted(triton_faults())


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict]:
    """Every case through Triton's interpreter in one child process (module doc)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CKFMHA_NO_DETECT": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, *CASES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {r["fault"]: r for r in rows}


@pytest.mark.parametrize("name", list(CASES))  # slow (tests/conftest.py): ~45 s for every case on 2 cores
def test_each_triton_fault_is_caught_in_the_interpreter(interpreted, name: str) -> None:
    assert_caught(interpreted[name])


@pytest.mark.parametrize("name", list(CASES))  # gpu (tests/conftest.py)
def test_each_triton_fault_is_caught_on_the_gpu(name: str) -> None:
    assert_caught(check_fault(name))


SMOKE_ADEQUACY = ["adequacy", "--category", "smoke", "--backend", "triton"]
"""The documented GPU command (docs/faults.md): ``ckfmha adequacy --category smoke --backend triton``."""


# gpu, slow (tests/conftest.py): one smoke run per hosted fault, tens of minutes on one H100
def test_smoke_catches_every_hosted_fault_on_the_gpu(tmp_path, capsys) -> None:
    from ckfmha.cli import main

    code = main([*SMOKE_ADEQUACY, "--cache-dir", str(tmp_path / "cache")])
    out = capsys.readouterr().out
    hosted = triton_faults()
    lines = {ln.split()[1]: ln for ln in out.splitlines()[1:-1] if ln.split()}
    escaped = [n for n in hosted if not lines.get(n, "").startswith("caught ")]
    assert not escaped, f"not caught on the Triton backend: {escaped}\n{out}"
    assert (
        out.splitlines()[-1]
        == f"28 fault(s): {len(hosted)} caught, 0 escaped, 0 error(s), 1 not injectable into triton"
    )
    assert code == 0, out


if __name__ == "__main__":  # the interpreter child: one JSON line per fault named
    sys.path.insert(0, str(ROOT))
    for fault in sys.argv[1:]:
        print(json.dumps(check_fault(fault)), flush=True)
