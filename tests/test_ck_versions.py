"""ckfmha against a real, older CK: the tree in the amd-aiter 0.1.7.post2.dev18 wheel (tests/ck_tree.py downloads it
once into the cache; without the registry these tests skip with pip's reason).

That CK names kernels in the 2025-11 scheme (squant, no sink token, convert_dq b{bm0}x{bn0}, batch_prefill without
page tokens): every name its generator lists parses and renders back in that scheme, and ``parity-enum`` explains
the renames before it lists what really differs."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter

import pytest

from ckfmha.cli import main
from ckfmha.kernel import Api, Family, KVLoad, KVLookupTable, KVMemoryLayout, QScale
from ckfmha.naming import CKNamingScheme, ck_instance_name, parse_ck_name
from tests.ck_tree import (  # noqa: F401 - ck_tree is a fixture
    GENERATOR,
    assert_parity_enum_skipped_gfx1100,
    ck_tree,
    generator_names,
)

ARCHS = ("gfx942", "gfx950")
# What the tree's generator lists at receipt 0 (the kernels, without the per-api dispatch file)
TREE_COUNTS = {
    ("gfx942", "fwd"): 2908,
    ("gfx942", "fwd_splitkv"): 1146,
    ("gfx942", "fwd_appendkv"): 99,
    ("gfx942", "pagedkv_prefill"): 120,
    ("gfx942", "batch_prefill"): 384,
    ("gfx942", "bwd"): 6900,
    ("gfx950", "fwd"): 3004,
    ("gfx950", "fwd_splitkv"): 1146,
    ("gfx950", "fwd_appendkv"): 99,
    ("gfx950", "pagedkv_prefill"): 120,
    ("gfx950", "batch_prefill"): 384,
    ("gfx950", "bwd"): 8256,
}


def test_every_tree_name_parses_and_round_trips_in_its_scheme(ck_tree):
    failures, schemes, count = [], Counter(), 0
    for arch in ARCHS:
        for api in Api:
            names = generator_names(ck_tree, api.value, arch)
            assert len(names) == TREE_COUNTS[arch, api.value], (arch, api)
            count += len(names)
            for n in names:
                try:
                    p = parse_ck_name(n)
                    for s in p.schemes:
                        if ck_instance_name(p.config, s) != n:
                            failures.append(f"{n} -> {ck_instance_name(p.config, s)} ({s.value})")
                except ValueError as e:
                    failures.append(f"{n}: {e}")
                    continue
                schemes[p.schemes] += 1
    assert not failures, f"{len(failures)} names fail, e.g.\n" + "\n".join(failures[:10])
    assert count == 24_566
    # the names the pre-scheme parser rejected are exactly those only the 2025-11 scheme spells
    assert schemes == {(CKNamingScheme.CK_2025_11,): 9_188, (CKNamingScheme.CURRENT, CKNamingScheme.CK_2025_11): 15_378}


def test_tree_tokens_map_to_the_current_fields(ck_tree):
    fwd = {n: parse_ck_name(n).config for n in generator_names(ck_tree, "fwd", "gfx942")}
    qscale = {("squant" if "_squant_" in n else "nsquant", c.qscale) for n, c in fwd.items()}
    assert qscale == {("nsquant", QScale.NONE), ("squant", QScale.PERTENSOR)}
    assert {(c.sink, c.fp8_static_quant) for c in fwd.values()} == {(False, False)}
    bp = [parse_ck_name(n).config for n in generator_names(ck_tree, "batch_prefill", "gfx942")]
    assert {(c.page_size, c.kv_load, c.kv_memory_layout, c.kv_lookup_table) for c in bp} == {
        (1, KVLoad.NONE, KVMemoryLayout.LINEAR, KVLookupTable.SGLANG)
    }
    cdq = [
        parse_ck_name(n).config
        for n in generator_names(ck_tree, "bwd", "gfx950")
        if n.startswith("fmha_bwd_convert_dq_")
    ]
    assert Counter(c.tile for c in cdq) == {(64, 0): 60, (64, 128): 48, (64, 64): 12, (64, 192): 12}
    assert {c.tile[1] == 0 for c in cdq if not c.deterministic} == {True}


def _parity(root, *extra, capsys):
    rc = main(["parity-enum", "--ck-root", str(root), "--arch", "gfx942", *extra])
    return rc, capsys.readouterr()


def test_parity_enum_explains_the_renames_first(ck_tree, capsys):
    rc, out = _parity(ck_tree, "--api", "fwd", "--api", "fwd_splitkv", "--show", "2", capsys=capsys)
    assert rc == 1, out.err
    text = out.out
    assert text.startswith("token summary")
    assert "CK names per naming scheme: ck-2025-11 only 3,916, alike in current and ck-2025-11 138 (of 4,054)" in text
    assert "    nsquant -> nqscale: 2,658 names (fwd 2,658)\n" in text
    assert "    squant -> pertensor: 2 names (fwd 2)\n" in text
    assert "    new token nsink: 3,668 names (fwd 2,660, fwd_splitkv 1,008)\n" in text
    assert "    sink=True: 4,564 names (fwd 3,604, fwd_splitkv 960)\n" in text
    assert "    qscale=blockscale: 60 names (fwd 60)\n" in text
    # the summary comes before the table and the residual lists
    assert text.index("nsquant -> nqscale") < text.index("arch    api") < text.index("gfx942/fwd missing")
    m = re.search(r"gfx942/fwd missing \(CK lists, ckfmha lacks\): (\d+)", text)
    assert m and int(m.group(1)) < 2908  # most of the 2,908 raw differences are renames

    rc, out = _parity(ck_tree, "--api", "fwd_splitkv", "--format", "json", capsys=capsys)
    doc = json.loads(out.out)
    assert "--targets" in doc["generator_options"] and "-l" in doc["generator_options"]
    assert doc["token_summary"]["renames"]["new token nsink"] == {"fwd_splitkv": 1008}
    api = doc["apis"][0]
    assert (api["upstream"], len(api["missing"]), api["residual_missing"]) == (1146, 1008, [])


def test_parity_enum_against_an_older_generator_without_targets(ck_tree, tmp_path, capsys):
    src = ck_tree / GENERATOR
    dst = tmp_path / "ck" / GENERATOR
    shutil.copytree(src.parent / "codegen", dst.parent / "codegen")
    text = src.read_text()
    older, n = re.subn(r'    parser\.add_argument\(\n        "--targets",.*?\n    \)\n', "", text, flags=re.S)
    assert n == 1
    older = older.replace('targets = args.targets.split(",")', 'targets = ["gfx9", "gfx950"]')
    dst.write_text(older)
    rc, out = _parity(tmp_path / "ck", "--api", "fwd_appendkv", capsys=capsys)
    assert rc == 2
    assert "this CK predates --targets (generator options: -h, -d, -o, -l, -f, -m, -r, --optdim, --help" in out.err
    assert "Traceback" not in out.err and "crashed" not in out.err


def test_parity_enum_all_archs_skips_what_the_tree_does_not_support(ck_tree, capsys):
    rc = main(["parity-enum", "--ck-root", str(ck_tree), "--arch", "all", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert_parity_enum_skipped_gfx1100(out.out)
    rc = main(["parity-enum", "--ck-root", str(ck_tree), "--arch", "gfx1100", "--api", "fwd_appendkv"])
    out = capsys.readouterr()
    assert rc == 2 and "does not support arch gfx1100" in out.err


@pytest.mark.parametrize("family", [Family.FWD, Family.FWD_SPLITKV, Family.FWD_PAGEDKV])
def test_current_sink_kernels_have_no_2025_11_name(ck_tree, family):
    api = {Family.FWD: "fwd", Family.FWD_SPLITKV: "fwd_splitkv", Family.FWD_PAGEDKV: "pagedkv_prefill"}[family]
    n = next(n for n in generator_names(ck_tree, api, "gfx942") if parse_ck_name(n).config.family is family)
    cfg = parse_ck_name(n).config.replace(sink=True)
    with pytest.raises(ValueError, match="sink: True has no spelling in the ck-2025-11 naming scheme"):
        ck_instance_name(cfg, CKNamingScheme.CK_2025_11)
    assert ck_instance_name(cfg).endswith(("_sink_gfx9.cpp", "_sink_gfx950.cpp"))


def test_unreachable_registry_is_a_reason_not_a_half_tree(tmp_path, monkeypatch):
    """What the ck_tree fixture turns into a skip: pip's failure, with nothing left in the cache but the lock."""
    from tests.ck_tree import CKTreeUnavailable, ensure_ck_tree, tree_dir

    monkeypatch.setenv("CKFMHA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no configured mirrors or find-links
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(CKTreeUnavailable, match=r"pip download amd-aiter==0\.1\.7\.post2\.dev18 failed \(exit \d+\)"):
        ensure_ck_tree()
    assert tree_dir() == tmp_path / "cache" / "ck-trees" / "amd-aiter-0.1.7.post2.dev18"
    assert sorted(p.name for p in tree_dir().iterdir()) == [".lock"]
