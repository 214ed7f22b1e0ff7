"""Helpers for the data-error tests of the fwd-like enumerators: run one enumerator on an edited arch section."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ckfmha.archs import ArchSpec, data_dir, load_arch_spec
from ckfmha.enumeration import EnumContext, SectionError
from ckfmha.kernel import Api, MaskMode

TEST_ARCH = "gfxtest"


def ctx_with_section(api: str, section: Any) -> EnumContext:
    """An enumeration context whose arch spec (``gfxtest.yaml``, not on disk) has only ``section`` for ``api``."""
    spec = ArchSpec(TEST_ARCH, "test", "amd", data_dir() / "archs" / f"{TEST_ARCH}.yaml", {api: section})
    return EnumContext(Api(api), TEST_ARCH, spec, 0, MaskMode.SIMPLIFIED)


def good_section(api: str, arch: str = "gfx942") -> dict:
    """A private, editable copy of a real arch's section for ``api``."""
    return copy.deepcopy(load_arch_spec(arch).section(api))


def section_error(enumerate_section: Callable[[EnumContext], list], api: str, section: Any) -> str:
    """The message of the ``SectionError`` that enumerating ``section`` raises (fails the test if none)."""
    with pytest.raises(SectionError) as ei:
        enumerate_section(ctx_with_section(api, section))
    return str(ei.value)
