"""The fault catalogue (ckfmha.faults, docs/faults.md): the data file follows its schema and names known families,
hook points and injectors of both backends; every hook point is called by its backend (cpu, Triton launchers);
each fault makes the cpu backend fail the comparison with the reference on a small problem that exercises it, and
the backend's outputs are bit for bit the same as before once the fault is off; the Triton injectors as pure
functions (their kernel runs are tests/test_triton_faults.py's); a bad catalogue is an error naming the file, the
entry and the rule, and so is a fault asked of a backend that cannot host it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ckfmha import Problem, make_inputs, reference, run, validate
from ckfmha.datafile import check_schema, load_yaml
from ckfmha.faults import (
    HOOK_POINTS,
    INJECTION_BACKENDS,
    TRITON_HOOK_POINTS,
    FaultError,
    activate,
    active,
    catalogue,
    default_catalogue_path,
    get_fault,
    injectable_fault,
    injected,
    load_catalogue,
    not_injectable,
    perturb,
)
from ckfmha.faults import triton_injectors as ti
from ckfmha.faults.injectors import INJECTORS
from ckfmha.faults.triton_injectors import TRITON_INJECTORS
from ckfmha.outputs import compared_outputs
from ckfmha.runner import UnwrittenOutputError

ROOT = Path(__file__).resolve().parent.parent
NO = {"not_injectable": "a reason"}  # a test entry's triton row

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


#: the faults the Triton backend hosts: argument-level injections in its launchers ...
TRITON_ARGUMENTS = {
    "splitkv_range_gap",
    "mask_left_off_by_one",
    "mask_right_off_by_one",
    "tail_key_tile_dropped",
    "page_index_off_by_one",
    "last_page_len_off_by_one",
    "append_offset_wrong",
    "dropout_threshold_off_by_one",
    "dropout_seed_wrong",
    "dropout_offset_wrong",
    "dropout_rescale_missing",
    "sink_state_wrong",
    "ds_missing_d",
    "dq_slices_not_summed",
    "rope_q_positions_wrong",
    "group_seqstart_ignores_padding",
    "alibi_slope_sign",
}
#: ... and the in-kernel classes, through the kernels' compile-time switch FAULT
TRITON_SWITCHES = {
    "gqa_head_map",
    "lse_base2",
    "sink_every_split",
    "masked_rows_nan",
    "empty_seqlen_q_nan_dkdv",
    "dk_scale_missing",
    "dq_scale_missing",
    "dq_stored_not_accumulated",
    "rope_halves_swapped",
    "rope_dim_ignored",
}
TRITON_HOSTED = TRITON_ARGUMENTS | TRITON_SWITCHES


def test_every_fault_says_how_the_triton_backend_hosts_it_or_why_not() -> None:
    faults = catalogue()
    rows = {n: f.injection("triton") for n, f in faults.items()}
    assert {n for n, r in rows.items() if r.injectable} == TRITON_HOSTED
    assert {n for n, r in rows.items() if r.points == {"triton.kernel.fault"}} == TRITON_SWITCHES
    assert [n for n, r in rows.items() if not r.injectable] == ["tile_corruption_2pct"]
    assert "LDS sizing" in rows["tile_corruption_2pct"].reason
    assert "bwd" not in rows["masked_rows_nan"].families  # its backward half does not exist in dq_dk_dv
    assert sorted(TRITON_INJECTORS) == sorted(TRITON_HOSTED)  # every Triton injector is catalogued
    assert {p for r in rows.values() for p in r.points} == set(TRITON_HOOK_POINTS)  # every Triton point is used
    for name, r in rows.items():
        if r.injectable:
            assert r.model and r.families and set(r.families) <= set(faults[name].families), name
        else:  # a reason, and no points, families or model to run
            assert r.reason and not r.points and not r.families, name
    assert list(INJECTION_BACKENDS) == ["cpu", "triton"]
    assert all(f.injection("cpu").injectable for f in faults.values())


def test_a_fault_asked_of_a_backend_that_cannot_host_it_is_an_error_naming_it() -> None:
    assert injectable_fault("ds_missing_d", "triton").name == "ds_missing_d"
    assert injectable_fault("gqa_head_map", "cpu").name == "gqa_head_map"
    with pytest.raises(FaultError) as e:
        injectable_fault("tile_corruption_2pct", "triton", "--fault")
    assert str(e.value).startswith(
        "--fault: 'tile_corruption_2pct' cannot be injected into the triton backend: the class is an LDS sizing "
    )
    with pytest.raises(FaultError, match=r"--fault: 'gqa_head_map': backend: 'hip' has no fault hooks; faults are "):
        injectable_fault("gqa_head_map", "hip", "--fault")
    with pytest.raises(FaultError, match=r"--fault: 'gqa_map' is not a catalogued fault"):
        injectable_fault("gqa_map", "triton", "--fault")


def test_every_hook_point_is_called_by_the_cpu_backend() -> None:
    source = "".join(p.read_text() for p in sorted((ROOT / "ckfmha" / "backends" / "cpu").glob("*.py")))
    called = set(re.findall(r'perturb\(\s*"([a-z_.]+)"', source))
    assert called == set(HOOK_POINTS)


def test_every_triton_hook_point_is_called_by_the_triton_launchers_only() -> None:
    """The launchers and their device layer (device.dropout_args, shared by the forward's and the backward's
    launchers) call every hook point; the kernels and the stage modules none."""
    triton = ROOT / "ckfmha" / "backends" / "triton"
    hosts = ("launch", "launch_bwd", "launch_kvcache", "device")
    launchers = "".join((triton / f"{m}.py").read_text() for m in hosts)
    called = set(re.findall(r'perturb\(\s*"([a-z_.]+)"', launchers))
    assert called == set(TRITON_HOOK_POINTS)
    others = [p.name for p in triton.glob("*.py") if p.stem not in hosts]
    assert not [n for n in others if "perturb(" in (triton / n).read_text()]  # the kernels are never touched


def test_triton_points_are_off_unless_a_triton_hosting_fault_is_active() -> None:
    value = object()
    for point in TRITON_HOOK_POINTS:
        assert perturb(point, value) is value
    with injected("tile_corruption_2pct"):  # a cpu-only fault: the Triton points pass their values through
        assert all(perturb(point, value) is value for point in TRITON_HOOK_POINTS)
    with injected("splitkv_range_gap"):
        assert perturb("triton.splitkv.num_splits", 3) == 4
        assert perturb("triton.mask.window", value) is value  # a point the fault does not hook


def test_the_triton_argument_perturbations_as_pure_functions() -> None:
    ctx: dict = {}
    assert ti.one_split_more(2, ctx) == 3
    causal_top_left, window, no_mask, unbounded = (
        (1, -1, 0, 0, 0, 2),
        (2, 5, 3, 0, 0, 2),
        (0, -1, -1, 0, 0, 2),
        (1, -1, -1, 0, 0, 1),
    )
    assert ti.window_left_plus_one(window, ctx) == (2, 6, 3, 0, 0, 2)
    assert ti.window_right_plus_one(window, ctx) == (2, 5, 4, 0, 0, 2)
    assert ti.window_right_plus_one(causal_top_left, ctx) == (1, -1, 1, 0, 0, 2)
    assert ti.window_left_plus_one(causal_top_left, ctx) == causal_top_left  # unbounded left: no edge to move
    assert ti.window_left_plus_one(no_mask, ctx) == no_mask and ti.window_right_plus_one(unbounded, ctx) == unbounded
    assert [ti.seqlen_k_to_full_tiles(n, {"block_n": 64}) for n in (150, 128, 40, 0)] == [128, 128, 0, 0]
    seed, off = (1 << 64) - 1, 77
    assert ti.seed_plus_one((seed, off, 178, 1.25), ctx) == (0, off, 178, 1.25)
    assert ti.offset_plus_one((5, off, 178, 1.25), ctx) == (5, off + 1, 178, 1.25)
    assert ti.threshold_minus_one((5, off, 178, 1.25), ctx) == (5, off, 177, 1.25)
    assert ti.no_rescale((5, off, 178, 1.25), ctx) == (5, off, 178, 1.0)
    assert [ti.one_slice_fewer(n, ctx) for n in (1, 2, 5)] == [1, 1, 4]
    assert ti.flip(True, ctx) is False and ti.flip(False, ctx) is True
    assert ti.page_index_plus_one(np.array([[0, 3], [4, 1]]), {"pages": 5}).tolist() == [[1, 4], [0, 2]]
    switch = TRITON_INJECTORS["gqa_head_map"]["triton.kernel.fault"]
    assert [switch("", {"kernel": k}) for k in ("attn_fwd", "dq_dk_dv", "append_rows")] == ["gqa_head_map"] * 2 + [""]
    with injected("rope_dim_ignored"):
        assert perturb("triton.kernel.fault", "", kernel="append_rows") == "rope_dim_ignored"
        assert perturb("triton.kernel.fault", "", kernel="attn_fwd") == ""  # the forward kernel compiles as always


def test_the_triton_tensor_perturbations_make_new_tensors() -> None:
    torch = pytest.importorskip("torch")
    ctx: dict = {}
    counts = torch.tensor([0, 1, 300], dtype=torch.int32)
    short = ti.one_key_short(counts, ctx)
    assert short.tolist() == [0, 0, 299] and short.dtype == torch.int32 and counts.tolist() == [0, 1, 300]
    moved = ti.append_one_early(counts, ctx)
    assert moved.tolist() == [1, 0, 299] and moved.dtype == torch.int32
    table = torch.tensor([[0, 3], [4, 1]], dtype=torch.int32)
    assert ti.page_index_plus_one(table, {"pages": 5}).tolist() == [[1, 4], [0, 2]] and table[0, 0] == 0
    d = torch.ones(2, 3)
    assert ti.zeroed(d, ctx).tolist() == [[0.0] * 3] * 2 and d.sum() == 6
    sinks = torch.tensor([0.5, -1.0])
    assert ti.unset_sinks(sinks, ctx).tolist() == [float("-inf")] * 2 and sinks.tolist() == [0.5, -1.0]
    slopes = torch.tensor([0.25, 0.5])
    assert ti.negated(slopes, ctx).tolist() == [-0.25, -0.5] and slopes.tolist() == [0.25, 0.5]
    p = Problem(mode="group", batch=2, nhead_q=2, seqlens_q=(9, 16), seqlens_k=(20, 30), s_kpad=(24, 30), hdim_q=64)
    sq, sk = torch.tensor([0, 9, 25], dtype=torch.int32), torch.tensor([0, 24, 54], dtype=torch.int32)
    lq, lk = ti.logical_seqstarts((sq, sk), {"problem": p})
    assert lq.tolist() == [0, 9, 25] and lk.tolist() == [0, 20, 50] and lk.dtype == torch.int32


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
        (
            {"triton": {"points": ["triton.gqa"], "model": "m"}},
            "faults[0] (gqa_head_map): triton.points: 'triton.gqa' is not a hook point of the triton backend; known: ",
        ),
        (
            {"triton": {"points": ["triton.seqlen_k"], "model": "m", "injector": "nosuch"}},
            "faults[0] (gqa_head_map): triton.injector: 'nosuch' is not in "
            "ckfmha.faults.triton_injectors.TRITON_INJECTORS",
        ),
        (
            {"triton": {"points": ["triton.seqlen_k"], "model": "m", "injector": "alibi_slope_sign"}},
            "triton.points: ['triton.seqlen_k'] must be the points injector 'alibi_slope_sign' hooks: "
            "['triton.alibi.slopes']",
        ),
        (
            {
                "triton": {
                    "points": ["triton.alibi.slopes"],
                    "model": "m",
                    "injector": "alibi_slope_sign",
                    "families": ["bwd"],
                }
            },
            "triton.families: ['bwd'] must be among the fault's families ['fwd']",
        ),
        ({"triton": {"points": ["triton.seqlen_k"]}}, "faults[0].triton: "),
    ],
)
def test_a_bad_catalogue_names_file_entry_and_rule(tmp_path, edit, words) -> None:
    entry = {
        "name": "gqa_head_map",
        "title": "t",
        "model": "m",
        "families": ["fwd"],
        "points": ["gqa.heads"],
        "triton": NO,
    }
    import yaml

    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "faults": [{**entry, **edit}]}))
    schema_error = "upstream" in edit or words.endswith(".triton: ")
    with pytest.raises(ValueError if schema_error else FaultError) as e:
        load_catalogue(path)
    assert str(path) in str(e.value) and words in str(e.value)


def test_a_fault_without_its_triton_row_is_a_schema_error(tmp_path) -> None:
    import yaml

    entry = {"name": "gqa_head_map", "title": "t", "model": "m", "families": ["fwd"], "points": ["gqa.heads"]}
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "faults": [entry]}))
    with pytest.raises(ValueError) as e:
        load_catalogue(path)
    assert (
        str(path) in str(e.value)
        and "faults[0]" in str(e.value)
        and "faults[0]: missing key(s) 'triton'" in str(e.value)
    )


def test_a_repeated_name_and_an_unknown_fault_are_errors(tmp_path) -> None:
    import yaml

    entry = {
        "name": "gqa_head_map",
        "title": "t",
        "model": "m",
        "families": ["fwd"],
        "points": ["gqa.heads"],
        "triton": NO,
    }
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
