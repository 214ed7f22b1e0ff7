"""The checkout's kernel space (ckfmha.cktree): its generator's lists, cached by a hash of its codegen sources,
parsed into KernelConfigs, selected like the enumeration; `ckfmha list/count --ck-root`.

Against a fake checkout (a generator script, offline) and against the real CK tree of the amd-aiter wheel: there
`ckfmha list --ck-root ... --format ck-names` must print exactly the generator's lists for every api on gfx942
and gfx950."""

from __future__ import annotations

import pytest

from ckfmha.cktree import (
    CKTreeError,
    checkout_hash,
    checkout_kernels,
    checkout_names,
    codegen_hash,
    select_checkout_kernels,
)
from ckfmha.kernel import Family
from ckfmha.selection import EmptySelectionError, KernelQuery
from tests.ck_tree import ck_tree, generator_names  # noqa: F401 - ck_tree is a fixture
from tests.hip_fakes import FWD_KERNEL, FWD_KERNEL_NLSE, generator_runs, make_fake_checkout

APIS = ("fwd", "fwd_splitkv", "fwd_appendkv", "pagedkv_prefill", "batch_prefill", "bwd")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CK_ROOT", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def fake(tmp_path, cache):
    return make_fake_checkout(tmp_path / "ck")


def test_names_are_listed_once_and_cached_by_the_codegen_hash(fake):
    assert checkout_names(fake, "fwd", "gfx942") == [f"{FWD_KERNEL}.cpp", f"{FWD_KERNEL_NLSE}.cpp"]
    assert checkout_names(fake, "fwd", "gfx942") == [f"{FWD_KERNEL}.cpp", f"{FWD_KERNEL_NLSE}.cpp"]
    runs = [r for r in generator_runs(fake) if "-l" in r.split()]
    assert len(runs) == 1 and runs[0].startswith("-d fwd --targets gfx942 -r 0 -m simplified -l ")
    h0 = codegen_hash(fake)
    (fake / "example/ck_tile/01_fmha/codegen/ops/fmha_fwd.py").write_text("# edited op\n")
    assert codegen_hash(fake) != h0
    checkout_names(fake, "fwd", "gfx942")  # an edited generator lists afresh
    assert len([r for r in generator_runs(fake) if "-l" in r.split()]) == 2
    checkout_names(fake, "fwd", "gfx942", 4)  # so does another receipt
    assert len([r for r in generator_runs(fake) if "-l" in r.split()]) == 3


def test_kernels_parse_into_configs_and_a_query_selects_them(fake):
    ks = checkout_kernels(fake, "gfx942", ["fwd"])
    assert [k.name for k in ks] == [f"{FWD_KERNEL}.cpp", f"{FWD_KERNEL_NLSE}.cpp"]
    assert ks[0].stem == FWD_KERNEL and ks[0].config.lse and not ks[1].config.lse
    assert ks[0].scheme.value == "ck-2025-11"
    q = KernelQuery.build("gfx942", families=["fwd"], filter_expr="c.lse == True")
    assert [k.name for k in select_checkout_kernels(fake, q)] == [f"{FWD_KERNEL}.cpp"]
    q = KernelQuery.build("gfx942", families=["bwd"])
    assert select_checkout_kernels(fake, q, allow_empty=True) == []
    with pytest.raises(EmptySelectionError, match=r"no kernel of the CK checkout .* families bwd_dot_do_o"):
        select_checkout_kernels(fake, q)
    q = KernelQuery.build("gfx942", families=["fwd"], filter_expr="c.hdim_q == 7")
    with pytest.raises(EmptySelectionError, match=r"lists 2 kernel\(s\) for these apis, 2 of the selected families"):
        select_checkout_kernels(fake, q)


def test_unusable_checkouts_and_names_are_errors_naming_them(fake, tmp_path):
    with pytest.raises(CKTreeError, match=r"arch: 'sm90' is not a CK arch"):
        checkout_names(fake, "fwd", "sm90")
    (fake / "extra_names").write_text("fmha_fwd_d64_what_is_this_gfx9\n")
    with pytest.raises(CKTreeError, match=r"lists 'fmha_fwd_d64_what_is_this_gfx9.cpp' .* which no naming scheme"):
        checkout_kernels(fake, "gfx942", ["fwd"], receipt=1)
    (fake / "extra_names").write_text(FWD_KERNEL + "\n")
    with pytest.raises(CKTreeError, match=r"which parse to one kernel config"):
        checkout_kernels(fake, "gfx942", ["fwd"], receipt=2)
    (fake / "crash").write_text("boom")
    with pytest.raises(CKTreeError, match=r"generator crashed \(exit 1\) for api fwd, arch gfx942: .*boom"):
        checkout_names(fake, "fwd", "gfx942", receipt=3)
    with pytest.raises(CKTreeError, match=r"has no example/ck_tile/01_fmha/generate.py"):
        checkout_names(tmp_path, "fwd", "gfx942")


def test_a_generator_without_targets_is_named(cache, tmp_path):
    root = make_fake_checkout(tmp_path / "old")
    gen = root / "example/ck_tile/01_fmha/generate.py"
    gen.write_text(gen.read_text().replace('"--targets"', '"--gpu"'))
    with pytest.raises(CKTreeError, match=r"this CK predates --targets"):
        checkout_names(root, "fwd", "gfx942")


def test_checkout_hash_covers_the_headers(fake, tmp_path):
    other = make_fake_checkout(tmp_path / "ck2")
    assert checkout_hash(other) == checkout_hash(fake) and len(checkout_hash(fake)) == 64
    third = make_fake_checkout(tmp_path / "ck3")
    (third / "include/ck_tile/core.hpp").write_text("// edited\n")
    assert checkout_hash(third) != checkout_hash(fake)


def test_cli_list_and_count_use_the_checkout(fake, capsys, monkeypatch):
    from ckfmha.cli import main

    assert main(["list", "--ck-root", str(fake), "--arch", "gfx942", "--api", "fwd", "--format", "ck-names"]) == 0
    assert capsys.readouterr().out.split() == sorted([f"{FWD_KERNEL}.cpp", f"{FWD_KERNEL_NLSE}.cpp"])
    assert main(["count", "--ck-root", str(fake), "--arch", "gfx942", "--api", "fwd", "--format", "json"]) == 0
    assert '"total": 2' in capsys.readouterr().out
    monkeypatch.setenv("CK_ROOT", str(fake))  # the environment names the checkout too
    assert main(["list", "--arch", "gfx942", "--api", "fwd", "--filter", "c.lse == True"]) == 0
    ids = capsys.readouterr().out.split()
    assert len(ids) == 1 and ids[0].endswith(".lse")
    assert main(["list", "--ck-root", str(fake / "nope"), "--arch", "gfx942"]) == 2
    assert "--ck-root: " in capsys.readouterr().err
    assert main(["list", "--ck-root", str(fake), "--arch", "sm90", "--api", "fwd"]) == 2
    assert "'sm90' is not a CK arch" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("api", APIS)
def test_list_ck_root_prints_exactly_the_generators_names(ck_tree, api, arch, capsys):  # noqa: F811
    from ckfmha.cli import main

    assert main(["list", "--ck-root", str(ck_tree), "--arch", arch, "--api", api, "--format", "ck-names"]) == 0
    printed = capsys.readouterr().out.split()
    expected = generator_names(ck_tree, api, arch)
    assert len(expected) > 0
    assert printed == sorted(expected)


def test_checkout_configs_carry_the_families_of_their_api(ck_tree):  # noqa: F811
    ks = checkout_kernels(ck_tree, "gfx942", ["fwd_splitkv", "bwd"])
    fams = {k.config.signature.family for k in ks}
    assert fams == {
        Family.FWD_SPLITKV,
        Family.FWD_SPLITKV_COMBINE,
        Family.BWD_DOT_DO_O,
        Family.BWD_DQ_DK_DV,
        Family.BWD_CONVERT_DQ,
    }


def test_a_registry_over_the_checkouts_kernel_space(fake):
    from ckfmha.registry import Registry

    reg = Registry.from_checkout(fake, "gfx942", families=[Family.FWD], backend="hip")
    assert list(reg) == [k.config for k in checkout_kernels(fake, "gfx942", ["fwd"])]
    assert reg.backend == "hip" and reg.source == f"CK checkout {fake} receipt=0 mask_mode=simplified"
    with pytest.raises(EmptySelectionError, match=r"no kernel of the CK checkout .* families bwd_dot_do_o"):
        Registry.from_checkout(fake, "gfx942", families=["bwd"])
    with pytest.raises(CKTreeError, match=r"has no example/ck_tile/01_fmha/generate.py"):
        Registry.from_checkout(fake / "include", "gfx942")


def test_cli_explain_and_run_plan_over_the_checkouts_kernel_space(fake, capsys, monkeypatch):
    """issue 28: `--ck-root` (and $CK_ROOT) on run / explain too: the plan's kernels are the checkout's."""
    from ckfmha.cli import main

    line = ["-prec=fp16", "-b=1", "-h=2", "-s=64", "-d=64"]
    assert main(["explain", *line, "--ck-root", str(fake)]) == 0
    out = capsys.readouterr().out
    assert f"kernel space: the CK checkout {fake}" in out
    assert "stage fwd: 2 candidate(s), 1 can serve it" in out and f"        CK {FWD_KERNEL_NLSE}.cpp\n" in out
    monkeypatch.setenv("CK_ROOT", str(fake))
    assert main(["run", *line]) == 0
    out = capsys.readouterr().out
    assert f"kernel space: the CK checkout {fake}" in out and "verdict: PASS" in out
