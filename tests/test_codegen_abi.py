"""The descriptor ABI (codegen/abi.py): the ctypes structure and the C struct agree on size and every field offset,
and descriptors -- those of problems whose sizes overflow int32 products included -- round-trip through C.

A host program rendered from the same field list (``abi_check_program``) is compiled with g++ (no HIP needed): it
prints ``sizeof``, ``alignof`` and each field's ``offsetof`` / ``sizeof``, and, given a file with one descriptor's
bytes, every field's value as C reads it."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess

import pytest

from ckfmha.backends.hip.descriptor import DeviceArray, stage_descriptor
from ckfmha.problem import Problem
from codegen.abi import (
    ABI_VERSION,
    FIELDS,
    Descriptor,
    DescriptorError,
    Kind,
    abi_check_program,
    c_header,
    field_values,
    make_descriptor,
)


@pytest.fixture(scope="module")
def abi_check(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ on this machine (the ABI check compiles a host program)")
    d = tmp_path_factory.mktemp("abi")
    (d / "ckfmha_abi.h").write_text(c_header())
    (d / "check.cpp").write_text(abi_check_program())
    res = subprocess.run(
        [gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{d}", str(d / "check.cpp"), "-o", str(d / "check")],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr

    def run(desc: Descriptor | None = None) -> dict:
        args = [str(d / "check")]
        if desc is not None:
            (d / "desc.bin").write_bytes(bytes(desc))
            args.append(str(d / "desc.bin"))
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    return run


def test_the_c_struct_and_ctypes_agree_on_size_and_every_offset(abi_check):
    c = abi_check()
    assert c["size"] == ctypes.sizeof(Descriptor)
    assert c["align"] == ctypes.alignment(Descriptor)
    assert list(c["fields"]) == [f.name for f in FIELDS]
    for f in FIELDS:
        desc = getattr(Descriptor, f.name)
        assert c["fields"][f.name] == [desc.offset, desc.size], f.name


def test_the_header_is_c_too(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    (tmp_path / "ckfmha_abi.h").write_text(c_header())
    (tmp_path / "t.c").write_text(
        '#include "ckfmha_abi.h"\nint main(void) { ckfmha_desc d = {0}; return (int)d.batch; }\n'
    )
    res = subprocess.run(
        [
            gcc,
            "-std=c99",
            "-Wall",
            "-Werror",
            f"-I{tmp_path}",
            "-c",
            str(tmp_path / "t.c"),
            "-o",
            str(tmp_path / "t.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr


def _contiguous(shape: tuple[int, ...], ptr: int) -> DeviceArray:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return DeviceArray(ptr, shape, tuple(reversed(strides)))


def test_a_problem_whose_int32_products_overflow_round_trips(abi_check):
    # each size fits CK's int32; nhead * seqlen * hdim does not (2**32): it must arrive whole, not wrapped
    p = Problem(batch=2, nhead_q=128, seqlen_q=131072, seqlen_k=131072, hdim_q=256, lse=True)
    b, h, s, d = p.batch, p.nhead_q, p.seqlen_q, p.hdim_q
    arrays = {
        "q": _contiguous((b, h, s, d), 1 << 40),
        "k": _contiguous((b, h, s, d), 2 << 40),
        "v": _contiguous((b, h, s, d), 3 << 40),
        "o": _contiguous((b, h, s, d), 4 << 40),
        "lse": _contiguous((b, h, s), 5 << 40),
    }
    desc = stage_descriptor(p, "fwd", arrays, stream=0xDEADBEEF)
    assert desc.batch_stride_q == h * s * d == 2**32 and desc.nhead_stride_q == s * d and desc.stride_q == d
    back = abi_check(desc)["values"]
    ours = field_values(desc)
    for f in FIELDS:
        if f.kind is Kind.F32:
            assert back[f.name] == pytest.approx(ours[f.name], rel=1e-7), f.name
        else:
            assert back[f.name] == ours[f.name], f.name
    assert back["batch_stride_o"] == 2**32 and back["q_ptr"] == 1 << 40 and back["stream"] == 0xDEADBEEF
    assert back["abi_version"] == ABI_VERSION and back["struct_size"] == ctypes.sizeof(Descriptor)
    assert back["mask_type"] == 0 and back["window_size_left"] == -1 and back["has_lse"] is True


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_stride_q", 2**63, r"batch_stride_q: 9223372036854775808 does not fit int64_t"),
        ("drop_seed", -1, r"drop_seed: -1 does not fit uint64_t"),
        ("has_lse", 1, r"has_lse: 1 is not a bool"),
        ("q_ptr", -8, r"q_ptr: -8 is not an address"),
        ("seqlen_q", 3.0, r"seqlen_q: 3.0 is not an integer"),
        ("scale_s", "1", r"scale_s: '1' is not a number"),
        ("nope", 1, r"descriptor field 'nope': no such field"),
    ],
)
def test_descriptor_values_are_checked_not_wrapped(field, value, message):
    with pytest.raises(DescriptorError, match=message):
        make_descriptor(**{field: value})
