"""Every Triton kernel of the backend compiles for AMD gfx942 ahead of time, on a machine without a GPU.

benchmarks/aot_amd.py compiles one launch of each representative config (``REPRESENTATIVES``: every family of the
sm90 space and the variants that compile different kernel code) for gfx942 through Triton's own JIT and its
bundled AMD backend, with torch CPU tensors; here each representative is a test item that passes only when its
launch compiled and every code object is a gfx942 AMDGPU ELF, and one more item checks that together they
compiled every top-level ``@triton.jit`` kernel of ``ckfmha.backends.triton``. The compile runs once per module,
against a fresh ``TRITON_CACHE_DIR`` in a tmp dir (always cold, as in CI: about 45 s on 2 cores).

Checkers with injected faults: a kernel whose inline assembly is PTX (the AMD assembler rejects it), a config
whose compile launches nothing, code objects that are empty, not ELF, not AMDGPU or for another target, a
representative that matches no config, a Python without torch / the AMD backend / with ``TRITON_INTERPRET=1``
(``amd_backend_missing`` and ``aot_amd.py --check-backend``, which CI's step runs first). The AMD items skip
with the reason where torch, triton or Triton's AMD backend is missing (CI's main venvs; CI's "AMD ahead-of-time
compile" step of .ci/run has them) or under ``TRITON_INTERPRET=1``; the checkers of pure functions run everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from ckfmha.kernel import Family
from ckfmha.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


def _aot_module() -> ModuleType:
    """benchmarks/aot_amd.py (not a package), loaded once."""
    if "aot_amd" not in sys.modules:
        spec = importlib.util.spec_from_file_location("aot_amd", ROOT / "benchmarks" / "aot_amd.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["aot_amd"] = mod  # its dataclasses resolve their module while it executes
        spec.loader.exec_module(mod)
    return sys.modules["aot_amd"]


aot = _aot_module()
AMD_MISSING = aot.amd_backend_missing()
needs_amd = pytest.mark.skipif(AMD_MISSING is not None, reason=f"no AMD ahead-of-time compile here: {AMD_MISSING}")
ARCH = "gfx942"
BACKEND_KERNELS = {
    "attn_fwd_kernel",
    "splitkv_combine_kernel",
    "append_rows_kernel",
    "bwd_dot_do_o_kernel",
    "bwd_dq_dk_dv_kernel",
    "bwd_convert_dq_kernel",
}


def _elf(machine: int, flags: int) -> bytes:
    """A 64-byte ELF64 header with ``e_machine`` and ``e_flags`` set (the fields code_object_problem reads)."""
    return b"\x7fELF" + bytes(14) + machine.to_bytes(2, "little") + bytes(28) + flags.to_bytes(4, "little") + bytes(12)


# ------------------------------------------------------------------------------------------ pure checkers
def test_code_object_problem_accepts_a_gfx942_object_only() -> None:
    gfx942 = _elf(224, 0x54C)  # EF_AMDGPU_MACH_AMDGCN_GFX942 | xnack/sramecc "any", as Triton's hsaco has
    assert aot.code_object_problem(gfx942, "gfx942") is None
    assert (
        aot.code_object_problem(gfx942, "gfx90a") == "code object for gfx942 (EF_AMDGPU_MACH 0x4c), not gfx90a (0x3f)"
    )
    assert aot.code_object_problem(b"", "gfx942") == "empty code object"
    assert aot.code_object_problem(b"\x00asm" + bytes(60), "gfx942") == "not an ELF file (starts b'\\x00asm', 64 bytes)"
    assert aot.code_object_problem(_elf(62, 0x54C), "gfx942") == "ELF e_machine 62, not EM_AMDGPU (224)"
    assert aot.code_object_problem(_elf(224, 0x5FF), "gfx942") == (
        "code object for an unknown target (EF_AMDGPU_MACH 0xff), not gfx942 (0x4c)"
    )


def test_launch_verdict_fails_on_an_exception_no_launch_or_a_bad_code_object() -> None:
    good = SimpleNamespace(asm={"hsaco": _elf(224, 0x4C)})
    assert aot.launch_verdict([("attn_fwd_kernel", good)], "", ARCH) == ""
    assert aot.launch_verdict([("attn_fwd_kernel", good)], "RuntimeError: boom", ARCH) == "RuntimeError: boom"
    assert aot.launch_verdict([], "", ARCH) == "no kernel was launched"
    empty = SimpleNamespace(asm={"hsaco": b""})
    other = SimpleNamespace(asm={"hsaco": _elf(224, 0x3F)})
    assert aot.launch_verdict([("a_kernel", good), ("b_kernel", empty), ("c_kernel", other)], "", ARCH) == (
        "b_kernel: empty code object; c_kernel: code object for gfx90a (EF_AMDGPU_MACH 0x3f), not gfx942 (0x4c)"
    )
    assert aot.launch_verdict([("a_kernel", None)], "", ARCH) == "a_kernel: empty code object"


def test_every_representative_matches_an_sm90_config() -> None:
    pairs = aot.representative_configs()
    assert [rep.name for rep, _ in pairs] == [rep.name for rep in aot.REPRESENTATIVES]
    assert len({rep.name for rep in aot.REPRESENTATIVES}) == len(aot.REPRESENTATIVES) == 16
    assert all(c.family.value == rep.family and c.hdim_q == 128 and rep.pick(c) for rep, c in pairs)
    assert {c.family.value for _, c in pairs} == {f.value for f in Family}


def test_a_representative_matching_no_config_is_an_error_naming_it() -> None:
    reg = [c for c in Registry.from_enumeration("sm90", mask_mode="generic") if c.family is not Family.BWD_CONVERT_DQ]
    with pytest.raises(aot.NoRepresentativeError) as e:
        aot.representative_configs(reg)
    assert isinstance(e.value, ValueError)
    assert str(e.value) == (
        f"representative 'bwd-convert-dq-deterministic': no hdim-128 config of family 'bwd_convert_dq' matches its "
        f"pick (among {len(reg)} configs); update REPRESENTATIVES in benchmarks/aot_amd.py"
    )


# ------------------------------------------------------------------------------------------ AMD compile
@pytest.fixture
def cold_triton_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty TRITON_CACHE_DIR for one test's compiles (a warm cache would skip the compiler)."""
    cache = tmp_path / "triton-cache"
    cache.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    return cache


def _device_caches() -> dict:
    from triton.runtime.jit import JITFunction

    from ckfmha.backends.triton import kernels, kernels_bwd, kernels_kvcache

    mods = (kernels, kernels_bwd, kernels_kvcache)
    return {f.__name__: f.device_caches for m in mods for f in vars(m).values() if isinstance(f, JITFunction)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Every representative compiled for gfx942 once, against a fresh TRITON_CACHE_DIR: results by name, the cache
    dir, and each JIT function's device caches before and after (the AMD binaries must not stay where a GPU run of
    the same process looks)."""
    cache = tmp_path_factory.mktemp("triton-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(cache))
        before = _device_caches()
        results = {rep.name: aot.compile_config_for(c, ARCH) for rep, c in aot.representative_configs()}
        after = _device_caches()
    return SimpleNamespace(results=results, cache_dir=cache, caches_before=before, caches_after=after)


@needs_amd
@pytest.mark.parametrize("name", [rep.name for rep in aot.REPRESENTATIVES])
def test_representative_compiles_for_gfx942(compiled: SimpleNamespace, name: str) -> None:
    r = compiled.results[name]
    assert (r.ok, r.error) == (True, ""), f"{name} ({r.kernel_id}): {r.error}"
    assert r.kernels and set(r.kernels) <= aot.backend_kernels()
    assert r.hsaco_bytes > 1000


@needs_amd
def test_every_backend_kernel_compiled_for_gfx942(compiled: SimpleNamespace) -> None:
    kernels = aot.backend_kernels()
    assert kernels >= BACKEND_KERNELS  # the discovery finds the kernels known today (new ones may join)
    assert {k for r in compiled.results.values() if r.ok for k in r.kernels} == kernels
    assert any(compiled.cache_dir.iterdir())  # the compiles went through the fresh cache: they ran cold
    assert compiled.caches_after == compiled.caches_before
    assert all(compiled.caches_after[k] is compiled.caches_before[k] for k in compiled.caches_before)


@needs_amd
def test_backend_kernels_are_the_jit_functions_no_jit_function_calls() -> None:
    assert aot.backend_kernels(["tests.aot_fault_kernels"]) == {"add_one_kernel", "ptx_asm_kernel"}


@needs_amd
def test_amd_backend_missing_names_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.backends

    assert aot.amd_backend_missing() is None
    with monkeypatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        assert aot.amd_backend_missing() == "TRITON_INTERPRET=1 replaces Triton's JIT: no ahead-of-time compile"
    others = {k: v for k, v in triton.backends.backends.items() if k != "amd"}
    with monkeypatch.context() as mp:
        mp.setattr(triton.backends, "backends", others)
        assert aot.amd_backend_missing() == f"this triton has no AMD backend (backends: {sorted(others)})"
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "torch", None)
        assert aot.amd_backend_missing() == "torch and triton are needed (import of torch halted; None in sys.modules)"


def test_check_backend_exits_2_with_the_reason_where_amd_cannot_compile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(aot, "amd_backend_missing", lambda: "torch and triton are needed (No module named 'torch')")
    assert aot.main(["--check-backend"]) == 2
    assert capsys.readouterr().err == "cannot compile for AMD: torch and triton are needed (No module named 'torch')\n"
    monkeypatch.setattr(aot, "amd_backend_missing", lambda: None)
    assert aot.main(["--check-backend"]) == 0
    assert (
        capsys.readouterr().out == "this Python can compile for AMD ahead of time (torch, triton and its amd backend)\n"
    )


def _a_config():
    return next(c for c in Registry.from_enumeration("sm90", mask_mode="generic") if c.family is Family.FWD)


@needs_amd
def test_a_kernel_that_cannot_compile_for_amd_is_a_failure(
    cold_triton_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected fault: the config's launch runs a kernel with PTX inline assembly."""
    import torch
    from triton.runtime.jit import JITFunction

    from ckfmha.backends.triton import warmup
    from tests import aot_fault_kernels

    def launch_ptx(c):
        aot_fault_kernels.ptx_asm_kernel[(1,)](torch.zeros(64, dtype=torch.int32))

    run, caches = JITFunction.run, aot_fault_kernels.ptx_asm_kernel.device_caches
    monkeypatch.setattr(warmup, "compile_config", launch_ptx)
    r = aot.compile_config_for(_a_config(), ARCH)
    assert not r.ok
    # Triton's own words vary across releases (CI installs today's): that the compile failed, not how it says it
    assert r.error and "AMD" in r.error, r.error
    assert (r.kernels, r.hsaco_bytes) == ([], 0)
    assert JITFunction.run is run and aot_fault_kernels.ptx_asm_kernel.device_caches is caches  # restored


@needs_amd
def test_a_config_whose_compile_launches_nothing_is_a_failure(
    cold_triton_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ckfmha.backends.triton import warmup

    monkeypatch.setattr(warmup, "compile_config", lambda c: None)
    r = aot.compile_config_for(_a_config(), ARCH)
    assert (r.ok, r.error, r.kernels) == (False, "no kernel was launched", [])


@needs_amd
def test_a_good_kernel_is_a_gfx942_code_object_and_not_another_targets(cold_triton_cache: Path) -> None:
    import torch

    from tests import aot_fault_kernels

    with aot.compile_only_for(ARCH) as launched:
        aot_fault_kernels.add_one_kernel[(1,)](torch.zeros(64, dtype=torch.int32))
    [(name, kernel)] = launched
    hsaco = kernel.asm["hsaco"]
    assert name == "add_one_kernel" and len(hsaco) > 1000
    assert aot.code_object_problem(hsaco, "gfx942") is None
    assert aot.code_object_problem(hsaco, "gfx950") == (
        "code object for gfx942 (EF_AMDGPU_MACH 0x4c), not gfx950 (0x4f)"
    )
