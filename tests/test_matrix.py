"""The matrix schema: validation errors name file, entry and key; categories nest smoke < full < nightly."""

from __future__ import annotations

import textwrap

import pytest

from ckfmha.matrix import CATEGORIES, MatrixError, counts, load_matrices, load_matrix_file, parse_matrix, select


def _doc(entries, **top):
    d = {"schema": 1, "family": "fwd", "entries": entries}
    d.update(top)
    return d


GOOD = {"name": "a", "category": "smoke", "batch": 1, "nhead_q": 2, "seqlen_q": 8, "hdim_q": 64}


@pytest.mark.parametrize(
    "doc, where, key",
    [
        (_doc([GOOD], extra=1), "m.yaml", "extra"),
        ({"schema": 2, "family": "fwd", "entries": [GOOD]}, "m.yaml", "schema"),
        (_doc([{**GOOD, "bogus": 1}]), "entry 'a'", "bogus"),
        (_doc([{**GOOD, "batch": "two"}]), "entry 'a'", "batch"),
        (_doc([{**GOOD, "lse": 1}]), "entry 'a'", "lse"),
        (_doc([{**GOOD, "category": "weekly"}]), "entry 'a'", "category"),
        (_doc([{**GOOD, "hdim_q": [64, 128]}]), "entry 'a'", "hdim_q"),
        (_doc([{**GOOD, "product": {"hdim_q": []}}]), "entry 'a'", "product.hdim_q"),
        (_doc([{**GOOD, "product": {"batch": [1, 2]}}]), "entry 'a'", "product.batch"),
        (_doc([{**GOOD, "zip": {"nhead_k, seqlen_k": [[2, 8], [1]]}}]), "entry 'a'", "zip.nhead_k, seqlen_k[1]"),
        (_doc([{**GOOD, "zip": {"nhead_k, nope": [[2, 2]]}}]), "entry 'a'", "nope"),
        (_doc([{**GOOD, "defaults_typo": 1}]), "entry 'a'", "defaults_typo"),
        (_doc([GOOD], defaults={"dtype": 3}), "m.yaml", "dtype"),
    ],
)
def test_schema_errors_name_file_entry_and_key(doc, where, key):
    with pytest.raises(MatrixError) as ei:
        parse_matrix(doc, "m.yaml")
    msg = str(ei.value)
    assert msg.startswith("m.yaml: ") and where in msg and key in msg, msg


def test_impossible_shape_is_an_error_not_dropped():
    e = {**GOOD, "product": {"nhead_k": [1, 3]}}  # 2 % 3 != 0
    with pytest.raises(MatrixError) as ei:
        parse_matrix(_doc([e]), "m.yaml")
    msg = str(ei.value)
    assert "entry 'a'" in msg and "combination 1" in msg and "nhead_k" in msg and "divide" in msg


def test_zip_pairs_and_product_crosses():
    e = {
        "name": "z",
        "category": "smoke",
        "batch": 1,
        "hdim_q": 64,
        "zip": {"nhead_q, nhead_k": [[8, 2], [5, 1]], "seqlen_q, seqlen_k": [[1, 10], [3, 99]]},
        "product": {"mask": ["none", "causal", "bottom_right"]},
    }
    shapes = parse_matrix(_doc([e]), "m.yaml")
    assert len(shapes) == 2 * 2 * 3
    pairs = {(s.problem.nhead_q, s.problem.nhead_k) for s in shapes}
    assert pairs == {(8, 2), (5, 1)}
    assert {(s.problem.seqlen_q, s.problem.seqlen_k) for s in shapes} == {(1, 10), (3, 99)}


def test_duplicates_are_errors():
    with pytest.raises(MatrixError, match="duplicate of entry 'a'"):
        parse_matrix(_doc([GOOD, {**GOOD, "name": "b"}]), "m.yaml")
    with pytest.raises(MatrixError, match="name: used by an earlier entry"):
        parse_matrix(_doc([GOOD, {**GOOD, "batch": 2}]), "m.yaml")


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\nentries: [\n")
    with pytest.raises(MatrixError, match="bad.yaml: malformed YAML"):
        load_matrix_file(bad)
    with pytest.raises(MatrixError, match="no such matrix file"):
        load_matrix_file(tmp_path / "missing.yaml")


def test_group_mode_lists_and_mask_aliases(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(
        textwrap.dedent("""\
        schema: 1
        family: fwd
        entries:
          - name: g
            category: full
            mode: group
            batch: 3
            nhead_q: 2
            hdim_q: 64
            zip:
              seqlens_q, seqlens_k: [[[1, 5, 9], [2, 5, 0]]]
            product: {mask: [top_left, bottom_right, "t:4,0", 0]}
        """)
    )
    shapes = load_matrix_file(f)
    assert len(shapes) == 4 and shapes[0].problem.seqlens_q == (1, 5, 9)
    assert [s.problem.mask.to_ck() for s in shapes] == ["t", "b", "t:4,0", "0"]


def test_packaged_matrices_nest_and_cover_every_family():
    shapes = load_matrices()
    sets = {c: {s.problem for s in select(shapes, c)} for c in CATEGORIES}
    assert sets["smoke"] < sets["full"] < sets["nightly"]
    c = counts(shapes)
    fams = {"fwd", "fwd_splitkv", "fwd_pagedkv", "fwd_appendkv", "batch_prefill", "bwd"}
    assert fams <= set(c["smoke"]) and c["smoke"]["total"] < 400 < c["full"]["total"] < c["nightly"]["total"]


def test_packaged_matrices_cover_the_issue_list():
    from ckfmha.kernel import Bias, Mode
    from ckfmha.masking import MaskKind

    ps = [s.problem for s in select(load_matrices(), "smoke")]
    assert {p.mask.kind for p in ps} == set(MaskKind)
    assert any(not p.mask.is_causal and p.mask.kind is MaskKind.TOP_LEFT for p in ps)  # windows
    assert any(p.nhead_k == 1 and p.nhead_q > 1 for p in ps) and any(1 < p.nhead_k < p.nhead_q for p in ps)
    assert {(32, 32), (64, 64), (80, 80), (96, 96), (128, 128), (192, 128), (256, 256)} <= {
        (p.hdim_q, p.hdim_v) for p in ps
    }
    assert any(p.seqlen_q == 1 for p in ps) and any(p.seqlen_q % 2 for p in ps)
    assert any(p.mode is Mode.GROUP and len(set(p.seqlens_q)) > 1 for p in ps)
    assert {Bias.ELEMENTWISE, Bias.ALIBI} <= {p.bias for p in ps}
    assert any(p.p_drop for p in ps) and any(p.lse for p in ps) and any(p.logits_soft_cap for p in ps)
    assert any(p.sink for p in ps) and any(p.dtype.is_fp8_family for p in ps)
    assert any(p.deterministic for p in ps) and any(p.dbias for p in ps)
    assert {p.kv_lookup.value for p in ps} >= {"vllm", "sglang"} and any(p.rotary_dim for p in ps)
    full = [s.problem for s in select(load_matrices(), "full")]
    assert max(p.seqlen_k for p in full) >= 8192


# ---------------------------------------------------------------------- strict types, unknown keys, caps, strict files
import ckfmha.matrix as matrix_mod  # noqa: E402
from ckfmha.masking import MASK_WORDS, MaskSpec  # noqa: E402


@pytest.mark.parametrize("schema", [True, 1.0, "1"])
def test_schema_must_be_the_int_1(schema):
    with pytest.raises(MatrixError, match=rf"m.yaml: schema: expected the int 1, found {schema!r}"):
        parse_matrix({"schema": schema, "family": "fwd", "entries": [GOOD]}, "m.yaml")


@pytest.mark.parametrize(
    "entry,key",
    [
        ({**GOOD, "batch": True}, "batch"),
        ({**GOOD, "product": {"seqlen_k": [8, True]}}, "seqlen_k"),
        ({**GOOD, "zip": {"nhead_k, seqlen_k": [[True, 8]]}}, "nhead_k"),
        ({**GOOD, "mask": False}, "mask"),
    ],
)
def test_bools_are_not_ints(entry, key):
    with pytest.raises(MatrixError, match=rf"{key}: expected \w+, found (True|False) \(bool\)"):
        parse_matrix(_doc([entry]), "m.yaml")


@pytest.mark.parametrize(
    "doc, where, key, hint",
    [
        ({"schema": 1, "family": "fwd", "entires": [GOOD]}, "m.yaml: top level", "entires", "entries"),
        (_doc([{k if k != "name" else "nme": v for k, v in GOOD.items()}]), "m.yaml: entries[0]", "nme", "name"),
        (_doc([{**GOOD, "categroy": "smoke"}]), "m.yaml: entry 'a'", "categroy", "category"),
        (_doc([GOOD], defaults={"dtpye": "fp16"}), "m.yaml: defaults", "dtpye", "dtype"),
        (
            _doc([{**GOOD, "product": {"hdim_q": [64], "dtpye": ["fp16"]}}]),
            "m.yaml: entry 'a': product",
            "dtpye",
            "dtype",
        ),
        (
            _doc([{**GOOD, "zip": {"nhead_k, seqlen_kk": [[2, 8]]}}]),
            "m.yaml: entry 'a': zip.nhead_k, seqlen_kk",
            "seqlen_kk",
            "seqlen_k",
        ),
    ],
)
def test_unknown_keys_first_with_a_suggestion(doc, where, key, hint):
    with pytest.raises(MatrixError) as ei:
        parse_matrix(doc, "m.yaml")
    assert str(ei.value).startswith(f"{where}: unknown key {key!r} (did you mean {hint!r}?); allowed: "), str(ei.value)


def test_unknown_key_is_reported_before_other_errors_of_its_mapping():
    # 'nme' used to be reported as a missing name; a bad category next to a typo reports the typo
    e = {"nme": "a", "category": "weekly", "batch": "x"}
    with pytest.raises(MatrixError, match=r"entries\[0\]: unknown key 'nme' \(did you mean 'name'\?\)"):
        parse_matrix(_doc([e]), "m.yaml")
    e = {**GOOD, "product": {"hdim_q": [], "dtpye": ["fp16"]}}
    with pytest.raises(MatrixError, match="product: unknown key 'dtpye'"):
        parse_matrix(_doc([e]), "m.yaml")


def test_entry_cap_is_checked_before_expanding():
    # 101 x 100 = 10,100 > 10,000; nhead_k=3 does not divide nhead_q=2, so expanding would fail on combination 2
    e = {**GOOD, "nhead_q": 2, "product": {"seqlen_k": list(range(1, 102)), "nhead_k": [1, 3] + list(range(4, 102))}}
    e["product"]["nhead_k"] = e["product"]["nhead_k"][:100]
    with pytest.raises(MatrixError) as ei:
        parse_matrix(_doc([e]), "m.yaml")
    msg = str(ei.value)
    assert msg.startswith(
        "m.yaml: entry 'a': expands to 10,100 shapes (101 (seqlen_k) x 100 (nhead_k)); the limit "
        "is MAX_SHAPES_PER_ENTRY = 10,000 per entry"
    ), msg


def test_file_cap_names_the_entry_that_crosses_it(monkeypatch):
    monkeypatch.setattr(matrix_mod, "MAX_SHAPES_PER_FILE", 5)
    a = {**GOOD, "product": {"seqlen_k": [8, 16, 32]}}
    b = {**GOOD, "name": "b", "product": {"seqlen_k": [1, 2, 3]}}
    with pytest.raises(
        MatrixError,
        match="m.yaml: entry 'b': brings the file to 6 shapes; the limit is MAX_SHAPES_PER_FILE = 5 per file",
    ):
        parse_matrix(_doc([a, b]), "m.yaml")
    assert len(parse_matrix(_doc([a]), "m.yaml")) == 3


def test_mask_vocabulary_is_maskings(tmp_path):
    words = sorted(MASK_WORDS)
    e = {**GOOD, "product": {"mask": words}}
    with pytest.raises(MatrixError, match="duplicate of entry 'a'"):  # none/no_mask/n are the same mask
        parse_matrix(_doc([e]), "m.yaml")
    for w in words:
        (s,) = parse_matrix(_doc([{**GOOD, "mask": w}]), "m.yaml")
        assert s.problem.mask == MaskSpec.parse(w)
    assert not hasattr(matrix_mod, "MASK_ALIASES")


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def test_duplicate_keys_in_a_matrix_file(tmp_path):
    f = _write(
        tmp_path,
        "d.yaml",
        textwrap.dedent("""\
        schema: 1
        family: fwd
        entries:
          - name: a
            category: smoke
            batch: 1
            seqlen_q: 8
            batch: 2
        """),
    )
    with pytest.raises(MatrixError, match=r"d.yaml: entries\[0\]: duplicate key 'batch' at line 8 \(first at line 6\)"):
        load_matrix_file(f)


def test_file_level_errors_are_matrix_errors(tmp_path):
    f = _write(tmp_path, "u.yaml", b"schema: 1\nfamily: fwd\ndescription: caf\xe9\n")
    with pytest.raises(MatrixError, match=r"u.yaml: not UTF-8: byte 0xe9 at byte offset 38 \(line 3\)"):
        load_matrix_file(f)
    f = _write(tmp_path, "deep.yaml", "schema: 1\nentries: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(MatrixError, match="deep.yaml: line 2: nested deeper than MAX_NESTING_DEPTH = 64"):
        load_matrix_file(f)
