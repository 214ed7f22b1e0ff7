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


@pytest.mark.parametrize("doc, where, key", [
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
])
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
    e = {"name": "z", "category": "smoke", "batch": 1, "hdim_q": 64,
         "zip": {"nhead_q, nhead_k": [[8, 2], [5, 1]], "seqlen_q, seqlen_k": [[1, 10], [3, 99]]},
         "product": {"mask": ["none", "causal", "bottom_right"]}}
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
    f.write_text(textwrap.dedent("""\
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
        """))
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
    assert {(32, 32), (64, 64), (80, 80), (96, 96), (128, 128), (192, 128), (256, 256)} <= {(p.hdim_q, p.hdim_v) for p in ps}
    assert any(p.seqlen_q == 1 for p in ps) and any(p.seqlen_q % 2 for p in ps)
    assert any(p.mode is Mode.GROUP and len(set(p.seqlens_q)) > 1 for p in ps)
    assert {Bias.ELEMENTWISE, Bias.ALIBI} <= {p.bias for p in ps}
    assert any(p.p_drop for p in ps) and any(p.lse for p in ps) and any(p.logits_soft_cap for p in ps)
    assert any(p.sink for p in ps) and any(p.dtype.is_fp8_family for p in ps)
    assert any(p.deterministic for p in ps) and any(p.dbias for p in ps)
    assert {p.kv_lookup.value for p in ps} >= {"vllm", "sglang"} and any(p.rotary_dim for p in ps)
    full = [s.problem for s in select(load_matrices(), "full")]
    assert max(p.seqlen_k for p in full) >= 8192
