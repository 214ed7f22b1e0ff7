"""Triton forward dropout past the random-value store limit (issues 27/25).

The forward kernel stores its random values (``STORE_RANDVAL``) only while the ``randval`` output of the stage
has at most ``RANDVAL_MAX_ELEMENTS`` (2**26) elements (execute.py); a larger problem ran the kernel compiled
without the store (``STORE_RANDVAL=False``) until session 9 -- now every dropout launch compiles the store and a
launch without a buffer masks it off (docs/hopper_forward.md).  That is the one thing every failing H100 dropout
item of issues 27/25 had and every passing one lacked (batch_prefill 1024/4000 x 16 heads: 92 M random values;
FA's 2048 x 2048 x 4 x 9: 151 M; the passing 1024 x 1024 x 4 x 16 items: exactly 2**26, stored), and the two
variants compiled differently on sm90 (without the store the Philox stream is computed in the wgmma accumulator
layout, with it in a blocked layout).
These tests lower the limit so that a small problem takes the no-store variant, and check it against the
reference and against the store variant, on a GPU or in Triton's interpreter (``TRITON_INTERPRET=1``; the
conftest's GPU_FILES / TRITON_INTERPRETER_FILES skip it with the reason elsewhere).

On the H100 (session 8, runs C and E; benchmarks/results/session8) the causal failing batch_prefill items, fp16 and
bf16, first mismatched at the same element -- head 0, query 12 of sequence 0 (100 queries x 200 keys, a causal row
of 13 keys) -- so the error is not tied to long sequences: ``batch_prefill_h100_kernel*`` run that kernel
(b128x64, 4 warps, 2 stages, vLLM table, vectorized pool, page 16) on that sequence with the same seed, offset and
p_drop, small enough for the interpreter.  In the interpreter every case passes (ckfmha's kernel arithmetic is
right); on a GPU a failure of the no-store half alone points at the compiled no-store variant -- as it did on
the H100 before the masked-off store (session 9: fwd and both batch-prefill cases failed, fwd_causal passed).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ckfmha.backends import get_backend

_backend = get_backend("triton")

from ckfmha import rng  # noqa: E402
from ckfmha.inputs import make_inputs  # noqa: E402
from ckfmha.problem import Problem  # noqa: E402
from ckfmha.reference import reference  # noqa: E402
from ckfmha.validator import validate  # noqa: E402
from tests.test_triton_gpu import dispatcher  # noqa: E402  (the sm90 dispatcher the GPU tests share)


def _run(p: Problem, inputs: dict, tile: str | None) -> dict:
    """The plan's stages on the triton backend; ``tile`` (e.g. ``b128x64``): the last stage runs the best-ranked
    candidate kernel with that block shape instead of the dispatcher's choice."""
    plan = dispatcher().select(p)
    tensors = dict(inputs)
    for i, st in enumerate(plan.stages):
        if tile is not None and i == len(plan.stages) - 1:
            ranked = [c for c in dispatcher().ranked_candidates(p, st.role) if f".{tile}." in c.kernel_id]
            assert ranked, f"no {tile} kernel serves {p}"
            st = replace(st, kernel=ranked[0])
        tensors.update(_backend.run_stage(_backend.build(st.kernel), st, p, tensors).outputs)
    return tensors


def _randval_mismatches(p: Problem, randval: np.ndarray) -> int:
    """Stored random values that differ from CK's Philox stream (rng.dropout_randval) where the kernel visits."""
    bad = 0
    q0 = 0
    for b, (sq, sk) in enumerate(zip(p.seqlens_q_list, p.seqlens_k_list)):
        want = rng.dropout_randval(
            p.drop_seed, p.drop_offset, b, np.arange(p.nhead_q), p.nhead_q, np.arange(sq), np.arange(sk)
        )
        got = randval[0, :, q0 : q0 + sq, :sk] if p.mode.value == "group" else randval[b, :, :sq, :sk]
        bad += int(((got != want) & p.mask.allowed(sq, sk)[None]).sum())
        q0 += sq
    return bad


_H100_PREFILL = dict(
    family="batch_prefill",
    mode="group",
    dtype="fp16",
    batch=2,
    nhead_q=4,
    nhead_k=1,
    hdim_q=128,
    seqlens_q=[100, 17],
    seqlens_k=[200, 300],
    page_block_size=16,
    kv_lookup="vllm",
    kv_layout="vectorized",
    lse=True,
    p_drop=0.1,
)

#: name -> (problem fields, forced block shape of the attention kernel or None)
PROBLEMS: dict[str, tuple[dict, str | None]] = {
    "fwd": (dict(dtype="fp16", batch=2, nhead_q=2, seqlen_q=200, seqlen_k=300, hdim_q=64, lse=True), None),
    "fwd_causal": (dict(dtype="fp16", batch=2, nhead_q=2, seqlen_q=200, seqlen_k=300, hdim_q=64, mask="b"), None),
    "batch_prefill_h100_kernel": (_H100_PREFILL, "b128x64"),
    "batch_prefill_h100_kernel_causal": (dict(_H100_PREFILL, mask="t"), "b128x64"),
}
_SEEDED = dict(p_drop=0.2, drop_seed=0x1234_5678_9ABC, drop_offset=77)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_dropout_past_the_randval_limit_matches_the_stored_variant_and_reference(name: str, monkeypatch) -> None:
    from ckfmha.backends.triton import execute

    fields, tile = PROBLEMS[name]
    p = Problem(**({"lse": True, **_SEEDED, **fields} if tile is None else fields))
    inputs = make_inputs(p, 0)
    ref = reference(p, inputs)

    stored = _run(p, inputs, tile)  # within the limit: STORE_RANDVAL=True
    assert "randval" in stored
    assert _randval_mismatches(p, np.asarray(stored["randval"])) == 0

    monkeypatch.setattr(execute, "RANDVAL_MAX_ELEMENTS", int(np.prod(stored["randval"].shape)) - 1)
    unstored = _run(p, inputs, tile)  # one element past the limit: no buffer, as the large items run
    assert "randval" not in unstored

    for out in (stored, unstored):
        bad = [str(r) for r in validate(p, out, ref, names=["o", "lse"]).values() if not r.passed]
        assert not bad, "\n".join(bad)
    # the same keep mask and the same arithmetic: the two variants agree bit for bit
    assert np.array_equal(np.asarray(stored["o"]), np.asarray(unstored["o"]))
    assert np.array_equal(np.asarray(stored["lse"]), np.asarray(unstored["lse"]))
