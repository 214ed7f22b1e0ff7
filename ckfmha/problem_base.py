"""The problem vocabulary below both :mod:`ckfmha.problem` and :mod:`ckfmha.ck_args`: the error class, the tensor
layouts and the data types each binary takes.

:mod:`ckfmha.problem` re-exports every name here (``from ckfmha.problem import ProblemError`` stays the usual
spelling); :mod:`ckfmha.ck_args` reads CK's command lines into a Problem's constructor fields with these names and
never imports :mod:`ckfmha.problem`, which imports it (``Problem.from_ck_args``, ``Problem.to_ck_args``).
"""

from __future__ import annotations

from ckfmha.kernel import DType, Family, TokenEnum


class ProblemError(ValueError):
    """An impossible or CK-undefined problem; the message names the field, the value and the rule."""


class CKRefusal(ProblemError):
    """A command line the tile_example runner itself refuses (it returns ``invalid_args`` or throws): the message
    names the argument and quotes the runner."""


class Layout(TokenEnum):
    """Tensor layout of Q/K/V (input) or O (output): CK's ``-iperm`` / ``-operm`` 1 = bhsd, 0 = bshd."""

    BHSD = "bhsd"
    BSHD = "bshd"


BWD = Family.BWD_DQ_DK_DV
FWD_DTYPES = (DType.FP16, DType.BF16, DType.FP32, DType.FP8, DType.FP8BF16, DType.FP8FP32)
BWD_DTYPES = (DType.FP16, DType.BF16, DType.FP32)

__all__ = ["BWD", "BWD_DTYPES", "CKRefusal", "FWD_DTYPES", "Layout", "ProblemError"]
