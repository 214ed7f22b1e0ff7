"""Registry: JSON export/import round trip with the versioned schema; queries; clear errors."""

from __future__ import annotations

import json

import pytest

from ckfmha.kernel import Family, KernelConfig
from ckfmha.registry import REGISTRY_SCHEMA, Registry, RegistryError
from tests.sample_kernels import FWD_FIELDS, FWD_WARPS


def configs() -> list[KernelConfig]:
    base = dict(FWD_FIELDS, **FWD_WARPS, pad_s=1, pad_sk=1, pad_d=1, pad_dv=1)
    out = [
        KernelConfig.make(**base),
        KernelConfig.make(**{**base, "mask": "any", "lse": True}),
        KernelConfig.make(**{**base, "dtype": "bf16", "mode": "group"}),
        KernelConfig.make(
            family="bwd_dq_dk_dv",
            dtype="fp16",
            mode="batch",
            hdim_q=64,
            hdim_v=64,
            arch_tag="gfx9",
            pipeline="bwd_dq_dk_dv",
            tile=(32, 128, 64, 32, 64, 32, 32, 64, 64),
            warps=((1, 4, 1), (4, 1, 1), (1, 4, 1)),
            warp_tiles=((16, 16, 32), (16, 16, 16)),
            occupancy=1,
            pad_d=8,
            pad_dv=8,
            dropout="wg16",
            deterministic=True,
        ),
    ]
    return out


def test_json_roundtrip(tmp_path) -> None:
    reg = Registry("gfx942", configs(), backend="cpu", source="hand-made")
    path = tmp_path / "reg.json"
    reg.save(path)
    doc = json.loads(path.read_text())
    assert doc["schema"] == REGISTRY_SCHEMA and doc["version"] == 1 and len(doc["kernels"]) == 4
    back = Registry.load(path)
    assert list(back) == list(reg) and back.arch == "gfx942" and back.backend == "cpu"


def test_duplicates_are_kept_once_and_queries_work() -> None:
    reg = Registry("gfx942", configs() + configs())
    assert len(reg) == 4
    assert len(reg.query(lse=True)) == 1
    assert len(reg.query(family="bwd_dq_dk_dv", deterministic=True)) == 1
    assert len(reg.candidates(Family.FWD)) == 3
    assert reg.families() == {Family.FWD, Family.BWD_DQ_DK_DV}
    with pytest.raises(RegistryError, match="no field 'colour'"):
        reg.query(colour="red")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="other"), "schema: expected 'ckfmha.registry'"),
        (lambda d: d.update(version=2), "version: expected 1, found 2"),
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.update(kernels={}), "kernels: expected a list"),
        (lambda d: d["kernels"][0].update(hdim_q=64), r"kernels\[0\]: kernel_id .* does not match its fields"),
        (lambda d: d["kernels"][1].update(mask="sideways"), r"kernels\[1\]: mask: unknown value 'sideways'"),
        (lambda d: d["kernels"][2].pop("kernel_id"), r"kernels\[2\]: missing key\(s\) 'kernel_id'"),
    ],
)
def test_import_errors(mutate, message: str) -> None:
    doc = Registry("gfx942", configs()).to_json()
    mutate(doc)
    with pytest.raises(RegistryError, match=message):
        Registry.from_json(doc, "reg.json")


def test_malformed_file(tmp_path) -> None:
    p = tmp_path / "bad.json"
    p.write_text("{")
    with pytest.raises(RegistryError, match="malformed JSON at line 1"):
        Registry.load(p)
    with pytest.raises(RegistryError, match="no such registry file"):
        Registry.load(tmp_path / "none.json")
