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

STUB = '''\
# TEST STUB standing in for CK's example/ck_tile/01_fmha/generate.py (ckfmha tests only).
import argparse, json, os, sys
ap = argparse.ArgumentParser()
ap.add_argument("-d"); ap.add_argument("--targets"); ap.add_argument("-r"); ap.add_argument("-m"); ap.add_argument("-l")
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("STUB_CRASH") == a.d:
    raise SystemExit("Traceback: KeyError: %r (stub crash)" % a.d)
names = json.load(open(os.path.join(here, "lists.json")))[a.d]
with open(a.l, "w") as f:
    for n in names:
        f.write(os.path.join(os.path.dirname(a.l), n) + "\\n")
    f.write(os.path.join(os.path.dirname(a.l), "fmha_%s_api.cpp" % a.d) + "\\n")
'''
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


def test_list_does_not_import_parity_enum():
    import subprocess
    import sys

    code = ("import sys; from ckfmha.cli import main; main(['count', '--arch', 'gfx942', '--api', 'fwd_appendkv']);"
            " assert not [m for m in sys.modules if m.startswith('ckfmha.upstream')], 'eager import'")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


UPSTREAM = Path("/tmp/upstream/ck")


@pytest.mark.slow
@pytest.mark.skipif(not (UPSTREAM / "generate.py").is_file() or not (UPSTREAM / "codegen").is_dir(),
                    reason="no upstream CK files in /tmp/upstream/ck (generate.py + codegen/)")
def test_real_generator_fwd_appendkv(tmp_path, capsys):
    d = tmp_path / "ck" / "example" / "ck_tile" / "01_fmha"
    d.mkdir(parents=True)
    shutil.copy(UPSTREAM / "generate.py", d / "generate.py")
    shutil.copytree(UPSTREAM / "codegen", d / "codegen")
    rc = main(["parity-enum", "--ck-root", str(tmp_path / "ck"), "--arch", "gfx942", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert "no differences" in out.out
