"""Parity sets (ckfmha.parity.load_parity_set): upstream's 14 configurations load as Problems, and a malformed set
is an error naming the file, the key path, the value and the rule (schema data/schemas/parity_set.schema.yaml)."""

from __future__ import annotations

import pytest
import yaml

from ckfmha.parity import PARITY_DEFAULT_PATH, ParitySetError, default_parity_set, load_parity_set


def test_default_set_is_upstreams_fourteen_configurations() -> None:
    cases = dict(default_parity_set())
    assert len(cases) == 14
    basic = cases["basic_fp16"]
    assert (basic.batch, basic.nhead_q, basic.seqlen_q, basic.seqlen_k, basic.hdim_q) == (2, 2, 128, 128, 128)
    assert cases["basic_bf16"].dtype.value == "bf16"
    assert (cases["gqa_4_1"].nhead_q, cases["gqa_4_1"].nhead_k) == (8, 2)
    assert cases["single_query"].seqlen_q == 1 and cases["asymmetric_seq"].seqlen_k == 256


def _write(tmp_path, doc):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def _base():
    return yaml.safe_load(PARITY_DEFAULT_PATH.read_text())


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("cases"), r"p.yaml: top level: missing key\(s\) 'cases'"),
        (lambda d: d.update(cases=[]), r"p.yaml: cases: expected at least this many items: 1, found \[\]"),
        (lambda d: d.update(version=2), r"p.yaml: version: expected 1, found 2"),
        (
            lambda d: d.update(binary="fwd_splitkv"),
            r"p.yaml: binary: expected one of 'fwd', 'bwd', found 'fwd_splitkv'",
        ),
        (lambda d: d.update(case=[]), r"p.yaml: top level: unknown key\(s\) 'case' \(did you mean 'cases'\?\)"),
        (lambda d: d["cases"].append({"s": 64}), r"p.yaml: cases\[14\]: missing key\(s\) 'name'"),
        (lambda d: d["cases"].append({"name": "lse on"}), r"p.yaml: cases\[14\].name: found 'lse on' \(rule: letters"),
        (lambda d: d["cases"].append({"name": "x\n"}), r"p.yaml: cases\[14\].name: found 'x\\n' \(rule: letters"),
        (lambda d: d["cases"].append({"name": "x", "lse": True}), r"p.yaml: cases\[14\].lse: expected a string or"),
        (lambda d: d["cases"].append({"name": "x", "s": [1]}), r"p.yaml: cases\[14\].s: expected a string or"),
        (lambda d: d["defaults"].update(p_drop=float("nan")), r"p.yaml: defaults.p_drop: expected a finite number"),
        (lambda d: d["cases"].append({"name": "basic_fp16"}), r"p.yaml: cases\[14\]: duplicate name 'basic_fp16'"),
        (lambda d: d["cases"].append({"name": "x", "s": 0}), r"p.yaml: cases\[14\] \(x\): "),
    ],
)
def test_malformed_set_is_a_named_error(tmp_path, edit, message: str) -> None:
    doc = _base()
    edit(doc)
    with pytest.raises(ParitySetError, match=message):
        load_parity_set(_write(tmp_path, doc))


def test_a_bwd_set_is_read_with_the_bwd_binary(tmp_path) -> None:
    doc = {"version": 1, "binary": "bwd", "defaults": {"prec": "bf16", "b": 1, "h": 2, "s": 64, "d": 64}}
    doc["cases"] = [{"name": "bwd_basic"}, {"name": "bwd_causal", "mask": "1"}]
    (name, p), (_, causal) = load_parity_set(_write(tmp_path, doc))
    assert name == "bwd_basic" and p.family.value.startswith("bwd") and p.dtype.value == "bf16"
    assert causal.mask != p.mask
