"""The one vocabulary of family names: problem families, their aliases, and the kernel families they run.

Two kinds of family exist (see :mod:`ckfmha.kernel` and :mod:`ckfmha.problem`):

* **problem families** -- what a user asks to compute: ``fwd``, ``fwd_splitkv``, ``fwd_pagedkv``,
  ``fwd_appendkv``, ``batch_prefill`` and ``bwd`` (:data:`PROBLEM_FAMILIES`).  ``bwd`` is the whole backward;
  :class:`ckfmha.problem.Problem` stores it as ``Family.BWD_DQ_DK_DV``.
* **kernel families** -- :class:`ckfmha.kernel.Family`, one per kernel stage CK generates, e.g.
  ``fwd_splitkv`` + ``fwd_splitkv_combine`` or the three backward stages ``bwd_dot_do_o``, ``bwd_dq_dk_dv``,
  ``bwd_convert_dq``.

Accepted aliases (:data:`FAMILY_ALIASES`): ``splitkv``, ``pagedkv``, ``appendkv`` for the ``fwd_`` names, and
``bwd_dq_dk_dv`` for ``bwd`` (a Problem's own spelling of the whole backward).

* :func:`problem_family` -- the canonical problem family token of a name or alias (``'splitkv'`` ->
  ``'fwd_splitkv'``, ``'bwd_dq_dk_dv'`` -> ``'bwd'``); :func:`problem_family_of` -- the token of a Problem.
* :func:`kernel_families` -- the kernel families CK's generator emits for a family name: a problem family
  name or alias gives every stage of its generator api (:data:`ckfmha.kernel.API_FAMILIES`: ``fwd_splitkv`` ->
  fwd_splitkv + fwd_splitkv_combine, ``bwd`` -> the three backward stages); a kernel-stage token that names no
  problem (``fwd_splitkv_combine``, ``bwd_dot_do_o``, ``bwd_convert_dq``) gives that stage alone.  One stage
  of a multi-stage family is selected with a filter instead (``c.family == 'bwd_dq_dk_dv'``).
* :func:`plan_families` -- every kernel family a plan for the problem family may use: the generator's stages
  plus, for ``fwd_appendkv``, the attention over the updated cache that the dispatcher plans after the
  append-KV stage (``fwd``, split-KV + combine, or paged-KV; see :mod:`ckfmha.dispatcher`), and for
  ``fwd_pagedkv`` the split-KV + combine fallback where no paged-KV kernel serves the problem.

A name that is none of these raises :class:`FamilyError` naming the value, the allowed names and the aliases.
This module imports only :mod:`ckfmha.kernel` at import time (no NumPy); :func:`plan_families` reads the family
records (:mod:`ckfmha.family_records`) when called.
"""

from __future__ import annotations

from typing import Any

from ckfmha.kernel import API_FAMILIES, FAMILY_API, Api, Family


class FamilyError(ValueError):
    """An unknown family name; the message names the value, the allowed names and the aliases."""


# The problem family of each generator api is the api's first family, except the backward, which is named by its
# api (``bwd``, the whole three-stage backward). Display order: forward, its variants, then the backward.
PROBLEM_FAMILIES: tuple[str, ...] = ("fwd", "fwd_splitkv", "fwd_pagedkv", "fwd_appendkv", "batch_prefill", "bwd")

FAMILY_ALIASES: dict[str, str] = {
    "splitkv": "fwd_splitkv",
    "pagedkv": "fwd_pagedkv",
    "appendkv": "fwd_appendkv",
    Family.BWD_DQ_DK_DV.value: "bwd",
}

BWD_STAGES: tuple[Family, ...] = API_FAMILIES[Api.BWD]


def _api_of(problem_token: str) -> Api:
    return Api.BWD if problem_token == Api.BWD.value else FAMILY_API[Family(problem_token)]


# problem family -> its generator api's kernel families, derived from ckfmha.kernel.API_FAMILIES
_GENERATED: dict[str, tuple[Family, ...]] = {f: API_FAMILIES[_api_of(f)] for f in PROBLEM_FAMILIES}

# kernel-stage tokens that name no problem family: selected alone
STAGE_ONLY: tuple[Family, ...] = tuple(
    f for f in Family if f.value not in PROBLEM_FAMILIES and f.value not in FAMILY_ALIASES
)


def _allowed(with_stages: bool) -> str:
    text = (
        f"allowed: {', '.join(PROBLEM_FAMILIES)} "
        f"(aliases: {', '.join(f'{a} = {t}' for a, t in FAMILY_ALIASES.items())})"
    )
    if with_stages:
        text += f"; single kernel stages: {', '.join(f.value for f in STAGE_ONLY)}"
    return text


def _token(name: Any, field: str) -> str:
    if isinstance(name, Family):
        return name.value
    if not isinstance(name, str):
        raise FamilyError(f"{field}: {name!r} is a {type(name).__name__}, expected a family name; {_allowed(False)}")
    return name.strip()


def problem_family(name: Any, field: str = "family") -> str:
    """The canonical problem family token of ``name`` (a problem family, an alias, or a Family member such as
    ``Family.BWD_DQ_DK_DV``, the Problem's spelling of ``bwd``)."""
    tok = _token(name, field)
    tok = FAMILY_ALIASES.get(tok, tok)
    if tok not in _GENERATED:
        raise FamilyError(f"{field}: {name!r} is not a problem family; {_allowed(False)}")
    return tok


def problem_family_of(problem: Any) -> str:
    """The problem family token of a :class:`ckfmha.problem.Problem` (``bwd`` for the backward)."""
    return problem_family(problem.family, "problem.family")


def kernel_families(name: Any, field: str = "family") -> tuple[Family, ...]:
    """The kernel families CK's generator emits for ``name`` (see the module doc)."""
    tok = _token(name, field)
    canonical = FAMILY_ALIASES.get(tok, tok)
    if canonical in _GENERATED:
        return _GENERATED[canonical]
    for f in STAGE_ONLY:
        if f.value == tok:
            return (f,)
    raise FamilyError(f"{field}: {name!r} is not a family; {_allowed(True)}")


def plan_families(name: Any, field: str = "family") -> tuple[Family, ...]:
    """Every kernel family a plan for problem family ``name`` may use (see the module doc): the kernel families of
    the roles its family record lists (:attr:`ckfmha.family_records.FamilyRecord.roles`)."""
    from ckfmha.family_records import ROLE_FAMILY, family_record

    return tuple(ROLE_FAMILY[role] for role in family_record(problem_family(name, field)).roles)


__all__ = [
    "BWD_STAGES",
    "FAMILY_ALIASES",
    "FamilyError",
    "PROBLEM_FAMILIES",
    "STAGE_ONLY",
    "kernel_families",
    "plan_families",
    "problem_family",
    "problem_family_of",
]
