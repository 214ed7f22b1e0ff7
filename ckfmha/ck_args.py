"""CK's tile_example argument dialect: what ``tile_example_fmha_fwd`` / ``_bwd`` run for a command line, and the
command line of a :class:`~ckfmha.problem.Problem`.

:func:`ck_run_from_args` models the runners of the CK tree (``fmha_fwd_run`` in
example/ck_tile/01_fmha/fmha_fwd_runner.hpp, ``fmha_bwd_run`` in fmha_bwd_runner.hpp, their argument tables in
example_fmha_fwd.cpp / example_fmha_bwd.cpp) and returns a :class:`CKRun`: the problem the binary effectively
runs and validates, the normalizations it announces on stderr (its own words, in its order) and the changes it
makes without a word (``unannounced``, in ckfmha's words naming the argument).  A line the runner itself refuses
(it returns ``invalid_args`` or throws) is a :class:`CKRefusal` carrying the runner's words.
:func:`problem_from_ck_args` (and :meth:`Problem.from_ck_args <ckfmha.problem.Problem.from_ck_args>`) return the
effective problem alone.  Direct construction of a Problem stays strict: the normalizations happen here, where CK
makes them.  Every error is a :class:`~ckfmha.problem.ProblemError` naming the argument (``-d``, ``-mask``...) or
field, the value and the rule.

Where the code is (the dependency runs one way, ``ck_args -> problem -> ck_dialect -> problem_base``): this module
is the public one and gathers the names; :mod:`ckfmha.ck_dialect` reads a command line into the effective
problem's constructor fields (:func:`parse_ck_args`, a :class:`CKArgs`) and renders a problem, without importing
:mod:`ckfmha.problem`; :mod:`ckfmha.problem` builds the Problem from those fields (:func:`ck_run_from_args`,
:class:`CKRun`) and its methods ``from_ck_args`` / ``to_ck_args`` / ``to_ck_command`` / ``ck_run_from_args``
use the dialect module.

The forward runner, in its order (``fwd_apis``: the fwd APIs the binary was built with, CMake's
``FMHA_FWD_ENABLE_APIS``: ``all`` -- fwd, fwd_splitkv, fwd_appendkv, pagedkv_prefill, as a testing build and CK's
smoke scripts with ``-s -a`` need -- or ``fwd``, CMake's default):

* ``-h_k`` not dividing ``-h``: refused ("nhead:H must be multiple of nhead_k:K");
* without the append-KV API ``-s_knew`` and ``-rotary_dim`` are ignored (announced); a negative ``-s_knew`` is
  drawn in ``[1, s]`` from the runner's seeded generator; RoPE with a dtype other than fp16/bf16, a rotary dim
  above ``-d`` or not a multiple of 16 is refused; append-KV in group mode runs in batch mode (announced);
* without any KV-cache API ``-page_block_size`` and ``-cache_batch_idx`` are ignored (announced); a page size not
  a multiple of 128 is refused; ``-cache_batch_idx`` is ignored with a paged cache or in group mode (announced);
* padding (group ``-s_qpad`` / ``-s_kpad`` with a positive first entry, batch ``-q_eff_lens`` / ``-kv_eff_lens``)
  together with append-KV, a paged cache or split-KV (``num_splits > 1`` or ``cache_batch_idx``) is refused;
* lengths: :mod:`ckfmha.ck_seqlens` (batch mode uses the first ``-s`` / ``-s_k`` value and ignores the pads;
  group mode generates the lengths of sequences not given; append-KV draws the cache lengths of batches 1..);
  a padded length below the logical one is refused;
* ``-p_drop`` outside 0..1 is refused; without the split-KV API ``-num_splits`` is ignored (announced); the
  batch-mode effective lengths repeat their last value up to ``-b``; ``-num_splits`` below 1 (CK's device
  heuristic) is not modelled; above 128 it is refused; dropout with split-KV or a KV cache is switched off
  (announced: "dropout is not supported by split-kv kernels. ignoring the 'p_drop' option");
* the family: append-KV when ``-s_knew`` or ``-rotary_dim`` are left on, else split-KV when ``num_splits > 1`` or
  ``cache_batch_idx`` (the runner's paged-KV call finds no kernel for an unpaged cache and falls back to split-KV),
  else paged-KV when the cache is paged, else fwd.

The backward runner: ``-h_k`` as above; ``-dbias`` without an elementwise bias and an unknown ``-init`` are
refused; lengths as the forward's (group ``-s_qpad`` / ``-s_kpad`` pad when their first entry is not -1); ``-p_drop``
outside 0..1 is refused.

Arguments.  Runner-only arguments (:data:`RUNNER_ONLY_ARGS`: ``-v -kname -init -warmup -repeat -timer -json
-jsonfile -drop_prefs``) say nothing about the problem (``-init`` is checked by the backward); ``-seed`` seeds the
generated lengths.  Values are read as CK's ArgParser (ck_tile/host/arg_parser.hpp) reads them: a scalar (``-d``,
``-b``, ``-p_drop``...; ``atoi``/``atof``) may end in one trailing comma (``-d=16,`` is 16, a form CK's own smoke
logs use) but a list where one number belongs (``-d=16,32``) is an error; a list (``-s``, ``-s_k``, ``-s_qpad``,
``-s_kpad``, ``-q_eff_lens``, ``-kv_eff_lens``; ``get_int_vec``) splits at every comma and reads an empty item as 0,
as CK does (``-s=16,`` is ``16, 0``).  ``-mask`` takes newer CK's ``t:l,r,sink`` / ``b:l,r,sink`` with sink 0 only
(:mod:`ckfmha.masking`).  ``-squant=auto`` turns the static quantization on for ``fp8`` alone (the runner's
``std::is_same_v<DataTypeConfig, FmhaFwdFp8>``).  An absent argument takes CK's default (``-b=2 -h=8 -s=3328
-d=128 -prec=fp16``...).

Rendering: :func:`problem_to_ck_args` writes non-default values in a fixed order, and a problem whose command
line CK would run differently is an error naming the field (``batch_prefill`` has no binary; ``min_seqlen_q`` has
no argument; per-batch key lengths of a KV cache are drawn by the runner, so they render only when they are its
draws).  Round trip: ``Problem.from_ck_args(problem_to_ck_args(p), binary=p.ck_binary) == p``.
"""

from __future__ import annotations

from ckfmha.ck_dialect import (
    BWD_INIT_METHODS,
    BWD_KEYS,
    CK_DEFAULT_SEED,
    FWD_APIS,
    FWD_KEYS,
    MAX_WALK_STEPS,
    RUNNER_ONLY_ARGS,
    UNMODELLED_BWD,
    UNMODELLED_FWD,
    CKArgs,
    parse_ck_args,
    problem_to_ck_args,
    problem_to_ck_command,
)
from ckfmha.problem import CKRun, ck_run_from_args, problem_from_ck_args
from ckfmha.problem_base import CKRefusal

__all__ = [
    "BWD_INIT_METHODS",
    "BWD_KEYS",
    "CK_DEFAULT_SEED",
    "CKArgs",
    "CKRefusal",
    "CKRun",
    "FWD_APIS",
    "FWD_KEYS",
    "MAX_WALK_STEPS",
    "RUNNER_ONLY_ARGS",
    "UNMODELLED_BWD",
    "UNMODELLED_FWD",
    "ck_run_from_args",
    "parse_ck_args",
    "problem_from_ck_args",
    "problem_to_ck_args",
    "problem_to_ck_command",
]
