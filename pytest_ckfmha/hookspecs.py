"""Hooks the plugin offers to conftest files and other plugins (registered in ``pytest_addhooks``)."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_ckfmha_kernels(config, arch):
    """Return the list of KernelConfigs of ``arch`` to test instead of the enumeration (e.g. a small hand-built
    registry).  The sweep/filter options still apply; receipt/profile/mask mode do not.  None: use the
    enumeration."""


@pytest.hookspec(firstresult=True)
def pytest_ckfmha_backend(config, name):
    """Return a Backend object for backend ``name`` (the --ckfmha-backend value, ``auto`` included) instead of
    :func:`ckfmha.backends.get_backend` -- e.g. a test backend defined in a conftest.  None: the default."""
