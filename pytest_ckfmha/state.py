"""Per-config state kept in ``config.stash``: settings, and (lazily) the kernel set, the specs and the runtime."""

from __future__ import annotations

import pytest

STATE_KEY = pytest.StashKey["State"]()


class State:
    def __init__(self, config, settings) -> None:
        self.config = config
        self.settings = settings
        self._registry = None
        self._specs = None
        self._runtime = None
        self.rows: list[dict] = []
        self.collect_seconds: float | None = None

    def registry(self):
        if self._registry is None:
            from ckfmha.registry import Registry
            from pytest_ckfmha.collect import kernel_set

            self._registry = Registry(self.settings.arch, kernel_set(self.config, self.settings),
                                      source="pytest-ckfmha")
        return self._registry

    def specs(self):
        if self._specs is None:
            import time

            from pytest_ckfmha.collect import build_specs

            t0 = time.perf_counter()
            self._specs = build_specs(self.config, self.settings, self.registry())
            self.collect_seconds = time.perf_counter() - t0
        return self._specs

    def parity_sides(self):
        """(upstream side, ckfmha side) for --ckfmha-parity, made once per session."""
        if getattr(self, "_parity", None) is None:
            from ckfmha.parity import make_pair
            from ckfmha.receipts import resolve_receipt

            s = self.settings
            self._parity = make_pair(s.parity, f"ckfmha:{s.backend}", bin_dir=s.upstream_bin, arch=s.arch,
                                     receipt=resolve_receipt(s.receipt, profile=s.profile), mask_mode=s.mask_mode)
        return self._parity

    def runtime(self):
        if self._runtime is None:
            from pytest_ckfmha.execute import Runtime

            self._runtime = Runtime(self.config, self.settings, self.registry())
        return self._runtime


def get_state(config) -> State:
    return config.stash[STATE_KEY]


def has_state(config) -> bool:
    return STATE_KEY in config.stash
