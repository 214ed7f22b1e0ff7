"""ckfmha's C ABI wrapper for one CK kernel library: ``ckfmha_wrapper.cpp`` (rendered by :func:`wrapper_source`).

The wrapper includes the api's header from the checkout (``fmha_fwd.hpp`` / ``fmha_bwd.hpp``), exports the
entry point of the kernel's api (``ckfmha_run_<api>``, :mod:`codegen.abi`) and, per call:

1. checks the descriptor's header (null, ABI version, struct size) and its dtype code -- ``BAD_DESCRIPTOR`` /
   ``BAD_VALUE``;
2. fills CK's traits, args and ``ck_tile::stream_config`` member by member from the tables below
   (:data:`ARGS_MEMBERS`, :data:`TRAITS_MEMBERS`, :data:`STREAM_MEMBERS`). Every member is set through
   compile-time detection (a C++20 requires-expression inside a template): a member this CK's struct has is
   set -- integers only when the int64 value fits the member's type (``OUT_OF_RANGE`` names the field, the
   value and the type otherwise, never wrapping), enums through their underlying type; a member it lacks is
   skipped when the descriptor holds the neutral value, and is ``UNSUPPORTED_FIELD`` naming the struct and the
   member otherwise (policy ``"required"``) -- or skipped silently (policy ``"optional"``: the sizes some CK
   versions copy into their traits as well). Three differences between CK versions and apis are handled by name:
   the scale mode (``qscale_type`` in newer CK's traits, the ``do_fp8_static_quant`` switch in older ones:
   pertensor only), the softmax scale (``scale_s`` in the forward apis' args, ``scale`` in ``fmha_bwd_args`` --
   fmha_bwd.hpp) and the dropout seed (``drop_seed_offset`` pair, or separate ``drop_seed`` / ``drop_offset``);
3. calls the api function (``fmha_fwd``, ``fmha_fwd_splitkv``, ``fmha_fwd_appendkv``, ``fmha_fwd_pagedkv``,
   ``fmha_batch_prefill``, ``fmha_bwd``) with the stream config; a negative return is ``NO_KERNEL`` (CK's
   dispatch found no instance in the library for the arguments);
4. checks ``hipGetLastError`` and ``hipStreamSynchronize`` on the descriptor's stream (``HIP_ERROR`` with
   ``hipGetErrorName`` / ``hipGetErrorString``); exceptions are caught (``EXCEPTION`` with ``what()``).

Messages go to the caller's buffer (``vsnprintf``, always NUL-terminated); the wrapper keeps no state between
calls (no globals, no statics but constants), so concurrent calls on different streams do not interfere.

A member CK's struct has and the wrapper never sets stays value-initialized (zero): a new CK member would go
unnoticed that way, so :func:`unset_members` reads the checkout's api header and lists, per traits/args struct of
an api, the members the wrapper sets neither from its tables nor by name (:data:`BY_NAME_MEMBERS`);
:func:`codegen.emit.emit_library` records them and ``ckfmha codegen`` prints them as a warning. Against the
amd-aiter CK tree the list is empty for every api (tests/test_codegen.py).
"""

from __future__ import annotations

import re

from codegen.abi import ENTRY_APIS, HEADER_NAME, c_dtype_table

WRAPPER_NAME = "ckfmha_wrapper.cpp"

#: api -> (header, traits type, args type, api function, how the api takes traits/args)
API_CALLS: dict[str, tuple[str, str, str, str]] = {
    "fwd": ("fmha_fwd.hpp", "fmha_fwd_traits", "fmha_fwd_args", "fmha_fwd"),
    "fwd_splitkv": ("fmha_fwd.hpp", "fmha_fwd_splitkv_traits", "fmha_fwd_splitkv_args", "fmha_fwd_splitkv"),
    "fwd_appendkv": ("fmha_fwd.hpp", "fmha_fwd_appendkv_traits", "fmha_fwd_appendkv_args", "fmha_fwd_appendkv"),
    "pagedkv_prefill": ("fmha_fwd.hpp", "fmha_fwd_pagedkv_traits", "fmha_fwd_pagedkv_args", "fmha_fwd_pagedkv"),
    "batch_prefill": ("fmha_fwd.hpp", "fmha_batch_prefill_traits", "fmha_batch_prefill_args", "fmha_batch_prefill"),
    "bwd": ("fmha_bwd.hpp", "fmha_bwd_traits", "fmha_bwd_args", "fmha_bwd"),
}
assert tuple(API_CALLS) == ENTRY_APIS

REQUIRED, OPTIONAL = "required", "optional"
ROW_MAJOR = "row-major"  # is_v_rowmajor: absent is fine for row-major V (bwd's traits), not for column-major
#: page_block_size: absent is fine for pages of one token (fmha_batch_prefill_args of CK before page sizes:
#: "#if 0 // we assume page_block_size=1 for now" in fmha_fwd.hpp), not for larger pages
PAGES_OF_ONE = "pages-of-one"

_POINTERS = (
    "q k v bias o lse rand_val lse_acc o_acc sink q_descale k_descale v_descale seqstart_q seqstart_k "
    "seqlen_q seqlen_k cu_seqlen_q cu_seqlen_k block_table knew vnew rotary_cos rotary_sin do d dq dk dv dbias dq_acc"
).split()
_DIMS = "seqlen_q seqlen_k seqlen_knew batch max_seqlen_q max_seqlen_k hdim_q hdim_v nhead_q nhead_k".split()


def _args_members() -> tuple[tuple[str, str, str], ...]:
    out: list[tuple[str, str, str]] = [(f"{n}_ptr", f"d->{n}_ptr", REQUIRED) for n in _POINTERS]
    # CK spells these without the _ptr suffix
    out += [
        ("cache_batch_idx", "d->cache_batch_idx_ptr", REQUIRED),
        ("kv_indptr", "d->kv_indptr_ptr", REQUIRED),
        ("kv_page_indices", "d->kv_page_indices_ptr", REQUIRED),
        ("kv_last_page_lens", "d->kv_last_page_lens_ptr", REQUIRED),
    ]
    out += [(n, f"d->{n}", OPTIONAL) for n in _DIMS]
    from codegen.abi import FIELDS

    strides = [f.name for f in FIELDS if "stride_" in f.name]
    out += [(n, f"d->{n}", REQUIRED) for n in strides]
    scalars = (
        "num_splits page_block_size num_total_pages rotary_dim window_size_left window_size_right sink_size "
        "min_seqlen_q mask_type scale_p scale_o logits_soft_cap p_drop p_undrop s_randval is_gappy has_mask"
    ).split()
    out += [(n, f"d->{n}", PAGES_OF_ONE if n == "page_block_size" else REQUIRED) for n in scalars]
    return tuple(out)


#: (CK args member, descriptor expression, policy) -- the union over every api's args struct
ARGS_MEMBERS: tuple[tuple[str, str, str], ...] = _args_members()

#: (CK traits member, descriptor expression, policy); ``data_type`` and the scale mode are set by name
TRAITS_MEMBERS: tuple[tuple[str, str, str], ...] = (
    ("hdim_q", "d->hdim_q", REQUIRED),
    ("hdim_v", "d->hdim_v", REQUIRED),
    ("is_group_mode", "d->is_group_mode", REQUIRED),
    ("is_v_rowmajor", "d->is_v_rowmajor", ROW_MAJOR),
    ("has_logits_soft_cap", "d->has_logits_soft_cap", REQUIRED),
    ("mask_type", "d->mask_type", REQUIRED),
    ("bias_type", "d->bias_type", REQUIRED),
    ("has_lse", "d->has_lse", REQUIRED),
    ("has_dropout", "d->has_dropout", REQUIRED),
    ("skip_min_seqlen_q", "d->skip_min_seqlen_q", REQUIRED),
    ("has_sink", "d->has_sink", REQUIRED),
    ("use_pagedkv", "d->use_pagedkv", OPTIONAL),  # pagedkv_prefill's traits default it to true
    ("rope_type", "d->rope_type", REQUIRED),
    ("has_dbias", "d->has_dbias", REQUIRED),
    ("is_store_randval", "d->s_randval", OPTIONAL),  # bwd's traits; fwd apis take s_randval in their args
    ("is_deterministic", "d->is_deterministic", REQUIRED),
    *((n, f"d->{n}", OPTIONAL) for n in _DIMS),  # newer CK copies the sizes into fmha_bwd_traits
)

#: members set by name in fill_traits / fill_args (the version differences of the module doc), not from the tables
BY_NAME_MEMBERS: dict[str, tuple[str, ...]] = {
    "traits": ("data_type", "qscale_type", "do_fp8_static_quant"),
    "args": ("scale_s", "scale", "drop_seed_offset", "drop_seed", "drop_offset"),
}

#: (ck_tile::stream_config member, descriptor expression, policy)
STREAM_MEMBERS: tuple[tuple[str, str, str], ...] = (
    ("stream_id_", "static_cast<hipStream_t>(d->stream)", REQUIRED),
    ("time_kernel_", "d->time_kernel", REQUIRED),
    ("cold_niters_", "d->cold_niters", REQUIRED),
    ("nrepeat_", "d->nrepeat", REQUIRED),
    ("log_level_", "int64_t{0}", OPTIONAL),
)

_PRELUDE = r"""
namespace ckfmha_detail {

constexpr const char* kDtypeNames[CKFMHA_NUM_DTYPES] = @DTYPES@;

// The outcome of one call: a status code and a message in the caller's buffer (no state beyond the call).
struct Status
{
    char* buf;
    uint64_t size;

    __attribute__((format(printf, 3, 4))) int32_t fail(int32_t code, const char* fmt, ...)
    {
        if(buf != nullptr && size > 0)
        {
            va_list ap;
            va_start(ap, fmt);
            std::vsnprintf(buf, static_cast<size_t>(size), fmt, ap);
            va_end(ap);
        }
        return code;
    }
};

template <class>
inline constexpr bool dependent_false = false;

template <class T>
std::string type_name()
{
    if constexpr(std::is_same_v<T, bool>)
        return "bool";
    else if constexpr(std::is_integral_v<T>)
        return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(sizeof(T) * 8) + "_t";
    else if constexpr(std::is_enum_v<T>)
        return "an enum over " + type_name<std::underlying_type_t<T>>();
    else
        return "a non-integer type";
}

template <class V>
bool is_neutral(const V& v)
{
    if constexpr(std::is_pointer_v<V>)
        return v == nullptr;
    else
        return v == V{};
}

template <class V>
long long as_ll(const V& v)
{
    if constexpr(std::is_pointer_v<V>)
        return static_cast<long long>(reinterpret_cast<uintptr_t>(v));
    else
        return static_cast<long long>(v);
}

// dst = v, checked: an integer must fit dst's type (enums: their underlying type); a pointer goes to a pointer.
template <class T, class V>
int32_t put(T& dst, const V& v, const char* what, Status& st)
{
    if constexpr(std::is_pointer_v<T> || std::is_pointer_v<V>)
    {
        static_assert(std::is_pointer_v<T> && std::is_pointer_v<V>, "a pointer field meets a non-pointer");
        dst = static_cast<T>(v);
    }
    else if constexpr(std::is_floating_point_v<T> || std::is_floating_point_v<V>)
    {
        dst = static_cast<T>(v);
    }
    else if constexpr(std::is_same_v<V, bool>)
    {
        dst = static_cast<T>(v);
    }
    else if constexpr(std::is_same_v<T, bool>)
    {
        if(v != 0 && v != 1)
            return st.fail(CKFMHA_BAD_VALUE, "%s = %lld: a bool member takes 0 or 1", what, as_ll(v));
        dst = (v != 0);
    }
    else if constexpr(std::is_enum_v<T>)
    {
        using U = std::underlying_type_t<T>;
        if(!std::in_range<U>(v))
            return st.fail(CKFMHA_OUT_OF_RANGE, "%s = %lld does not fit %s", what, as_ll(v), type_name<T>().c_str());
        dst = static_cast<T>(static_cast<U>(v));
    }
    else if constexpr(std::is_integral_v<T>)
    {
        if(!std::in_range<T>(v))
            return st.fail(CKFMHA_OUT_OF_RANGE,
                           "%s = %lld does not fit this CK's %s (the problem is too large for it)",
                           what, as_ll(v), type_name<T>().c_str());
        dst = static_cast<T>(v);
    }
    else
    {
        static_assert(dependent_false<T>, "unhandled member type");
    }
    return CKFMHA_OK;
}

} // namespace ckfmha_detail

// Set obj.member from value when this CK's struct has the member; when it lacks it, a non-neutral value is
// UNSUPPORTED_FIELD (REQUIRED) or ignored (OPTIONAL). Only usable inside templates (requires-expressions on a
// dependent object).
#define CKFMHA_REQUIRED(obj, member, value, sname)                                                      \
    do                                                                                                  \
    {                                                                                                   \
        if constexpr(requires { (obj).member; })                                                        \
        {                                                                                               \
            if(int32_t c_ = ::ckfmha_detail::put((obj).member, (value), #member, st)) return c_;               \
        }                                                                                               \
        else if(!::ckfmha_detail::is_neutral(value))                                                    \
            return st.fail(CKFMHA_UNSUPPORTED_FIELD,                                                    \
                           "this CK's %s has no member %s, but the descriptor sets it (%s = %lld)",      \
                           sname, #member, #value, ::ckfmha_detail::as_ll(value));                      \
    } while(0)

#define CKFMHA_OPTIONAL(obj, member, value, sname)                                                      \
    do                                                                                                  \
    {                                                                                                   \
        if constexpr(requires { (obj).member; })                                                        \
        {                                                                                               \
            if(int32_t c_ = ::ckfmha_detail::put((obj).member, (value), #member, st)) return c_;               \
        }                                                                                               \
    } while(0)
"""

_CHECK_HEADER = r"""
namespace ckfmha_detail {

int32_t check_header(const ckfmha_desc* d, Status& st)
{
    if(d == nullptr)
        return st.fail(CKFMHA_BAD_DESCRIPTOR, "descriptor: null pointer");
    if(d->abi_version != CKFMHA_ABI_VERSION)
        return st.fail(CKFMHA_BAD_DESCRIPTOR, "descriptor: abi_version %u, this library speaks %d",
                       d->abi_version, CKFMHA_ABI_VERSION);
    if(d->struct_size != sizeof(ckfmha_desc))
        return st.fail(CKFMHA_BAD_DESCRIPTOR, "descriptor: struct_size %u, this library's ckfmha_desc has %zu bytes",
                       d->struct_size, sizeof(ckfmha_desc));
    if(d->dtype < 0 || d->dtype >= CKFMHA_NUM_DTYPES)
        return st.fail(CKFMHA_BAD_VALUE, "descriptor: dtype code %lld, known codes 0..%d",
                       static_cast<long long>(d->dtype), CKFMHA_NUM_DTYPES - 1);
    return CKFMHA_OK;
}

template <class T>
int32_t fill_traits(T& t, const ckfmha_desc* d, const char* sname, Status& st)
{
    if constexpr(requires { t.data_type = std::string{}; })
        t.data_type = kDtypeNames[d->dtype];
    else
        return st.fail(CKFMHA_UNSUPPORTED_FIELD, "this CK's %s has no std::string data_type", sname);
@TRAITS@
    if constexpr(requires { t.qscale_type; })
    {
        if(int32_t c_ = put(t.qscale_type, d->qscale_type, "qscale_type", st)) return c_;
    }
    else if constexpr(requires { t.do_fp8_static_quant; })
    {
        if(d->qscale_type != 0 && d->qscale_type != 1)
            return st.fail(CKFMHA_UNSUPPORTED_FIELD,
                           "this CK's %s has only do_fp8_static_quant (pertensor), not qscale_type %lld",
                           sname, static_cast<long long>(d->qscale_type));
        t.do_fp8_static_quant = (d->qscale_type == 1);
    }
    else if(d->qscale_type != 0)
        return st.fail(CKFMHA_UNSUPPORTED_FIELD, "this CK's %s has no scale mode, but qscale_type is %lld",
                       sname, static_cast<long long>(d->qscale_type));
    return CKFMHA_OK;
}

template <class A>
int32_t fill_args(A& a, const ckfmha_desc* d, const char* sname, Status& st)
{
@ARGS@
    if constexpr(requires { a.scale_s; })
    {
        if(int32_t c_ = put(a.scale_s, d->scale_s, "scale_s", st)) return c_;
    }
    else if constexpr(requires { a.scale; }) // fmha_bwd_args (fmha_bwd.hpp) spells it scale
    {
        if(int32_t c_ = put(a.scale, d->scale_s, "scale", st)) return c_;
    }
    else if(d->scale_s != 0.0f) // fmha_fwd_appendkv_args: no softmax
        return st.fail(CKFMHA_UNSUPPORTED_FIELD, "this CK's %s has neither scale_s nor scale, but the descriptor "
                       "sets scale_s = %g", sname, static_cast<double>(d->scale_s));
    if constexpr(requires { a.drop_seed_offset = std::make_pair(uint64_t{}, uint64_t{}); })
        a.drop_seed_offset = std::make_pair(d->drop_seed, d->drop_offset);
    else
    {
        CKFMHA_REQUIRED(a, drop_seed, d->drop_seed, sname);
        CKFMHA_REQUIRED(a, drop_offset, d->drop_offset, sname);
    }
    return CKFMHA_OK;
}

template <class S>
int32_t fill_stream(S& s, const ckfmha_desc* d, Status& st)
{
@STREAM@
    return CKFMHA_OK;
}

int32_t finish(float ms, const char* api, const ckfmha_desc* d, float* elapsed_ms, Status& st)
{
    if(ms < 0)
        return st.fail(CKFMHA_NO_KERNEL,
                       "%s returned %g: no instance in this library (%s) serves these arguments "
                       "(CK's dispatch checks dtype, head dims, traits and padding at run time)",
                       api, static_cast<double>(ms), kKernelName);
    hipError_t e = hipGetLastError();
    if(e != hipSuccess)
        return st.fail(CKFMHA_HIP_ERROR, "%s: kernel launch failed: %s (%s)", api, hipGetErrorName(e),
                       hipGetErrorString(e));
    e = hipStreamSynchronize(static_cast<hipStream_t>(d->stream));
    if(e != hipSuccess)
        return st.fail(CKFMHA_HIP_ERROR, "%s: hipStreamSynchronize failed: %s (%s)", api, hipGetErrorName(e),
                       hipGetErrorString(e));
    if(elapsed_ms != nullptr)
        *elapsed_ms = ms;
    return CKFMHA_OK;
}

} // namespace ckfmha_detail
"""

_ENTRY = r"""
extern "C" int32_t ckfmha_abi_version(void) { return CKFMHA_ABI_VERSION; }
extern "C" uint64_t ckfmha_desc_size(void) { return sizeof(ckfmha_desc); }
extern "C" const char* ckfmha_kernel_name(void) { return ckfmha_detail::kKernelName; }

extern "C" int32_t ckfmha_run_@API@(const ckfmha_desc* d, float* elapsed_ms, char* message, uint64_t message_size)
{
    using namespace ckfmha_detail;
    Status st{message, message_size};
    if(message != nullptr && message_size > 0)
        message[0] = '\0';
    try
    {
        if(int32_t c = check_header(d, st)) return c;
        @TRAITS_T@ t{};
        @ARGS_T@ a{};
        ck_tile::stream_config s{};
        if(int32_t c = fill_traits(t, d, "@TRAITS_T@", st)) return c;
        if(int32_t c = fill_args(a, d, "@ARGS_T@", st)) return c;
        if(int32_t c = fill_stream(s, d, st)) return c;
        const float ms = @CALL@(t, a, s);
        return finish(ms, "@CALL@", d, elapsed_ms, st);
    }
    catch(const std::exception& e)
    {
        return st.fail(CKFMHA_EXCEPTION, "@CALL@ threw: %s", e.what());
    }
    catch(...)
    {
        return st.fail(CKFMHA_EXCEPTION, "@CALL@ threw a non-standard exception");
    }
}
"""


def _member_lines(obj: str, members, sname: str) -> str:
    lines = []
    for member, expr, policy in members:
        macro = "CKFMHA_REQUIRED" if policy == REQUIRED else "CKFMHA_OPTIONAL"
        if policy == ROW_MAJOR:
            lines.append(
                "    if constexpr(requires { t.is_v_rowmajor; })\n"
                '    { if(int32_t c_ = put(t.is_v_rowmajor, d->is_v_rowmajor, "is_v_rowmajor", st)) return c_; }\n'
                "    else if(!d->is_v_rowmajor)\n"
                "        return st.fail(CKFMHA_UNSUPPORTED_FIELD, \"this CK's %s has no is_v_rowmajor, but the "
                'descriptor asks for column-major V", sname);'
            )
            continue
        if policy == PAGES_OF_ONE:
            lines.append(
                f"    if constexpr(requires {{ {obj}.{member}; }})\n"
                f'    {{ if(int32_t c_ = put({obj}.{member}, {expr}, "{member}", st)) return c_; }}\n'
                f"    else if({expr} > 1)\n"
                f"        return st.fail(CKFMHA_UNSUPPORTED_FIELD, \"this CK's %s has no member {member} (pages of one "
                f'token only), but the descriptor sets {member} = %lld", {sname}, static_cast<long long>({expr}));'
            )
            continue
        lines.append(f"    {macro}({obj}, {member}, {expr}, {sname});")
    return "\n".join(lines)


def wrapper_source(api: str, kernel_name: str) -> str:
    """The wrapper's C++ source for one library: the kernel's api's entry point (see the module doc)."""
    if api not in API_CALLS:
        raise ValueError(f"api: {api!r} has no entry point; known: {', '.join(API_CALLS)}")
    header, traits_t, args_t, call = API_CALLS[api]
    head = "\n".join(
        [
            f"// {WRAPPER_NAME}: ckfmha's C ABI entry point for the CK kernel {kernel_name} (api {api}).",
            "// Generated by ckfmha codegen/wrapper.py -- do not edit.",
            f'#include "{HEADER_NAME}"',
            f'#include "{header}"',
            "",
            "#include <hip/hip_runtime.h>",
            "",
            "#include <cstdarg>",
            "#include <cstdint>",
            "#include <cstdio>",
            "#include <exception>",
            "#include <string>",
            "#include <type_traits>",
            "#include <utility>",
            "",
            "namespace ckfmha_detail {",
            f'constexpr const char* kKernelName = "{kernel_name}";',
            "} // namespace ckfmha_detail",
        ]
    )
    body = (
        _CHECK_HEADER.replace("@TRAITS@", _member_lines("t", TRAITS_MEMBERS, "sname"))
        .replace("@ARGS@", _member_lines("a", ARGS_MEMBERS, "sname"))
        .replace("@STREAM@", _member_lines("s", STREAM_MEMBERS, '"ck_tile::stream_config"'))
    )
    entry = (
        _ENTRY.replace("@API@", api).replace("@TRAITS_T@", traits_t).replace("@ARGS_T@", args_t).replace("@CALL@", call)
    )
    return head + _PRELUDE.replace("@DTYPES@", c_dtype_table()) + body + entry


_STRUCT = re.compile(r"\bstruct\s+(\w+)\s*(?::\s*(?:public\s+)?(\w+)\s*)?\{(.*?)\n[ \t]*\};", re.S)
_ALIAS = re.compile(r"\busing\s+(\w+)\s*=\s*(\w+)\s*;")


def struct_members(header_text: str) -> dict[str, list[str]]:
    """Data members of every ``struct NAME [: public BASE] { ... };`` (the base's first) and ``using A = B;``
    alias in a CK api header, by struct name; comments, ``#if 0`` blocks, member functions and static members are
    skipped (no other preprocessor condition is evaluated: both branches count)."""
    text = _drop_if0(re.sub(r"//[^\n]*|/\*.*?\*/", "", header_text, flags=re.S))
    out: dict[str, list[str]] = {}
    for m in _STRUCT.finditer(text):
        name, base, body = m.groups()
        body = re.sub(r"^[ \t]*#[^\n]*", "", body, flags=re.M)  # the directives left (both branches count)
        while re.search(r"\{[^{}]*\}", body):  # member function bodies and brace initializers
            body = re.sub(r"\{[^{}]*\}", "", body)
        members = list(out.get(base, [])) if base else []
        for stmt in body.split(";"):
            if not stmt.strip() or "(" in stmt.split("=", 1)[0] or stmt.strip().startswith(("static ", "using ")):
                continue
            members += [re.findall(r"\w+", d.split("=", 1)[0])[-1] for d in _declarators(stmt)]
        out[name] = members
    for alias, target in _ALIAS.findall(text):
        if target in out:
            out[alias] = out[target]
    return out


def _drop_if0(text: str) -> str:
    """``text`` without the lines of ``#if 0`` blocks (up to their ``#else`` / ``#endif``, nesting counted)."""
    out, depth, dead = [], 0, 0  # depth: open #if's; dead: the depth at which an #if 0 began (0: live)
    for line in text.splitlines():
        directive = line.strip()
        if directive.startswith("#if"):
            depth += 1
            if not dead and re.fullmatch(r"#if\s+0", directive):
                dead = depth
                continue
        elif directive.startswith("#endif"):
            depth -= 1
            if dead and depth < dead:
                dead = 0
                continue
        elif directive.startswith(("#else", "#elif")) and dead == depth:
            dead = 0
            continue
        if not dead:
            out.append(line)
    return "\n".join(out)


def _declarators(stmt: str) -> list[str]:
    """``T a = 1, b`` -> ``["T a = 1", " b"]``: split at the commas outside template brackets and braces."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(stmt):
        depth += (ch in "<({") - (ch in ">)}")
        if ch == "," and depth == 0:
            parts.append(stmt[start:i])
            start = i + 1
    parts.append(stmt[start:])
    return [p for p in parts if p.strip()]


def unset_members(api: str, header_text: str) -> dict[str, list[str]]:
    """The members of ``api``'s traits and args structs in ``header_text`` that the wrapper does not set (see the
    module doc); a struct the header does not define is a ValueError naming it."""
    if api not in API_CALLS:
        raise ValueError(f"api: {api!r} has no entry point; known: {', '.join(API_CALLS)}")
    _, traits_t, args_t, _ = API_CALLS[api]
    structs = struct_members(header_text)
    known = {
        traits_t: {m for m, _, _ in TRAITS_MEMBERS} | set(BY_NAME_MEMBERS["traits"]),
        args_t: {m for m, _, _ in ARGS_MEMBERS} | set(BY_NAME_MEMBERS["args"]),
    }
    out = {}
    for struct, setters in known.items():
        if struct not in structs:
            raise ValueError(f"{API_CALLS[api][0]}: defines no struct {struct} (api {api}); has this CK renamed it?")
        out[struct] = [m for m in structs[struct] if m not in setters]
    return out
