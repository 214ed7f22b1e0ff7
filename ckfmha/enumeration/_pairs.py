"""What the api enumerators make: (signature, algorithm) pairs, one per kernel; configs are built from them on demand.

A :class:`~ckfmha.kernel.KernelConfig` is exactly such a pair.  The enumerators emit bare pairs
(``enumerate_pairs(ctx)``) because the commonest question, CK's instance names (:func:`ckfmha.naming.render_ck_names`),
needs nothing more, and a tuple costs a quarter of a config to build; ``enumerate_api(ctx)`` of each enumerator gives
the configs (:func:`configs`).  (``fwd``, ``bwd``, ``batch_prefill`` and
``splitkv`` name their kernels without even the pairs: their ``enumerate_names``.)

A receipt's filter reads config fields (``c.dtype``, ``c.pad_d``): :func:`kept` tests a pair on its signature alone
when the filter reads signature fields only (the same answer for every algorithm), else on its config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import starmap
from typing import TYPE_CHECKING, Any

from ckfmha.kernel import SIGNATURE_FIELDS, KernelAlgorithm, KernelConfig, KernelSignature, new_config

Pair = tuple[KernelSignature, KernelAlgorithm]

_SIGNATURE_FIELD_SET = frozenset(SIGNATURE_FIELDS)


def configs(pairs: Iterable[Pair]) -> list[KernelConfig]:
    """The configs of ``pairs``, in their order."""
    return list(starmap(new_config, pairs))


def reads_signature_only(keep: Any) -> bool:
    """True when ``keep`` is a plain compiled filter that reads signature fields only.

    Receipt predicates are lambdas compiled from checked ``c.<field>`` expressions, so the names their code loads are
    exactly the fields they read.  Such a predicate gives the same answer for every algorithm of a signature, and a
    signature has every field it reads: it can be evaluated once per signature, on the signature itself."""
    code = getattr(keep, "__code__", None)
    if code is None or getattr(keep, "__closure__", None) or code.co_freevars:
        return False
    if any(hasattr(const, "co_code") for const in code.co_consts):
        return False
    return set(code.co_names) <= _SIGNATURE_FIELD_SET


class SignatureProbe:
    """A mutable stand-in for a signature, to test a filter that reads signature fields only
    (:func:`reads_signature_only`) on many field values without making a signature for each: it starts with the
    fields of ``sig``, and the caller sets the fields that vary."""

    __slots__ = SIGNATURE_FIELDS

    def __init__(self, sig: KernelSignature) -> None:
        for name in SIGNATURE_FIELDS:
            setattr(self, name, getattr(sig, name))

    if TYPE_CHECKING:  # the slots come from the field list, so mypy cannot see them: any field may be set

        def __setattr__(self, name: str, value: Any) -> None: ...


def kept(pairs: Iterable[Pair], keep: Callable[[Any], Any]) -> list[Pair]:
    """The pairs whose config ``keep`` accepts, in their order (tested on the signature when it suffices)."""
    if reads_signature_only(keep):
        return [p for p in pairs if keep(p[0])]
    return [p for p in pairs if keep(new_config(*p))]
