"""``ckfmha parity-enum`` against a FAKE CK checkout built in tmp_path: its generate.py is a TEST STUB that writes
ckfmha's own list (optionally with one name removed / added, or crashing); plus an optional slow test on a real
checkout layout assembled from /tmp/upstream/ck (skipped when those files are absent, as on CI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckfmha.cli import main
from ckfmha.enumeration import ck_instance_names
from tests.ck_tree import assert_parity_enum_skipped_gfx1100

STUB = """\
# TEST STUB standing in for CK's example/ck_tile/01_fmha/generate.py (ckfmha tests only).
import argparse, json, os, sys
ap = argparse.ArgumentParser()
ap.add_argument("-d")
if not os.environ.get("STUB_NO_TARGETS"):
    ap.add_argument("--targets")
ap.add_argument("-r"); ap.add_argument("-m"); ap.add_argument("-l")
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("STUB_CRASH") == a.d:
    raise SystemExit("Traceback: KeyError: %r (stub crash)" % a.d)
if os.environ.get("STUB_UNSUPPORTED") == a.targets:
    raise Exception("Unsupported device target %s" % a.targets)
names = json.load(open(os.path.join(here, "lists.json")))[a.d]
with open(a.l, "w") as f:
    for n in names:
        f.write(os.path.join(os.path.dirname(a.l), n) + "\\n")
    f.write(os.path.join(os.path.dirname(a.l), "fmha_%s_api.cpp" % a.d) + "\\n")
"""
APIS = ("fwd_appendkv", "pagedkv_prefill")


def fake_checkout(root: Path, drop: str | None = None, add: str | None = None) -> Path:
    d = root / "example" / "ck_tile" / "01_fmha"
    d.mkdir(parents=True)
    (d / "generate.py").write_text(STUB)
    lists = {api: list(ck_instance_names(api, "gfx942")) for api in APIS}
    if drop:
        lists["fwd_appendkv"].remove(drop)
    if add:
        lists["pagedkv_prefill"].append(add)
    (d / "lists.json").write_text(json.dumps(lists))
    return root


def cli(root, *extra, capsys=None):
    argv = ["parity-enum", "--ck-root", str(root), "--arch", "gfx942"]
    for a in APIS:
        argv += ["--api", a]
    rc = main(argv + list(extra))
    return rc, capsys.readouterr() if capsys else None


def test_same_lists_exit_0(tmp_path, capsys):
    rc, out = cli(fake_checkout(tmp_path), capsys=capsys)
    assert rc == 0, out.err
    assert "no differences" in out.out and "fwd_appendkv" in out.out and "fwd_pagedkv" in out.out


def test_missing_and_extra_exit_1(tmp_path, capsys):
    drop = ck_instance_names("fwd_appendkv", "gfx942")[3]
    add = "fmha_fwd_pagedkv_d999_fp16_made_up_gfx9.cpp"
    rc, out = cli(fake_checkout(tmp_path, drop=drop, add=add), capsys=capsys)
    assert rc == 1
    assert f"gfx942/fwd_appendkv extra (ckfmha has, CK lacks): 1\n  {drop}" in out.out
    assert f"gfx942/pagedkv_prefill missing (CK lists, ckfmha lacks): 1\n  {add}" in out.out
    rc, out = cli(tmp_path, "--format", "json", capsys=capsys)
    doc = json.loads(out.out)
    assert rc == 1 and not doc["same"]
    fam = {(a["api"]): a["families"] for a in doc["apis"]}
    assert fam["fwd_appendkv"]["fwd_appendkv"]["extra"] == 1
    assert fam["pagedkv_prefill"]["fwd_pagedkv"]["missing"] == 1


def test_unusable_checkout_exit_2(tmp_path, capsys, monkeypatch):
    rc, out = cli(tmp_path / "nope", capsys=capsys)
    assert rc == 2 and "no such directory" in out.err
    rc, out = cli(tmp_path, capsys=capsys)
    assert rc == 2 and "generate.py" in out.err
    root = fake_checkout(tmp_path / "ck")
    monkeypatch.setenv("STUB_CRASH", "pagedkv_prefill")
    rc, out = cli(root, capsys=capsys)
    assert rc == 2 and "crashed" in out.err and "stub crash" in out.err


def test_non_ck_arch_is_rejected_before_the_checkout_is_used(tmp_path, capsys):
    rc = main(["parity-enum", "--ck-root", str(tmp_path / "nope"), "--arch", "sm90"])
    err = capsys.readouterr().err
    assert rc == 2
    assert (
        "--arch: 'sm90' is not a CK arch (CK's generator has no such target); allowed: gfx90a, gfx942, gfx950, "
        "gfx1100, gfx1201, all"
    ) in err
    assert "no such directory" not in err
    rc = main(["parity-enum", "--ck-root", str(tmp_path), "--api", "fwd_decode"])
    assert rc == 2 and "--api: unknown value 'fwd_decode'" in capsys.readouterr().err


def test_generator_without_targets_predates(tmp_path, capsys, monkeypatch):
    root = fake_checkout(tmp_path)
    monkeypatch.setenv("STUB_NO_TARGETS", "1")
    rc, out = cli(root, capsys=capsys)
    assert rc == 2
    assert (
        "cannot use the checkout: this CK predates --targets (generator options: -h, -d, -r, -m, -l, --help)" in out.err
    )
    assert "crashed" not in out.err


def test_arch_all_skips_archs_the_generator_rejects(tmp_path, capsys, monkeypatch):
    root = fake_checkout(tmp_path)
    monkeypatch.setenv("STUB_UNSUPPORTED", "gfx1100")
    rc = main(["parity-enum", "--ck-root", str(root), "--arch", "all", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 1  # the stub lists gfx942's names for every arch: other archs differ
    assert_parity_enum_skipped_gfx1100(out.out)
    rc = main(["parity-enum", "--ck-root", str(root), "--arch", "gfx1100", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 2 and "does not support arch gfx1100" in out.err and "crashed" not in out.err


def _old(names):
    from ckfmha.naming import ck_instance_name, parse_ck_instance_name

    return [ck_instance_name(parse_ck_instance_name(n), "ck-2025-11") for n in names]


def test_older_scheme_names_match_by_kernel():
    from ckfmha.upstream.enum_parity import ApiDiff

    ours = list(ck_instance_names("pagedkv_prefill", "gfx942"))
    from ckfmha.naming import parse_ck_instance_name

    spellable = [n for n in ours if not parse_ck_instance_name(n).sink]
    upstream = _old(spellable[1:])  # CK 2025-11 lacks one kernel ckfmha has
    d = ApiDiff("gfx942", "pagedkv_prefill", upstream, ours)
    assert d.schemes == {"ck-2025-11 only": len(upstream)}
    assert d.renames == {"new token nsink": {"fwd_pagedkv": len(upstream)}}
    assert d.unspellable == {"sink=True": {"fwd_pagedkv": len(ours) - len(spellable)}}
    assert (d.residual_missing, d.residual_extra) == ([], [spellable[0]])
    assert len(d.missing) == len(upstream) and not d.same


def test_convert_dq_tiles_and_unknown_names():
    from ckfmha.upstream.enum_parity import ApiDiff

    ours = [
        "fmha_bwd_convert_dq_d128_bf16_b64_batch_o2_npad_ndeterministic_gfx9.cpp",
        "fmha_bwd_convert_dq_d128_bf16_b64_batch_o2_npad_deterministic_gfx9.cpp",
    ]
    upstream = [
        "fmha_bwd_convert_dq_d128_bf16_b64x0_batch_o2_npad_ndeterministic_gfx9.cpp",
        "fmha_bwd_convert_dq_d128_bf16_b64x128_batch_o2_npad_deterministic_gfx9.cpp",
        "fmha_bwd_convert_dq_d128_bf16_b64x64_batch_o2_npad_deterministic_gfx9.cpp",
        "fmha_bwd_convert_dq_d256_bf16_b64x0_batch_o2_npad_ndeterministic_gfx9.cpp",
        "fmha_bwd_convert_dq_d128_bf16_b64x0x0_batch_o2_npad_ndeterministic_gfx9.cpp",
    ]
    d = ApiDiff("gfx942", "bwd", upstream, ours)
    assert d.renames == {
        "b64x0 -> b64": {"bwd_convert_dq": 1},
        "b64x128 -> b64": {"bwd_convert_dq": 1},
        "b64x64 -> b64": {"bwd_convert_dq": 1},
    }
    assert d.unparsed == [upstream[4]]
    assert d.residual_missing == sorted([upstream[3], upstream[4]]) and d.residual_extra == []
    from ckfmha.upstream.enum_parity import EnumParityReport

    text = EnumParityReport("ck", 0, "simplified", [d]).table()
    assert text.startswith("token summary")
    assert "    b64x0 -> b64: 1 names (bwd_convert_dq 1)\n" in text
    assert "CK names in no naming scheme ckfmha knows (a newer CK? listed under missing): 1 (bwd_convert_dq 1)" in text
    assert text.index("b64x0 -> b64") < text.index("gfx942/bwd missing (CK lists, ckfmha lacks): 2")


def test_list_does_not_import_parity_enum():
    import subprocess
    import sys

    code = (
        "import sys; from ckfmha.cli import main; main(['count', '--arch', 'gfx942', '--api', 'fwd_appendkv']);"
        " assert not [m for m in sys.modules if m.startswith('ckfmha.upstream')], 'eager import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


UPSTREAM = Path("/tmp/upstream/ck")


@pytest.mark.slow
@pytest.mark.skipif(
    not (UPSTREAM / "generate.py").is_file() or not (UPSTREAM / "codegen").is_dir(),
    reason="no upstream CK files in /tmp/upstream/ck (generate.py + codegen/)",
)
def test_real_generator_fwd_appendkv(tmp_path, capsys):
    d = tmp_path / "ck" / "example" / "ck_tile" / "01_fmha"
    d.mkdir(parents=True)
    shutil.copy(UPSTREAM / "generate.py", d / "generate.py")
    shutil.copytree(UPSTREAM / "codegen", d / "codegen")
    rc = main(["parity-enum", "--ck-root", str(tmp_path / "ck"), "--arch", "gfx942", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert "no differences" in out.out
