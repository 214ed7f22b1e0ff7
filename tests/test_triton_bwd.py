"""Triton backward (dot_do_o -> dq_dk_dv -> convert_dq) against the NumPy reference, on a GPU or in Triton's
interpreter (``TRITON_INTERPRET=1``).

Skipped (with the backend's reason) where torch/triton is missing, or neither a GPU nor the interpreter is there.
Sizes follow the device: small problems in the interpreter, realistic ragged ones on a GPU; bf16 only on a GPU
(the interpreter computes bf16 through NumPy, which has no bf16).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from ckfmha.backends import get_backend

_backend = get_backend("triton")
_avail = _backend.available()

from ckfmha import rng  # noqa: E402
from ckfmha.dispatcher import Dispatcher  # noqa: E402
from ckfmha.inputs import make_inputs, storage_dtype  # noqa: E402
from ckfmha.kernel import Family  # noqa: E402
from ckfmha.outputs import compared_outputs  # noqa: E402
from ckfmha.problem import Problem  # noqa: E402
from ckfmha.reference import reference  # noqa: E402
from ckfmha.registry import Registry  # noqa: E402
from ckfmha.runner import execute, forward_for_backward, prepare_tensors  # noqa: E402
from ckfmha.validator import validate  # noqa: E402


def _device() -> str:
    if not _avail:
        return "none"
    from ckfmha.backends.triton import device

    return device.DEVICE


DEVICE = _device()
ON_GPU = DEVICE == "cuda"
# problem sizes by device: the interpreter runs a kernel in NumPy, one program at a time
BASE = (
    dict(batch=2, nhead_q=4, seqlen_q=197, seqlen_k=301, hdim_q=128)
    if ON_GPU
    else dict(batch=2, nhead_q=2, seqlen_q=40, seqlen_k=50, hdim_q=64)
)
RERUNS = 100 if ON_GPU else 3
NO_BF16 = "bf16 in Triton's interpreter computes through NumPy, which has no bf16: GPU only"
_REG: dict = {}


def dispatcher() -> Dispatcher:
    if "d" not in _REG:
        reg = Registry.from_enumeration("sm90", mask_mode="generic", backend="triton")
        _REG["d"] = Dispatcher(reg, _backend, num_cus=132)
    return _REG["d"]


def _skip_bf16(dtype: str) -> None:
    if dtype == "bf16" and not ON_GPU:
        pytest.skip(NO_BF16)


def run_plan(p: Problem, inputs: dict | None = None, built: dict | None = None):
    """The sm90 plan of ``p`` on the triton backend: (plan, tensors after the host reduction, inputs)."""
    inputs = make_inputs(p, 0) if inputs is None else inputs
    plan = dispatcher().select(p)
    tensors, _ = prepare_tensors(p, plan, inputs, forward_for_backward(p, inputs))
    execute(_backend, plan, tensors, built=built)
    return plan, tensors, inputs


def failures(p: Problem, out: dict, inputs: dict, names=None) -> list[str]:
    names = list(compared_outputs(p)) + ["dk_raw", "dv_raw"] if names is None else names
    res = validate(p, out, reference(p, inputs), names=names)
    return [str(r) for r in res.values() if not r.passed]


def check(p: Problem) -> None:
    plan, out, inputs = run_plan(p)
    assert [st.role.value for st in plan.stages][:2] == ["dot_do_o", "dq_dk_dv"]
    bad = failures(p, out, inputs)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("mask", ["0", "t", "b", "t:7,0", "b:5,3", "g:9,12", "t:-1,4"])
def test_masks_and_dtypes(dtype: str, mask: str) -> None:
    _skip_bf16(dtype)
    check(Problem(family="bwd", dtype=dtype, mask=mask, **BASE))


@pytest.mark.parametrize("sq, sk", [(128, 256), (256, 128), (100, 256)])
@pytest.mark.parametrize("mask", ["0", "t", "b", "g:9,12", "t:-1,4", "b:20,0"])
def test_block_aligned_lengths(sq: int, sk: int, mask: str) -> None:
    """Lengths that are whole query and key blocks: the dq_dk_dv kernel runs its unmasked loop over the query blocks
    whose rows see every key of the key block, masked loops before and after (kernels_bwd._bwd_query_blocks); a
    row range that is off by one block shows as wrong dK/dV (rows missed) or wrong masking (rows let in).  100 x 256
    top-left: full key blocks that no row sees (an empty range the kernel must not turn into an unmasked one: an
    H100 run found fp32 kernels reading rows past the sequence there)."""
    check(Problem(family="bwd", dtype="fp16", mask=mask, batch=1, nhead_q=2, seqlen_q=sq, seqlen_k=sk, hdim_q=64))


@pytest.mark.parametrize("hq, hk", [(4, 2), (4, 1)])
@pytest.mark.parametrize("mask", ["0", "b"])
def test_gqa_raw_per_q_head_gradients(hq: int, hk: int, mask: str) -> None:
    check(Problem(family="bwd", dtype="fp16", mask=mask, **{**BASE, "nhead_q": hq, "nhead_k": hk}))


@pytest.mark.parametrize("mask", ["0", "b", "t:5,3"])
def test_group_mode_with_an_empty_query_sequence(mask: str) -> None:
    qs, ks = ([0, 197, 64, 1], [150, 301, 5, 77]) if ON_GPU else ([0, 40, 17, 1], [30, 40, 5, 9])
    p = Problem(
        family="bwd", dtype="fp16", mode="group", batch=4, nhead_q=4, nhead_k=2, hdim_q=64, mask=mask,
        seqlens_q=qs, seqlens_k=ks,
    )  # fmt: skip
    check(p)


def test_group_mode_padded_keys() -> None:
    # s_kpad: K/V rows between a sequence's logical end and the next start; their dK/dV rows stay 0
    p = Problem(
        family="bwd", dtype="fp16", mode="group", batch=2, nhead_q=2, hdim_q=64, mask="b", seqlens_q=[17, 30],
        seqlens_k=[20, 33], s_kpad=[24, 40],
    )  # fmt: skip
    check(p)


@pytest.mark.parametrize("rank, dbias", [(0, False), (0, True), (1, True), (2, True)])
@pytest.mark.parametrize("mask", ["0", "t"])
def test_elementwise_bias_and_dbias(rank: int, dbias: bool, mask: str) -> None:
    check(Problem(family="bwd", dtype="fp16", bias="elementwise", bias_rank=rank, dbias=dbias, mask=mask, **BASE))


def test_group_mode_bias_and_dbias() -> None:
    p = Problem(
        family="bwd", dtype="fp16", mode="group", batch=3, nhead_q=2, hdim_q=64, mask="b", bias="elementwise",
        bias_rank=1, dbias=True, seqlens_q=[1, 40, 17], seqlens_k=[30, 40, 1],
    )  # fmt: skip
    check(p)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("mask", ["0", "t", "b:20,5"])
def test_alibi(rank: int, mask: str) -> None:
    check(Problem(family="bwd", dtype="fp16", bias="alibi", bias_rank=rank, mask=mask, **BASE))


@pytest.mark.parametrize("hdims", [(64, 64), (128, 128), (192, 128), (256, 256), (32, 32), (80, 80)])
def test_head_dims(hdims: tuple[int, int]) -> None:
    check(Problem(family="bwd", dtype="fp16", mask="b", **{**BASE, "hdim_q": hdims[0], "hdim_v": hdims[1]}))


def test_bshd_layouts() -> None:
    check(Problem(family="bwd", dtype="fp16", mask="t", input_layout="bshd", output_layout="bshd", **BASE))


@pytest.mark.parametrize("mask, p_drop", [("0", 0.2), ("b", 0.2), ("t:9,3", 0.6)])
def test_dropout_matches_reference(mask: str, p_drop: float) -> None:
    check(Problem(family="bwd", dtype="fp16", mask=mask, p_drop=p_drop, drop_seed=0x1234_5678_9ABC, drop_offset=77,
                  **{**BASE, "nhead_q": 2, "nhead_k": 2}))  # fmt: skip


@pytest.mark.parametrize("mask", ["0", "b"])
def test_dropout_keep_mask_is_bit_exact(mask: str) -> None:
    # dO[i] = e_i (one-hot rows, hdim_v >= seqlen_q) makes dV_raw[j, i] = round(P[i, j] * Z[i, j] / pk): each
    # element is one product, so dV_raw != 0 is exactly the kernel's keep mask on the allowed positions
    n = 64 if not ON_GPU else 128
    p = Problem(family="bwd", dtype="fp16", batch=2, nhead_q=2, seqlen_q=n, seqlen_k=n + 13, hdim_q=n, mask=mask,
                p_drop=0.3, drop_seed=0xDEAD_BEEF_0123, drop_offset=5)  # fmt: skip
    inputs = dict(make_inputs(p, 1))
    eye = np.broadcast_to(np.eye(n, dtype=np.float32), (p.batch, p.nhead_q, n, n))
    inputs["do"] = eye.astype(storage_dtype(p.dtype))
    _, out, _ = run_plan(p, inputs)
    kept = np.asarray(out["dv_raw"]).astype(np.float32).transpose(0, 1, 3, 2) != 0  # (b, h, i, j)
    allowed = p.mask.allowed(p.seqlen_q, p.seqlen_k)
    for b in range(p.batch):
        rv = rng.dropout_randval(
            p.drop_seed, p.drop_offset, b, np.arange(p.nhead_q), p.nhead_q, np.arange(n), np.arange(p.seqlen_k)
        )
        want = rng.dropout_keep(rv, p.p_drop) & allowed[None]
        diff = kept[b] != want
        assert not diff.any(), (
            f"batch {b}: {int(diff.sum())} keep/drop decisions differ, first at {np.argwhere(diff)[0]}"
        )
    assert 0.55 < kept.sum() / (allowed.sum() * p.batch * p.nhead_q) < 0.85  # about 1 - p_drop kept


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize("mode", ["batch", "group"])
def test_deterministic_kernels_are_bitwise_equal_over_reruns(mode: str) -> None:
    kw: dict = dict(family="bwd", dtype="fp16", deterministic=True, mask="b", nhead_q=4, nhead_k=2, hdim_q=64)
    if mode == "group":
        kw.update(mode="group", batch=3, seqlens_q=[33, 0, 70] if not ON_GPU else [197, 0, 300],
                  seqlens_k=[50, 20, 64] if not ON_GPU else [301, 20, 511])  # fmt: skip
    else:
        kw.update(batch=2, seqlen_q=BASE["seqlen_q"], seqlen_k=BASE["seqlen_k"])
    p = Problem(**kw)
    built: dict = {}
    plan, first, inputs = run_plan(p, built=built)
    assert all(st.kernel.deterministic for st in plan.stages if st.role.value != "dot_do_o")
    assert not failures(p, first, inputs)
    for i in range(RERUNS - 1):
        _, again, _ = run_plan(p, inputs, built=built)
        for name in ("dq", "dk_raw", "dv_raw"):
            assert np.array_equal(_bits(again[name]), _bits(first[name])), f"rerun {i + 1}: {name} differs bitwise"


def test_deterministic_kernel_has_no_atomics() -> None:
    import inspect

    from ckfmha.backends.triton import kernels_bwd

    src = inspect.getsource(kernels_bwd)
    det = re.search(r"if DETERMINISTIC:\n\s+tl\.store\(dq_ptrs", src)
    assert det is not None, "the deterministic dQ store is gone"
    det_branch = src[det.start() :].split("else:")[0]
    assert "atomic" not in det_branch and "tl.store(dq_ptrs" in det_branch
    convert = src[src.index("def bwd_convert_dq_kernel") : src.index("def _bwd_query_blocks")]
    assert "tl.atomic" not in convert and src.count("tl.atomic_add(") == 1 and src.count(".atomic_add(") == 2
    # the descriptor reduce-add (the other atomic) is refused with deterministic kernels, in the kernel itself
    assert "tl.static_assert(not (DQ_TMA_ADD and DETERMINISTIC)" in src


@pytest.mark.parametrize("fault", ["scale", "dropout_offset", "d_term"])
def test_injected_fault_is_caught(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a kernel that gets one term slightly wrong must fail the validator
    from ckfmha.backends.triton import launch_bwd

    p = Problem(family="bwd", dtype="fp16", mask="b", p_drop=0.2 if fault == "dropout_offset" else 0.0, **BASE)
    target = Family.BWD_DOT_DO_O if fault == "d_term" else Family.BWD_DQ_DK_DV
    real = launch_bwd.LAUNCHERS[target]

    def faulty(c, prob, t):
        if fault == "scale":
            prob = dataclasses.replace(prob, scale=prob.softmax_scale * 1.03)
        elif fault == "dropout_offset":
            prob = dataclasses.replace(prob, drop_offset=prob.drop_offset + 1)
        launch = real(c, prob, t)
        if fault != "d_term":
            return launch

        def launch_and_skew() -> None:
            launch()
            # 2% went unnoticed on an H100 at the GPU shape (hdim 128, 197 x 301, fp16 tolerance 1e-2): D enters
            # dS = P * (dP - D) only through its difference with dP; 25% is a real bug (e.g. D without p_undrop)
            t["d"].mul_(1.25)

        return launch_and_skew

    monkeypatch.setitem(launch_bwd.LAUNCHERS, target, faulty)
    _, out, inputs = run_plan(p)
    bad = failures(p, out, inputs)
    assert any(b.startswith(("dq", "dk", "dv")) for b in bad), f"the {fault} fault went unnoticed"


def test_supports_reasons() -> None:
    from ckfmha.kernel_id import parse_kernel_id

    reg = dispatcher().registry
    dq = next(c for c in reg.candidates(Family.BWD_DQ_DK_DV) if c.hdim_q == 128)
    assert _backend.supports(dq) is None
    one_d = next(c for c in reg.candidates(Family.BWD_CONVERT_DQ))
    assert _backend.supports(one_d) is None
    bad = parse_kernel_id(one_d.kernel_id.replace(".b64.", ".b48."))
    assert _backend.supports(bad) == "tile (48,): bm0 must be a power of two >= 16"


@pytest.mark.skipif(
    not ON_GPU,
    reason="torch.cuda.set_sync_debug_mode needs a GPU ("
    + ("the interpreter runs on the CPU" if _avail else f"triton backend unavailable: {_avail.reason}")
    + ")",
)
@pytest.mark.parametrize("deterministic", [False, True])
def test_group_mode_plan_makes_no_host_sync(deterministic: bool) -> None:
    # upstream CK PR #7331: the workspace comes from the upper bounds and no stage reads seqstart back
    import torch

    from ckfmha.backends.triton.launch_bwd import backward_device_tensors, stage_launcher

    p = Problem(
        family="bwd", dtype="bf16", mode="group", batch=4, nhead_q=8, nhead_k=2, hdim_q=128, mask="b",
        bias="elementwise", bias_rank=1, dbias=True, p_drop=0.1, deterministic=deterministic,
        seqlens_q=[0, 257, 64, 1000], seqlens_k=[150, 301, 5, 1024],
    )  # fmt: skip
    plan, _, inputs = run_plan(p)  # builds and warms every kernel
    tensors, _ = prepare_tensors(p, plan, inputs, forward_for_backward(p, inputs))
    t = backward_device_tensors(tensors)  # host-to-device copies of the inputs happen here, before the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for st in plan.stages:
            stage_launcher(st.kernel, p, t)()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    from ckfmha.backends.triton.device import to_numpy
    from ckfmha.runner import reduce_gradients

    out = dict(tensors)
    out.update({n: to_numpy(t[n]) for n in ("dq", "dk_raw", "dv_raw", "dbias_raw")})
    reduce_gradients(p, out)
    bad = failures(p, out, inputs)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("family", ["bwd_dot_do_o", "bwd_dq_dk_dv", "bwd_convert_dq"])
@pytest.mark.parametrize("mode", ["batch", "group"])
def test_each_stage_compiles_alone(family: str, mode: str) -> None:
    # compile_ahead launches a kernel on a synthetic problem: a later stage's inputs are fabricated (warmup_inputs)
    want = {
        "bwd_dq_dk_dv": dict(dbias=True, deterministic=True, mask="generic"),
        "bwd_convert_dq": dict(deterministic=True),
    }
    c = next(
        c
        for c in dispatcher().registry.candidates(Family(family))
        if c.mode.value == mode
        and c.dtype.value == "fp16"
        and all(getattr(getattr(c, k), "value", getattr(c, k)) == v for k, v in want.get(family, {}).items())
    )
    info = _backend.compile_ahead(c)
    assert info["warmup_seconds"] >= 0 and "device" in info


def test_padded_query_rows_are_a_precondition_error() -> None:
    from ckfmha.backends.triton.device import PreconditionError

    p = Problem(
        family="bwd", dtype="fp16", mode="group", batch=2, nhead_q=2, hdim_q=64, seqlens_q=[17, 30],
        seqlens_k=[20, 33], s_qpad=[24, 30],
    )  # fmt: skip
    with pytest.raises(PreconditionError, match=r"s_qpad: \[24, 30\] differs from seqlens_q \[17, 30\]"):
        run_plan(p)


@pytest.mark.parametrize("deterministic", [False, True])
def test_group_mode_workspace_comes_from_the_upper_bounds(deterministic: bool) -> None:
    # dq_acc on the device: batch * max seqlen_q rows and ceil(max seqlen_k / bn0) slices, whatever the lengths,
    # within the dispatcher's workspace bound; the NumPy output is cut to the exact dq_acc_shape
    from ckfmha.backends.triton.launch_bwd import backward_device_tensors, stage_launcher
    from ckfmha.workspace import dq_acc_shape

    p = Problem(
        family="bwd", dtype="fp16", mode="group", batch=3, nhead_q=2, hdim_q=64, mask="b",
        deterministic=deterministic, seqlens_q=[5, 40, 0], seqlens_k=[30, 70, 9],
    )  # fmt: skip
    plan, out, inputs = run_plan(p)
    tensors, _ = prepare_tensors(p, plan, inputs, forward_for_backward(p, inputs))
    t = backward_device_tensors(tensors)
    for st in plan.stages:
        stage_launcher(st.kernel, p, t)()
    dq_stage = next(st for st in plan.stages if st.role.value == "dq_dk_dv")
    bn0 = dq_stage.kernel.tile[1]
    nsplits = -(-70 // bn0) if deterministic else 1
    assert tuple(t["dq_acc"].shape) == (nsplits, 1, 2, 3 * 40, 64)
    assert t["dq_acc"].numel() * 4 <= dq_stage.launch.workspace_bytes
    assert out["dq_acc"].shape == dq_acc_shape(p, bn0) == (nsplits, 1, 2, 45, 64)


def test_another_shape_of_a_backward_kernel_compiles_nothing() -> None:
    """The backward kernels are not specialized on lengths, heads, the GQA group, the mask window or the LSE / D
    strides (kernels_bwd.BWD_NOT_SPECIALIZED): a second shape of the same plan -- other lengths (another
    divisibility class), batch, heads and group -- compiles no stage (a nightly compiled one dq_dk_dv kernel up to
    ten times).  GPU only: the interpreter compiles nothing."""
    from ckfmha.backends.triton.device import COMPILES_COUNTED

    if not ON_GPU:
        pytest.skip("compiles are counted on a GPU only (the interpreter compiles nothing)")
    assert COMPILES_COUNTED, "Triton has no compilation listener: compiles cannot be counted"
    base = dict(family="bwd", dtype="fp16", mask="b:13,7", hdim_q=64)
    p1 = Problem(**base, batch=2, nhead_q=4, nhead_k=2, seqlen_q=77, seqlen_k=91)
    p2 = Problem(**base, batch=1, nhead_q=3, nhead_k=1, seqlen_q=64, seqlen_k=128)
    plan1, plan2 = dispatcher().select(p1), dispatcher().select(p2)
    assert [st.kernel for st in plan1.stages] == [st.kernel for st in plan2.stages]
    built: dict = {}
    for p, plan in ((p1, plan1), (p2, plan2)):
        inputs = make_inputs(p, 0)
        tensors, _ = prepare_tensors(p, plan, inputs, forward_for_backward(p, inputs))
        ex = execute(_backend, plan, tensors, built=built)
        assert not failures(p, tensors, inputs)
    assert ex.build_seconds == 0.0 and not ex.cold, [(s.role.value, s.build_seconds) for s in ex.stages]


def test_the_unspecialized_names_are_kernel_arguments() -> None:
    """A misspelt name in a do_not_specialize list would silently leave that argument specialized."""
    import inspect

    from ckfmha.backends.triton import kernels, kernels_bwd

    pairs = [
        (kernels.attn_fwd_kernel, kernels.FWD_NOT_SPECIALIZED),
        (kernels_bwd.bwd_dq_dk_dv_kernel, kernels_bwd.BWD_NOT_SPECIALIZED),
        (kernels_bwd.bwd_dot_do_o_kernel, kernels_bwd.DOT_DO_O_NOT_SPECIALIZED),
        (kernels_bwd.bwd_convert_dq_kernel, kernels_bwd.CONVERT_DQ_NOT_SPECIALIZED),
    ]
    for fn, names in pairs:
        params = inspect.signature(fn.fn).parameters
        assert names and all(n in params for n in names), (fn.fn.__name__, [n for n in names if n not in params])
