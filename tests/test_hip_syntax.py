"""HIP syntax check of generated sources for gfx942 with Debian's clang (codegen/syntax.py): for one kernel of every
api of the amd-aiter CK tree, the kernel's instance, the api dispatch file and ckfmha's wrapper are compiled with
``-fsyntax-only`` (host and gfx942 device front ends) with CK's flags from compile_commands.json.

Then the hip backend's real build and call path against the tree's own headers, host-only: for one problem per api
the dispatcher's plan over the tree's kernel space, each kernel built through codegen, the build cache and
compile_commands.json by ``tests/data/fake_ck/host_hipcc`` (the wrapper compiled with clang for the host against
the real fmha_fwd.hpp / fmha_bwd.hpp; CK's api functions replaced by stubs recording every member they receive),
each stage's descriptor sent through the wrapper, and every recorded member of CK's traits, args and stream config
compared with the descriptor.

Each syntax-checked file takes 12-50 s on a 2-core machine (18 files, about 4 minutes two at a time; the host
builds about 2 more), so these tests run only when ``CKFMHA_HIP_SYNTAX=1`` is set, and skip with the reason where
no clang++-19..22 or no HIP headers are installed (``apt-get install clang-19 lld-19 libamdhip64-dev
rocm-device-libs``)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ckfmha.problem import Problem
from codegen.abi import DTYPE_CODES, field_values, make_descriptor
from codegen.emit import emit_library
from codegen.syntax import (
    SYSTEM_HIP_INCLUDE,
    VECTOR_TYPES,
    find_clang,
    patch_vector_types,
    patched_hip_include,
    syntax_command,
)
from tests.ck_tree import ck_tree  # noqa: F401 - a fixture
from tests.hip_fakes import install_host_rocm
from tests.test_codegen import APIS, one_kernel

ENV = "CKFMHA_HIP_SYNTAX"


def test_the_vector_types_patch_defaults_each_copy_assignment():
    text = (
        "struct A { HIP_vector_base& operator=(const HIP_vector_base& x_) noexcept {\n"
        "  #if X\n data = x_.data; { nested(); }\n #endif\n return *this; } int y; };\n"
        "struct B { HIP_vector_base& operator=(const HIP_vector_base& x_) noexcept { return *this; } };\n"
    )
    patched, n = patch_vector_types(text)
    assert n == 2
    assert patched.count("HIP_vector_base& operator=(const HIP_vector_base& x_) = default;") == 2
    assert "nested" not in patched and "int y; };" in patched
    with pytest.raises(ValueError, match=r"unbalanced braces"):
        patch_vector_types("HIP_vector_base& operator=(const HIP_vector_base& x_) noexcept { {")


def test_syntax_command_keeps_cks_flags_and_checks_only(tmp_path):
    cmd = [
        "/opt/rocm/bin/hipcc",
        "-x",
        "hip",
        "--offload-arch=gfx942",
        "-O3",
        "-fPIC",
        "-Ia",
        "-c",
        "k.cpp",
        "-o",
        "k.o",
    ]
    out = syntax_command(cmd, tmp_path / "clang++-19", tmp_path / "hip")
    assert out == [
        str(tmp_path / "clang++-19"),
        "--rocm-path=/usr",
        "-nogpulib",
        f"-I{tmp_path / 'hip'}",
        "-fsyntax-only",
        "-x",
        "hip",
        "--offload-arch=gfx942",
        "-O3",
        "-Ia",
        "k.cpp",
    ]


@pytest.fixture(scope="module")
def toolchain():
    if os.environ.get(ENV) != "1":
        pytest.skip(
            f"set {ENV}=1 to run the HIP syntax check and the host build against the CK tree (about 6 minutes on 2 cores)"
        )
    clang = find_clang()
    if clang is None:
        pytest.skip("no clang++-19..22 on PATH (apt-get install clang-19 lld-19 libamdhip64-dev rocm-device-libs)")
    if not (SYSTEM_HIP_INCLUDE / VECTOR_TYPES).is_file():
        pytest.skip(f"no HIP headers at {SYSTEM_HIP_INCLUDE / 'hip'} (apt-get install libamdhip64-dev)")
    return clang, patched_hip_include()


def test_generated_sources_of_every_api_pass_the_gfx942_syntax_check(ck_tree, toolchain, tmp_path):  # noqa: F811
    clang, hip_include = toolchain
    jobs = []
    for api in APIS:
        lib = emit_library(ck_tree, "gfx942", one_kernel(ck_tree, api), tmp_path / api)
        entries = {c["file"]: c for c in json.loads((lib.out_dir / "compile_commands.json").read_text())}
        for src in (lib.instances[0], lib.api_source, lib.wrapper):  # one instance per api (the asked-for kernel)
            jobs.append((api, src.name, entries[str(src)]))

    def check(job):
        api, name, entry = job
        t0 = time.perf_counter()
        proc = subprocess.run(
            syntax_command(entry["arguments"], clang, hip_include),
            cwd=entry["directory"],
            capture_output=True,
            text=True,
        )
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln][:10]
        return api, name, proc.returncode, time.perf_counter() - t0, errors

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(check, jobs))
    for api, name, rc, secs, _ in results:
        print(f"{api:16s} {secs:5.1f}s rc={rc} {name}")
    failed = [f"{api} {name}: exit {rc}\n  " + "\n  ".join(errs) for api, name, rc, _, errs in results if rc != 0]
    assert not failed, "\n".join(failed)


# ------------------------------------------------------------------------------------ the real structs, host-only
#: one problem per api (and append-KV's second stage), each served by the amd-aiter tree's gfx942 kernels
HOST_CASES = {
    "fwd-group-window-bias": Problem(
        family="fwd", mode="group", batch=2, nhead_q=4, nhead_k=2, seqlens_q=(30, 50), seqlens_k=(60, 100),
        hdim_q=64, mask="g:20,10", bias="elementwise", lse=True,
    ),
    "fwd-dropout-bshd": Problem(
        family="fwd", batch=2, nhead_q=2, seqlen_q=40, seqlen_k=70, hdim_q=64, p_drop=0.2, input_layout="bshd"
    ),
    "splitkv-paged": Problem(
        family="fwd_splitkv", batch=2, nhead_q=2, seqlen_q=8, seqlen_k=300, hdim_q=128, num_splits=4,
        page_block_size=128, lse=True,
    ),
    "pagedkv-bshd": Problem(
        family="fwd_pagedkv", batch=2, nhead_q=2, seqlen_q=20, seqlen_k=200, hdim_q=128, page_block_size=128,
        input_layout="bshd", mask="b",
    ),
    "appendkv-inter-paged": Problem(
        family="fwd_appendkv", batch=2, nhead_q=2, seqlen_q=3, seqlen_k=260, seqlen_knew=9, rotary_dim=64,
        rope="interleaved", hdim_q=64, page_block_size=128, lse=True,
    ),
    "batch-prefill": Problem(
        family="batch_prefill", mode="group", batch=2, nhead_q=2, seqlens_q=(9, 20), seqlens_k=(40, 150),
        hdim_q=128, page_block_size=1, kv_lookup="sglang", kv_layout="linear", lse=True,
    ),
    "bwd-gqa-causal-dropout-alibi": Problem(
        family="bwd", batch=2, nhead_q=4, nhead_k=2, seqlen_q=50, seqlen_k=70, hdim_q=64, mask="t",
        bias="alibi", p_drop=0.2,
    ),
}  # fmt: skip

_POINTER_MEMBERS = ("cache_batch_idx", "kv_indptr", "kv_page_indices", "kv_last_page_lens", "stream_id_")


def _expected(member: str, values: dict, expr: str | None):
    """What CK's member should hold for the descriptor ``values`` (None: nothing to compare)."""
    by_name = {
        "data_type": DTYPE_CODES[values["dtype"]],
        "scale": values["scale_s"],
        "scale_s": values["scale_s"],
        "do_fp8_static_quant": int(values["qscale_type"] == 1),
        "qscale_type": values["qscale_type"],
        "drop_seed_offset": f"{values['drop_seed']},{values['drop_offset']}",
    }
    if member in by_name:
        return by_name[member]
    m = re.search(r"d->(\w+)", expr or "")
    return None if m is None else values[m.group(1)]


def _check_record(report: str, desc) -> tuple[list[str], list[str]]:
    """Every member the stub recorded against the descriptor: pointers by nullness, the rest by value. Returns
    (mismatches, the members compared)."""
    from codegen.wrapper import ARGS_MEMBERS, STREAM_MEMBERS, TRAITS_MEMBERS

    values = field_values(desc)
    exprs = {f"t.{m}": e for m, e, _ in TRAITS_MEMBERS} | {f"a.{m}": e for m, e, _ in ARGS_MEMBERS}
    exprs |= {f"s.{m}": e for m, e, _ in STREAM_MEMBERS}
    bad, checked = [], []
    for token in report.split()[1:]:
        key, got = token.split("=", 1)
        member = key.split(".", 1)[1]
        want = _expected(member, values, exprs.get(key))
        if want is None:
            continue
        checked.append(key)
        if member.endswith("_ptr") or member in _POINTER_MEMBERS:
            ok = (got != "0") == bool(want)
        elif isinstance(want, float):
            ok = float(got) == pytest.approx(want, rel=1e-6)
        elif isinstance(want, str):
            ok = got == want
        else:
            ok = int(got) == int(want)
        if not ok:
            bad.append(f"{key} = {got}, the descriptor says {want}")
    return bad, checked


def test_descriptors_reach_the_real_ck_structs_of_every_api(ck_tree, toolchain, tmp_path, monkeypatch):  # noqa: F811
    """The hip backend end to end on the host, against the tree's own headers: the plan's kernels built through
    codegen, the build cache and compile_commands.json by a host-only stand-in compiler (tests/data/fake_ck/
    host_hipcc: ckfmha's wrapper compiled with clang-19 against the real fmha_fwd.hpp / fmha_bwd.hpp; CK's api
    functions replaced by stubs that record every member they receive), each stage's descriptor sent through the
    wrapper, and every recorded member of CK's traits, args and stream config compared with the descriptor."""
    from ckfmha.backends.base import RunContext
    from ckfmha.backends.hip.backend import ROLE_API, HipBackend
    from ckfmha.backends.hip.descriptor import stage_descriptor
    from ckfmha.backends.hip.memory import HostMemory
    from ckfmha.dispatcher import Dispatcher
    from ckfmha.inputs import make_inputs
    from ckfmha.registry import Registry
    from ckfmha.runner import forward_for_backward, prepare_tensors

    clang, hip_include = toolchain
    install_host_rocm(tmp_path / "rocm", tmp_path / "stubs", clang, hip_include, monkeypatch)
    lines: list[str] = []
    backend = HipBackend(
        ck_root=ck_tree, arch="gfx942", memory=HostMemory(), cache_dir=tmp_path / "cache", progress=lines.append
    )
    dispatcher = Dispatcher(Registry.from_checkout(ck_tree, "gfx942"), backend)
    plans = {name: dispatcher.select(p) for name, p in HOST_CASES.items()}
    kernels = list(dict.fromkeys(st.kernel for plan in plans.values() for st in plan.stages))
    t0 = time.perf_counter()
    built = backend.build_many(kernels, workers=2)
    print(f"built {len(kernels)} kernels in {time.perf_counter() - t0:.0f}s:", *lines, sep="\n  ")
    assert not [b for b in built if isinstance(b, BaseException)], [str(b) for b in built]
    ran, bad = set(), []
    for name, plan in plans.items():
        p = plan.problem
        inputs = make_inputs(p, seed=0)
        forward = forward_for_backward(p, inputs) if p.family.value.startswith("bwd") else None  # (o, lse)
        tensors, _ = prepare_tensors(p, plan, inputs, forward)
        # what the backend puts on the device: the inputs and every output of the plan, NaN-poisoned
        tensors.update((s.name, s.allocate()) for st in plan.stages for s in st.outputs if not s.updates)
        for st in plan.stages:
            if st.role not in ROLE_API:
                continue
            bk = backend.build(st.kernel)
            backend.run_stage(bk, st, p, tensors, context=RunContext(plan))  # raises KernelCallError on failure
            report_fn = bk.artifact._lib.ckfmha_stub_report
            report_fn.restype = ctypes.c_char_p
            report = report_fn().decode()
            api = ROLE_API[st.role]
            assert report.startswith(f"api={api} "), report
            mem = HostMemory()
            arrays = {n: mem.put(n, a) for n, a in tensors.items() if isinstance(a, np.ndarray)}
            desc = stage_descriptor(
                p,
                api,
                arrays,
                num_splits=st.launch.num_splits or 1,
                is_deterministic=bool(st.kernel.signature.deterministic) if api == "bwd" else False,
            )
            mismatches, checked = _check_record(report, desc)
            bad += [f"{name} {api}: {b}" for b in mismatches]
            ran.add(api)
            assert len(checked) >= 25, report  # CK's smallest structs (append-KV's) still have 36 + 5 members
            assert {"t.data_type", "t.hdim_q", "a.q_ptr", "a.stride_q", "a.nhead_stride_q", "s.stream_id_"} <= set(
                checked
            ), report
            if api == "bwd":
                assert "a.scale" in checked and "a.drop_seed_offset" in checked, report
    assert ran == set(APIS)
    assert not bad, "\n".join(bad)


def test_the_record_check_catches_a_wrong_member():
    desc = make_descriptor(dtype=1, stride_q=64, scale_s=0.5, q_ptr=4096)
    good = "api=fwd t.data_type=bf16 a.stride_q=64 a.scale_s=0.5 a.q_ptr=77 a.k_ptr=0"
    assert _check_record(good, desc) == ([], ["t.data_type", "a.stride_q", "a.scale_s", "a.q_ptr", "a.k_ptr"])
    bad = "api=fwd t.data_type=fp16 a.stride_q=32 a.scale=0.25 a.q_ptr=0 a.k_ptr=9"
    assert _check_record(bad, desc)[0] == [
        "t.data_type = fp16, the descriptor says bf16",
        "a.stride_q = 32, the descriptor says 64",
        "a.scale = 0.25, the descriptor says 0.5",
        "a.q_ptr = 0, the descriptor says 4096",
        "a.k_ptr = 9, the descriptor says 0",
    ]
