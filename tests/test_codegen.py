"""codegen/: one kernel's library sources from a CK checkout (the checkout's own instance and api file, ckfmha's
wrapper and header) and the exact compile and link commands; `ckfmha codegen`.

Against the CK tree of the amd-aiter wheel (tests/ck_tree.py): one kernel of every api emits, with the files and
commands checked; the stage-only kernels, unlisted and unparseable names are errors naming the kernel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ckfmha.naming import parse_ck_name
from codegen.emit import CodegenError, emit_library, generator_filter
from codegen.flags import arch_defines, compile_flags
from codegen.wrapper import API_CALLS, ARGS_MEMBERS, TRAITS_MEMBERS, wrapper_source
from tests.ck_tree import ck_tree, generator_names  # noqa: F401 - ck_tree is a fixture

APIS = ("fwd", "fwd_splitkv", "fwd_appendkv", "pagedkv_prefill", "batch_prefill", "bwd")
STAGE_ONLY = ("_combine_", "_dot_do_o_", "_convert_dq_")


def one_kernel(root: Path, api: str, arch: str = "gfx942") -> str:
    """A kernel of ``api`` the tree lists (the middle one of its main kernels), without ``.cpp``."""
    names = [n for n in generator_names(root, api, arch) if not any(t in n for t in STAGE_ONLY)]
    return names[len(names) // 2][:-4]


@pytest.mark.parametrize("api", APIS)
def test_codegen_emits_one_kernels_library(ck_tree, api, tmp_path):  # noqa: F811
    kernel = one_kernel(ck_tree, api)
    lib = emit_library(ck_tree, "gfx942", kernel, tmp_path / "out")
    assert lib.api == api and lib.kernel == kernel
    assert lib.instances[0].name == f"{kernel}.cpp" and lib.instances[0].is_file()
    assert lib.api_source.name.endswith("_api.cpp") and lib.api_source.is_file()
    companions = [p.name for p in lib.instances[1:]]
    if api == "bwd":  # the dot_do_o and convert_dq kernels CK's api pairs with this dq_dk_dv kernel
        assert companions and all(("_dot_do_o_" in n or "_convert_dq_" in n) for n in companions)
    elif api == "fwd_splitkv":  # the combine kernels of the split kernel's hdim, dtype and mode
        assert companions and all("_combine_" in n for n in companions)
    else:
        assert companions == []
    text = lib.wrapper.read_text()
    header, traits_t, args_t, call = API_CALLS[api]
    assert f"ckfmha_run_{api}(" in text and f'#include "{header}"' in text and f"{call}(t, a, s)" in text
    assert f'kKernelName = "{kernel}"' in text
    assert "typedef struct ckfmha_desc" in lib.header.read_text()
    commands = json.loads((lib.out_dir / "compile_commands.json").read_text())
    assert [c["ckfmha_step"] for c in commands] == ["compile"] * len(lib.sources) + ["link"]
    assert [Path(c["file"]) for c in commands[:-1]] == list(lib.sources)
    for c in commands[:-1]:
        args = c["arguments"]
        assert args[1:3] == ["-x", "hip"] and "--offload-arch=gfx942" in args and "-std=c++20" in args
        root = ck_tree.resolve()  # the checkout as resolved (a cache reached through a symlink too)
        assert f"-I{root / 'include'}" in args and f"-I{root / 'example/ck_tile/01_fmha'}" in args
        assert "-DCK_USE_FNUZ_FP8" in args and args[-4:] == ["-c", c["file"], "-o", c["output"]]
    link = commands[-1]["arguments"]
    assert "-shared" in link and link[-2:] == ["-o", str(lib.library)]
    assert [a for a in link if a.endswith(".o")] == [c["output"] for c in commands[:-1]]


def test_codegen_cli_writes_the_files_and_names_the_compiler(ck_tree, tmp_path, capsys, monkeypatch):  # noqa: F811
    from ckfmha.cli import main

    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    kernel = one_kernel(ck_tree, "fwd")
    rc = main(["codegen", "--ck-root", str(ck_tree), "--arch", "gfx942", "--kernel", kernel, "-o", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"wrote {tmp_path / 'o' / (kernel + '.cpp')}" in out and "compile_commands.json" in out
    assert f"compiler: {tmp_path / 'no-rocm' / 'bin' / 'hipcc'} (not found on this machine" in out


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        ("fmha_fwd_d32_nope", r"is not a CK instance name ckfmha can parse"),
        ("fmha_bwd_dot_do_o_d32_fp16_b64_batch_o2_npad_gfx9", r"is a bwd_dot_do_o kernel; .* dq_dk_dv"),
        ("fmha_fwd_splitkv_combine_d32_fp16_batch_b32_unused_psdv_lse_nsquant_gfx9", r"is a split-KV combine kernel"),
    ],
)
def test_codegen_refuses_what_it_cannot_build_alone(ck_tree, tmp_path, kernel, message):  # noqa: F811
    with pytest.raises(CodegenError, match=message):
        emit_library(ck_tree, "gfx942", kernel, tmp_path)


def test_codegen_refuses_a_kernel_the_checkout_does_not_list(ck_tree, tmp_path, capsys):  # noqa: F811
    from ckfmha.cli import main

    gfx950_only = next(n for n in generator_names(ck_tree, "fwd", "gfx950") if n.endswith("_gfx950.cpp"))[:-4]
    with pytest.raises(CodegenError, match=r"does not list .* for arch gfx942, receipt 0, mask mode simplified"):
        emit_library(ck_tree, "gfx942", gfx950_only, tmp_path)
    assert main(["codegen", "--ck-root", str(ck_tree), "--arch", "gfx942", "--kernel", gfx950_only, "-o", "x"]) == 2
    assert "ckfmha codegen: error: --kernel: the checkout's generator" in capsys.readouterr().err


def test_codegen_without_a_checkout_is_a_usage_error(capsys, monkeypatch):
    from ckfmha.cli import main

    monkeypatch.delenv("CK_ROOT", raising=False)
    assert main(["codegen", "--arch", "gfx942", "--kernel", "k", "-o", "x"]) == 2
    assert "--ck-root: not given and $CK_ROOT is unset" in capsys.readouterr().err


def test_generator_filters_follow_each_apis_syntax():
    fwd = "fmha_fwd_d64_fp16_batch_b128x64x32x64x32x64_r4x1x1_r4x1x1_w32x32x16_w32x32x16_qr_async_vr_psskddv_nlogits_nbias_nmask_lse_ndropout_nskip_nsquant_ntrload_gfx9"
    assert generator_filter("fwd", fwd, parse_ck_name(fwd).config) == fwd[: -len("_gfx9")]
    split = "fmha_fwd_splitkv_d32_bf16_batch_b32x64x16x32x32x32_r2x1x1_r2x1x1_w16x16x16_w16x16x16_qr_vr_psk_nlogits_bias_nmask_lse_nsquant_pagedkv_gfx9"
    assert generator_filter("fwd_splitkv", split, parse_ck_name(split).config) == (
        "fmha_fwd_splitkv_combine_d32_bf16_batch_*@" + split[: -len("_gfx9")]
    )
    bwd = "fmha_bwd_d32_bf16_batch_b32x128x32x32x32x32x64x32x32_r1x4x1_r4x1x1_r2x2x1_w16x16x32_w16x16x16_o1_maxq0_npad_nbias_ndbias_nmask_ndropout_deterministic_ntrload_gfx9"
    assert generator_filter("bwd", bwd, parse_ck_name(bwd).config) == "*@*@" + bwd[: -len("_gfx9")]
    bp = "fmha_batch_prefill_d128_bf16_batch_b64x128x64x128x64x128_r4x1x1_r4x1x1_w16x16x16_w16x16x16_qr_async_vr_psddv_logits_nbias_nmask_lse_dropout_nsquant"
    assert generator_filter("batch_prefill", bp, parse_ck_name(bp).config) == bp  # no arch suffix


def test_flags_follow_cks_cmake_per_arch(tmp_path):
    assert "-DCK_USE_FNUZ_FP8" in arch_defines("gfx942") and "-DCK_TILE_USE_WMMA=0" in arch_defines("gfx942")
    gfx950 = arch_defines("gfx950")
    assert {"-DCK_USE_OCP_FP8", "-DCK_TILE_USE_OCP_FP8", "-DCK_GFX950_SUPPORT"} <= set(gfx950)
    assert "-DCK_USE_FNUZ_FP8" not in gfx950
    assert {"-DCK_USE_WMMA", "-DCK_TILE_USE_WMMA=1", "-DCK_USE_WMMA_FP8"} <= set(arch_defines("gfx1201"))
    bwd = compile_flags("gfx942", "bwd", tmp_path, tmp_path)
    assert "-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=3" in bwd and "-DCK_TILE_FMHA_FWD_FAST_EXP2=1" not in bwd
    fwd = compile_flags("gfx942", "fwd", tmp_path, tmp_path)
    assert "-DCK_TILE_FMHA_FWD_FAST_EXP2=1" in fwd and "-fgpu-flush-denormals-to-zero" in fwd
    assert fwd[fwd.index("-mllvm") + 1] == "--lsr-drop-solution=1"


def test_the_wrapper_sets_every_member_through_detection():
    src = wrapper_source("fwd", "k")
    # every args/traits member goes through a requires-expression, never an assumed layout
    for member, _, policy in ARGS_MEMBERS:
        assert f"(a, {member}, " in src or (policy == "pages-of-one" and f"requires {{ a.{member}; }}" in src)
    for member, _, policy in TRAITS_MEMBERS:
        assert (f"(t, {member}, " in src) or (policy == "row-major" and "requires { t.is_v_rowmajor; }" in src)
    assert "requires { (obj).member; }" in src and "std::in_range<T>(v)" in src
    assert not re.search(r"\bstatic\b", src)  # no globals or function statics: no state between calls
    with pytest.raises(ValueError, match=r"api: 'fwd_pagedkv' has no entry point"):
        wrapper_source("fwd_pagedkv", "k")


@pytest.mark.parametrize("api", APIS)
def test_the_wrapper_sets_every_member_of_the_trees_api_structs(ck_tree, api):  # noqa: F811
    from codegen.wrapper import unset_members

    header = (ck_tree / "example/ck_tile/01_fmha" / API_CALLS[api][0]).read_text()
    _, traits_t, args_t, _ = API_CALLS[api]
    assert unset_members(api, header) == {traits_t: [], args_t: []}


def test_unset_members_catches_a_new_ck_member_and_codegen_warns(ck_tree, tmp_path, capsys):  # noqa: F811
    import shutil

    from ckfmha.cli import main
    from codegen.wrapper import struct_members, unset_members

    header = (ck_tree / "example/ck_tile/01_fmha/fmha_fwd.hpp").read_text()
    assert len(struct_members(header)["fmha_fwd_args"]) > 40
    newer = header.replace(
        "struct fmha_fwd_args\n{", "struct fmha_fwd_args\n{\n    float new_scale = 1; // a new member"
    )
    assert newer != header
    assert unset_members("fwd", newer)["fmha_fwd_args"] == ["new_scale"]
    with pytest.raises(ValueError, match=r"fmha_fwd.hpp: defines no struct fmha_fwd_args \(api fwd\)"):
        unset_members("fwd", header.replace("struct fmha_fwd_args", "struct fmha_fwd_args_v2"))
    # a copy of the tree's FMHA example with the edited header: codegen still emits, and warns
    tree = tmp_path / "ck"
    shutil.copytree(ck_tree / "example/ck_tile/01_fmha", tree / "example/ck_tile/01_fmha")
    (tree / "include" / "ck_tile").mkdir(parents=True)
    (tree / "example/ck_tile/01_fmha/fmha_fwd.hpp").write_text(newer)
    kernel = one_kernel(ck_tree, "fwd")
    assert (
        main(["codegen", "--ck-root", str(tree), "--arch", "gfx942", "--kernel", kernel, "-o", str(tmp_path / "o")])
        == 0
    )
    err = capsys.readouterr().err
    assert (
        "warning: this CK's fmha_fwd_args has members ckfmha's wrapper does not set (they stay zero): new_scale" in err
    )


def test_struct_members_skip_if0_blocks_and_split_declarators():
    from codegen.wrapper import struct_members

    header = """
    struct fmha_x_args
    {
        const void* q_ptr; // a comment; with a semicolon
        ck_tile::index_t a, b = 2;
        std::variant<std::pair<uint64_t, uint64_t>, std::pair<const void*, const void*>> drop_seed_offset;
    #if 0 // not yet
        ck_tile::index_t page_block_size;
    #if X
        int nested;
    #endif
    #else
        int live_else;
    #endif
        static constexpr int kConst = 1;
        float f() const { return 1; }
    };
    struct fmha_y_args : public fmha_x_args
    {
        int extra;
    };
    using fmha_z_args = fmha_y_args;
    """
    members = struct_members(header)
    assert members["fmha_x_args"] == ["q_ptr", "a", "b", "drop_seed_offset", "live_else"]
    assert members["fmha_z_args"] == members["fmha_y_args"] == members["fmha_x_args"] + ["extra"]
