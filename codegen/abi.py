"""ckfmha's C ABI for CK kernels: one flat, versioned descriptor struct and one entry point per generator api.

This module is the one definition of the ABI; the C header (:func:`c_header`), the ctypes structure
(:class:`Descriptor`) and the C++ wrapper's field handling (:mod:`codegen.wrapper`) are all rendered from
:data:`FIELDS`, so they cannot drift apart -- and ``tests/test_codegen_abi.py`` compiles a host program with g++
that prints the C struct's size and every field offset and compares them with ctypes' (the "ABI check").

The descriptor (``ckfmha_desc``, :data:`ABI_VERSION` 1):

* a header: ``abi_version`` and ``struct_size`` (the wrapper refuses a descriptor of another version or size);
* device pointers (``void*``): every buffer any api reads or writes, null where unused;
* ``int64_t`` for every size, count, stride, offset, window and enum value -- products are computed in Python
  (arbitrary precision) and stored whole; the wrapper narrows each to the type CK's own args struct declares
  (``ck_tile::index_t`` = int32 in today's CK) and fails with :data:`Status.OUT_OF_RANGE` naming the field and the
  value when it does not fit, never wrapping;
* ``uint64_t`` dropout seed and offset, ``float`` scales, ``bool`` switches;
* the stream and the timing request (``stream``, ``time_kernel``, ``cold_niters``, ``nrepeat``).

Entry points (``extern "C"``, one library per kernel exports its api's): ``int32_t ckfmha_run_<api>(const
ckfmha_desc*, float* elapsed_ms, char* message, uint64_t message_size)`` for ``<api>`` in
:data:`ENTRY_APIS`, plus ``ckfmha_abi_version()``, ``ckfmha_desc_size()`` and ``ckfmha_kernel_name()`` (the CK
instance the library was built for). A call returns a :class:`Status` code; anything but ``OK`` comes with a
NUL-terminated message in ``message`` (the wrapper writes at most ``message_size`` bytes).

Data types travel as :data:`DTYPE_CODES` (index into CK's ``data_type`` strings: ``fp16``, ``bf16``, ...); the
mask, bias and rope enums as CK's own values (``mask_enum``: 0 no_mask, 1 mask_top_left, 2 mask_bottom_right,
3 window_generic -- example/ck_tile/01_fmha/mask.hpp; ``bias_enum``: 0 no, 1 elementwise, 2 alibi -- bias.hpp;
``rope_enum``: 0 none, 1 interleaved, 2 half_rotated -- rotary.hpp); ``qscale_type`` as newer CK's
``quant_scale_enum`` (example/ck_tile/01_fmha/quant.hpp: 0 no_scale, 1 pertensor, 2 blockscale, 3 kv_blockscale,
4 mx): a CK whose traits still carry the older
``do_fp8_static_quant`` switch gets ``qscale_type == 1`` there (the same mapping as :mod:`ckfmha.naming`'s
``squant`` = pertensor), any other scale mode is unsupported by it.
"""

from __future__ import annotations

import ctypes
import enum
from dataclasses import dataclass
from typing import Any

ABI_VERSION = 1
HEADER_NAME = "ckfmha_abi.h"
STRUCT_NAME = "ckfmha_desc"

#: the generator apis (CK's ``generate.py -d``) with an entry point ``ckfmha_run_<api>``
ENTRY_APIS = ("fwd", "fwd_splitkv", "fwd_appendkv", "pagedkv_prefill", "batch_prefill", "bwd")

#: CK's ``data_type`` strings (the traits' ``std::string data_type``), by code
DTYPE_CODES = ("fp16", "bf16", "fp32", "fp8", "bf8", "fp8fp16", "fp8bf16", "fp8fp32")


class Status(enum.IntEnum):
    """What an entry point returns (``CKFMHA_<NAME>`` in C)."""

    OK = 0
    BAD_DESCRIPTOR = 1  # null, or another ABI version / struct size
    BAD_VALUE = 2  # a value outside its domain (a dtype code, a bool that is not 0/1, a negative size)
    OUT_OF_RANGE = 3  # an int64 value that does not fit the type CK's args struct declares for the field
    UNSUPPORTED_FIELD = 4  # the descriptor sets a field this CK's args/traits struct does not have
    NO_KERNEL = 5  # the api found no instance in this library for the arguments (it returned < 0)
    HIP_ERROR = 6  # a HIP call failed (the message has hipGetErrorString)
    EXCEPTION = 7  # CK threw (the message has what())


class Kind(enum.Enum):
    """A field's C type, its ctypes type and its byte size."""

    U32 = ("uint32_t", ctypes.c_uint32)
    PTR = ("void*", ctypes.c_void_p)
    I64 = ("int64_t", ctypes.c_int64)
    U64 = ("uint64_t", ctypes.c_uint64)
    F32 = ("float", ctypes.c_float)
    BOOL = ("bool", ctypes.c_bool)

    @property
    def c_type(self) -> str:
        return self.value[0]

    @property
    def ctype(self) -> Any:
        return self.value[1]


@dataclass(frozen=True)
class AbiField:
    name: str
    kind: Kind


def _fields() -> tuple[AbiField, ...]:
    P, I, U, F, B = Kind.PTR, Kind.I64, Kind.U64, Kind.F32, Kind.BOOL
    out = [AbiField("abi_version", Kind.U32), AbiField("struct_size", Kind.U32)]
    pointers = (
        "q k v bias o lse rand_val lse_acc o_acc sink q_descale k_descale v_descale "
        "seqstart_q seqstart_k seqlen_q seqlen_k cu_seqlen_q cu_seqlen_k "
        "block_table cache_batch_idx knew vnew rotary_cos rotary_sin kv_indptr kv_page_indices kv_last_page_lens "
        "do d dq dk dv dbias dq_acc"
    ).split()
    out += [AbiField(f"{n}_ptr", P) for n in pointers]
    out.append(AbiField("stream", P))
    sizes = (
        "dtype seqlen_q seqlen_k seqlen_knew batch max_seqlen_q max_seqlen_k hdim_q hdim_v nhead_q nhead_k "
        "num_splits page_block_size num_total_pages rotary_dim window_size_left window_size_right sink_size "
        "min_seqlen_q mask_type bias_type rope_type qscale_type cold_niters nrepeat"
    ).split()
    out += [AbiField(n, I) for n in sizes]
    row = "q k v bias randval o o_acc knew vnew do dq_acc dq dk dv dbias".split()
    nhead = "q k v bias randval lse o lse_acc o_acc knew vnew do lsed dq_acc dq dk dv dbias".split()
    batch = nhead + ["block_table"]
    split = "lse_acc o_acc dq_acc".split()
    out += [AbiField(f"stride_{n}", I) for n in row]
    out += [AbiField(f"nhead_stride_{n}", I) for n in nhead]
    out += [AbiField(f"batch_stride_{n}", I) for n in batch]
    out += [AbiField(f"split_stride_{n}", I) for n in split]
    out += [AbiField("drop_seed", U), AbiField("drop_offset", U)]
    out += [AbiField(n, F) for n in "scale_s scale_p scale_o logits_soft_cap p_drop p_undrop".split()]
    flags = (
        "is_group_mode is_v_rowmajor has_logits_soft_cap has_lse has_dropout s_randval "
        "skip_min_seqlen_q has_sink use_pagedkv is_gappy has_mask has_dbias is_deterministic time_kernel"
    ).split()
    out += [AbiField(n, B) for n in flags]
    names = [f.name for f in out]
    if len(names) != len(set(names)):  # pragma: no cover - a typo in the lists above
        raise AssertionError("duplicate descriptor field")
    return tuple(out)


#: every descriptor field, in struct order (see the module doc)
FIELDS: tuple[AbiField, ...] = _fields()
FIELD_KIND: dict[str, Kind] = {f.name: f.kind for f in FIELDS}


class Descriptor(ctypes.Structure):
    """``ckfmha_desc`` as ctypes sees it (same field order and C types as :func:`c_header`)."""

    _fields_ = [(f.name, f.kind.ctype) for f in FIELDS]


class DescriptorError(ValueError):
    """A value that cannot go into the descriptor (the message names the field, the value and the rule)."""


_INT_RANGE = {Kind.I64: (-(2**63), 2**63 - 1), Kind.U64: (0, 2**64 - 1), Kind.U32: (0, 2**32 - 1)}


def make_descriptor(**values: Any) -> Descriptor:
    """A descriptor with the header filled in and ``values`` set; unknown names, ints outside the field's C type
    and non-bools for bool fields are :class:`DescriptorError` s naming the field (ctypes would wrap or coerce
    silently)."""
    d = Descriptor()
    d.abi_version = ABI_VERSION
    d.struct_size = ctypes.sizeof(Descriptor)
    for name, v in values.items():
        set_field(d, name, v)
    return d


def set_field(d: Descriptor, name: str, value: Any) -> None:
    """Set one field with the checks of :func:`make_descriptor`."""
    kind = FIELD_KIND.get(name)
    if kind is None:
        raise DescriptorError(f"descriptor field {name!r}: no such field (ckfmha_desc version {ABI_VERSION})")
    if kind is Kind.BOOL:
        if not isinstance(value, bool):
            raise DescriptorError(f"descriptor field {name}: {value!r} is not a bool")
    elif kind in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DescriptorError(f"descriptor field {name}: {value!r} is not an integer")
        lo, hi = _INT_RANGE[kind]
        if not lo <= value <= hi:
            raise DescriptorError(f"descriptor field {name}: {value} does not fit {kind.c_type} [{lo}, {hi}]")
    elif kind is Kind.PTR:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise DescriptorError(f"descriptor field {name}: {value!r} is not an address (an int >= 0 or None)")
    elif kind is Kind.F32:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DescriptorError(f"descriptor field {name}: {value!r} is not a number")
    setattr(d, name, value)


def field_values(d: Descriptor) -> dict[str, Any]:
    """Every field of ``d`` (pointers as ints, null as 0)."""
    return {f.name: (getattr(d, f.name) or 0) if f.kind is Kind.PTR else getattr(d, f.name) for f in FIELDS}


def c_header() -> str:
    """``ckfmha_abi.h``: the descriptor struct, the status codes and the entry point declarations (C and C++)."""
    lines = [
        f"/* {HEADER_NAME}: ckfmha's C ABI for CK kernels, version {ABI_VERSION}.",
        " * Generated from codegen/abi.py (FIELDS) -- do not edit; the ctypes structure is rendered from the same list. */",
        "#ifndef CKFMHA_ABI_H",
        "#define CKFMHA_ABI_H",
        "#include <stdint.h>",
        "#include <stddef.h>",
        "#ifndef __cplusplus",
        "#include <stdbool.h>",
        "#endif",
        "",
        f"#define CKFMHA_ABI_VERSION {ABI_VERSION}",
        f"#define CKFMHA_NUM_DTYPES {len(DTYPE_CODES)}",
        "",
        "enum ckfmha_status {",
        *[f"    CKFMHA_{s.name} = {s.value}," for s in Status],
        "};",
        "",
        f"typedef struct {STRUCT_NAME} {{",
        *[f"    {f.kind.c_type} {f.name};" for f in FIELDS],
        f"}} {STRUCT_NAME};",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "int32_t ckfmha_abi_version(void);",
        "uint64_t ckfmha_desc_size(void);",
        "const char* ckfmha_kernel_name(void);",
        *[
            f"int32_t ckfmha_run_{api}(const {STRUCT_NAME}* desc, float* elapsed_ms, char* message, "
            "uint64_t message_size);"
            for api in ENTRY_APIS
        ],
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "#endif /* CKFMHA_ABI_H */",
        "",
    ]
    return "\n".join(lines)


def c_dtype_table() -> str:
    """The C initializer of CK's data_type strings by code (the wrapper's ``kDtypeNames``)."""
    return "{" + ", ".join(f'"{n}"' for n in DTYPE_CODES) + "}"


def abi_check_program() -> str:
    """A host C++ program (g++, no HIP) that prints the struct's size and each field's offset as JSON and, given
    a file holding one descriptor's bytes, every field's value as the C side reads it."""
    prints = []
    for f in FIELDS:
        if f.kind is Kind.PTR:
            expr = f"(unsigned long long)(uintptr_t)d.{f.name}"
            fmt = "%llu"
        elif f.kind is Kind.F32:
            expr, fmt = f"(double)d.{f.name}", "%.9g"
        elif f.kind is Kind.BOOL:
            expr, fmt = f'd.{f.name} ? "true" : "false"', "%s"
        elif f.kind is Kind.I64:
            expr, fmt = f"(long long)d.{f.name}", "%lld"
        else:
            expr, fmt = f"(unsigned long long)d.{f.name}", "%llu"
        prints.append(f'    std::printf("%s\\"{f.name}\\": {fmt}", first ? "" : ", ", {expr}); first = false;')
    offsets = [
        f'    std::printf("%s\\"{f.name}\\": [%zu, %zu]", first ? "" : ", ", offsetof({STRUCT_NAME}, {f.name}), '
        f"sizeof((({STRUCT_NAME}*)0)->{f.name})); first = false;"
        for f in FIELDS
    ]
    return "\n".join(
        [
            f'#include "{HEADER_NAME}"',
            "#include <cstdint>",
            "#include <cstdio>",
            "#include <cstddef>",
            "",
            "int main(int argc, char** argv) {",
            "    bool first = true;",
            f'    std::printf("{{\\"size\\": %zu, \\"align\\": %zu, \\"fields\\": {{", sizeof({STRUCT_NAME}), '
            f"alignof({STRUCT_NAME}));",
            *offsets,
            '    std::printf("}");',
            "    if (argc > 1) {",
            f"        {STRUCT_NAME} d;",
            '        std::FILE* fh = std::fopen(argv[1], "rb");',
            '        if (!fh || std::fread(&d, sizeof d, 1, fh) != 1) { std::fprintf(stderr, "cannot read %s\\n", argv[1]); return 2; }',
            "        std::fclose(fh);",
            '        std::printf(", \\"values\\": {");',
            "        first = true;",
            *prints,
            '        std::printf("}");',
            "    }",
            '    std::printf("}\\n");',
            "    return 0;",
            "}",
            "",
        ]
    )
