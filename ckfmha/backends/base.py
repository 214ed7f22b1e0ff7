"""The backend interface.

A backend

* has a ``name``;
* ``available()`` -> :class:`Availability` (truthy when usable, else carrying the reason);
* ``supports(config)`` -> ``None`` when it can realize the KernelConfig, else the reason it cannot;
* ``build(config)`` -> :class:`BuiltKernel`, cached on disk (:mod:`ckfmha.backends.cache`) and safe when
  several processes build the same kernel at once;
* ``build_many(configs, workers)`` -> builds in parallel, returns kernels in input order (failures as
  exceptions in the returned list, never silently dropped);
* ``run_stage(kernel, stage, problem, tensors, *, timing)`` -> :class:`StageResult`: runs one plan stage;
  outputs are written into ``tensors`` (the caller's dict of named arrays) and device time is reported when
  ``timing`` is set.

``ckfmha.run(problem, inputs)`` drives a whole plan through a backend (:mod:`ckfmha.runner`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckfmha.kernel import KernelConfig

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Stage
    from ckfmha.problem import Problem


class BackendError(RuntimeError):
    pass


class UnsupportedConfig(BackendError):
    """The backend cannot realize this config (the message says why)."""


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok

    @classmethod
    def yes(cls) -> "Availability":
        return cls(True, "")

    @classmethod
    def no(cls, reason: str) -> "Availability":
        return cls(False, reason)


@dataclass
class BuiltKernel:
    """A kernel ready to run: the config, the backend's artifact and how long the (cold) build took."""

    config: KernelConfig
    backend: str
    artifact: Any = None
    build_seconds: float = 0.0
    cached: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageResult:
    outputs: dict[str, Any]
    device_ms: float | None = None


class Backend(abc.ABC):
    name: str = "?"

    @abc.abstractmethod
    def available(self) -> Availability: ...

    @abc.abstractmethod
    def supports(self, config: KernelConfig) -> str | None: ...

    def device(self) -> str:
        """The device this backend runs on, in words (reports name it); call only when available."""
        return ""

    def flush_cache(self) -> None:  # noqa: B027 - optional hook: backends without device caches keep the no-op
        """Evict the device's caches before a timed run (a GPU's L2), so repetitions start alike; a no-op here."""

    def clocks(self) -> str:
        """The device clocks now, in words, where readable (reports carry them with timings); "" here."""
        return ""

    @abc.abstractmethod
    def build(self, config: KernelConfig) -> BuiltKernel: ...

    def build_many(self, configs: Sequence[KernelConfig], workers: int = 1) -> list[BuiltKernel | BaseException]:
        """Build in parallel (threads: compilers release the GIL or run in subprocesses)."""

        def one(c: KernelConfig) -> BuiltKernel | BaseException:
            try:
                return self.build(c)
            except Exception as e:  # reported per kernel, never dropped
                return e

        if workers <= 1 or len(configs) <= 1:
            return [one(c) for c in configs]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, configs))

    @abc.abstractmethod
    def run_stage(
        self, kernel: BuiltKernel, stage: "Stage", problem: "Problem", tensors: dict[str, Any], *, timing: bool = False
    ) -> StageResult: ...

    def check_supported(self, config: KernelConfig) -> None:
        reason = self.supports(config)
        if reason is not None:
            raise UnsupportedConfig(f"backend {self.name!r} cannot realize {config.kernel_id}: {reason}")


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    """Run fn and return (result, wall milliseconds) — the CPU backend's notion of device time."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1e3
