"""The backend interface.

A backend

* has a ``name``;
* ``available()`` -> :class:`Availability` (truthy when usable, else carrying the reason);
* ``supports(config)`` -> ``None`` when it can realize the KernelConfig, else the reason it cannot;
* ``build(config)`` -> :class:`BuiltKernel`, cached on disk (:mod:`ckfmha.backends.cache`) and safe when
  several processes build the same kernel at once;
* ``build_many(configs, workers)`` -> builds in parallel, returns kernels in input order (failures as
  exceptions in the returned list, never silently dropped);
* ``configure(**settings)`` -> the backend itself: its process-wide settings (:attr:`Backend.settings` names the
  ones it takes; hip: ``ck_root``, ``arch``, ``receipt``, ``mask_mode``); an unknown name is an error naming the
  backend, the name and the ones it takes.  ``kernel_source()`` -> the CK checkout whose generator lists the
  kernels this backend builds (None: ckfmha's built-in enumeration); core code configures a backend and asks it
  this through these two methods only (:func:`ckfmha.backends.configure_backend`);
* ``run_stage(kernel, stage, problem, inputs, *, timing, context)`` -> :class:`StageResult`: runs one plan stage;
* ``release_memory()``: hands cached device memory back (called after each harness item; a no-op by default).

The stage contract:

==================  ================================================================================================
``inputs``          a read-only mapping name -> NumPy array: the problem's inputs and what earlier stages returned
                    (the runner passes read-only views: a backend that writes into them fails loudly)
``stage.outputs``   what the stage must return (:class:`ckfmha.plan.OutputSpec`: name, shape, dtype; optional ones
                    may be absent); elements the kernel does not write hold the NaN poison of ``spec.allocate()``
``stage.launch``    the dispatcher's backend-neutral launch choices (:class:`ckfmha.plan.Launch`)
``StageResult``     ``outputs``: name -> a new NumPy array per spec; ``device_ms``: the stage's device time when
                    ``timing`` is set (None otherwise or where not measurable); ``compile_seconds``: what compiling
                    took inside this stage, for a backend that compiles at a kernel's first launch (Triton's JIT
                    specializes on the problem, so its ``build`` compiles nothing): the runner counts it as the
                    stage's build, not its run
``context``         a :class:`RunContext` per plan execution: where a backend keeps what it reuses across the
                    stages of one run (device copies of inputs); never the caller's dict
==================  ================================================================================================

Only the runner (:func:`ckfmha.runner.execute`) merges results into the plan's tensors, after checking each
against its spec (:meth:`ckfmha.plan.OutputSpec.mismatch`).  :class:`PreconditionError` is the one error for a
launch a real kernel's host check would refuse, on every backend.

``ckfmha.run(problem, inputs)`` drives a whole plan through a backend (:mod:`ckfmha.runner`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckfmha.kernel import KernelConfig

if TYPE_CHECKING:  # pragma: no cover
    from ckfmha.plan import Plan, Stage
    from ckfmha.problem import Problem


class BackendError(RuntimeError):
    pass


class UnsupportedConfig(BackendError):
    """The backend cannot realize this config (the message says why)."""


class PreconditionError(BackendError):
    """A launch a real kernel's host check would refuse (an unaligned length on a kernel without padding, a head
    dim the kernel cannot serve, a query length over a bwd kernel's max_seq_len_q): the message names the
    argument, its value and the rule.  The one such error of every backend."""


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
    """What a stage returns (see the module doc): ``outputs`` name -> new NumPy array, one per output spec of the
    stage; ``device_ms`` the device time when asked for; ``compile_seconds`` the compiling done at its launches."""

    outputs: dict[str, Any]
    device_ms: float | None = None
    compile_seconds: float = 0.0


class RunContext:
    """Per plan execution: the ``plan`` being run (None when a stage runs alone) and what a backend keeps across
    the stages of one run (device copies of inputs, say).  :meth:`state` gives each backend its own dict;
    :meth:`on_close` registers a clean-up the runner calls when the run ends (:meth:`close`)."""

    def __init__(self, plan: "Plan | None" = None) -> None:
        self.plan = plan
        self._state: dict[str, dict[str, Any]] = {}
        self._closers: list[Callable[[], None]] = []

    def state(self, owner: str) -> dict[str, Any]:
        """The dict ``owner`` (a backend's name) keeps its entries in, for this run."""
        return self._state.setdefault(owner, {})

    def on_close(self, fn: Callable[[], None]) -> None:
        self._closers.append(fn)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        self._state.clear()
        for fn in reversed(closers):
            fn()


class Backend(abc.ABC):
    name: str = "?"
    #: the names :meth:`configure` takes (none here)
    settings: tuple[str, ...] = ()

    def configure(self, **settings: Any) -> "Backend":
        """Set this backend's process-wide settings (:attr:`settings` names them) and return it; a name it does
        not take raises :class:`BackendError` naming the backend, the name and the ones it takes."""
        unknown = sorted(set(settings) - set(self.settings))
        if unknown:
            raise BackendError(
                f"backend {self.name!r}: no setting {', '.join(unknown)}; it takes: {', '.join(self.settings) or 'none'}"
            )
        return self

    def kernel_source(self) -> Any:
        """The CK checkout (a Path) whose generator lists the kernels this backend builds, or None: ckfmha's
        built-in enumeration (every backend but a configured hip)."""
        return None

    @abc.abstractmethod
    def available(self) -> Availability: ...

    @abc.abstractmethod
    def supports(self, config: KernelConfig) -> str | None: ...

    def declines(self, problem: "Problem") -> str | None:
        """Why no kernel of this backend can run ``problem``, whatever kernel is chosen (a length its kernels do
        not read, say), in words naming the field, its value and the rule; None (here: always) when some kernel
        can.  The harness skips such an item with this reason instead of running it into a
        :class:`PreconditionError`."""
        return None

    def device(self) -> str:
        """The device this backend runs on, in words (reports name it); call only when available."""
        return ""

    def flush_cache(self) -> None:  # noqa: B027 - optional hook: backends without device caches keep the no-op
        """Evict the device's caches before a timed run (a GPU's L2), so repetitions start alike; a no-op here."""

    def clocks(self) -> str:
        """The device clocks now, in words, where readable (reports carry them with timings); "" here."""
        return ""

    def warm_up(self) -> None:  # noqa: B027 - optional hook: a backend with nothing to load ahead keeps the no-op
        """Load ahead what the first stage would load (modules, the device context), so that a process's first item
        does not pay for it; called once per kernel process before its first item (pytest_ckfmha/warmup.py), only
        when available.  Never changes a result; a no-op here."""

    def release_memory(self) -> None:  # noqa: B027 - optional hook: backends without a device allocator keep the no-op
        """Give the device memory this process caches but no longer uses back to the device (the harness calls it
        after each item: processes that share a GPU must not starve each other with cached blocks); a no-op here."""

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
        self,
        kernel: BuiltKernel,
        stage: "Stage",
        problem: "Problem",
        inputs: Mapping[str, Any],
        *,
        timing: bool = False,
        context: RunContext | None = None,
    ) -> StageResult:
        """Run one plan stage (the module doc's contract): read ``inputs``, return every ``stage.outputs`` entry."""

    def check_supported(self, config: KernelConfig) -> None:
        reason = self.supports(config)
        if reason is not None:
            raise UnsupportedConfig(f"backend {self.name!r} cannot realize {config.kernel_id}: {reason}")


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    """Run fn and return (result, wall milliseconds) — the CPU backend's notion of device time."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1e3
