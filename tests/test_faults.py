"""The fault catalogue (ckfmha.faults, docs/faults.md): the data file follows its schema and names known families,
hook points and injectors; every hook point is called by the cpu backend; each fault makes the cpu backend fail
the comparison with the reference on a small problem that exercises it, and the backend's outputs are bit for bit
the same as before once the fault is off; a bad catalogue is an error naming the file, the entry and the rule."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ckfmha import Problem, make_inputs, reference, run, validate
from ckfmha.datafile import check_schema, load_yaml
from ckfmha.faults import (
    HOOK_POINTS,
    FaultError,
    activate,
    active,
    catalogue,
    default_catalogue_path,
    get_fault,
    injected,
    load_catalogue,
    not_injectable,
    perturb,
)
from ckfmha.faults.injectors import INJECTORS
from ckfmha.outputs import compared_outputs
from ckfmha.runner import UnwrittenOutputError

ROOT = Path(__file__).resolve().parent.parent

# one small problem per fault, exercising the hooked path
FWD = dict(batch=1, nhead_q=2, seqlen_q=32, seqlen_k=48, hdim_q=64, lse=True)
SPLIT = dict(family="fwd_splitkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=100, hdim_q=64, num_splits=2, lse=True)
PAGED = dict(family="fwd_pagedkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=300, hdim_q=128, page_block_size=128)
APPEND = dict(family="fwd_appendkv", batch=1, nhead_q=2, seqlen_q=4, seqlen_k=40, seqlen_knew=3, hdim_q=64)
ROPE = dict(APPEND, rotary_dim=32, rope="half_rotated")
BWD = dict(family="bwd", batch=1, nhead_q=2, seqlen_q=32, seqlen_k=40, hdim_q=64)
DROP = dict(FWD, p_drop=0.3)
CASES: dict[str, Problem] = {
    "splitkv_range_gap": Problem(**SPLIT),
    "mask_left_off_by_one": Problem(**FWD, mask="t:5,0"),
    "mask_right_off_by_one": Problem(**FWD, mask="t"),
    "tail_key_tile_dropped": Problem(**dict(FWD, seqlen_k=150)),
    "page_index_off_by_one": Problem(**PAGED),
    "last_page_len_off_by_one": Problem(**PAGED),
    "append_offset_wrong": Problem(**APPEND),
    "gqa_head_map": Problem(**dict(FWD, nhead_q=4, nhead_k=2)),
    "dropout_threshold_off_by_one": Problem(**DROP),
    "dropout_seed_wrong": Problem(**DROP),
    "dropout_offset_wrong": Problem(**DROP),
    "dropout_rescale_missing": Problem(**DROP),
    "lse_base2": Problem(**FWD),
    "sink_state_wrong": Problem(**FWD, sink=True),
    "sink_every_split": Problem(**SPLIT, sink=True),
    "masked_rows_nan": Problem(**dict(FWD, seqlen_q=40, seqlen_k=20), mask="b"),
    "empty_seqlen_q_nan_dkdv": Problem(
        family="bwd", mode="group", batch=2, nhead_q=2, seqlens_q=(0, 16), seqlens_k=(16, 16), hdim_q=64
    ),
    "ds_missing_d": Problem(**BWD),
    "dk_scale_missing": Problem(**BWD),
    "dq_scale_missing": Problem(**BWD),
    "dq_stored_not_accumulated": Problem(**dict(BWD, seqlen_k=300)),
    "dq_slices_not_summed": Problem(**dict(BWD, seqlen_k=300), deterministic=True),
    "rope_halves_swapped": Problem(**ROPE),
    "rope_dim_ignored": Problem(**ROPE),
    "rope_q_positions_wrong": Problem(**ROPE),
    "group_seqstart_ignores_padding": Problem(
        mode="group", batch=2, nhead_q=2, seqlens_q=(9, 16), seqlens_k=(20, 30), s_kpad=(24, 30), hdim_q=64, lse=True
    ),
    "alibi_slope_sign": Problem(**FWD, bias="alibi"),
    "tile_corruption_2pct": Problem(**dict(FWD, dtype="bf16", hdim_q=256)),
}


def test_catalogue_follows_its_schema_and_vocabularies() -> None:
    path = default_catalogue_path()
    check_schema(load_yaml(path), "faults", str(path))
    faults = catalogue()
    assert len(faults) == 28 and list(faults) == list(CASES)
    assert sorted(INJECTORS) == sorted(faults)  # every injector is catalogued, every fault has its injector
    assert {p for f in faults.values() for p in f.points} == set(HOOK_POINTS)  # every hook point is used
    assert [n.name for n in not_injectable()] == ["kv_blockscale_wrong_block", "new_instances_break_clients"]
    assert get_fault("tile_corruption_2pct").when == {"hdim_q": 256, "dtype": "bf16"}
    assert get_fault("splitkv_range_gap").upstream[:2] == (
        "Dao-AILab/flash-attention#1328",
        "ROCm/composable_kernel#3733",
    )


def test_every_hook_point_is_called_by_the_cpu_backend() -> None:
    source = "".join(p.read_text() for p in sorted((ROOT / "ckfmha" / "backends" / "cpu").glob("*.py")))
    called = set(re.findall(r'perturb\(\s*"([a-z_.]+)"', source))
    assert called == set(HOOK_POINTS)


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"families": ["decode"]}, "faults[0] (gqa_head_map): families: 'decode' is not a problem family"),
        ({"points": ["gqa.tail"]}, "faults[0] (gqa_head_map): points: 'gqa.tail' is not a hook point"),
        ({"injector": "nosuch"}, "injector: 'nosuch' is not in ckfmha.faults.injectors.INJECTORS"),
        (
            {"points": ["bwd.lse"]},
            "points: ['bwd.lse'] must be the points injector 'gqa_head_map' hooks: ['gqa.heads']",
        ),
        (
            {"upstream": ["flash-attention 1328"]},
            "faults[0].upstream[0]: found 'flash-attention 1328' (rule: an upstream issue or pull request",
        ),
    ],
)
def test_a_bad_catalogue_names_file_entry_and_rule(tmp_path, edit, words) -> None:
    entry = {"name": "gqa_head_map", "title": "t", "model": "m", "families": ["fwd"], "points": ["gqa.heads"]}
    import yaml

    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "faults": [{**entry, **edit}]}))
    with pytest.raises(FaultError if "upstream" not in edit else ValueError) as e:
        load_catalogue(path)
    assert str(path) in str(e.value) and words in str(e.value)


def test_a_repeated_name_and_an_unknown_fault_are_errors(tmp_path) -> None:
    import yaml

    entry = {"name": "gqa_head_map", "title": "t", "model": "m", "families": ["fwd"], "points": ["gqa.heads"]}
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "faults": [entry, entry]}))
    with pytest.raises(FaultError, match=r"faults\[1\]: name 'gqa_head_map' appears more than once"):
        load_catalogue(path)
    with pytest.raises(FaultError, match=r"--fault: 'gqa_map' is not a catalogued fault; known: splitkv_range_gap, "):
        get_fault("gqa_map", "--fault")


def test_nothing_is_active_by_default_and_injected_restores() -> None:
    assert active() is None
    value = object()
    assert perturb("gqa.heads", value, hq=4, hk=2) is value  # off: the very object passed
    with injected("gqa_head_map") as f:
        assert active() is f and f.name == "gqa_head_map"
        assert perturb("gqa.heads", None, hq=4, hk=2).tolist() == [0, 1, 0, 1]
        assert perturb("gqa.heads", None, hq=4, hk=1) is None  # one K/V head: the mapping is CK's
        assert perturb("bwd.lse", value) is value  # a point the fault does not hook
        with injected(None):
            assert active() is None
        assert active() is f
    assert active() is None
    assert activate("lse_base2") is None and activate(None).name == "lse_base2"


def _outputs(p: Problem, inputs: dict) -> dict[str, np.ndarray]:
    res = run(p, inputs, backend="cpu")
    return {n: np.array(res.outputs[n]) for n in compared_outputs(p) if n in res.outputs}


@pytest.mark.parametrize("name", list(CASES))
def test_each_fault_is_caught_on_a_problem_that_exercises_it_and_costs_nothing_off(name: str) -> None:
    p = CASES[name]
    fault = get_fault(name)
    assert p.family.value in fault.families or (p.is_backward and "bwd" in fault.families)
    inputs = make_inputs(p, seed=0)
    ref = reference(p, inputs)
    before = _outputs(p, inputs)
    names = sorted(before)
    clean = validate(p, before, ref, names=names)
    assert all(c.passed for c in clean.values()), [str(c) for c in clean.values()]
    with injected(name):
        try:
            faulty = _outputs(p, inputs)
        except UnwrittenOutputError as e:  # NaN where the reference is finite: the runner's own check catches it
            assert "are NaN where the reference is finite" in str(e)
            faulty = None
    if faulty is not None:
        checks = validate(p, faulty, ref, names=names)
        failed = [n for n, c in checks.items() if not c.passed]
        assert failed, f"{name}: every output still matches: {[str(c) for c in checks.values()]}"
    after = _outputs(p, inputs)  # off again: bit for bit the outputs of before
    for n in names:
        assert np.array_equal(after[n], before[n], equal_nan=True), n


def test_the_2pct_corruption_needs_its_kernel_and_corrupts_two_percent() -> None:
    p = CASES["tile_corruption_2pct"]
    inputs = make_inputs(p, seed=0)
    before = _outputs(p, inputs)["o"].astype(np.float32)
    with injected("tile_corruption_2pct"):
        after = _outputs(p, inputs)["o"].astype(np.float32)
        other = Problem(**FWD)  # d=64 fp16: not the faulty kernel
        other_inputs = make_inputs(other, seed=0)
        unchanged = _outputs(other, other_inputs)["o"]
    assert np.array_equal(unchanged, _outputs(other, other_inputs)["o"])
    hit = after != before
    assert 0.015 < hit.mean() < 0.025  # 32 rows = one query tile: every 50th element, where neighbours differ
