"""The ckfmha command line: list / count with every selection option, and clear errors (exit status 2)."""

from __future__ import annotations

import json

import pytest

from ckfmha.cli import main
from ckfmha.enumeration import ck_instance_names


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_ck_names_equals_the_enumeration(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx942", "--api", "fwd_appendkv", "--format", "ck-names")
    assert code == 0
    assert out.split() == ck_instance_names("fwd_appendkv", "gfx942")


def test_list_ids_json_and_table(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx950", "--family", "fwd_appendkv", "--filter",
                           "c.hdim_q == 128 and c.rope == 'half_rotated'")
    ids = out.split()
    assert code == 0 and ids and all(".d128x128." in i and "rope=half_rotated" in i for i in ids)
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx950", "--family", "fwd_appendkv", "--format", "json",
                           "--filter", "c.hdim_q == 64")
    rows = json.loads(out)
    assert rows and all(r["hdim_q"] == 64 and r["kernel_id"] for r in rows)
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx950", "--family", "fwd_appendkv", "--format", "table",
                           "--filter", "c.hdim_q == 32 and not c.paged_kv")
    assert out.splitlines()[0].split()[:3] == ["family", "dtype", "mode"]


def test_count_table_and_profiles(capsys) -> None:
    code, out, _ = run_cli(capsys, "count", "--arch", "gfx942", "--api", "fwd_splitkv")
    assert code == 0
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines()[2:]}
    assert int(lines["fwd_splitkv_combine"][1]) == 138 and int(lines["total"][1]) == 2106
    code, out, _ = run_cli(capsys, "count", "--arch", "gfx942", "--api", "fwd_splitkv", "--profile", "pytorch",
                           "--format", "json")
    doc = json.loads(out)
    assert doc["total"] == 138  # upstream's receipt-4 quirk: only the combine kernels


def test_sweep_and_filter_file(tmp_path, capsys) -> None:
    sweep = tmp_path / "s.json"
    sweep.write_text(json.dumps({"variant": "appendkv", "trait_config": {"data_type": {"values": ["bf16"]}}}))
    flt = tmp_path / "f.py"
    flt.write_text("def filter_config(c):\n    return c.hdim_q == 256\n")
    code, out, _ = run_cli(capsys, "list", "--arch", "gfx942", "--sweep", str(sweep), "--filter-file", str(flt))
    ids = out.split()
    assert code == 0 and ids and all(i.startswith("fwd_appendkv.bf16.") and ".d256x256." in i for i in ids)


@pytest.mark.parametrize("args, message", [
    (["--arch", "gfx999"], "arch: unknown arch 'gfx999'; known archs:"),
    (["--arch", "gfx942", "--api", "fwdd"], "api: unknown value 'fwdd'; allowed:"),
    (["--arch", "gfx942", "--family", "fwd_bogus"], "family: unknown value 'fwd_bogus'"),
    (["--arch", "gfx942", "--receipt", "5"], "receipt: unknown receipt 5"),
    (["--arch", "gfx942", "--profile", "flashy"], "profile: unknown profile 'flashy'"),
    (["--arch", "gfx942", "--mask-mode", "loose"], "mask_mode: unknown value 'loose'"),
    (["--arch", "gfx942", "--filter", "c.hdimq == 1"], "unknown field 'hdimq'"),
    (["--arch", "gfx942", "--filter", "open('x')"], "function calls are not allowed"),
    (["--arch", "gfx942", "--filter", "c.hdim_q =="], "does not parse"),
])
def test_errors_name_field_value_and_rule(capsys, args, message: str) -> None:
    code, _, err = run_cli(capsys, "count", *args)
    assert code == 2
    assert message in err


def test_malformed_sweep_reports_file_and_key_path(tmp_path, capsys) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"variant": "fwd", "trait_config": {"mask": {"values": "no"}}}))
    code, _, err = run_cli(capsys, "count", "--arch", "gfx942", "--sweep", str(p))
    assert code == 2 and f"{p}: trait_config.mask.values: expected a non-empty list, found 'no'" in err
    p.write_text("{not json")
    code, _, err = run_cli(capsys, "count", "--arch", "gfx942", "--sweep", str(p))
    assert code == 2 and "malformed JSON at line 1" in err
